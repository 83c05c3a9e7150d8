"""Held steps: a queued step with ``is_ready=False`` and nothing left to wait for.

The reference's parallel runner never queues such a step; nbagent keeps it in the queue,
draws it as held and runs it once someone releases it (here, ``step.is_ready = True``, or
the panel's Release button).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent import events as ev

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.engine.step_engine import StepEngine
    from nbagent.schema import TaskStep

__all__ = ["release_step", "hold_step"]


def _queued(runner: StepEngine, task_id: TaskRef, step_id: str) -> tuple[str, TaskStep]:
    state = runner.state_of(task_id)
    for step in state.step_queue:
        if step.step_id == step_id:
            return state.task_id, step
    queued = [s.step_id for s in state.step_queue]
    raise ValueError(f"step {step_id!r} is not queued in task {state.task_id!r}; queued: {queued}")


def release_step(runner: StepEngine, task_id: TaskRef, step_id: str | None = None) -> list[TaskStep]:
    """Release ``step_id`` (it must be held) or, with None, every held step of the task."""
    state = runner.state_of(task_id)
    if step_id is None:
        steps = state.held_steps()
        if not steps:
            raise ValueError(f"task {state.task_id!r} has no held step to release")
    else:
        _, step = _queued(runner, task_id, step_id)
        if step.is_ready:
            held = [s.step_id for s in state.held_steps()]
            raise ValueError(
                f"step {step_id!r} of task {state.task_id!r} is not held; held steps: {held}"
            )
        steps = [step]
    for step in steps:
        step.is_ready = True
        runner._emit(ev.StepEdited(state.task_id, step_id=step.step_id, fields=("is_ready",)))
    return steps


def hold_step(runner: StepEngine, task_id: TaskRef, step_id: str) -> TaskStep:
    """Hold a queued step back until it is released."""
    tid, step = _queued(runner, task_id, step_id)
    if not step.is_ready:
        raise ValueError(f"step {step_id!r} of task {tid!r} is already held")
    step.is_ready = False
    runner._emit(ev.StepEdited(tid, step_id=step.step_id, fields=("is_ready",)))
    return step
