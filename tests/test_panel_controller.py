"""PanelController alone: every Python twin of the panel, the run loop, Stop, events and
tokens, driven with no widget library imported (the panel's controller must not need one).

The full walk through the twins runs in a fresh interpreter, so that ``sys.modules`` shows
what importing and driving the controller pulls in; the other tests watch what the
controller tells its views (``on_change``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, FnAgentWorker, TaskStateError, TaskStatus
from nbagent.viz.live import EMPTY_DOT
from nbagent.viz.panel.controller import PanelController, latest_step

ROOT = Path(__file__).resolve().parents[1]
WIDGET_MODULES = ("ipywidgets", "anywidget", "traitlets", "graphviz_anywidget", "comm", "IPython")

# a worker that counts to ``steps``, fails when its input says "fail", and sleeps when told
WORKER = '''
import asyncio
from nbagent import AgentRunner, FnAgentWorker

def counting(steps=4, delay=0.0):
    async def fn(state):
        n = state["step"] + 1
        if delay:
            await asyncio.sleep(delay)
        if state["input"] == "fail":
            raise ValueError(f"told to fail at step {n}")
        state["seen"] = [*state.get("seen", []), state["input"]]
        return (f"the answer is {n}" if n >= steps else f"partial {n}"), n >= steps
    return AgentRunner(FnAgentWorker(fn, initial_state={"seen": []}, max_steps=None))
'''

SCENARIO = WORKER + '''
import json, sys
from typing import Any
from nbagent import (FunctionCallingAgent, ParallelAgentRunner, ScriptedLLM, TaskStateError,
                     BaseAgentWorker, TaskStep, TaskStepOutput, AgentChatResponse, FunctionTool)
from nbagent.viz.panel.controller import PanelController

kinds = []
runner = counting(4)
c = PanelController(runner, on_change=kinds.append)
assert c.task_id is None and c.state is None
try:
    c.step()
    raise AssertionError("step without a task ran")
except TaskStateError as err:
    assert "no task selected" in str(err)
c.press(c.step)  # what a click does: shown, not raised
assert "no task selected" in c.notice and c.notice_is_error

first = c.new_task("count")
assert c.task_id == first.task_id and kinds[-1] == "state" and c.notice == ""
c.inject("steer")
assert c.inject_text == "steer" and kinds[-1] == "inject"
out = c.step()
assert out.task_step.input == "steer" and c.inject_text == "" and c.last_output is out
c.inject("fail")
err = c.step()
assert isinstance(err, ValueError) and c.error is err and c.inject_text == "fail"  # kept for Retry
c.inject("go on")
out = c.retry()
assert out.task_step.input == "go on" and c.error is None
state = c.state
assert [o.task_step.input for o in state.completed_steps] == ["steer", "go on"]
undone = c.undo()
assert undone.step_id == state.completed_steps[-1].task_step.step_id or len(state.completed_steps) == 1
assert len(state.completed_steps) == 1
c.inject("fail")
assert isinstance(c.step(), ValueError)
c.inject("")
skipped = c.skip()
assert state.failed_step_id() is None and len(state.completed_steps) == 2
ids = list(state.steps)
c.inspect(ids[0])
assert c.inspected_step() == ids[0]
c.inspect(None)
assert c.inspected_step() != ids[0]
nxt = c.goto(ids[0])
assert len(state.completed_steps) == 1 and c.inspected_step() == ids[0]
new = c.fork(ids[0], input="forked")
assert new.input == "forked" and state.step_queue[0].step_id == new.step_id
edited = c.edit_input(new.step_id, "edited")
assert state.step_queue[0].input == "edited"
answer = c.run()
assert answer.is_last and state.finalized
assert c.transcript_messages()[-1].text == str(state.final_response)

second = c.new_task("second")
c.abandon()
assert c.state.abandoned
c.select(first.task_id)
assert c.task_id == first.task_id and c.state.finalized

# approvals: a function-calling agent whose tool needs a person's yes
deleted = []
def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"
tool = FunctionTool.from_defaults(delete_file, requires_approval=True)
llm = ScriptedLLM([{"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}},
                                    {"name": "delete_file", "arguments": {"path": "b.txt"}}]}, "done"])
agent = FunctionCallingAgent.from_tools([tool], llm=llm)
a = PanelController(agent, agent.create_task("tidy"))
a.step()
calls = agent.pending_approvals(a.task_id)
assert len(calls) == 2
a.edit(calls[0].call_id, {"path": "c.txt"})
a.reject(calls[1].call_id, "keep it")
assert agent.pending_approvals(a.task_id) == []
a.approve  # the twin exists; approve itself is edit without arguments
a.run()
assert deleted == ["c.txt"] and a.state.finalized

# a held step, released by the twin
class Held(BaseAgentWorker):
    def initialize_step(self, task, **kwargs):
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"n": "root"})
    async def arun_step(self, step, task, **kwargs):
        if step.step_state["n"] == "root":
            gate = TaskStep(task_id=task.task_id, input="check", step_state={"n": "gate"}, is_ready=False)
            return TaskStepOutput(output="asked", task_step=step, next_steps=[gate])
        return TaskStepOutput(output=AgentChatResponse(response="ok"), task_step=step, is_last=True)
par = ParallelAgentRunner(Held())
h = PanelController(par, par.create_task("go"))
h.step()
assert h.state.held_steps()
released = h.release()
assert [s.step_id for s in released] and not h.state.held_steps()

# a background run on an event loop: stop after the running step, wait for it
async def background():
    slow = counting(50, delay=0.01)
    b = PanelController(slow, slow.create_task("long"))
    handle = b.run()
    assert isinstance(handle, asyncio.Task) and b.busy
    while len(b.state.completed_steps) < 2:
        await asyncio.sleep(0.005)
    b.stop()
    result = await b.wait()
    assert not b.busy and 2 <= len(b.state.completed_steps) < 50 and "stopped after" in b.notice
    assert result is b.state.completed_steps[-1]
    b.close()
asyncio.run(background())

c.close()
before = len(kinds)
runner.create_task("after close")
assert len(kinds) == before  # no longer listening

print(json.dumps({"kinds": sorted(set(kinds)), "loaded": [m for m in %r if m in sys.modules]}))
''' % (WIDGET_MODULES,)


def test_every_twin_works_with_no_widget_library_imported() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NBAGENT_BLOCK_NETWORK": "1"}
    proc = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    import json

    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["loaded"] == [], f"the controller pulled in widget modules: {report['loaded']}"
    # no step here streams: a step's start and end reach the token view with the state's redraw
    assert report["kinds"] == ["inject", "state"]


# ----- in this process: what the views are told ------------------------------------------------

namespace: dict[str, Any] = {}
exec(WORKER, namespace)  # noqa: S102 - our own test worker, shared with the scenario
counting = namespace["counting"]


def test_an_action_settles_then_redraws_once_and_a_click_error_is_a_notice() -> None:
    runner = counting(3)
    kinds: list[str] = []
    c = PanelController(runner, runner.create_task("x"), on_change=kinds.append)
    c.step()
    kinds.clear()
    c.undo()
    assert kinds == ["state"]  # one redraw: the graph, the buttons, the emptied token view
    kinds.clear()
    c.press(c.undo)  # nothing left to undo: shown, not raised, nothing changed
    assert kinds == ["state"] and "nothing to undo" in c.notice and c.notice_is_error
    with pytest.raises(TaskStateError, match="nothing to undo"):
        c.undo()


def test_a_failed_step_is_returned_kept_and_its_injected_input_comes_back() -> None:
    runner = counting(3)
    kinds: list[str] = []
    c = PanelController(runner, runner.create_task("x"), on_change=kinds.append)
    c.inject("fail")
    err = c.step()
    assert isinstance(err, ValueError) and c.error is err
    assert c.inject_text == "fail" and kinds.count("inject") == 3  # set, used, put back
    assert c.state.status == TaskStatus.FAILED and latest_step(c.state) == c.state.failed_step_id()
    assert c.inspected_step() == c.state.failed_step_id()
    with pytest.raises(TaskStateError, match="nothing to retry"):
        PanelController(runner, runner.create_task("y")).retry()


def test_events_from_outside_the_panel_are_throttled_into_few_redraws() -> None:
    runner = counting(40)
    kinds: list[str] = []
    task = runner.create_task("x")
    c = PanelController(runner, task, throttle_s=3600.0, on_change=kinds.append)
    for _ in range(10):
        runner.run_step(task)  # a cell, not the panel: 20 events
    assert kinds.count("state") == 1  # the first at once, the rest wait for the interval
    c.flush()
    assert kinds.count("state") == 2
    c.close()


def test_a_slow_redraw_spaces_the_next_ones_further_apart() -> None:
    """The views of a long task cost more to redraw: the throttle then waits ten times as long
    as the last redraw took, so drawing never takes most of a run; 0 keeps every change drawn."""
    import time

    from nbagent.viz.panel.controller import REDRAW_SPACING

    def slow_view(kind: str) -> None:
        if kind == "state":
            time.sleep(0.03)

    runner = counting(40)
    task = runner.create_task("x")
    c = PanelController(runner, task, throttle_s=0.01, on_change=slow_view)
    runner.run_step(task)  # a cell runs a step: the first redraw runs at once, and takes 30 ms
    assert c._refresh_throttle.interval_s >= 0.03 * REDRAW_SPACING
    c.close()
    eager = PanelController(runner, task, throttle_s=0, on_change=slow_view)
    runner.run_step(task)
    assert eager._refresh_throttle.interval_s == 0
    eager.close()


def test_a_task_made_elsewhere_is_shown_when_none_was_and_a_deleted_one_goes() -> None:
    runner = counting(2)
    kinds: list[str] = []
    c = PanelController(runner, on_change=kinds.append, throttle_s=0)
    task = runner.create_task("made in a cell")
    assert c.task_id == task.task_id and "state" in kinds
    runner.delete_task(task)
    assert c.task_id is None and c.dot() == EMPTY_DOT


def test_streamed_tokens_are_kept_per_step_and_the_note_says_how_it_ended() -> None:
    from nbagent import ReActAgent, ScriptedLLM

    agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Thought: done.\nAnswer: hello there"]))
    kinds: list[str] = []
    c = PanelController(agent, agent.create_task("hi"), on_change=kinds.append)
    assert c.tokens_note() == "no step has streamed yet"
    c.step()
    assert "hello there" in c.streamed_text and c.token_step == c.state.completed_steps[-1].task_step.step_id
    assert c.tokens_note().startswith("step #1 · done") and "tokens" in kinds
    c.select(c.task_id)
    assert c.streamed_text == "" and c.token_step is None


def test_cancel_rolls_the_running_step_back_and_retry_runs_it() -> None:
    async def main() -> None:
        runner = counting(3, delay=10)
        c = PanelController(runner, runner.create_task("slow"))
        c.step()
        await asyncio.sleep(0.05)
        assert c.state.status == TaskStatus.RUNNING and c.busy
        with pytest.raises(TaskStateError, match="run is going on"):
            c.undo()
        c.stop(cancel=True)
        assert await c.wait() is None
        assert not c.busy and not c.state.completed_steps and "cancelled" in c.notice
        assert c.state.status == TaskStatus.FAILED  # the cancelled attempt counts as failed

    asyncio.run(main())


def test_the_controller_module_does_not_import_a_widget_library_at_all() -> None:
    source = (ROOT / "nbagent" / "viz" / "panel" / "controller.py").read_text(encoding="utf-8")
    for name in WIDGET_MODULES:
        assert f"import {name}" not in source and f"from {name}" not in source, name


def test_an_unknown_step_to_inspect_names_the_steps_there_are() -> None:
    runner = AgentRunner(FnAgentWorker(lambda s: ("x", True)))
    c = PanelController(runner, runner.create_task("x"))
    with pytest.raises(ValueError, match="is not a step of task .*; steps: \\['"):
        c.inspect("nope")
