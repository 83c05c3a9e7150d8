"""Typed answers for workflow agents: ``AgentWorkflow(output_cls=Form)`` (or an agent's own
``output_cls``) gives the final ``AgentOutput`` a validated ``structured_response``.

As in LlamaIndex's AgentWorkflow, the typed answer is made after the agents finish: if the
answer's text already is a valid JSON object of ``output_cls`` it is used as it is; otherwise
the answering agent's model is asked once more, with the conversation, for the object (the
``final_result`` tool for function-calling models, ``response_format`` when the model
supports it, else a JSON answer). An answer that does not validate goes back with the errors,
at most ``max_output_retries`` times (default 2); each retry is a ``StructuredOutputRetry``
event in the stream. ``structured_output_fn(messages) -> dict`` replaces the model call.
"""

from __future__ import annotations

import inspect
from typing import Any

from nbagent import structured as _s
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole
from nbagent.workflow.agent_events import AgentOutput, AgentStreamStructuredOutput
from nbagent.workflow.context import Context
from nbagent.workflow.events import Event

__all__ = ["StructuredOutputRetry", "add_structured_response"]


class StructuredOutputRetry(Event):
    """A typed answer did not validate; the model is asked again with ``error``."""

    attempt: int
    error: str
    current_agent_name: str


async def add_structured_response(
    workflow: Any, ctx: Context, agent: Any, output: AgentOutput, memory: ChatMemoryBuffer
) -> AgentOutput:
    cls = getattr(agent, "output_cls", None) or getattr(workflow, "output_cls", None)
    fn = getattr(agent, "structured_output_fn", None) or getattr(workflow, "structured_output_fn", None)
    if cls is None and fn is None:
        return output
    if fn is not None:
        data = fn(memory.get_all())
        if inspect.isawaitable(data):
            data = await data
        obj = cls.model_validate(data) if cls is not None else data
    else:
        try:
            obj = _s.parse_json_answer(output.response.text, cls)
        except ValueError:
            obj = await _ask(workflow, ctx, agent, cls, memory)
    # streamed as the reference streams it: the answer's data as a dict
    data = obj.model_dump() if hasattr(obj, "model_dump") else obj
    ctx.write_event_to_stream(AgentStreamStructuredOutput(output=data))
    return output.model_copy(update={"structured_response": obj})


async def _ask(workflow: Any, ctx: Context, agent: Any, cls: Any, memory: ChatMemoryBuffer) -> Any:
    llm = agent.llm
    mode = _s.pick_mode("auto", llm)
    retries = int(getattr(workflow, "max_output_retries", 2))
    messages = [*memory.get_all()]
    if mode == "json":
        messages.append(ChatMessage(role=MessageRole.SYSTEM, content=_s.json_instructions(cls)))
    messages.append(ChatMessage(role=MessageRole.USER, content=f"Give your final answer as a {cls.__name__}."))
    tools: list[Any] = [_s.final_tool(cls)] if mode == "tool" else []
    choice: Any = {"type": "function", "function": {"name": _s.FINAL_TOOL}} if mode == "tool" else None
    extra = {"response_format": _s.response_format(cls)} if mode == "response_format" else {}
    for attempt in range(retries + 1):
        reply = (await llm.achat(messages, tools=tools or None, tool_choice=choice, **extra)).message
        final = next((c for c in reply.tool_calls if c.tool_name == _s.FINAL_TOOL), None)
        try:
            if final is not None:
                return _s.validate_args(final.tool_kwargs, cls)
            return _s.parse_json_answer(reply.text, cls)
        except ValueError as error:
            if attempt == retries:
                raise _s.StructuredOutputError(
                    f"the answer did not fit {cls.__name__} after {retries} retries: {error}"
                ) from None
            ctx.write_event_to_stream(
                StructuredOutputRetry(attempt=attempt + 1, error=str(error), current_agent_name=agent.name)
            )
            note = _s.feedback(str(error), mode, cls)
            messages.append(reply.model_copy(update={"role": MessageRole.ASSISTANT}))
            if final is not None:
                for c in reply.tool_calls:
                    messages.append(ChatMessage(role=MessageRole.TOOL, content=note, tool_call_id=c.tool_id, name=c.tool_name))
            else:
                messages.append(ChatMessage(role=MessageRole.USER, content=note))
    raise AssertionError("unreachable")
