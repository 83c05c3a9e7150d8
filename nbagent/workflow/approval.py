"""Approval of tool calls in workflow agents: the call waits for a person's decision.

When an agent of an ``AgentWorkflow`` calls a tool with ``requires_approval=True`` (or one the
workflow's ``approve_tools=`` policy names), the ``call_tool`` step writes a
``ToolApprovalRequired`` event to the stream (a question, so ``handler.pending_questions``,
``handler.input_box()`` and checkpoints see it) and waits. The person decides from a cell::

    async for ev in handler.stream_events():
        if isinstance(ev, ToolApprovalRequired):
            handler.ctx.send_event(ToolApprovalResponse.reject(ev, reason="keep it"))

(``ToolApprovalResponse.approve(ev, arguments={...})`` approves, with edited arguments if
given), or with ``handler.respond("yes")`` / ``handler.respond("no: keep it")`` / the input box.
A rejected call runs nothing; the model gets ``"Rejected by <who>: <reason>"`` as its result.
Every decision is recorded in the run's state under ``"tool_approvals"`` (who, when, edited
arguments, reason), so a checkpoint and the trace keep it.

A question and its answer name the call itself (``call``: its tool and arguments), not only
the model's ``tool_id``: a run resumed from an earlier checkpoint asks the model again and
may get another call under the same id and question (a scripted model's ``call_1``), and an
answer meant for the call the person saw must not approve that one. Such an answer is
refused with an error naming both calls. An approved call that already ran is not run again
when an interrupted run resumes (``Context``'s tool journal, see ``nbagent.calls``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from pydantic import Field

from nbagent.approval import ApprovalPolicy, needs_approval
from nbagent.messages import ToolOutput, ToolSelection
from nbagent.tools import FunctionTool
from nbagent.workflow.context import Context
from nbagent.workflow.events import HumanResponseEvent, InputRequiredEvent

__all__ = ["ToolApprovalRequired", "ToolApprovalResponse", "APPROVALS_KEY", "gate"]

APPROVALS_KEY = "tool_approvals"
_YES = {"y", "yes", "ok", "okay", "approve", "approved", "allow"}


class ToolApprovalRequired(InputRequiredEvent):
    """A tool call waiting for a person: ``tool_name``, ``tool_kwargs`` (the arguments),
    ``tool_id`` and the agent that asked. ``prefix`` says it in words."""

    tool_name: str
    tool_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_id: str
    agent_name: str = ""
    call: str = ""  # the call in words (tool and arguments): what an answer must name


class ToolApprovalResponse(HumanResponseEvent):
    """A person's decision on a ``ToolApprovalRequired``: ``approved``, edited ``arguments``
    (None keeps the model's), ``reason`` (told to the model on a rejection), ``by`` (who)."""

    tool_id: str
    approved: bool
    arguments: dict[str, Any] | None = None
    reason: str | None = None
    by: str = "user"
    call: str = ""  # the call the person decided on (the question's ``call``)

    @classmethod
    def approve(
        cls, question: ToolApprovalRequired, arguments: dict[str, Any] | None = None, *, by: str = "user"
    ) -> ToolApprovalResponse:
        """Approve the call ``question`` asks about (with edited ``arguments`` if given)."""
        return cls(
            tool_id=question.tool_id, approved=True, arguments=arguments, by=by,
            waiter_id=question.waiter_id, response="approve", call=question.call,
        )

    @classmethod
    def reject(
        cls, question: ToolApprovalRequired, reason: str | None = None, *, by: str = "user"
    ) -> ToolApprovalResponse:
        """Reject the call ``question`` asks about; ``reason`` goes to the model."""
        return cls(
            tool_id=question.tool_id, approved=False, reason=reason, by=by,
            waiter_id=question.waiter_id, response=f"reject: {reason}" if reason else "reject",
            call=question.call,
        )


def _from_text(text: str) -> tuple[bool, str | None]:
    """A typed answer (``handler.respond``, the input box): yes/ok/approve approves; anything
    else rejects, and text after ``no:`` (or the whole text) is the reason."""
    words = text.strip()
    if words.lower() in _YES:
        return True, None
    low = words.lower()
    for head in ("no:", "reject:", "no,", "no "):
        if low.startswith(head):
            return False, words[len(head):].strip() or None
    return False, None if low in {"n", "no", "reject", ""} else words


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


async def gate(
    ctx: Context,
    tool: FunctionTool | None,
    call: ToolSelection,
    policy: ApprovalPolicy,
    agent_name: str,
) -> tuple[ToolSelection, ToolOutput | None]:
    """Wait for a decision when the call needs one. Returns the call to run (maybe with edited
    arguments) and, for a rejected call, the output that stands in for it."""
    if not needs_approval(tool, call, policy):
        return call, None
    args = ", ".join(f"{k}={v!r}" for k, v in call.tool_kwargs.items())
    said = f"{call.tool_name}({args})"
    question = ToolApprovalRequired(
        prefix=f"Agent {agent_name} wants to call {said}. Approve?",
        tool_name=call.tool_name,
        tool_kwargs=dict(call.tool_kwargs),
        tool_id=call.tool_id,
        agent_name=agent_name,
        call=said,
    )
    answer = await ctx.wait_for_event(
        HumanResponseEvent, waiter_event=question, requirements={"tool_id": call.tool_id, "call": said}
    )
    if isinstance(answer, ToolApprovalResponse):
        approved, reason, edited, by = answer.approved, answer.reason, answer.arguments, answer.by
    else:
        approved, reason = _from_text(answer.response)
        edited, by = None, str(answer.get("by", "user"))
    record = {
        "tool_id": call.tool_id,
        "tool_name": call.tool_name,
        "agent": agent_name,
        "arguments": dict(call.tool_kwargs),
        "decision": "approved" if approved else "rejected",
        "edited_arguments": dict(edited) if edited is not None else None,
        "reason": reason,
        "by": by,
        "at": _now(),
    }
    await ctx.set(APPROVALS_KEY, [*(await ctx.get(APPROVALS_KEY, default=[])), record])
    if approved:
        if edited is not None:
            call = call.model_copy(update={"tool_kwargs": dict(edited)})
        return call, None
    out = ToolOutput(
        content=f"Rejected by {by}: {reason or 'no reason given'}. The call was not run.",
        tool_name=call.tool_name,
        raw_input=dict(call.tool_kwargs),
        is_error=True,
        tool_call_id=call.tool_id,
    )
    return call, out
