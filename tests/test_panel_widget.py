"""AgentPanel (the panel as one anywidget) without a browser: commands in, traitlets out.

The browser side is tested in tests/browser (JupyterLab, Notebook 7, marimo). Here: every
command reaches its Python twin, a command that cannot be done is shown and changes nothing,
the buttons are on exactly when their twins can act, the graph's nodes are described as the
DOT draws them, state crosses as small plain data (no HTML) through one widget (no hidden
ones), and the shipped ES module is what js/ builds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import comm
import pytest
from comm import DummyComm

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    CustomSimpleAgentWorker,
    FnAgentWorker,
    FunctionCallingAgent,
    FunctionTool,
    MessageRole,
    ScriptedLLM,
    Task,
    TaskStatus,
)
from nbagent.engine.state import StepStatus
from nbagent.viz.dot import STATUS_COLORS, task_to_dot
from nbagent.viz.panel.commands import COMMANDS
from nbagent.viz.panel.widget import STATIC, AgentPanel

REPO = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NODE_LINE = re.compile(r"^  ([suc]\d+) \[label=<.*?<B>#(\d+) ([a-z]+)", re.M)
FOLDED_LINE = re.compile(r"^  (c\d+) \[label=<.*?#(\d+)–#(\d+)", re.M)
DRAWN_NAME = re.compile(r"^  ([suc]\d+) \[", re.M)
HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)> & "quotes" </style>'


def counting_runner(steps: int = 5, *, fail_once_at: int | None = None, delay: float = 0.0) -> AgentRunner:
    failed: set[int] = set()

    async def fn(state: dict[str, Any]) -> tuple[str, bool]:
        n = state["step"] + 1
        if delay:
            await asyncio.sleep(delay)
        if fail_once_at == n and n not in failed:
            failed.add(n)
            raise ValueError(f"boom at step {n}")
        return (f"the answer is {n}" if n >= steps else f"partial {n}"), n >= steps

    return AgentRunner(FnAgentWorker(fn, initial_state={}, max_steps=None))


class StreamingWorker(CustomSimpleAgentWorker):
    """One streamed model reply per step; done after ``steps`` steps."""

    steps: int = 2

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    async def _arun_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> Any:
        state["memory"].put(ChatMessage(role=MessageRole.USER, content=input or task.input))
        text = ""
        async for chunk in self.llm.astream_chat(state["memory"].get_all()):
            text = chunk.message.text
            await asyncio.sleep(0.01)  # a model that takes its time
        state["n"] += 1
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        return AgentChatResponse(response=text), state["n"] >= self.steps

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def message(w: AgentPanel, content: Any) -> None:
    """What the browser's ``model.send(content)`` delivers: a custom message on the widget's
    comm, handed to ipywidgets' own dispatch."""
    w._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def send(w: AgentPanel, **content: Any) -> None:
    """What the browser does on a click."""
    message(w, content)


def drawn_nodes(dot: str) -> dict[str, tuple[int, str]]:
    return {m.group(1): (int(m.group(2)), m.group(3)) for m in NODE_LINE.finditer(dot)}


def enabled(w: AgentPanel) -> set[str]:
    return {name for name, on in w.buttons.items() if on}


IDLE = {"new", "task_picker", "abandon"}  # an open task, nothing running


def check_graph_traits(w: AgentPanel) -> None:
    """Every node drawn in ``dot`` is described in ``nodes`` with the number and status it
    shows; the DOT is the live graph's."""
    assert w.dot == task_to_dot(w.state)
    described = {n["name"]: n for n in w.nodes}
    for name, (number, word) in drawn_nodes(w.dot).items():
        if name.startswith("c"):
            continue  # a collapsed run of steps: no one step to select
        n = described[name]
        assert n["number"] == number and n["head"].startswith(f"#{number} "), (name, n)
        assert n["status"].split()[0] == word or (word == "skipped" and n["status"] == "skipped"), (name, n)
        assert n["step"] in w.state.steps  # type: ignore[union-attr]


