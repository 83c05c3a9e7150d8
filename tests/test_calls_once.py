"""A tool call that ran is not run again behind the person's back (issue 28, item 3).

The hole: one reply called ``side_effect`` (approved) and ``crash_once``; the crash rolled the
step back and the retry ran ``side_effect`` again. Now an attempt's calls are journaled on the
step (``nbagent.calls``): the retry acts on the same reply, reuses the outputs of the calls
that finished and runs only the others. Undoing a step that ran is the person taking it back:
its approvals are withdrawn and running it again asks anew.

Every side effect here is a line appended to a real file, counted after each move.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, FunctionCallingAgent, FunctionTool, ParallelAgentRunner, ReActAgent, ScriptedLLM
from nbagent import events as ev
from nbagent.calls import JOURNAL_KEY
from nbagent.runner.approvals import AwaitingApprovalError
from nbagent.runner.base import TaskStateError
from nbagent.workers.planner import PlannerAgentWorker


class Crash(BaseException):
    """Raised past a tool (as ``KeyboardInterrupt`` or ``SystemExit`` would be)."""


class World:
    """A log file the tools append to, and a crash that happens once."""

    def __init__(self, root: Path) -> None:
        self.log = root / "effects.log"
        self.log.write_text("")
        self.crashes = 1

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def tools(self, approve_side_effect: bool = True, crash: type[BaseException] = Crash) -> list[FunctionTool]:
        def side_effect(text: str) -> str:
            """Append a line to the log.

            Args:
                text: the line
            """
            with self.log.open("a") as f:
                f.write(text + "\n")
            return f"appended {text}"

        def crash_once() -> str:
            """Fails the first time (past the tool), then works."""
            if self.crashes:
                self.crashes -= 1
                raise crash("crashed")
            with self.log.open("a") as f:
                f.write("crash_once ran\n")
            return "fine"

        return [
            FunctionTool.from_defaults(side_effect, requires_approval=approve_side_effect),
            FunctionTool.from_defaults(crash_once),
        ]


BOTH = {"tool_calls": [
    {"name": "side_effect", "arguments": {"text": "one"}},
    {"name": "crash_once", "arguments": {}},
]}


@pytest.mark.parametrize("crash", [Crash, KeyboardInterrupt, SystemExit])
def test_the_issue_scenario_an_approved_call_is_not_run_twice(tmp_path: Path, crash: type[BaseException]) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([BOTH, "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(crash=crash), llm=llm)
    task = agent.create_task("go")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id)
    with pytest.raises(crash):
        agent.run_step(task)
    assert world.lines() == ["one"]  # it ran once; the crash came past the other call
    state = agent.state_of(task)
    waiting = agent.get_upcoming_steps(task)[0]
    assert state.failed_step_id() == waiting.step_id
    kept = waiting.step_state[JOURNAL_KEY]["outputs"]
    assert [o.content for o in kept.values()] == ["appended one"]
    # what ran cannot be decided again: the error says so and keeps the record as it was
    with pytest.raises(TaskStateError, match=rf"call '{p.call_id}' \(side_effect\) already ran in an attempt .* cannot be decided again"):
        agent.reject(task, p.call_id, reason="too late")
    out = agent.run_step(task)  # the retry
    assert world.lines() == ["one", "crash_once ran"]
    assert [o.content for o in out.tool_outputs] == ["appended one", "fine"]
    assert JOURNAL_KEY not in out.task_step.step_state
    final = agent.run_step(task)
    assert final.is_last and len(llm.requests) == 2
    tool_msgs = [m.content for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert tool_msgs == ["appended one", "fine"]  # the model hears of each call once


def test_a_reply_whose_calls_ran_is_not_asked_again(tmp_path: Path) -> None:
    """No approval at all: the step called the model, ran both calls, one crashed. The retry
    acts on the same reply (no new model call) and runs only the crashed call."""
    world = World(tmp_path)
    llm = ScriptedLLM([BOTH, {"tool_calls": [{"name": "side_effect", "arguments": {"text": "two"}}]}, "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(approve_side_effect=False), llm=llm)
    task = agent.create_task("go")
    with pytest.raises(Crash):
        agent.run_step(task)
    assert world.lines() == ["one"] and len(llm.requests) == 1
    out = agent.run_step(task)
    assert world.lines() == ["one", "crash_once ran"] and len(llm.requests) == 1
    assert [o.content for o in out.tool_outputs] == ["appended one", "fine"]
    assert [m.role.value for m in agent.state_of(task).task.scratch_memory.get_all()] == ["user", "assistant", "tool", "tool"]


def test_streaming_retry_resumes_too(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([BOTH, "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(approve_side_effect=False), llm=llm)
    task = agent.create_task("go")
    with pytest.raises(Crash):
        agent.stream_step(task)
    agent.stream_step(task)
    assert world.lines() == ["one", "crash_once ran"] and len(llm.requests) == 1


def test_input_given_to_the_retry_goes_to_the_model_next(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([BOTH, "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(approve_side_effect=False), llm=llm)
    task = agent.create_task("go")
    with pytest.raises(Crash):
        agent.run_step(task)
    agent.run_step(task, input="and say when you are done")
    assert world.lines() == ["one", "crash_once ran"]
    agent.run_step(task)
    roles = [(m.role.value, m.text) for m in llm.requests[-1].messages]
    assert roles[0] == ("user", "go")  # the reply answered the original input
    assert roles[-1] == ("user", "and say when you are done")  # after the tool replies


def _interrupt_after_commit(agent: AgentRunner) -> None:
    """Ctrl-C right after the step's output was recorded (its listener raises once)."""
    fired: list[bool] = []

    def listener(event: Any) -> None:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt()

    agent.subscribe(listener, ev.StepCompleted)


