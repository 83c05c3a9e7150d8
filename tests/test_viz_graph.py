"""StepGraph: DOT source, SVG through the real ``dot``, and the HTML fallback when it is missing."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from nbagent import TaskStep, seed_ids
from nbagent.viz import dot as dot_module
from nbagent.viz.dot import task_to_dot
from nbagent.viz.graph import GraphvizError, GraphvizNotFoundError, StepGraph
from tests.test_viz_dot import HOSTILE, dot_available, hostile_state, run_plan

PLAN: list[Any] = [{"out": "a"}, {"out": "b"}, {"out": "done <now>", "last": True}]


def _graph_runner(steps: int = 3) -> Any:
    runner, task = run_plan([dict(p) for p in PLAN], steps=steps)
    return runner, task


def _hide_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_runner_graph_source_is_the_dot_text_and_follows_the_state() -> None:
    runner, task = _graph_runner(steps=1)
    g = runner.graph(task)
    state = runner.state_of(task)
    assert isinstance(g, StepGraph) and g.source == task_to_dot(state)
    runner.run_step(task)
    assert "#2 done" in g.source  # a live view: re-displaying shows the current state
    assert runner.graph(task, rankdir="LR").source == task_to_dot(state, rankdir="LR")
    assert runner.graph().state is state  # the latest task by default


def test_mimebundle_with_dot_is_svg() -> None:
    if not dot_available():
        return
    runner, task = _graph_runner()
    bundle = runner.graph(task)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "image/svg+xml"}
    svg = bundle["image/svg+xml"]
    assert svg.startswith("<svg") and svg.count('class="node"') == 3
    assert "done &lt;now&gt;" in svg
    assert "StepGraph(task=" in bundle["text/plain"] and "3 done" in bundle["text/plain"]
    assert runner.graph(task).svg() == svg
    assert runner.graph(task).pipe("svg").decode().endswith(svg)


def test_mimebundle_without_dot_is_html_timeline_with_escaped_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, task = hostile_state()
    g = runner.graph(task)
    _hide_dot(monkeypatch, tmp_path)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    page = bundle["text/html"]
    for status in ("done", "failed", "blocked"):
        assert f'<span class="nb-badge nb-s-{status}">{status}</span>' in page
    assert "<details><summary>DOT source</summary><pre>digraph task {" in page
    assert "label=&lt;&lt;B&gt;task" in page  # the DOT source, escaped once more
    assert "&amp;lt;script&amp;gt;alert(1)" in page
    for raw in (HOSTILE[0], HOSTILE[1], HOSTILE[3]):
        assert raw not in page
    assert page.count("</style>") == 1  # only our own style block
    assert g.svg() is None
    with pytest.raises(GraphvizNotFoundError, match="'dot' program was not found on PATH"):
        g.pipe()
    with pytest.raises(GraphvizNotFoundError):
        g.save(tmp_path / "g.svg")


def test_forced_html_renderer_even_with_dot() -> None:
    runner, task = _graph_runner()
    bundle = StepGraph(runner.state_of(task), renderer="html")._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert "nb-timeline" in bundle["text/html"] and "done &lt;now&gt;" in bundle["text/html"]
    with pytest.raises(ValueError, match="renderer must be one of"):
        StepGraph(runner.state_of(task), renderer="png")  # type: ignore[arg-type]


def test_include_exclude_keep_text_plain() -> None:
    runner, task = _graph_runner()
    g = StepGraph(runner.state_of(task), renderer="html")
    assert set(g._repr_mimebundle_(exclude=["text/html"])) == {"text/plain"}
    assert set(g._repr_mimebundle_(include=["text/html"])) == {"text/plain", "text/html"}
    assert set(g._repr_mimebundle_(include=["image/svg+xml"])) == {"text/plain"}


def test_failing_dot_falls_back_to_html(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner, task = _graph_runner()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"
    fake.write_text("#!/bin/sh\necho 'Error: broken dot' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    g = runner.graph(task)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"} and "nb-timeline" in bundle["text/html"]
    with pytest.raises(GraphvizError, match="exit code 3: Error: broken dot"):
        g.pipe()


def test_repr_never_raises_on_odd_or_broken_state(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, task = _graph_runner(steps=1)
    state = runner.state_of(task)
    ghost = TaskStep(task_id=task.task_id, step_id="ghost", input=HOSTILE[0])
    next(iter(state.steps.values())).link_step(ghost)  # linked but never registered
    state.undone_edges.append(("nowhere", "ghost"))
    bundle = runner.graph(task)._repr_mimebundle_()
    assert "text/plain" in bundle and len(bundle) == 2

    def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("renderer <exploded>")

    g = runner.graph(task)
    monkeypatch.setattr("nbagent.viz.graph.task_to_dot", broken)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert "RuntimeError: renderer &lt;exploded&gt;" in bundle["text/html"]
    monkeypatch.setattr(dot_module, "STATUS_ORDER", ())  # status_summary now fails inside repr
    assert "StepGraph(" in repr(g)


def test_bad_options_fail_at_construction() -> None:
    runner, task = _graph_runner(steps=0)
    with pytest.raises(ValueError, match="rankdir"):
        runner.graph(task, rankdir="up")
    with pytest.raises(TypeError, match="unknown graph option"):
        runner.graph(task, colour="red")


def test_save_by_suffix(tmp_path: Path) -> None:
    runner, task = _graph_runner()
    g = runner.graph(task)
    assert g.save(tmp_path / "g.dot") == str(tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text(encoding="utf-8") == g.source
    g.save(tmp_path / "g.gv")
    with pytest.raises(ValueError, match=r"cannot save a step graph as '\.txt'.*\.dot, \.gv, \.svg"):
        g.save(tmp_path / "g.txt")
    if dot_available():
        g.save(tmp_path / "g.svg")
        assert (tmp_path / "g.svg").read_text(encoding="utf-8").count('class="node"') == 3
        g.save(tmp_path / "g.png")
        assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")


def test_pipe_rejects_odd_formats() -> None:
    runner, task = _graph_runner(steps=0)
    with pytest.raises(ValueError, match="format must be a Graphviz output format"):
        runner.graph(task).pipe("svg; rm -rf /")


def test_same_state_same_bundle() -> None:
    seed_ids(0)
    runner, task = _graph_runner()
    g = runner.graph(task)
    assert g._repr_mimebundle_() == g._repr_mimebundle_()
    assert StepGraph(runner.state_of(task), renderer="html").html() == StepGraph(
        runner.state_of(task), renderer="html"
    ).html()
