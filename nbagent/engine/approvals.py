"""The runner's side of tool-call approval: list what waits, approve, reject.

Decisions are written into the waiting step's approval record (see ``nbagent.approval``), so
they are part of the run: undo puts back the record as it was when the step ran, save/load
and the report carry it. Each decision emits ``StepEdited(fields=("approval",))`` so the
live graph, the panel and autosave see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent import approval as _ap
from nbagent import calls
from nbagent import events as ev
from nbagent.engine.errors import TaskStateError
from nbagent.engine.state import StepStatus, TaskState
from nbagent.tools import FunctionTool

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.engine.step_engine import StepEngine
    from nbagent.schema import TaskStep

__all__ = ["AwaitingApprovalError", "pending_approvals", "approve", "reject", "check_decided"]


class AwaitingApprovalError(TaskStateError):
    """The step to run holds tool calls nobody has approved or rejected yet."""


def _waiting_steps(state: TaskState) -> list[TaskStep]:
    return [s for s in state.step_queue if _ap.record_of(s) is not None]


def pending_approvals(runner: StepEngine, task: TaskRef) -> list[_ap.PendingCall]:
    """Every call of the task waiting for a decision, in queue and call order."""
    state = runner.state_of(task)
    out: list[_ap.PendingCall] = []
    for step in _waiting_steps(state):
        out.extend(_ap.pending_of(state.task_id, step))
    return out


def _decidable(state: TaskState) -> list[tuple[TaskStep, dict[str, Any]]]:
    """Every call of a queued step that a person may decide on now, in queue and call order."""
    return [
        (step, c)
        for step in _waiting_steps(state)
        for c in (_ap.record_of(step) or {}).get("calls", [])
        if c.get("needs_approval")
    ]


def _call_text(name: Any, arguments: Any) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in arguments.items()) if isinstance(arguments, dict) else ""
    return f"{name}({args})"


def _seen_as(state: TaskState, call_id: str) -> str:
    """What ``call_id`` named in the task, if anything: for the error refusing it."""
    for step in state.steps.values():
        for c in (_ap.record_of(step) or {}).get("calls", []):
            if c.get("call_id") != call_id:
                continue
            what = f"it was {_call_text(c.get('tool_name'), c.get('arguments'))} in step {step.step_id!r}"
            if step.step_id in state.undone_ids:
                return f"{what}, which was undone (running again asks anew, with new call ids)"
            if state.step_status(step.step_id) == StepStatus.DONE:
                return f"{what}, which already ran"
            if not c.get("needs_approval"):
                return f"{what}; it needs no approval (it runs with the others)"
            return what
    undone = {id(o) for o in state.undone_outputs}
    for out in (*state.completed_steps, *state.undone_outputs):
        for t in out.tool_outputs or ():
            if t.tool_call_id == call_id:
                gone = "was undone" if id(out) in undone else "already ran"
                return (
                    f"it was {_call_text(t.tool_name, t.raw_input)} in step "
                    f"{out.task_step.step_id!r}, which {gone}"
                )
    return "no call of this task has that id"


def _find(state: TaskState, call_id: str) -> TaskStep:
    """The queued step whose call ``call_id`` a person may decide now; anything else (an id
    from before an undo, a call that ran, a typo) is refused, naming what it was and what
    waits now."""
    choices = _decidable(state)
    for step, c in choices:
        if c["call_id"] == call_id:
            return step
    waiting = "; ".join(f"{c['call_id']}: {_call_text(c['tool_name'], c['arguments'])}" for _, c in choices)
    raise ValueError(
        f"call {call_id!r} is not waiting for a decision in task {state.task_id!r}: "
        f"{_seen_as(state, call_id)}. Calls that can be decided now: "
        f"{[c['call_id'] for _, c in choices] if choices else 'none'}"
        + (f" ({waiting})" if waiting else "")
        + "; use the ids runner.pending_approvals(task) lists"
    )


def _tool(runner: StepEngine, name: str) -> FunctionTool | None:
    for tool in getattr(runner.agent_worker, "tools", None) or []:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None


def _decide(
    runner: StepEngine, task: TaskRef, call_id: str, decision: str, **kwargs: Any
) -> dict[str, Any]:
    state = runner.state_of(task)
    if state.finalized or state.abandoned:
        raise TaskStateError(f"task {state.task_id!r} is {state.status.value}; nothing to decide")
    if not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str, got {type(call_id).__name__}: {call_id!r}")
    step = _find(state, call_id)
    if step.step_id in state.running:
        raise TaskStateError(f"step {step.step_id!r} is running; decide before it runs")
    rec = _ap.record_of(step)
    assert rec is not None
    name = next(c["tool_name"] for c in rec["calls"] if c["call_id"] == call_id)
    ran = calls.journal_outputs(step).get(call_id)
    if ran is not None:  # it ran in an attempt that failed later: what it did is done
        raise TaskStateError(
            f"call {call_id!r} ({name}) already ran in an attempt of step {step.step_id!r} that "
            f"failed afterwards (it returned {ran.content[:80]!r}); its output is kept and the "
            "step's retry uses it, so it cannot be decided again"
        )
    entry = _ap.decide(step, call_id, decision, tool=_tool(runner, name), **kwargs)
    runner._emit(ev.StepEdited(state.task_id, step_id=step.step_id, fields=("approval",)))
    return entry


def approve(
    runner: StepEngine,
    task: TaskRef,
    call_id: str,
    arguments: dict[str, Any] | None = None,
    *,
    by: str = "user",
) -> dict[str, Any]:
    """Approve a call, optionally with edited ``arguments`` (checked against the tool's schema)."""
    return _decide(runner, task, call_id, _ap.APPROVED, arguments=arguments, by=by)


def reject(
    runner: StepEngine, task: TaskRef, call_id: str, reason: str | None = None, *, by: str = "user"
) -> dict[str, Any]:
    """Reject a call; the model gets ``reason`` as the call's result."""
    return _decide(runner, task, call_id, _ap.REJECTED, reason=reason, by=by)


def check_decided(state: TaskState, step: TaskStep) -> None:
    """Refuse to run a step whose calls are not all decided (names them, says what to do)."""
    waiting = _ap.pending_of(state.task_id, step)
    if waiting:
        listed = ", ".join(f"{p.call_id} {p.tool_name}({p.arguments})" for p in waiting)
        raise AwaitingApprovalError(
            f"step {step.step_id!r} of task {state.task_id!r} awaits approval of: {listed}; "
            "decide each with runner.approve(task, call_id) or runner.reject(task, call_id, "
            "reason=...), then run the step"
        )
