"""The runner's side of tool-call approval: list what waits, approve, reject.

Decisions are written into the waiting step's approval record (see ``nbagent.approval``), so
they are part of the run: undo puts back the record as it was when the step ran, save/load
and the report carry it. Each decision emits ``StepEdited(fields=("approval",))`` so the
live graph, the panel and autosave see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent import approval as _ap
from nbagent.events import StepEdited
from nbagent.runner.base import TaskStateError
from nbagent.runner.state import TaskState
from nbagent.schema import TaskStep
from nbagent.tools import FunctionTool

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner, TaskRef

__all__ = ["AwaitingApprovalError", "pending_approvals", "approve", "reject", "check_decided"]


class AwaitingApprovalError(TaskStateError):
    """The step to run holds tool calls nobody has approved or rejected yet."""


def _waiting_steps(state: TaskState) -> list[TaskStep]:
    return [s for s in state.step_queue if _ap.record_of(s) is not None]


def pending_approvals(runner: AgentRunner, task: TaskRef) -> list[_ap.PendingCall]:
    """Every call of the task waiting for a decision, in queue and call order."""
    state = runner.state_of(task)
    out: list[_ap.PendingCall] = []
    for step in _waiting_steps(state):
        out.extend(_ap.pending_of(state.task_id, step))
    return out


def _find(state: TaskState, call_id: str) -> TaskStep:
    for step in _waiting_steps(state):
        rec = _ap.record_of(step)
        assert rec is not None
        if any(c["call_id"] == call_id and c.get("needs_approval") for c in rec["calls"]):
            return step
    known = [
        c["call_id"]
        for s in _waiting_steps(state)
        for c in (_ap.record_of(s) or {}).get("calls", [])
        if c.get("needs_approval")
    ]
    raise ValueError(
        f"no queued tool call {call_id!r} awaits approval in task {state.task_id!r}; "
        f"calls that can be decided: {known or 'none'}"
    )


def _tool(runner: AgentRunner, name: str) -> FunctionTool | None:
    for tool in getattr(runner.agent_worker, "tools", None) or []:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None


def _decide(
    runner: AgentRunner, task: TaskRef, call_id: str, decision: str, **kwargs: Any
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
    entry = _ap.decide(step, call_id, decision, tool=_tool(runner, name), **kwargs)
    runner._emit(StepEdited(state.task_id, step_id=step.step_id, fields=("approval",)))
    return entry


def approve(
    runner: AgentRunner,
    task: TaskRef,
    call_id: str,
    arguments: dict[str, Any] | None = None,
    *,
    by: str = "user",
) -> dict[str, Any]:
    """Approve a call, optionally with edited ``arguments`` (checked against the tool's schema)."""
    return _decide(runner, task, call_id, _ap.APPROVED, arguments=arguments, by=by)


def reject(
    runner: AgentRunner, task: TaskRef, call_id: str, reason: str | None = None, *, by: str = "user"
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