def test_a_run_of_steps_drawn_as_one_node_is_described_and_opens_its_last_step() -> None:
    from nbagent.viz.dot import step_numbers

    runner = counting_runner(60)
    w = AgentPanel(runner, runner.create_task("count"), collapse_after=10)
    for _ in range(20):
        send(w, cmd="step")
    assert w.dot == task_to_dot(w.state, collapse_after=10)  # type: ignore[arg-type]
    runs = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in FOLDED_LINE.finditer(w.dot)}
    assert runs, w.dot  # the graph folded a run of steps into one node
    described = {n["name"]: n for n in w.nodes}
    assert set(DRAWN_NAME.findall(w.dot)) <= set(described)  # every drawn node (and every step, for the picker)
    assert {name for name in described if name.startswith("c")} == set(runs)
    numbers = step_numbers(w.state)  # type: ignore[arg-type]
    for name, (first, last) in runs.items():
        n = described[name]
        assert numbers[n["step"]] == n["number"] == last, (name, n)
        assert n["label"].startswith(f"Steps {first} to {last}, done"), n
    step = described["c0"]["step"]
    send(w, cmd="inspect", step=step)  # what a click on the folded node sends
    assert w.selected == step and w.inspector["head"].startswith(f"#{runs['c0'][1]} done")


# ----- commands reach the twins ----------------------------------------------------------------


def test_buttons_drive_the_twins_and_every_traitlet_follows() -> None:
    runner = counting_runner(5)
    w = AgentPanel(runner, runner.create_task("count"))
    assert w.protocol == 1 and w.kind == "agent" and enabled(w) == IDLE | {"step", "run"}
    assert [n["status"] for n in w.nodes] == ["queued"]
    for _ in range(3):
        send(w, cmd="step", input="")
    assert [n["status"] for n in w.nodes] == ["done", "done", "done", "queued"]
    assert w.status["parts"][:2] == ["3 done", "1 queued"] and w.status["notice"] == ""
    check_graph_traits(w)
    send(w, cmd="undo")
    state = runner.state_of(w.task_id)
    assert len(state.completed_steps) == 2
    assert [(n["name"], n["status"]) for n in w.nodes] == [
        ("s0", "done"), ("s1", "done"), ("s2", "queued"), ("s3", "undone"), ("u0", "undone run")]
    check_graph_traits(w)
    assert enabled(w) == IDLE | {"step", "run", "undo"}
    # the inspector follows the latest step unless one was picked
    assert w.selected == state.completed_steps[-1].task_step.step_id and w.inspector["head"] == "#2 done"
    first = w.nodes[0]["step"]
    send(w, cmd="inspect", step=first)
    assert w.selected == first and w.inspector["head"] == "#1 done" and w.inspector["output"] == "partial 1"
    send(w, cmd="run")
    assert state.status == TaskStatus.FINALIZED and w.status["answer"] == "the answer is 5"
    assert enabled(w) == {"new", "task_picker"}  # finalized: nothing to run, undo or abandon
    assert w.transcript["messages"][-1]["text"] == "the answer is 5"


def test_a_button_is_on_exactly_when_its_twin_can_act() -> None:
    runner = counting_runner(3, fail_once_at=2)
    w = AgentPanel(runner, runner.create_task("x"))
    expected = [
        ({"cmd": "step"}, IDLE | {"step", "run", "undo"}),
        ({"cmd": "step"}, IDLE | {"step", "run", "undo", "retry", "skip"}),  # step 2 failed
        ({"cmd": "skip"}, IDLE | {"step", "run", "undo"}),
        ({"cmd": "undo"}, IDLE | {"step", "run", "undo", "retry", "skip"}),  # the failure is back
        ({"cmd": "retry"}, IDLE | {"step", "run", "undo"}),
        ({"cmd": "abandon"}, {"new", "task_picker"}),
        ({"cmd": "new_task", "text": "again"}, IDLE | {"step", "run"}),
        ({"cmd": "run"}, {"new", "task_picker"}),
    ]
    for content, on in expected:
        send(w, **content)
        assert w.status["notice"] == "", (content, w.status)
        assert enabled(w) == on, (content, enabled(w))
    # and a press on a button that is off is refused with a reason, changing nothing
    for cmd in ("step", "run", "undo", "retry", "skip", "abandon", "release"):
        send(w, cmd=cmd)
        assert w.status["notice_error"] and w.status["notice"], cmd


def test_a_busy_run_shows_stop_and_turns_the_other_buttons_off() -> None:
    async def main() -> None:
        runner = counting_runner(4, delay=0.05)
        w = AgentPanel(runner, runner.create_task("slow"), throttle_s=0.0)
        send(w, cmd="run")
        await asyncio.sleep(0.08)
        assert w.busy and w.status["state"] == "running"
        assert enabled(w) == {"stop"}
        send(w, cmd="step")  # refused while it runs: shown, nothing started
        assert "run is going on" in w.status["notice"]
        send(w, cmd="stop")
        await w.wait()
        assert not w.busy and enabled(w) == IDLE | {"step", "run", "undo"}
        assert w.status["notice"].startswith("stopped after")

    asyncio.run(main())


