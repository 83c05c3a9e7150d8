"""``WorkflowTracer``: one workflow run's streamed events as OpenTelemetry spans.

An ``AgentWorkflow`` run draws as::

    invoke_workflow {workflow}        CHAIN  the run, from its start to its result or error
      invoke_agent {agent}            AGENT  one per agent turn (``nbagent.handoff.from``
        chat {model}                  LLM      names the agent that handed off to it)
        execute_tool {tool}           TOOL   one per call; ``handoff`` ones name the target

Built only from what the run writes to its stream (``AgentInput``, ``AgentOutput``,
``ToolCall``, ``ToolCallResult``, ``StopEvent``) and the handler's end: the workflow runtime
knows nothing of tracing; each model call's tokens come from the run's own events
(``handler.events``: ``ModelCalled``, built only while a tracer listens). Any other workflow
is one ``invoke_workflow`` span, with a ``chat`` span per model call of its steps.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from nbagent.events import ModelCalled
from nbagent.tracing import names as n
from nbagent.tracing.content import messages_json, value_json
from nbagent.tracing.spans import chat_attributes, child, current_in_step, end, fail
from nbagent.workflow.agent_events import AgentInput, AgentOutput, ToolCall, ToolCallResult
from nbagent.workflow.approval import ToolApprovalRequired
from nbagent.workflow.events import StopEvent

__all__ = ["WorkflowTracer"]

log = logging.getLogger("nbagent.tracing")

HANDOFF = "handoff"
_REJECTED = "Rejected by "


def _decision(content: str) -> tuple[str, str] | None:
    """Who rejected a call and why, from the result the model got (``nbagent.approval``'s
    words: "Rejected by <who>: <reason>. The call was not run."), or None."""
    if not content.startswith(_REJECTED):
        return None
    who, _, reason = content[len(_REJECTED):].partition(": ")
    return who, reason.removesuffix(" The call was not run.").rstrip(".")


class WorkflowTracer:
    """Listens to one run (``handler.subscribe``) until it ends; ``close`` stops it early."""

    def __init__(self, handler: Any, tracer: Tracer, capture_content: bool = False) -> None:
        self.tracer = tracer
        self.capture = bool(capture_content)
        self.workflow = handler.ctx.workflow
        name = type(self.workflow).__name__
        attrs: dict[str, Any] = {
            n.OPERATION: "invoke_workflow",
            n.WORKFLOW_NAME: name,
            n.OI_KIND: "CHAIN",
        }
        self.span = child(tracer, f"invoke_workflow {name}", None, time.time(), attrs)
        self.turn: Span | None = None
        self.turn_agent: str | None = None
        self.turns = 0
        self.chat: Span | None = None
        self.tools: dict[str, Span] = {}
        self.handoff: tuple[str, str, str] | None = None  # (from agent, to agent, reason)
        self._unsubscribe = handler.subscribe(self.on_event)
        self._unsubscribe_calls = handler.events.subscribe(self._model_called, ModelCalled)
        handler.add_done_callback(self._on_done)

    def close(self) -> None:
        self._unsubscribe()
        self._unsubscribe_calls()
        self._end_turn()
        end(self.span)

    # ----- events ------------------------------------------------------------------------
    def on_event(self, event: Any) -> None:
        if isinstance(event, AgentInput):
            self._agent_input(event)
        elif isinstance(event, AgentOutput):
            self._agent_output(event)
        elif isinstance(event, ToolCallResult):  # before ToolCall: it is one
            self._tool_result(event)
        elif isinstance(event, ToolCall):
            self._tool_call(event)
        elif isinstance(event, ToolApprovalRequired):
            self._approval_asked(event)
        elif isinstance(event, StopEvent):
            self._stop(event)

    def _model(self, agent: str) -> tuple[str, str]:
        llm = getattr(getattr(self.workflow, "agents", {}).get(agent), "llm", None)
        return str(getattr(llm, "model", "") or "unknown"), str(getattr(llm, "provider_name", "") or "unknown")

    def _agent_input(self, e: AgentInput) -> None:
        now = time.time()
        self._end_turn(now)
        self.turns += 1
        agent = e.current_agent_name
        attrs: dict[str, Any] = {
            n.OPERATION: "invoke_agent",
            n.AGENT_NAME: agent,
            n.OI_KIND: "AGENT",
            "nbagent.turn": self.turns,
        }
        if self.handoff is not None and self.handoff[1] == agent:
            attrs["nbagent.handoff.from"] = self.handoff[0]
            attrs["nbagent.handoff.reason"] = self.handoff[2]
        self.handoff = None
        self.turn, self.turn_agent = child(self.tracer, f"invoke_agent {agent}", self.span, now, attrs), agent
        model, provider = self._model(agent)
        chat_attrs = chat_attributes(model, provider)
        if self.capture:
            chat_attrs[n.INPUT_MESSAGES] = messages_json(e.input)
        self.chat = child(self.tracer, f"chat {model}", self.turn, now, chat_attrs, SpanKind.CLIENT)
        current_in_step(self.chat)  # written by the step about to call the model: the call runs under it

    def _model_called(self, e: ModelCalled) -> None:
        """The model call of the running turn: what it used, on the turn's chat span (a call
        from another step of a plain workflow gets a span of its own)."""
        span = self.chat
        if span is None:
            attrs = {n.OPERATION: "chat", n.REQUEST_MODEL: e.model, n.PROVIDER: e.provider, n.OI_KIND: "LLM",
                     n.OI_MODEL: e.model, n.OI_PROVIDER: e.provider, "nbagent.workflow.step": e.step_id}
            span = child(self.tracer, f"chat {e.model}", self.turn or self.span, e.started_at, attrs, SpanKind.CLIENT)
        if e.usage is not None:
            span.set_attributes({
                n.INPUT_TOKENS: e.usage.prompt_tokens, n.OUTPUT_TOKENS: e.usage.completion_tokens,
                n.OI_PROMPT_TOKENS: e.usage.prompt_tokens, n.OI_COMPLETION_TOKENS: e.usage.completion_tokens,
                n.OI_TOTAL_TOKENS: e.usage.total_tokens,
            })
        span.set_attribute("gen_ai.request.stream", e.streamed)
        if e.error_type is not None:
            fail(span, e.error_type)
        if span is not self.chat:
            end(span, e.started_at + e.latency_s)

    def _agent_output(self, e: AgentOutput) -> None:
        if self.chat is None:
            return
        reason = "tool_calls" if e.tool_calls else "stop"
        self.chat.set_attribute(n.FINISH_REASONS, (reason,))
        if self.capture:
            self.chat.set_attribute(n.OUTPUT_MESSAGES, messages_json([e.response], reason))
        end(self.chat)
        self.chat = None

    def _tool_call(self, e: ToolCall) -> None:
        attrs: dict[str, Any] = {
            n.OPERATION: "execute_tool",
            n.TOOL_NAME: e.tool_name,
            n.TOOL_CALL_ID: e.tool_id,
            n.TOOL_TYPE: "function",
            n.OI_KIND: "TOOL",
            n.OI_TOOL_NAME: e.tool_name,
        }
        if self.capture:
            attrs[n.TOOL_ARGUMENTS] = value_json(e.tool_kwargs)
        span = self.tools[e.tool_id] = child(self.tracer, f"execute_tool {e.tool_name}", self.turn or self.span, time.time(), attrs)
        current_in_step(span)  # written by the step that runs the tool: the tool runs under it

    def _approval_asked(self, e: ToolApprovalRequired) -> None:
        """The call waits for a person: an event on its span (the decision is its result)."""
        span = self.tools.get(e.tool_id)
        if span is not None:
            span.add_event("nbagent.approval.asked", {"nbagent.approval.agent": e.agent_name})

    def _tool_result(self, e: ToolCallResult) -> None:
        span = self.tools.pop(e.tool_id, None)
        if span is None:
            return
        out = e.tool_output
        if self.capture:
            span.set_attribute(n.TOOL_RESULT, value_json(out.content))
        decision = _decision(out.content) if out.is_error else None
        if decision is not None:  # a person said no: nothing ran, nothing failed
            who, reason = decision
            span.set_attribute("nbagent.call.rejected", True)
            span.add_event("nbagent.approval", {
                "nbagent.approval.decision": "rejected", "nbagent.approval.by": who, "nbagent.approval.reason": reason,
            })
        elif out.is_error:
            fail(span, "ToolError", out.content[:200])
        elif e.tool_name == HANDOFF:
            to = str(e.tool_kwargs.get("to_agent", ""))
            reason = str(e.tool_kwargs.get("reason", ""))
            span.set_attribute("nbagent.handoff.to", to)
            self.handoff = (self.turn_agent or "", to, reason)
        end(span)

    def _stop(self, e: StopEvent) -> None:
        self._end_turn()
        result = e.result if type(e) is StopEvent else e
        if self.capture and result is not None:
            self.span.set_attribute(n.OI_OUTPUT, value_json(str(result)))
        agent = getattr(result, "current_agent_name", None)
        if agent:
            self.span.set_attribute("nbagent.answered_by", str(agent))

    def _end_turn(self, at: float | None = None) -> None:
        for span in self.tools.values():  # calls that never reported a result
            end(span, at)
        self.tools.clear()
        end(self.chat, at)
        self.chat = None
        end(self.turn, at)
        self.turn = None

    def _on_done(self, handler: Any) -> None:
        try:
            self._done(handler)
        except Exception:  # a tracer must never break a run, not even its end
            log.exception("nbagent tracing failed at the end of a workflow run")

    def _done(self, handler: Any) -> None:
        """The run ended: its result, or the error that ended it."""
        self._end_turn()
        try:
            error = handler.exception()
        except BaseException as cancelled:  # noqa: BLE001 - a cancelled run has no exception to give
            error = cancelled
        if error is not None:
            fail(self.span, type(error).__name__, str(error)[:200])
        self.span.set_attribute("nbagent.workflow.status", str(handler.status))
        end(self.span)
        self._unsubscribe()
        self._unsubscribe_calls()
