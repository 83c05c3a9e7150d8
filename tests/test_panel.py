"""AgentPanel and LiveGraph without a browser: drive the Python twins and the presses, check
what the panel sends to the browser (its traitlets) and its static picture.

Widgets are built without a kernel (ipywidgets falls back to a dummy comm); a few tests swap in
a comm that records the messages a frontend would receive.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
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
    MessageRole,
    ScriptedLLM,
    Task,
    TaskStateError,
    TaskStatus,
)
from nbagent.viz.dot import task_to_dot
from nbagent.viz.graph import find_dot
from nbagent.viz.live import EMPTY_DOT, LiveGraph, Throttle
from nbagent.viz.panel import AgentPanel

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
NODE_RE = re.compile(r"^\s+(s\d+) \[label=<<B>#(\d+) (\w+)", re.M)


def node_statuses(dot: str) -> list[str]:
    """Statuses of the step nodes in DOT text, in node order."""
    return [m.group(3) for m in NODE_RE.finditer(dot)]


# ----- workers -------------------------------------------------------------------------------


def counting_runner(steps: int = 5, *, fail_once_at: int | None = None, delay: float = 0.0) -> AgentRunner:
    """A FnAgentWorker that answers after ``steps`` steps (async, optionally slow)."""
    failed: set[int] = set()

    async def fn(state: dict[str, Any]) -> tuple[str, bool]:
        n = state["step"] + 1
        if delay:
            await asyncio.sleep(delay)
        if fail_once_at == n and n not in failed:
            failed.add(n)
            raise ValueError(f"boom at step {n}")
        state["seen"] = [*state.get("seen", []), state["input"]]
        return (f"the answer is {n}" if n >= steps else f"partial {n}"), n >= steps

    return AgentRunner(FnAgentWorker(fn, initial_state={"seen": []}, max_steps=None))


class SlowStreamLLM(ScriptedLLM):
    """ScriptedLLM whose stream waits between tokens, like a real model."""

    delay: float = 0.0

    async def _astream(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> Any:
        async for chunk in super()._astream(messages, tools, tool_choice, **kwargs):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield chunk


class ChattyWorker(CustomSimpleAgentWorker):
    """Asks the model once per step (streaming) and writes its reply to the transcript."""

    steps: int = 2

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    async def _arun_step(
        self, state: dict[str, Any], task: Task, input: str | None = None
    ) -> tuple[AgentChatResponse, bool]:
        messages = [ChatMessage(role=MessageRole.USER, content=input or task.input)]
        if state["n"] == 0:
            state["memory"].put(messages[0])
        text = ""
        async for chunk in self.llm.astream_chat(messages):
            text = chunk.message.text
        state["n"] += 1
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        return AgentChatResponse(response=text), state["n"] >= self.steps

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def chatty_runner(replies: list[str], steps: int = 2, delay: float = 0.0) -> AgentRunner:
    llm = SlowStreamLLM(replies)
    llm.delay = delay
    return AgentRunner(ChattyWorker(llm=llm, steps=steps))


def transcript_text(panel: AgentPanel) -> str:
    """What the transcript shows: each message's role, name, text and tool calls."""
    return "\n".join(" ".join([m["role"], m["name"], m["text"], *m["calls"]]) for m in panel.transcript["messages"])


def inspector_text(panel: AgentPanel) -> str:
    """What the inspector shows of the selected step."""
    step = panel.inspector
    tools = [f"{t['name']}({t['args']}) {t['result']}" for t in step.get("tools", [])]
    return "\n".join(str(step.get(k, "")) for k in ("head", "input", "thought", "output", "error")) + "\n".join(tools)


def tokens_text(panel: AgentPanel) -> str:
    return f"{panel.tokens_note}\n{panel.tokens}"


def fresh_dot(panel: AgentPanel) -> str:
    """The shown task's DOT drawn afresh from its state (what ``dot`` must equal)."""
    return task_to_dot(panel.state) if panel.state is not None else EMPTY_DOT


def dot_changes(panel: AgentPanel) -> list[str]:
    """Every DOT text the panel sends from now on."""
    sent: list[str] = []
    panel.observe(lambda change: sent.append(change["new"]), names="dot")
    return sent


# ----- stepping, undo, graph -----------------------------------------------------------------


