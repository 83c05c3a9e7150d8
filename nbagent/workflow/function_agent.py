"""FunctionAgent: an agent for models with a tools API (the model calls tools by name with JSON
arguments); its work in progress is the context's ``scratchpad``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from nbagent.llms.base import ChatResponse
from nbagent.llms.stream import open_stream
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole
from nbagent.tools import FunctionTool
from nbagent.workflow.agent_events import AgentInput, AgentOutput, AgentStream, ToolCallResult
from nbagent.workflow.agents import BaseWorkflowAgent, _final_chunk, _raw
from nbagent.workflow.context import Context

__all__ = ["FunctionAgent"]


class FunctionAgent(BaseWorkflowAgent):
    """An agent for models with a tools API: the model calls tools by name with JSON arguments."""

    scratchpad_key: str = "scratchpad"
    allow_parallel_tool_calls: bool = Field(
        default=True,
        description="If False, only the first tool call of a reply is kept (one tool per step), as on the reference",
    )

    @model_validator(mode="after")
    def _needs_tools_api(self) -> FunctionAgent:
        if not getattr(self.llm, "is_function_calling_model", False):
            raise ValueError(
                f"LLM must be a FunctionCallingLLM: FunctionAgent {self.name!r} needs a model with a "
                f"tools API, but {self.llm!r} has is_function_calling_model=False; use ReActAgent "
                "(works with any chat model)"
            )
        return self

    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[FunctionTool], memory: ChatMemoryBuffer
    ) -> AgentOutput:
        if not getattr(self.llm, "is_function_calling_model", False):  # the model was swapped since
            raise ValueError(
                f"LLM must be a FunctionCallingLLM: FunctionAgent {self.name!r} has {self.llm!r}, "
                "which has is_function_calling_model=False; use ReActAgent"
            )
        scratchpad: list[ChatMessage] = list(await ctx.get(self.scratchpad_key, default=[]))
        messages = [*llm_input, *scratchpad]
        ctx.write_event_to_stream(AgentInput(input=messages, current_agent_name=self.name))
        last: ChatResponse | None = None
        async for chunk in await open_stream(self.llm.astream_chat(messages, tools=list(tools))):
            last = chunk
            ctx.write_event_to_stream(
                AgentStream(
                    delta=chunk.delta or "",
                    response=chunk.message.text,
                    tool_calls=list(chunk.message.tool_calls),
                    raw=_raw(chunk.raw),
                    current_agent_name=self.name,
                )
            )
        final = _final_chunk(last)
        update: dict[str, Any] = {"role": MessageRole.ASSISTANT}
        if final.message.content == "":  # an empty reply: content None, as the reference has it
            update["content"] = None
        if not self.allow_parallel_tool_calls and len(final.message.tool_calls) > 1:
            update["tool_calls"] = list(final.message.tool_calls[:1])  # the reference's force_single_tool_call
        reply = final.message.model_copy(update=update)
        await ctx.set(self.scratchpad_key, [*scratchpad, reply])
        return AgentOutput(
            response=reply, tool_calls=list(reply.tool_calls), raw=_raw(final.raw), current_agent_name=self.name
        )

    async def handle_tool_call_results(
        self, ctx: Context, results: list[ToolCallResult], memory: ChatMemoryBuffer
    ) -> None:
        scratchpad: list[ChatMessage] = list(await ctx.get(self.scratchpad_key, default=[]))
        for result in results:
            scratchpad.append(
                ChatMessage(
                    role=MessageRole.TOOL,
                    content=result.tool_output.content,
                    tool_call_id=result.tool_id,
                    name=result.tool_name,
                )
            )
            if result.return_direct and result.tool_name != "handoff":  # a handoff is no answer
                scratchpad.append(ChatMessage(role=MessageRole.ASSISTANT, content=result.tool_output.content))
                break
        await ctx.set(self.scratchpad_key, scratchpad)

    async def finalize(self, ctx: Context, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        scratchpad: list[ChatMessage] = list(await ctx.get(self.scratchpad_key, default=[]))
        memory.put_messages(scratchpad)
        await ctx.set(self.scratchpad_key, [])
        return output
