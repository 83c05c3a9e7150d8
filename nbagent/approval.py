"""Approval of tool calls: a call with real effects waits for a person to approve or reject it.

Who decides is part of the run. When a model asks for a call that needs approval, the worker
does not run it: it queues the next step with an *approval record* in its ``step_state``
(key ``"approval"``) and that step waits until every call in it is decided. The record is
plain JSON, so undo (the step's state is snapshotted before it runs), save/load and the
report keep it with no extra machinery::

    {"calls": [{"call_id", "tool_name", "arguments", "needs_approval", ["tool_id"]}, ...],
     "decisions": {call_id: {"decision": "approved" | "rejected", "arguments", "reason",
                             "by", "at"}},
     "log": [every decision in the order it was made, overridden and withdrawn ones included]}

``call_id`` is what a person decides on: unique for the task's whole life (undo, fork, goto,
edit and load never make it name another call; see ``nbagent.calls``), and ``approve`` /
``reject`` refuse an id that is not waiting now. ``tool_id`` is the model's own id for the
call, kept for the transcript; it is there only when it differs (the model reused an id).

Calls that do not need approval but came in the same reply wait with the others, so the
tool replies stay in the model's call order. A rejected call runs nothing; the model gets
``"Rejected by <who>: <reason>"`` as the call's result and can adapt.

An approval is for one run of the call. Once the call ran, it is not run again without a
person: a retry after a failure reuses its kept output (``nbagent.calls``), and undoing the
step that ran it (``undo_step``, ``goto_step``, ``fork``) withdraws the approval, so running
that step again waits for a new decision. A rejection stays (nothing ran).

This module is below the runner (workers use it); the runner-side methods
(``pending_approvals``, ``approve``, ``reject``) are in ``nbagent.engine.approvals``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, Union

from nbagent._lazy import LazyModule
from nbagent.tools import _validation_message

if TYPE_CHECKING:
    from nbagent.messages import ToolOutput, ToolSelection
    from nbagent.schema import TaskStep
    from nbagent.tools import FunctionTool


# imported on first use: ``import nbagent`` defines no pydantic model
@LazyModule
def messages() -> ModuleType:
    from nbagent import messages as module

    return module


@LazyModule
def pydantic() -> ModuleType:
    import pydantic as module

    return module

__all__ = [
    "APPROVAL_KEY",
    "ApprovalPolicy",
    "PendingCall",
    "needs_approval",
    "check_policy",
    "make_record",
    "is_awaiting",
    "undecided",
    "decide",
    "split_decided",
    "rejection_output",
    "withdraw_used",
    "DecidedCall",
]

APPROVAL_KEY = "approval"
#: Metadata key of a step output whose calls now wait for approval (their call ids).
AWAITING_KEY = "awaiting_approval"
APPROVED = "approved"
REJECTED = "rejected"
WITHDRAWN = "withdrawn"

#: ``approve_tools=``: ``"all"``, ``None`` (only tools marked ``requires_approval``), a list of
#: tool names, or ``fn(tool_name, arguments) -> bool``.
ApprovalPolicy = Union[str, Sequence[str], Callable[[str, dict[str, Any]], bool], None]


@dataclass(frozen=True)
class PendingCall:
    """One tool call waiting for a decision."""

    task_id: str
    step_id: str
    call_id: str
    tool_name: str
    arguments: dict[str, Any]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"PendingCall({self.call_id!r}: {self.tool_name}({args}))"


def check_policy(policy: Any) -> ApprovalPolicy:
    """Validate an ``approve_tools=`` value (clear error naming what is allowed)."""
    if policy is None or policy == "all" or callable(policy):
        return policy  # type: ignore[no-any-return]
    if isinstance(policy, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in policy):
        return list(policy)
    raise ValueError(
        f"approve_tools must be None, 'all', a list of tool names or a function "
        f"(tool_name, arguments) -> bool; got {policy!r}"
    )


def policy_of(task: Any) -> ApprovalPolicy:
    """The runner-wide policy of the runner that owns ``task`` (None when there is none)."""
    runner = getattr(task, "_runner", None)
    return getattr(runner, "approve_tools", None) if runner is not None else None


def needs_approval(
    tool: FunctionTool | None, call: ToolSelection, policy: ApprovalPolicy = None
) -> bool:
    """Does this call wait for a person? The tool's own flag, or the runner-wide policy.

    An unknown tool never waits: the model gets the usual "no such tool" error at once.
    """
    if tool is None:
        return False
    if getattr(tool.metadata, "requires_approval", False):
        return True
    if policy is None:
        return False
    if policy == "all":
        return True
    if callable(policy):
        return bool(policy(call.tool_name, dict(call.tool_kwargs)))
    return call.tool_name in policy


def make_record(
    calls: Iterable[ToolSelection], flags: Iterable[bool], ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """The approval record for the calls of one reply (``flags``: which need approval;
    ``ids``: the task-unique ids a person decides on, by default the calls' own)."""
    calls = list(calls)
    ids = [c.tool_id for c in calls] if ids is None else list(ids)
    if len(ids) != len(calls) or len(set(ids)) != len(ids):
        raise ValueError(f"an approval record needs one distinct id per call, got {ids} for {len(calls)} calls")
    entries = []
    for c, f, cid in zip(calls, flags, ids):
        entry = {"call_id": cid, "tool_name": c.tool_name, "arguments": dict(c.tool_kwargs), "needs_approval": bool(f)}
        if c.tool_id != cid:  # the model reused an id: keep its own for the transcript
            entry["tool_id"] = c.tool_id
        entries.append(entry)
    return {"calls": entries, "decisions": {}, "log": []}


def record_of(step: TaskStep) -> dict[str, Any] | None:
    rec = step.step_state.get(APPROVAL_KEY) if isinstance(step.step_state, dict) else None
    return rec if isinstance(rec, dict) else None


def undecided(step: TaskStep) -> list[dict[str, Any]]:
    """The calls of ``step`` that need approval and have no decision yet."""
    rec = record_of(step)
    if rec is None:
        return []
    decided = rec.get("decisions", {})
    return [c for c in rec.get("calls", []) if c.get("needs_approval") and c["call_id"] not in decided]


def is_awaiting(step: TaskStep) -> bool:
    """True while some call of ``step`` waits for a decision (the step cannot run yet)."""
    state = step.step_state
    if type(state) is dict and APPROVAL_KEY not in state:
        return False  # no calls to decide on (every step is asked before it runs)
    return bool(undecided(step))


def pending_of(task_id: str, step: TaskStep) -> list[PendingCall]:
    return [
        PendingCall(task_id, step.step_id, c["call_id"], c["tool_name"], dict(c["arguments"]))
        for c in undecided(step)
    ]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def decide(
    step: TaskStep,
    call_id: str,
    decision: str,
    *,
    tool: FunctionTool | None = None,
    arguments: dict[str, Any] | None = None,
    reason: str | None = None,
    by: str = "user",
) -> dict[str, Any]:
    """Record a decision on one call of ``step``; edited ``arguments`` are checked against
    the tool's schema first. A later decision on the same call replaces the earlier one
    (both stay in the record's log)."""
    rec = record_of(step)
    if rec is None:
        raise ValueError(f"step {step.step_id!r} has no tool calls waiting for approval")
    call = next((c for c in rec["calls"] if c["call_id"] == call_id), None)
    if call is None or not call.get("needs_approval"):
        ids = [c["call_id"] for c in rec["calls"] if c.get("needs_approval")]
        raise ValueError(
            f"call {call_id!r} is not a call awaiting approval in step {step.step_id!r}; "
            f"calls there: {ids}"
        )
    if decision not in (APPROVED, REJECTED):
        raise ValueError(f"decision must be {APPROVED!r} or {REJECTED!r}, got {decision!r}")
    if not isinstance(by, str) or not by:
        raise ValueError(f"by must name who decided (a non-empty str), got {by!r}")
    if arguments is not None:
        if decision != APPROVED:
            raise ValueError("only an approval can change a call's arguments")
        if not isinstance(arguments, dict):
            raise TypeError(f"arguments must be a dict, got {type(arguments).__name__}")
        if tool is not None and tool.metadata.fn_schema is not None:
            try:
                tool.metadata.fn_schema.model_validate(arguments)
            except pydantic.ValidationError as e:
                raise ValueError(_validation_message(tool, e)) from None
        check = getattr(tool, "argument_problems", None)  # a tool with a JSON schema (MCP)
        if callable(check):
            problems = check(arguments)
            if problems:
                raise ValueError(f"invalid arguments for tool {tool.name!r}: " + "; ".join(problems))
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"reason must be a str, got {type(reason).__name__}")
    entry = {
        "call_id": call_id,
        "decision": decision,
        "arguments": dict(arguments) if arguments is not None else None,
        "reason": reason,
        "by": by,
        "at": _now(),
    }
    rec["decisions"][call_id] = entry
    rec["log"].append(dict(entry))
    return entry