def test_step_and_undo_redraw_the_graph_with_the_right_nodes_and_statuses() -> None:
    runner = counting_runner(5)
    task = runner.create_task("count to five")
    panel = runner.panel(task)
    assert panel.task_id == task.task_id
    assert node_statuses(panel.dot) == ["queued"]

    for expected_done in (1, 2, 3):
        out = panel.step()
        assert out is not None and not isinstance(out, BaseException)
        assert node_statuses(panel.dot) == ["done"] * expected_done + ["queued"]
    assert "3 done" in panel.status_text() and "1 queued" in panel.status_text()

    step = panel.undo()
    # step #3 is queued again; the step it had produced (#4) stays in the graph, greyed
    assert node_statuses(panel.dot) == ["done", "done", "queued", "undone"]
    assert step.step_id == list(runner.state_of(task).steps)[2]
    assert "2 done" in panel.status_text() and "1 undone" in panel.status_text()
    assert panel.dot == fresh_dot(panel)  # what is shown is the current state


def test_live_graph_alone_follows_runner_events_and_degrades_without_a_task() -> None:
    runner = counting_runner(3)
    graph = LiveGraph(runner, throttle_s=0)
    assert graph.source == EMPTY_DOT and graph.task_id is None
    task = runner.create_task("x")
    graph.show(task)
    runner.run_step(task)
    assert node_statuses(graph.source) == ["done", "queued"]
    runner.delete_task(task)
    assert graph.task_id is None and graph.source == EMPTY_DOT
    graph.close()
    runner.create_task("y")
    assert graph.source == EMPTY_DOT  # closed: no longer listening


def test_trailing_redraw_happens_without_a_flush_after_a_direct_runner_call() -> None:
    runner = counting_runner(5)
    task = runner.create_task("x")
    panel = runner.panel(task)
    runner.run_step(task)  # not through the panel: StepStarted draws, StepCompleted is throttled
    runner.run_step(task)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and node_statuses(panel.dot) != ["done", "done", "queued"]:
        time.sleep(0.02)
    assert node_statuses(panel.dot) == ["done", "done", "queued"]
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and "2 done" not in panel.status_text():
        time.sleep(0.02)
    assert "2 done" in panel.status_text()


# ----- failures --------------------------------------------------------------------------------


def test_failure_is_shown_returned_and_retry_is_enabled_then_works() -> None:
    runner = counting_runner(3, fail_once_at=2)
    task = runner.create_task("go")
    panel = runner.panel(task)
    assert not panel.buttons["retry"]
    panel.step()
    result = panel.step()  # the failing step: returned, not raised
    assert isinstance(result, ValueError) and panel.error is result
    assert panel.buttons["retry"] and panel.buttons["step"]
    assert "failed" in panel.status_text()
    assert "ValueError: boom at step 2" in panel.status_text()
    assert node_statuses(panel.dot) == ["done", "failed"]
    assert "boom at step 2" in inspector_text(panel)  # the inspector follows the failed step
    assert runner.state_of(task).status == TaskStatus.FAILED

    out = panel.retry()
    assert not isinstance(out, BaseException)
    assert not panel.buttons["retry"] and panel.error is None
    assert "boom" not in panel.status_text()
    assert node_statuses(panel.dot) == ["done", "done", "queued"]
    with pytest.raises(TaskStateError, match="nothing to retry"):
        panel.retry()


def test_button_clicks_never_raise_and_show_why_they_could_not_act() -> None:
    runner = counting_runner(2)
    panel = runner.panel()
    panel.press("step")  # no task: shown, not raised
    assert "no task selected" in panel.status_text()
    with pytest.raises(TaskStateError, match="no task selected"):
        panel.step()

    panel.press("new_task", text="first task")
    assert panel.state is not None and panel.state.task.input == "first task"
    panel.press("undo")  # nothing to undo
    assert "nothing to undo" in panel.status_text()
    with pytest.raises(TaskStateError, match="nothing to undo"):
        panel.undo()
    panel.press("new_task", text="")  # empty box
    assert "needs some input text" in panel.status_text()
    assert len(runner.tasks) == 1


def test_failure_raised_by_a_click_on_run_step_is_in_the_status_line() -> None:
    runner = counting_runner(3, fail_once_at=1)
    panel = runner.panel(runner.create_task("go"))
    panel.press("step")
    assert "ValueError: boom at step 1" in panel.status_text()
    assert panel.buttons["retry"]
    panel.press("retry")
    assert "boom" not in panel.status_text()
    assert node_statuses(panel.dot) == ["done", "queued"]


# ----- steering, abandon, run to end -----------------------------------------------------------