def test_react_call_that_ran_before_an_interrupt_is_reused(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([
        'Thought: log it.\nAction: side_effect\nAction Input: {"text": "one"}',
        'Thought: again?\nAction: side_effect\nAction Input: {"text": "two"}',
        "Thought: done.\nAnswer: ok",
    ])
    agent = ReActAgent.from_tools(world.tools(approve_side_effect=False)[:1], llm=llm)
    task = agent.create_task("go")
    _interrupt_after_commit(agent)
    with pytest.raises(KeyboardInterrupt):
        agent.run_step(task)
    assert world.lines() == ["one"] and agent.get_completed_steps(task) == []
    out = agent.run_step(task)
    assert world.lines() == ["one"] and len(llm.requests) == 1  # neither the tool nor the model again
    assert out.tool_outputs[0].content == "appended one" and out.tool_outputs[0].tool_call_id == "react_1"
    agent.run_step(task)
    assert world.lines() == ["one", "two"]


def test_a_sync_tool_still_running_when_the_step_is_stopped_is_waited_for(tmp_path: Path) -> None:
    """Stop (a cancelled step) while the tool runs in its thread: the thread goes on and
    appends; the retry waits for it and takes its output instead of appending again."""
    world = World(tmp_path)
    started, release = threading.Event(), threading.Event()

    def slow_append(text: str) -> str:
        """Append a line, slowly."""
        started.set()
        release.wait(10)
        with world.log.open("a") as f:
            f.write(text + "\n")
        return f"appended {text}"

    llm = ScriptedLLM([{"tool_calls": [{"name": "slow_append", "arguments": {"text": "one"}}]}, "done"])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(slow_append)], llm=llm)
    task = agent.create_task("go")

    async def stop_while_it_runs() -> None:
        run = asyncio.ensure_future(agent.arun_step(task))
        await asyncio.to_thread(started.wait, 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    async def retry_then_release() -> Any:
        retry = asyncio.ensure_future(agent.arun_step(task))
        await asyncio.sleep(0.05)
        assert not retry.done()  # it waits for the thread, it does not call the tool again
        release.set()
        return await retry

    loop = asyncio.new_event_loop()  # one loop: asyncio.run would wait for the thread on exit
    try:
        loop.run_until_complete(stop_while_it_runs())
        assert agent.state_of(task).failed_step_id() is not None and world.lines() == []
        out = loop.run_until_complete(retry_then_release())
    finally:
        release.set()
        loop.close()
    assert world.lines() == ["one"] and out.tool_outputs[0].content == "appended one"
    assert out.tool_outputs[0].tool_call_id == "call_1" and len(llm.requests) == 1


def test_a_stopped_tool_that_ends_before_the_retry_is_not_run_again(tmp_path: Path) -> None:
    world = World(tmp_path)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def slow_append(text: str) -> str:
        """Append a line, slowly."""
        started.set()
        release.wait(10)
        with world.log.open("a") as f:
            f.write(text + "\n")
        ended.set()
        return f"appended {text}"

    llm = ScriptedLLM([{"tool_calls": [{"name": "slow_append", "arguments": {"text": "one"}}]}, "done"])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(slow_append)], llm=llm)
    task = agent.create_task("go")

    async def stop_while_it_runs() -> None:
        run = asyncio.ensure_future(agent.arun_step(task))
        await asyncio.to_thread(started.wait, 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(stop_while_it_runs())
        release.set()
        assert ended.wait(10)
        out = loop.run_until_complete(agent.arun_step(task))
    finally:
        release.set()
        loop.close()
    assert world.lines() == ["one"] and out.tool_outputs[0].content == "appended one"


@pytest.mark.parametrize("where", ["run.json", "runs.db"])
def test_the_journal_is_saved_and_a_loaded_run_does_not_run_the_call_again(tmp_path: Path, where: str) -> None:
    world = World(tmp_path)
    path = tmp_path / where
    agent = FunctionCallingAgent.from_tools(world.tools(), llm=ScriptedLLM([BOTH]), autosave=path)
    task = agent.create_task("go")
    agent.run_step(task)
    agent.approve(task, agent.pending_approvals(task)[0].call_id)
    with pytest.raises(Crash):
        agent.run_step(task)
    agent.autosave = None
    worker = FunctionCallingAgent.from_tools(world.tools(), llm=ScriptedLLM(["done"])).agent_worker
    loaded = AgentRunner.load(path, worker)
    out = loaded.run_step(task.task_id)
    assert world.lines() == ["one", "crash_once ran"]
    assert [o.content for o in out.tool_outputs] == ["appended one", "fine"]


def test_undo_withdraws_the_approval_so_running_again_asks_again(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([{"tool_calls": [{"name": "side_effect", "arguments": {"text": "one"}}]}, "done", "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(), llm=llm)
    task = agent.create_task("go")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id, by="ana")
    agent.run_step(task)
    assert world.lines() == ["one"]
    agent.undo_step(task)  # the person takes the step that ran it back
    assert agent.pending_approvals(task) == [p]  # the approval was used up: asked again
    with pytest.raises(AwaitingApprovalError, match=p.call_id):
        agent.run_step(task)
    assert world.lines() == ["one"]
    log = agent.get_upcoming_steps(task)[0].step_state["approval"]["log"]
    assert [(e["decision"], e["by"]) for e in log] == [("approved", "ana"), ("withdrawn", "undo")]
    agent.approve(task, p.call_id, by="ana")  # asked again, and approved again: it runs again
    agent.run_step(task)
    assert world.lines() == ["one", "one"]
    # goto back before it: the same
    agent.goto_step(task, agent.get_completed_steps(task)[-1].task_step.step_id, before=True)
    assert agent.pending_approvals(task) == [p]


def test_a_rejection_stays_after_undo(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([{"tool_calls": [{"name": "side_effect", "arguments": {"text": "one"}}]}, "ok", "ok"])
    agent = FunctionCallingAgent.from_tools(world.tools(), llm=llm)
    task = agent.create_task("go")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.reject(task, p.call_id, reason="no")
    agent.run_step(task)
    agent.undo_step(task)
    assert agent.pending_approvals(task) == []  # nothing ran: the rejection still holds
    out = agent.run_step(task)
    assert out.tool_outputs[0].is_error and world.lines() == []


def test_planner_call_step_under_the_parallel_runner(tmp_path: Path) -> None:
    world = World(tmp_path)
    plan = '1. side_effect(text="one")\n2. side_effect(text="two")\n3. join()'
    llm = ScriptedLLM([plan, "Thought: ok\nAnswer: done"])
    runner = ParallelAgentRunner(PlannerAgentWorker.from_tools(world.tools(approve_side_effect=False)[:1], llm=llm))
    task = runner.create_task("go")
    runner.run_step(task)  # the plan
    _interrupt_after_commit(runner)  # the first call step to finish is interrupted after it
    with pytest.raises(KeyboardInterrupt):
        runner.run_steps_in_queue(task)
    ran = world.lines()
    assert ran and len(ran) == len(set(ran))
    runner.run_until_done(task)
    assert sorted(world.lines()) == ["one", "two"]  # each call ran once, retries included
    assert str(runner.finalize_response(task)) == "done"


def test_multimodal_react_resumes_with_its_images_once(tmp_path: Path) -> None:
    """The multimodal worker acts on the earlier reply too; the question keeps its image once."""
    from nbagent.workers.multimodal import MultimodalReActAgentWorker

    world = World(tmp_path)
    red = tmp_path / "red.png"
    red.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    llm = ScriptedLLM(['Thought: log it.\nAction: side_effect\nAction Input: {"text": "one"}', "Answer: ok"])
    worker = MultimodalReActAgentWorker(world.tools(approve_side_effect=False)[:1], multi_modal_llm=llm)
    agent = AgentRunner(worker)
    task = agent.create_task("log what you see", extra_state={"image_docs": [str(red)]})
    _interrupt_after_commit(agent)
    with pytest.raises(KeyboardInterrupt):
        agent.run_step(task)
    agent.run_step(task)
    assert world.lines() == ["one"] and len(llm.requests) == 1
    agent.run_step(task)
    with_images = [m for m in llm.requests[-1].messages if isinstance(m.content, list)]
    assert len(with_images) == 1 and [p["type"] for p in with_images[0].content] == ["text", "image_url"]
    assert with_images[0].content[0]["text"] == "log what you see"


def test_a_kept_journal_is_escaped_in_the_views_and_the_report(tmp_path: Path) -> None:
    from nbagent.report import report_html
    from nbagent.viz.dot import task_to_dot
    from nbagent.viz.html import step_html

    world = World(tmp_path)
    hostile = {"tool_calls": [
        {"name": "side_effect", "arguments": {"text": "<script>alert(1)</script>"}},
        {"name": "crash_once", "arguments": {}},
    ]}
    agent = FunctionCallingAgent.from_tools(world.tools(approve_side_effect=False), llm=ScriptedLLM([hostile]))
    task = agent.create_task("go")
    with pytest.raises(Crash):
        agent.run_step(task)
    step = agent.get_upcoming_steps(task)[0]
    assert JOURNAL_KEY in step.step_state
    for text in (step_html(step), report_html(agent), task_to_dot(agent.state_of(task))):
        assert "<script>" not in text
    assert "&lt;script&gt;" in step_html(step)


def test_skipping_a_step_whose_calls_ran_does_not_resume_it_later(tmp_path: Path) -> None:
    world = World(tmp_path)
    llm = ScriptedLLM([BOTH, "done"])
    agent = FunctionCallingAgent.from_tools(world.tools(approve_side_effect=False), llm=llm)
    task = agent.create_task("go")
    with pytest.raises(Crash):
        agent.run_step(task)
    skipped = agent.skip_step(task, reason="leave it")
    assert JOURNAL_KEY in skipped.task_step.step_state  # what ran stays recorded on it
    nxt = agent.get_upcoming_steps(task)[0]
    assert JOURNAL_KEY not in nxt.step_state
    out = agent.run_step(task)  # a new model call, nothing of the skipped reply runs
    assert out.is_last and str(out.output) == "done" and len(llm.requests) == 2
    assert world.lines() == ["one"]