def test_a_command_that_cannot_be_done_is_shown_and_changes_nothing() -> None:
    runner = counting_runner(3)
    w = AgentPanel(runner, runner.create_task("x"))
    send(w, cmd="step")
    state = runner.state_of(w.task_id)
    queued_id = state.step_queue[0].step_id
    done_id = state.completed_steps[0].task_step.step_id

    def snapshot() -> tuple[Any, ...]:
        return (len(state.completed_steps), [s.step_id for s in state.step_queue], len(state.undone_outputs),
                state.steps[queued_id].input, w.dot)

    before = snapshot()
    bad: list[tuple[Any, str]] = [
        ({"cmd": "launch"}, "unknown panel command 'launch'; allowed: ["),
        ("step", "a panel command is a dict with a 'cmd' string"),
        ({"cmd": "new_task"}, "command 'new_task' needs 'text' as a string, got None"),
        ({"cmd": "new_task", "text": "   "}, "a new task needs some input text"),
        ({"cmd": "goto", "step": queued_id}, queued_id),
        ({"cmd": "edit_input", "step": done_id, "input": "y"}, "only queued steps can be edited"),
        ({"cmd": "edit", "call": "nope", "arguments": "[1]"}, "edited arguments must be a JSON object"),
        ({"cmd": "approve", "call": "nope"}, "nope"),
        ({"cmd": "inspect", "step": "not-a-step"}, "is not a step of task"),
    ]
    for content, reason in bad:
        message(w, content)  # never raises into the kernel
        assert w.status["notice_error"] and reason in w.status["notice"], (content, w.status)
        assert snapshot() == before, content
    send(w, cmd="stop")  # nothing running: a plain note, not an error
    assert w.status["notice"] == "nothing is running" and not w.status["notice_error"]
    assert set(COMMANDS) == {"new_task", "select_task", "step", "run", "retry", "stop", "undo", "skip", "abandon",
                             "release", "inspect", "goto", "fork", "edit_input", "approve", "edit", "reject"}


def test_the_inspector_undoes_back_to_a_step_forks_from_it_and_edits_a_queued_input() -> None:
    runner = counting_runner(9)
    w = AgentPanel(runner, runner.create_task("x"))
    for _ in range(3):
        send(w, cmd="step")
    state = runner.state_of(w.task_id)
    first = state.completed_steps[0].task_step.step_id
    send(w, cmd="inspect", step=first)
    assert w.inspector["can_goto"] and w.inspector["can_fork"] and not w.inspector["can_edit"]
    send(w, cmd="goto", step=first)  # "Undo back to here"
    assert len(state.completed_steps) == 1 and len(state.undone_outputs) == 2
    assert w.selected == first and w.status["notice"] == ""
    check_graph_traits(w)
    queued = state.step_queue[0].step_id
    send(w, cmd="inspect", step=queued)
    assert w.inspector["can_edit"] and w.inspector["can_fork"] and not w.inspector["can_goto"]
    send(w, cmd="edit_input", step=queued, input="take the other road")
    assert state.steps[queued].input == "take the other road" and w.inspector["input"] == "take the other road"
    send(w, cmd="fork", step=first, input="start again, differently")
    new = state.step_queue[0]
    assert new.step_id not in (first, queued) and new.input == "start again, differently"
    assert len(state.completed_steps) == 0 and w.selected == new.step_id
    check_graph_traits(w)
    send(w, cmd="step")
    assert state.completed_steps[0].task_step.step_id == new.step_id