def test_inject_changes_the_next_step_input_and_is_used_once() -> None:
    runner = counting_runner(4)
    task = runner.create_task("original")
    panel = runner.panel(task)
    panel.step()
    panel.inject("turn left")
    assert panel.inject_text == "turn left"
    panel.step()
    state = runner.state_of(task)
    assert state.completed_steps[-1].task_step.input == "turn left"
    assert state.task.extra_state["seen"] == ["original", "turn left"]
    assert panel.inject_text == ""  # used once
    panel.step()
    assert state.completed_steps[-1].task_step.input is None
    assert "turn left" in panel.dot  # the node shows the injected input


def test_injected_input_survives_a_failed_step_for_the_retry() -> None:
    runner = counting_runner(3, fail_once_at=1)
    task = runner.create_task("go")
    panel = runner.panel(task)
    panel.inject("steer")
    assert isinstance(panel.step(), ValueError)
    assert panel.inject_text == "steer"
    panel.retry()
    assert runner.state_of(task).completed_steps[0].task_step.input == "steer"


def test_abandon_disables_the_run_buttons() -> None:
    runner = counting_runner(5)
    task = runner.create_task("go")
    panel = runner.panel(task)
    panel.step()
    panel.abandon()
    assert runner.state_of(task).status == TaskStatus.ABANDONED
    for name in ("step", "run", "undo", "retry", "abandon", "stop"):
        assert not panel.buttons[name], name
    assert panel.buttons["new"]
    assert "abandoned" in panel.status_text()
    with pytest.raises(TaskStateError, match="abandoned"):
        panel.step()


def test_run_to_end_finalizes_and_the_answer_is_in_the_transcript() -> None:
    runner = counting_runner(5)
    task = runner.create_task("count")
    panel = runner.panel(task)
    out = panel.run()
    assert out is not None and not isinstance(out, BaseException) and out.is_last
    state = runner.state_of(task)
    assert state.status == TaskStatus.FINALIZED
    assert node_statuses(panel.dot) == ["done"] * 5
    assert "the answer is 5" in transcript_text(panel)
    assert "finalized" in panel.status_text() and "the answer is 5" in panel.status_text()
    assert not panel.buttons["step"] and not panel.buttons["run"] and not panel.buttons["undo"]


def test_chatty_worker_transcript_holds_user_and_model_messages_once() -> None:
    runner = chatty_runner(["thinking about it", "final: 42"])
    panel = runner.panel(runner.create_task("what is 6*7?"))
    panel.step()
    assert "what is 6*7?" in transcript_text(panel) and "thinking about it" in transcript_text(panel)
    panel.run()
    assert transcript_text(panel).count("final: 42") == 1  # in memory: not added again
    assert panel.transcript_messages()[-1].text == "final: 42"
    assert len(runner.chat_history) == 3  # finalized: the task's messages joined the memory


def test_streamed_final_answer_of_a_function_calling_agent_reaches_every_view() -> None:
    from nbagent import FunctionCallingAgentWorker, tool_call

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    llm = ScriptedLLM([tool_call("multiply", a=121, b=3), "The answer is 363, computed by the tool."])
    runner = AgentRunner(FunctionCallingAgentWorker.from_tools([multiply], llm=llm))
    panel = runner.panel(runner.create_task("121 * 3?"))
    out = panel.run()
    assert not isinstance(out, BaseException), out
    state = runner.state_of(panel.task_id)
    assert state.status == TaskStatus.FINALIZED
    answer = "The answer is 363, computed by the tool."
    assert panel.streamed_text == answer  # first token from the step, the rest from the stream
    assert answer in tokens_text(panel)
    assert transcript_text(panel).count(answer) == 1
    assert "multiply" in transcript_text(panel) and answer in panel.status_text()
    assert node_statuses(panel.dot) == ["done", "done"]


def test_new_task_and_select_switch_what_every_view_shows() -> None:
    runner = counting_runner(2)
    panel = runner.panel()
    first = panel.new_task("first")
    panel.run()
    second = panel.new_task("second")
    assert panel.task_id == second.task_id
    assert [t["id"] for t in panel.tasks] == [first.task_id, second.task_id]
    assert panel.task == second.task_id
    assert node_statuses(panel.dot) == ["queued"]
    panel.select(first.task_id)
    assert node_statuses(panel.dot) == ["done", "done"]
    assert "finalized" in panel.status_text()
    panel.press("select_task", task=second.task_id)  # the picker does the same as select()
    assert panel.task_id == second.task_id and node_statuses(panel.dot) == ["queued"]
    with pytest.raises(ValueError, match="needs some input"):
        panel.new_task("   ")


