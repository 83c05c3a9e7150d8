"""skip_step: a failed (or any queued) step is marked done without running, and undo takes it back."""

from __future__ import annotations

from typing import Any

import pytest

from nbagent import AgentRunner, StepStatus, TaskStateError, TaskStep
from nbagent.events import StepCompleted
from tests.test_viz_dot import run_plan


def test_skip_the_failed_step_then_the_task_goes_on_and_undo_takes_the_skip_back() -> None:
    plan: list[Any] = [{"out": "a"}, RuntimeError("tool down"), {"out": "c", "last": True}]
    runner, task = run_plan(plan, steps=1)
    with pytest.raises(RuntimeError):
        runner.run_step(task)
    state = runner.state_of(task)
    failed = state.failed_step_id()
    assert failed is not None
    events: list[Any] = []
    runner.subscribe(events.append)
    out = runner.skip_step(task)
    assert str(out.output) == "(skipped)" and out.task_step.step_id == failed and not out.is_last
    assert state.step_status(failed) == StepStatus.DONE and state.failed_step_id() is None
    assert state.status.value == "active"
    assert [e.step_id for e in events if isinstance(e, StepCompleted)] == [failed]
    # a fresh step with the same state takes its place; the worker was not called for the skip
    [follow] = runner.get_upcoming_steps(task)
    assert follow.step_id != failed and follow.step_state is state.steps[failed].step_state
    assert task.extra_state["i"] == 1  # the worker's counter: the skip did not call it
    plan[1] = {"out": "c", "last": True}  # the tool is back
    final = runner.run_step(task)
    assert final.is_last and str(final.output) == "c"
    # undo takes back the answer, then the skip: the failed step is queued again
    runner.undo_step(task)
    runner.undo_step(task)
    assert [s.step_id for s in runner.get_upcoming_steps(task)] == [failed]
    assert state.step_status(failed) == StepStatus.FAILED  # back to where it was: failed, to retry or skip


def test_skip_needs_a_failed_step_or_a_queued_step_id() -> None:
    runner, task = run_plan([{"out": "a"}, {"out": "b"}], steps=1)
    with pytest.raises(TaskStateError, match="nothing to skip.*no step has failed; pass step_id="):
        runner.skip_step(task)
    with pytest.raises(ValueError, match="step 'nope' is not queued.*queued: \\['"):
        runner.skip_step(task, "nope")
    queued = runner.get_upcoming_steps(task)[0]
    out = runner.skip_step(task, queued.step_id, reason="not needed")
    assert str(out.output) == "(not needed)"
    assert len(runner.get_upcoming_steps(task)) == 1  # the task can go on


def test_skipping_a_step_with_linked_next_steps_makes_them_ready_and_adds_none() -> None:
    runner, task = run_plan([{"out": "a"}], steps=0)
    state = runner.state_of(task)
    first = state.step_queue[0]
    later = TaskStep(task_id=task.task_id, input="later")
    first.link_step(later)
    state.register(later)
    state.step_queue.append(later)
    assert state.step_status(later.step_id) == StepStatus.BLOCKED
    runner.skip_step(task, first.step_id)
    assert [s.step_id for s in state.step_queue] == [later.step_id]
    assert state.step_status(later.step_id) == StepStatus.QUEUED  # ready now


def test_cannot_skip_on_a_finished_task() -> None:
    runner, task = run_plan([{"out": "a", "last": True}], steps=1)
    runner.finalize_response(task)
    with pytest.raises(TaskStateError, match="finalized"):
        runner.skip_step(task)
    assert isinstance(runner, AgentRunner)