def test_approvals_are_decided_from_the_browser() -> None:
    deleted: list[str] = []

    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: the file to delete
        """
        deleted.append(path)
        return f"deleted {path}"

    calls = {"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}},
                            {"name": "delete_file", "arguments": {"path": "notes.md"}}]}
    agent = FunctionCallingAgent.from_tools(
        [FunctionTool.from_defaults(delete_file, requires_approval=True)], llm=ScriptedLLM([calls, "done"]))
    w = AgentPanel(agent, agent.create_task("tidy up"))
    send(w, cmd="step")
    assert [(a["tool"], json.loads(a["args"])) for a in w.approvals] == [
        ("delete_file", {"path": "a.txt"}), ("delete_file", {"path": "notes.md"})]
    first, second = (a["call"] for a in w.approvals)
    waiting = w.approvals[0]["step"]
    send(w, cmd="inspect", step=waiting)
    assert w.inspector["calls"] == [first, second] and w.inspector["status"] == "awaiting approval"
    send(w, cmd="edit", call=first, arguments="{not json")
    assert "edited arguments must be a JSON object" in w.status["notice"] and len(w.approvals) == 2
    send(w, cmd="edit", call=first, arguments='{"path": "b.txt"}')
    send(w, cmd="reject", call=second, reason="notes.md is mine")
    assert w.approvals == [] and w.inspector["calls"] == []
    send(w, cmd="step")
    assert deleted == ["b.txt"]
    assert "notes.md is mine" in json.dumps(w.inspector["tools"])


# ----- what crosses to the browser ------------------------------------------------------------


class RecordingComm(DummyComm):
    log: list[tuple[str, str, Any]] = []

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None,
                    buffers: Any = None, **keys: Any) -> None:
        RecordingComm.log.append((self.comm_id, msg_type, data))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, Any]]]:
    RecordingComm.log = []
    monkeypatch.setattr(comm, "create_comm", lambda *a, **kw: RecordingComm(*a, **kw))
    yield RecordingComm.log


def test_state_crosses_as_small_plain_data_and_only_what_changed(recorded: list[Any]) -> None:
    runner = counting_runner(5)
    w = AgentPanel(runner, runner.create_task("count"), throttle_s=3600.0)
    last = dict(w.get_state())
    recorded.clear()
    send(w, cmd="step")
    updates = [d["state"] for cid, kind, d in recorded
               if cid == w.comm.comm_id and kind == "comm_msg" and d.get("method") == "update"]
    # start (busy), the drawn start, the step done, the end of the run: each a few traits
    assert 2 <= len(updates) <= 8, [list(u) for u in updates]
    for update in updates:
        for key, value in update.items():
            assert value != last[key], f"{key} was sent again unchanged"
            last[key] = value
    now = w.get_state()
    assert all(last[k] == now[k] for k in last if k not in ("_esm", "_css")), "the browser ends where Python is"
    sent = json.dumps(updates)
    assert "<div" not in sent and "<span" not in sent and "<b>" not in sent  # data, not HTML
    assert {"dot", "nodes", "status", "buttons", "inspector", "tasks"} <= {k for u in updates for k in u}
    assert "_esm" not in sent and len(sent) < 16_000, len(sent)  # a few KB: the module is never resent


def test_the_panel_is_one_widget_with_no_hidden_ones_inside(recorded: list[Any]) -> None:
    runner = counting_runner(3)
    w = AgentPanel(runner, runner.create_task("x"))
    send(w, cmd="step")
    models = {d["state"]["_model_name"]: d["state"] for _, kind, d in recorded if kind == "comm_open"}
    opened = [d["state"]["_model_name"] for _, kind, d in recorded if kind == "comm_open"]
    # the anywidget and the Layout every ipywidgets DOMWidget carries: no buttons, boxes or graph
    assert sorted(opened) == ["AnyModel", "LayoutModel"], opened
    assert models["AnyModel"]["kind"] == "agent"
    assert len(models["AnyModel"]["_esm"]) > 500_000  # the module, with Graphviz inside, once


def test_streamed_tokens_grow_by_appending_while_the_step_runs() -> None:
    async def main() -> list[str]:
        llm = ScriptedLLM(["alpha beta gamma delta epsilon zeta", "second reply"])
        runner = AgentRunner(StreamingWorker(llm=llm, steps=2))
        w = AgentPanel(runner, runner.create_task("stream"), throttle_s=0.01)
        values: list[str] = []
        w.observe(lambda c: values.append(c["new"]), names="tokens")
        await w.step()
        assert w.tokens == "alpha beta gamma delta epsilon zeta" and w.tokens_note.startswith("step #1")
        return values

    values = asyncio.run(main())
    grown = [v for v in values if v]
    assert len(grown) >= 3  # seen while it streamed, not only at the end
    # each update extends the one before: the browser appends the new tail to its text node
    assert all(b.startswith(a) for a, b in zip(grown, grown[1:])), grown


def test_untrusted_text_crosses_as_text_and_the_static_picture_escapes_it() -> None:
    runner = AgentRunner(StreamingWorker(llm=ScriptedLLM([HOSTILE, HOSTILE]), steps=2))
    w = AgentPanel(runner, runner.create_task(HOSTILE))
    send(w, cmd="step", input=HOSTILE)
    send(w, cmd="inspect", step=w.nodes[0]["step"])
    # the browser puts these in with textContent: they must arrive as the text they are
    assert w.inspector["input"] == HOSTILE and w.inspector["output"] == HOSTILE
    assert HOSTILE in w.nodes[0]["text"] and w.tokens == HOSTILE
    assert [m["text"] for m in w.transcript["messages"]] == [HOSTILE, HOSTILE]
    assert "<script" not in w.dot and "&lt;script&gt;" in w.dot
    html = w._repr_mimebundle_()["text/html"]
    assert "<script" not in html.lower() and "<img" not in html and "&lt;script&gt;" in html


def test_mimebundle_keeps_a_static_picture_for_frontends_without_widgets() -> None:
    runner = counting_runner(3)
    w = AgentPanel(runner, runner.create_task("show me"))
    send(w, cmd="step")
    bundle = w._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", WIDGET_VIEW}
    assert bundle[WIDGET_VIEW]["model_id"] == w.model_id
    assert bundle["text/plain"].startswith("AgentPanel(task=") and "0x" not in bundle["text/plain"]
    assert bundle["text/plain"] == repr(w)
    assert "1 done" in bundle["text/html"] and "<svg" in bundle["text/html"]  # the graph, inline


def test_close_stops_listening() -> None:
    runner = counting_runner(3)
    w = AgentPanel(runner, runner.create_task("x"))
    dot = w.dot
    w.close()
    runner.run_step(w.task_id)
    assert w.dot == dot and w.comm is None


# ----- the shipped front end -----------------------------------------------------------------


def test_the_es_module_ships_in_the_package_with_graphviz_inside_and_fetches_nothing() -> None:
    js = (STATIC / "panel.js").read_text()
    assert str(AgentPanel._esm) == js
    assert len(js) > 500_000  # Graphviz's WebAssembly, inlined
    assert re.search(r"export\{\w+ as default\};\s*$", js)
    assert "import(" not in js and "importScripts" not in js and "new Worker" not in js
    urls = set(re.findall(r"https?://[\w./-]+", js))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"}, urls
    assert ".innerHTML" not in js.split("var ", 1)[0]  # the banner; our code below uses no innerHTML
    notices = (STATIC / "panel.js.LICENSES.txt").read_text()
    assert "@hpcc-js/wasm-graphviz" in notices and "Apache" in notices and "Eclipse Public License" in notices
    # the wheel carries them (setuptools package-data)
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["nbagent"]
    shipped = {p.relative_to(REPO / "nbagent").as_posix() for g in data for p in (REPO / "nbagent").glob(g)}
    assert {"viz/static/panel.js", "viz/static/panel.css", "viz/static/panel.js.LICENSES.txt"} <= shipped


def test_our_sources_never_use_inner_html() -> None:
    for src in (REPO / "js" / "src").glob("*.js"):
        text = src.read_text()
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "outerHTML" not in text, src


def test_the_css_uses_the_graphs_status_colours() -> None:
    css = (STATIC / "panel.css").read_text()
    from nbagent.viz.html import _ROLE_COLORS

    for prefix, colours in (("s", {s.name.lower(): c for s, c in STATUS_COLORS.items()}), ("r", _ROLE_COLORS)):
        for name, (fill, border, text) in colours.items():
            rule = re.search(rf"\.nba-{prefix}-{name} \{{ background: (#\w+); border-color: (#\w+); color: (#\w+); \}}", css)
            assert rule and rule.groups() == (fill, border, text), (name, rule and rule.groups())


@pytest.mark.skipif(shutil.which("npm") is None and os.environ.get("REQUIRE_PYODIDE") != "1",
                    reason="npm is not on PATH (Node.js builds the panel's ES module)")
@pytest.mark.timeout(600)
def test_the_committed_module_is_what_js_builds(tmp_path: Path) -> None:
    """``js/build.mjs --check`` in a fresh copy of js/ (``npm ci`` from its lockfile): the
    committed panel.js and its notices are byte for byte what the pinned tools build."""
    assert shutil.which("npm"), "npm is needed (REQUIRE_PYODIDE=1)"
    work = tmp_path / "js"
    shutil.copytree(REPO / "js", work, ignore=shutil.ignore_patterns("node_modules"))
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=work, check=True, capture_output=True,
                   timeout=500)
    check = subprocess.run(["node", "build.mjs", "--check", "--static", str(STATIC)], cwd=work,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr + check.stdout
    # and a changed source is caught
    (work / "src" / "agent.js").write_text((work / "src" / "agent.js").read_text().replace("Run step", "Go"))
    stale = subprocess.run(["node", "build.mjs", "--check", "--static", str(STATIC)], cwd=work,
                           capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1 and "out of date" in stale.stderr