def test_step_inspector_shows_a_picked_step_and_follows_the_latest_otherwise() -> None:
    runner = counting_runner(4)
    task = runner.create_task("inspect me")
    panel = runner.panel(task)
    panel.step()
    panel.step()
    ids = list(runner.state_of(task).steps)
    assert panel.selected == ids[1]  # latest completed
    assert "partial 2" in inspector_text(panel)
    panel.press("inspect", step=ids[0])  # a click on its node
    assert "partial 1" in inspector_text(panel) and "inspect me" in inspector_text(panel)
    panel.step()
    assert panel.selected == ids[0]  # a picked step stays picked
    panel.inspect(None)
    assert panel.selected == ids[2] and "partial 3" in inspector_text(panel)


# ----- background runs -------------------------------------------------------------------------


def test_stop_interrupts_a_background_run_and_the_loop_stays_responsive() -> None:
    total = 30

    async def main() -> None:
        runner = counting_runner(total, delay=0.01)
        task = runner.create_task("long")
        panel = runner.panel(task)
        handle = panel.run()
        assert isinstance(handle, asyncio.Task) and panel.running_task is handle  # returned at once
        assert panel.busy and not panel.buttons["step"] and panel.buttons["stop"]
        ticks = 0
        while len(runner.state_of(task).completed_steps) < 3:
            ticks += 1  # this coroutine runs while the panel works
            await asyncio.sleep(0.005)
        panel.press("stop")
        result = await panel.wait()
        done = len(runner.state_of(task).completed_steps)
        assert 3 <= done < total and ticks > 1
        assert isinstance(result, type(runner.state_of(task).completed_steps[-1]))
        assert not panel.busy and panel.buttons["step"] and not panel.buttons["stop"]
        assert "stopped after" in panel.status_text()
        assert runner.state_of(task).status == TaskStatus.ACTIVE
        assert node_statuses(panel.dot).count("done") == done  # final state drawn

    asyncio.run(main())


def test_stop_with_cancel_rolls_the_running_step_back() -> None:
    async def main() -> None:
        runner = counting_runner(3, delay=10)
        task = runner.create_task("slow")
        panel = runner.panel(task)
        panel.step()
        await asyncio.sleep(0.05)
        assert runner.state_of(task).status == TaskStatus.RUNNING
        assert node_statuses(fresh_dot(panel)) == ["running"]
        panel.stop(cancel=True)
        assert await panel.wait() is None
        state = runner.state_of(task)
        assert not state.completed_steps and len(state.step_queue) == 1
        assert "cancelled" in panel.status_text()
        assert panel.buttons["retry"]  # the cancelled attempt counts as failed

    asyncio.run(main())


def test_a_second_run_while_busy_is_refused() -> None:
    async def main() -> None:
        runner = counting_runner(5, delay=0.02)
        panel = runner.panel(runner.create_task("x"))
        panel.run()
        with pytest.raises(TaskStateError, match="run is going on"):
            panel.step()
        panel.press("run")  # refused, shown, not raised
        assert "run is going on" in panel.status_text()
        await panel.wait()
        assert runner.state_of(panel.task_id).status == TaskStatus.FINALIZED

    asyncio.run(main())


# ----- throttling ------------------------------------------------------------------------------


def test_throttle_calls_at_once_then_coalesces_and_never_drops_the_last_request() -> None:
    calls: list[float] = []
    t = Throttle(lambda: calls.append(time.monotonic()), 0.05)
    for _ in range(100):
        t.request()
    assert len(calls) == 1 and t.pending
    time.sleep(0.2)  # the trailing call runs on a timer thread
    assert len(calls) == 2 and not t.pending
    t.request()
    t.request()
    assert t.flush() and len(calls) == 4 and not t.flush()


def test_many_fast_steps_are_coalesced_into_few_redraws_and_the_final_state_is_drawn() -> None:
    runner = counting_runner(50)
    panel = runner.panel(runner.create_task("fast"))
    sent = dot_changes(panel)
    panel.run()
    redraws = len(sent)
    assert 1 <= redraws <= 5, redraws  # 50 steps x (started + completed) events
    # 50 done steps: the middle of the long linear run is drawn as one "… N steps …" node
    collapsed = sum(int(n) for n in re.findall(r"… (\d+) steps …", panel.dot))
    assert node_statuses(panel.dot).count("done") + collapsed == 50 and collapsed > 0
    assert panel.dot == fresh_dot(panel)
    assert "50 done" in panel.status_text()