def rejection_output(call: ToolSelection, entry: dict[str, Any]) -> ToolOutput:
    """What the model sees for a rejected call: who rejected it and why."""
    reason = entry.get("reason") or "no reason given"
    return messages.ToolOutput(
        content=f"Rejected by {entry.get('by', 'user')}: {reason}. The call was not run.",
        tool_name=call.tool_name,
        raw_input=dict(call.tool_kwargs),
        is_error=True,
        tool_call_id=call.tool_id,
    )


class DecidedCall(NamedTuple):
    """One call of a decided step: its task-unique ``call_id``, the call to run (the model's
    id, approved arguments) and, for a rejected call, the output standing in for it."""

    call_id: str
    call: ToolSelection
    rejected: ToolOutput | None


def split_decided(step: TaskStep) -> list[DecidedCall]:
    """The step's calls in order (approved ones with their edited arguments), each with the
    output standing in for it if it was rejected. Raises while a call is undecided."""
    rec = record_of(step)
    if rec is None:
        raise ValueError(f"step {step.step_id!r} has no approval record")
    waiting = undecided(step)
    if waiting:
        raise RuntimeError(
            f"step {step.step_id!r} still waits for decisions on {[c['call_id'] for c in waiting]}"
        )
    out: list[DecidedCall] = []
    for c in rec["calls"]:
        entry = rec["decisions"].get(c["call_id"])
        args = c["arguments"]
        if entry is not None and entry["decision"] == APPROVED and entry.get("arguments") is not None:
            args = entry["arguments"]
        sel = messages.ToolSelection(
            tool_id=c.get("tool_id") or c["call_id"], tool_name=c["tool_name"], tool_kwargs=dict(args)
        )
        rejected = rejection_output(sel, entry) if entry is not None and entry["decision"] == REJECTED else None
        out.append(DecidedCall(c["call_id"], sel, rejected))
    return out


def withdraw_used(step: TaskStep, why: str) -> list[str]:
    """Withdraw the approvals of ``step``'s calls (they were used: the calls ran), so the
    step waits for a new decision; the log keeps them. Returns the call ids."""
    rec = record_of(step)
    if rec is None:
        return []
    used = [cid for cid, e in rec.get("decisions", {}).items() if e.get("decision") == APPROVED]
    for cid in used:
        del rec["decisions"][cid]
        rec["log"].append(
            {"call_id": cid, "decision": WITHDRAWN, "arguments": None, "reason": why, "by": "undo", "at": _now()}
        )
    return used


def decisions_of(step: TaskStep) -> list[dict[str, Any]]:
    """The step's calls, each with its current decision (None while undecided): for views."""
    rec = record_of(step)
    if rec is None:
        return []
    out = []
    for c in rec["calls"]:
        out.append({**c, "decision": rec["decisions"].get(c["call_id"])})
    return out
