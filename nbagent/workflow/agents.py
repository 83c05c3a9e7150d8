"""Agents for AgentWorkflow: each knows how to take one step with its model.

An agent keeps nothing of its own between steps: its work in progress lives in the run's
context (``scratchpad`` for FunctionAgent, ``current_reasoning`` for ReActAgent), so a run can be
checkpointed and resumed, and one agent object can serve many runs.

- ``take_step(ctx, llm_input, tools, memory)``: ask the model once; stream the request
  (``AgentInput``) and the reply's pieces (``AgentStream``); return the reply (``AgentOutput``).
- ``handle_tool_call_results(ctx, results, memory)``: note the tool outputs for the next step.
- ``finalize(ctx, output, memory)``: move the work in progress into the shared memory.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from nbagent.ids import new_id
from nbagent.llms.base import LLM, ChatResponse
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole, ToolSelection
from nbagent.tools import FunctionTool
from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    ObservationReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ReasoningStep,
    ResponseReasoningStep,
)
from nbagent.workers.react.prompt import FORMAT_REMINDER, render_system_prompt
from nbagent.workflow.agent_events import AgentInput, AgentOutput, AgentStream, ToolCallResult
from nbagent.workflow.context import Context
from nbagent.workflow.tools import as_workflow_tools

__all__ = ["BaseWorkflowAgent", "FunctionAgent", "ReActAgent", "DEFAULT_AGENT_DESCRIPTION"]

DEFAULT_AGENT_DESCRIPTION = "An agent that can perform a task"


class BaseWorkflowAgent(ABC):
    """An agent's configuration (name, model, tools, who it may hand off to) and its step logic.

    ``tools`` may mix FunctionTools and plain functions; a function that takes ``ctx: Context``
    gets the run's context. ``tool_retriever`` (an object with ``retrieve(text)`` or async
    ``aretrieve(text)`` returning tools) adds tools chosen for the current input.
    ``can_handoff_to`` lists the agents this one may hand off to (None: any other agent).
    """

    def __init__(
        self,
        *,
        name: str = "Agent",
        description: str = DEFAULT_AGENT_DESCRIPTION,
        system_prompt: str | None = None,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        tool_retriever: Any = None,
        can_handoff_to: Sequence[str] | None = None,
        llm: LLM | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"an agent needs a non-empty name (str), got {name!r}")
        if not isinstance(description, str):
            raise TypeError(f"description must be a str, got {type(description).__name__}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a str or None, got {type(system_prompt).__name__}")
        if llm is None:
            raise ValueError(
                f"agent {name!r} needs llm=...: e.g. OpenAILLM(model=...) or, offline, "
                "ScriptedLLM([...]) / FunctionLLM(fn)"
            )
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be an nbagent LLM, got {type(llm).__name__}: {llm!r}")
        if tool_retriever is not None and not (
            callable(getattr(tool_retriever, "retrieve", None)) or callable(getattr(tool_retriever, "aretrieve", None))
        ):
            raise TypeError(
                "tool_retriever must have retrieve(text) -> tools (or async aretrieve(text)), got "
                f"{type(tool_retriever).__name__}"
            )
        if can_handoff_to is not None:
            if isinstance(can_handoff_to, str) or not all(isinstance(n, str) for n in can_handoff_to):
                raise TypeError(f"can_handoff_to must be a list of agent names, got {can_handoff_to!r}")
            can_handoff_to = list(can_handoff_to)
        self.name = name
        self.description = description
        self.system_prompt = system_prompt
        self.tools: list[FunctionTool] = as_workflow_tools(tools)
        self.tool_retriever = tool_retriever
        self.can_handoff_to: list[str] | None = can_handoff_to
        self.llm = llm

    async def retrieve_tools(self, input: str) -> list[FunctionTool]:
        """The tools the retriever picks for ``input`` (none without a retriever)."""
        retriever = self.tool_retriever
        if retriever is None:
            return []
        if callable(getattr(retriever, "aretrieve", None)):
            found = await retriever.aretrieve(input)
        else:
            found = retriever.retrieve(input)
            if inspect.isawaitable(found):
                found = await found
        return as_workflow_tools(list(found or []))

    @abstractmethod
    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[FunctionTool], memory: ChatMemoryBuffer
    ) -> AgentOutput:
        """Ask the model once and return its reply (tool calls included)."""

    @abstractmethod
    async def handle_tool_call_results(
        self, ctx: Context, results: list[ToolCallResult], memory: ChatMemoryBuffer
    ) -> None:
        """Record the tool outputs so the next step sees them."""

    @abstractmethod
    async def finalize(self, ctx: Context, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        """Move the work in progress into memory; return the (possibly cleaned) output."""

    # ----- display ------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "kind": type(self).__name__,
            "name": self.name,
            "description": self.description,
            "llm": repr(self.llm),
            "tools": [t.name for t in self.tools],
            "tool_retriever": None if self.tool_retriever is None else type(self.tool_retriever).__name__,
            "can_handoff_to": self.can_handoff_to,
            "system_prompt": self.system_prompt,
        }

    def __repr__(self) -> str:
        handoff = "" if self.can_handoff_to is None else f", can_handoff_to={self.can_handoff_to}"
        return (
            f"{type(self).__name__}(name={self.name!r}, llm={self.llm!r}, "
            f"tools={[t.name for t in self.tools]}{handoff})"
        )

    def _repr_html_(self) -> str:
        from nbagent.viz.workflow_html import agent_html

        return agent_html(self)


def _final_chunk(last: ChatResponse | None, agent: str, llm: LLM) -> ChatResponse:
    if last is None:
        raise RuntimeError(f"agent {agent!r}: {llm!r} streamed no reply at all; a reply needs at least one chunk")
    return last


class FunctionAgent(BaseWorkflowAgent):
    """An agent for models with a tools API: the model calls tools by name with JSON arguments."""

    scratchpad_key: str = "scratchpad"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not getattr(self.llm, "is_function_calling_model", False):
            raise ValueError(
                f"FunctionAgent {self.name!r} needs a model with a tools API, but {self.llm!r} has "
                "is_function_calling_model=False; use ReActAgent (works with any chat model)"
            )

    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[FunctionTool], memory: ChatMemoryBuffer
    ) -> AgentOutput:
        scratchpad: list[ChatMessage] = list(await ctx.get(self.scratchpad_key, default=[]))
        messages = [*llm_input, *scratchpad]
        ctx.write_event_to_stream(AgentInput(input=messages, current_agent_name=self.name))
        last: ChatResponse | None = None
        async for chunk in self.llm.astream_chat(messages, tools=list(tools)):
            last = chunk
            ctx.write_event_to_stream(
                AgentStream(
                    delta=chunk.delta or "",
                    response=chunk.message.text,
                    tool_calls=list(chunk.message.tool_calls),
                    raw=None,
                    current_agent_name=self.name,
                )
            )
        final = _final_chunk(last, self.name, self.llm)
        reply = final.message.model_copy(update={"role": MessageRole.ASSISTANT})
        await ctx.set(self.scratchpad_key, [*scratchpad, reply])
        return AgentOutput(
            response=reply, tool_calls=list(reply.tool_calls), raw=None, current_agent_name=self.name
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
            if result.return_direct:
                scratchpad.append(ChatMessage(role=MessageRole.ASSISTANT, content=result.tool_output.content))
                break
        await ctx.set(self.scratchpad_key, scratchpad)

    async def finalize(self, ctx: Context, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        scratchpad: list[ChatMessage] = list(await ctx.get(self.scratchpad_key, default=[]))
        memory.put_messages(scratchpad)
        await ctx.set(self.scratchpad_key, [])
        return output


class ReActAgent(BaseWorkflowAgent):
    """An agent for any chat model: tools are described in the prompt, the model replies in
    Thought / Action / Action Input / Answer text (parsed by nbagent's tolerant ReAct parser).
    """

    reasoning_key: str = "current_reasoning"

    def __init__(
        self,
        *,
        react_system_prompt: str | None = None,
        output_parser: ReActOutputParser | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.react_system_prompt = react_system_prompt
        self.output_parser = output_parser or ReActOutputParser()

    def system_message(self, tools: Sequence[FunctionTool], context: str | None) -> ChatMessage:
        """The ReAct system prompt for these tools, with the agent's own prompt as context."""
        text = render_system_prompt(list(tools), self.react_system_prompt, context)
        return ChatMessage(role=MessageRole.SYSTEM, content=text)

    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[FunctionTool], memory: ChatMemoryBuffer
    ) -> AgentOutput:
        context: str | None = None
        history = list(llm_input)
        if history and history[0].role == MessageRole.SYSTEM:
            context = history[0].text
            history = history[1:]
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        messages = [
            self.system_message(tools, context),
            *history,
            *(ReActChatFormatter.render(r)[0] for r in reasoning),
        ]
        ctx.write_event_to_stream(AgentInput(input=messages, current_agent_name=self.name))
        last: ChatResponse | None = None
        async for chunk in self.llm.astream_chat(messages):
            last = chunk
            ctx.write_event_to_stream(
                AgentStream(
                    delta=chunk.delta or "",
                    response=chunk.message.text,
                    tool_calls=[],
                    raw=None,
                    current_agent_name=self.name,
                )
            )
        final = _final_chunk(last, self.name, self.llm)
        text = final.message.text
        reply = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        try:
            parsed = self.output_parser.parse(text)
        except ReActParseError as err:
            observation = ObservationReasoningStep(
                observation=f"Could not parse your output: {err}. {FORMAT_REMINDER}.", is_error=True
            )
            await ctx.set(self.reasoning_key, [*reasoning, observation])
            retry = ChatMessage(role=MessageRole.USER, content=observation.content)
            return AgentOutput(response=reply, current_agent_name=self.name, retry_messages=[retry])
        await ctx.set(self.reasoning_key, [*reasoning, parsed])
        if isinstance(parsed, ResponseReasoningStep):
            answer = ChatMessage(role=MessageRole.ASSISTANT, content=parsed.response)
            return AgentOutput(response=answer, current_agent_name=self.name)
        assert isinstance(parsed, ActionReasoningStep)
        call = ToolSelection(tool_id=new_id(), tool_name=parsed.action, tool_kwargs=parsed.action_input)
        return AgentOutput(response=reply, tool_calls=[call], current_agent_name=self.name)

    async def handle_tool_call_results(
        self, ctx: Context, results: list[ToolCallResult], memory: ChatMemoryBuffer
    ) -> None:
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        for result in results:
            out = result.tool_output
            reasoning.append(ObservationReasoningStep(observation=out.content, is_error=out.is_error))
            if result.return_direct:
                reasoning.append(ResponseReasoningStep(thought="", response=out.content))
                break
        await ctx.set(self.reasoning_key, reasoning)

    async def finalize(self, ctx: Context, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        if reasoning:
            text = "\n".join(r.content for r in reasoning)
            memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        await ctx.set(self.reasoning_key, [])
        return output