def test_slow_steps_on_an_event_loop_redraw_about_once_per_interval() -> None:
    async def main() -> tuple[int, AgentPanel]:
        runner = counting_runner(40, delay=0.01)  # about 0.5 s of steps
        panel = AgentPanel(runner, runner.create_task("paced"), throttle_s=0.1)
        sent = dot_changes(panel)
        panel.run()
        await panel.wait()
        return len(sent), panel

    redraws, panel = asyncio.run(main())
    assert 3 <= redraws <= 15, redraws  # neither one per event (80) nor only the last
    assert panel.dot == fresh_dot(panel)
    assert "40 done" in panel.status_text()


class RecordingComm(DummyComm):
    """A comm that keeps what it would send to the frontend."""

    log: list[tuple[str, str, Any]] = []

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None,
                    buffers: Any = None, **keys: Any) -> None:
        RecordingComm.log.append((self.comm_id, msg_type, data))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, Any]]]:
    RecordingComm.log = []
    monkeypatch.setattr(comm, "create_comm", lambda *a, **kw: RecordingComm(*a, **kw))
    yield RecordingComm.log


def _updates(log: list[tuple[str, str, Any]], comm_id: str, key: str) -> list[Any]:
    return [
        d["state"][key]
        for cid, kind, d in log
        if cid == comm_id and kind == "comm_msg" and d.get("method") == "update"
        and key in d.get("state", {})
    ]


def test_frontend_gets_few_graph_messages_and_one_batched_update_per_change(recorded: list[Any]) -> None:
    runner = counting_runner(50)
    # a throttle far longer than the run makes the count independent of the machine's speed:
    # the first change is drawn at once, the other 49 steps coalesce into the one sent at
    # the end of run() (with the default 0.1 s a loaded machine legitimately sends more)
    panel = runner.panel(runner.create_task("fast"), throttle_s=3600.0)
    recorded.clear()
    panel.run()
    sent = _updates(recorded, panel.comm.comm_id, "dot")
    assert 1 <= len(sent) <= 3 and sent[-1] == fresh_dot(panel)

    recorded.clear()
    panel.new_task("another")  # changes picker, buttons, status, inspector, transcript at once
    updates = [d["state"] for cid, kind, d in recorded
               if cid == panel.comm.comm_id and kind == "comm_msg" and d.get("method") == "update"]
    assert len(updates) == 1  # one message for the lot
    assert {"tasks", "task", "buttons", "status", "dot", "nodes", "inspector"} <= set(updates[0])
    panel.close()  # no hour-long timer left behind


# ----- streaming -------------------------------------------------------------------------------


def test_streamed_tokens_appear_in_the_token_view_while_the_step_runs() -> None:
    async def main() -> None:
        runner = chatty_runner(["alpha beta gamma delta epsilon", "done now"], steps=2, delay=0.03)
        panel = AgentPanel(runner, runner.create_task("stream please"), throttle_s=0.02)
        seen: list[str] = []
        panel.step()
        while panel.busy:
            seen.append(tokens_text(panel))
            await asyncio.sleep(0.01)
        await panel.wait()
        partial = [v for v in seen if "alpha" in v and "epsilon" not in v]
        assert partial, "no partial stream was visible while the step ran"
        assert any("streaming" in v for v in seen)
        assert panel.streamed_text == "alpha beta gamma delta epsilon"
        assert "alpha beta gamma delta epsilon" in tokens_text(panel)
        panel.step()
        await panel.wait()
        assert panel.streamed_text == "done now"  # a new step starts a fresh stream

    asyncio.run(main())


def test_tokens_and_usage_reach_the_status_line() -> None:
    runner = chatty_runner(["one two three", "four"], steps=2)
    panel = runner.panel(runner.create_task("q"))
    panel.run()
    tokens = sum(o.usage.total_tokens for o in runner.state_of(panel.task_id).completed_steps if o.usage)
    assert tokens > 0 and f"{tokens} tokens" in panel.status_text()


# ----- escaping and display --------------------------------------------------------------------

HOSTILE_INPUT = '<script>alert("in")</script> "; } digraph x { a -> b [label="' + "\\"
HOSTILE_REPLY = '</style><img src=x onerror=alert(1)> <script>alert("out")</script> }}"->'


