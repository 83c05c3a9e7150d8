"""The HTML report: one self-contained, inert file, written from a runner or from run.json."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, ScriptedLLM, seed_ids
from nbagent.__main__ import main
from nbagent.report import report_html, write_report
from nbagent.viz.graph import find_dot
from nbagent.workers import ReActAgentWorker

HOSTILE = '<script>alert(1)</script><img src="http://evil.example/x.png" onerror="boom()">'
_EXTERNAL = re.compile(r"""(?:src|href|action|srcset|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", re.I)


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def flaky(x: int) -> int:
    """Fails on purpose."""
    raise RuntimeError(f"tool broke on {x} {HOSTILE}")


def act(tool: str, args: str, thought: str = "I need a tool.") -> str:
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {args}"


def sample_runner() -> tuple[AgentRunner, Any]:
    """A finished ReAct task with a tool error, a failed attempt, an undone run and hostile text."""
    seed_ids(0)
    llm = ScriptedLLM([
        act("add", '{"a": 1, "b": 2}', thought=f"Think {HOSTILE}"),
        act("flaky", '{"x": 5}'),
        RuntimeError(f"model down {HOSTILE}"),
        f"Thought: done\nAnswer: 3 (see https://example.com/a) {HOSTILE}",
    ])
    runner = AgentRunner(ReActAgentWorker.from_tools([add, flaky], llm=llm))
    task = runner.create_task(f"What is 1+2? {HOSTILE}")
    runner.run_step(task)
    runner.run_step(task)
    with pytest.raises(RuntimeError):
        runner.run_step(task)
    runner.run_step(task)
    runner.finalize_response(task)
    return runner, task


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_self_contained(page: str) -> str:
    assert page.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not _EXTERNAL.search(page), _EXTERNAL.search(page)
    p = _Tags()
    p.feed(page)
    assert "script" not in p.tags and "img" not in p.tags and "link" not in p.tags and "iframe" not in p.tags
    names = {n.lower() for n, _ in p.attrs}
    assert not {n for n in names if n.startswith("on")}, names
    for name, value in p.attrs:
        if name in ("href", "src", "xlink:href"):
            assert value is not None and value.startswith("#"), (name, value)  # in-page anchors only
    assert "url(" not in page
    return "".join(p.text)


def test_report_has_every_step_transcript_tokens_timings_and_errors(tmp_path: Path) -> None:
    runner, task = sample_runner()
    path = write_report(runner, task.task_id, tmp_path / "run.html")
    page = path.read_text(encoding="utf-8")
    text = assert_self_contained(page)
    state = runner.state_of(task)
    for sid in state.steps:
        assert f'id="step-{sid}"' in page
    assert "add(a=1, b=2)" in text and "flaky(x=5)" in text
    assert "Error" in text and "tool broke on 5" in text  # the tool's error observation
    assert "attempt 1 failed: RuntimeError: model down" in text  # the failed model call
    assert "Traceback (most recent call last)" in text
    assert f"{sum(o.usage.total_tokens for o in state.completed_steps if o.usage)} (" in text
    assert " s in steps" in text and "Transcript" in text
    assert text.count("What is 1+2?") >= 2  # summary and transcript
    assert HOSTILE in text  # shown as text...
    assert "<script>" not in page and 'onerror="' not in page  # ...never as markup
    if find_dot() is not None:
        assert "<svg" in page


def test_report_without_graphviz_falls_back_to_the_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, task = sample_runner()
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all
    assert find_dot() is None
    page = report_html(runner, task.task_id)
    assert_self_contained(page)
    assert "<svg" not in page and "nb-timeline" in page and "Graphviz was not available" in page


def test_report_from_a_saved_run_needs_no_worker(tmp_path: Path) -> None:
    runner, task = sample_runner()
    other = runner.create_task("a second task")
    saved = runner.save(tmp_path / "run.json")
    page = write_report(saved, path=tmp_path / "all.html").read_text(encoding="utf-8")
    text = assert_self_contained(page)
    assert 'href="#task-0"' in page and 'href="#task-1"' in page
    assert "a second task" in text and "ReActAgentWorker" in text and "model scripted" in text
    assert other.task_id[:8] in text


def test_cli_report_writes_the_file_and_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner, task = sample_runner()
    saved = runner.save(tmp_path / "run.json")
    assert main(["report", str(saved), "-o", str(tmp_path / "out.html"), "--title", "My <run>"]) == 0
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "<title>My &lt;run&gt;</title>" in page
    assert main(["report", str(saved)]) == 0  # default: run.html beside run.json
    assert (tmp_path / "run.html").exists()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "no such run file" in capsys.readouterr().err
    assert main(["report", str(saved), "--task", "nope"]) == 2
    assert "unknown task id 'nope'" in capsys.readouterr().err
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip()


def test_python_dash_m_nbagent_report(tmp_path: Path) -> None:
    runner, _ = sample_runner()
    saved = runner.save(tmp_path / "run.json")
    done = subprocess.run(
        [sys.executable, "-m", "nbagent", "report", str(saved), "-o", str(tmp_path / "r.html")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and (tmp_path / "r.html").stat().st_size > 1000


def test_report_header_uses_the_apis_words_total_and_spent() -> None:
    from nbagent.demo import run_quickstart

    agent, task = run_quickstart()  # one run was undone: it was paid for, but does not stand
    cost = agent.cost(task)
    assert cost.spent.total_tokens > cost.total.total_tokens
    page = report_html(agent, task.task_id)
    assert f"total: {cost.total.total_tokens} tokens" in page
    assert f"spent, undone runs included: {cost.spent.total_tokens} tokens" in page
    # a task with nothing undone: one number, one word
    runner, plain = sample_runner()
    assert runner.cost(plain).spent.total_tokens == runner.cost(plain).total.total_tokens
    assert "spent, undone" not in report_html(runner, plain.task_id)