def test_hostile_text_crosses_as_text_and_is_escaped_in_the_picture_and_the_dot() -> None:
    runner = chatty_runner([HOSTILE_REPLY, HOSTILE_REPLY], steps=2)
    task = runner.create_task(HOSTILE_INPUT)
    panel = runner.panel(task)
    panel.inject(HOSTILE_INPUT)
    panel.step()
    panel.press("inspect", step=list(runner.state_of(task).steps)[0])
    panel.run()
    # the browser puts texts in with textContent: they arrive as the very text, unescaped
    assert panel.inspector["input"] == HOSTILE_INPUT
    assert HOSTILE_REPLY in transcript_text(panel) and panel.tokens == HOSTILE_REPLY
    html = panel.static_html()  # the picture escapes them
    assert "<script" not in html.lower() and "<img" not in html
    assert html.count("</style>") == html.count("<style>")  # only our own styles, each closed
    assert "&lt;script&gt;" in html and "&lt;img" in html

    dot = panel.dot
    assert "<script" not in dot and "&lt;script&gt;" in dot
    exe = find_dot()
    if exe:
        svg = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, check=True).stdout
        assert svg.count(b'class="node"') == 2  # parsed as intended: two step nodes, no injected ones


def test_mimebundles_carry_the_widget_view_and_a_static_fallback(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Any) -> None:
    runner = counting_runner(3)
    task = runner.create_task("show me")
    panel = runner.panel(task)
    panel.step()
    graph = runner.live_graph(task)
    for obj in (panel, graph):
        bundle = obj._repr_mimebundle_()
        assert WIDGET_VIEW in bundle and bundle[WIDGET_VIEW]["model_id"]
        assert "0x" not in bundle["text/plain"]  # no addresses: stable for nbval
        assert "text/html" in bundle or "image/svg+xml" in bundle
    html = panel._repr_mimebundle_()["text/html"]
    assert "1 done" in html
    if find_dot():
        assert html.count('class="node"') == 2  # the graph as an inline SVG
        assert graph._repr_mimebundle_()["image/svg+xml"].count('class="node"') == 2
    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz: HTML with the steps and the DOT text
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all
    no_dot = graph._repr_mimebundle_()
    assert "image/svg+xml" not in no_dot and "digraph" in no_dot["text/html"]
    assert WIDGET_VIEW in no_dot
    html = panel._repr_mimebundle_()["text/html"]
    assert "1 done" in html and "<svg" not in html


def test_reset_and_close_leave_the_panel_quiet_and_consistent() -> None:
    runner = counting_runner(3)
    task = runner.create_task("x")
    panel = runner.panel(task)
    panel.step()
    runner.reset()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and panel.tasks:
        time.sleep(0.02)
    assert panel.task_id is None and panel.dot == EMPTY_DOT
    assert panel.tasks == [] and not panel.buttons["step"]
    panel.close()
    assert panel.comm is None
    runner.create_task("after close")  # no listener left: nothing to update, nothing raised
    assert panel.task_id is None and panel.tasks == []


def test_html_renderer_works_without_graphviz_anywidget(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = counting_runner(2)
    task = runner.create_task("plain")
    graph = LiveGraph(runner, task, renderer="html", throttle_s=0)
    assert not graph.in_browser
    runner.run_step(task)
    assert "done" in graph.widget.value
    with pytest.raises(ValueError, match="renderer must be"):
        LiveGraph(runner, task, renderer="svg")
    with pytest.raises(TypeError, match="unknown graph option"):
        LiveGraph(runner, task, colour="red")


def test_status_line_shows_cost_when_prices_are_set() -> None:
    from nbagent import FnAgentWorker
    from nbagent.costs import Pricing

    def fn(state: dict) -> tuple[str, bool]:
        from nbagent.events import record_llm_call
        from nbagent.messages import TokenUsage

        record_llm_call(TokenUsage(prompt_tokens=1_000_000, completion_tokens=0), 0.0)
        return "x", state["step"] >= 1

    class Priced(FnAgentWorker):
        class llm:  # the model name the cost is looked up by
            model = "m1"

    runner = Priced(fn).as_agent()
    panel = runner.panel(runner.create_task("go"))
    panel.step()
    assert "$" not in panel.status_text()  # no prices: no money shown
    runner.pricing = Pricing({"m1": (2.0, 8.0)})
    panel.step()
    assert "$4" in panel.status_text(), panel.status_text()
