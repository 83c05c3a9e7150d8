"""ReActAgent: an agent for any chat model, which reads the tools in its prompt and replies in
Thought / Action / Action Input / Answer text; its work in progress is the context's
``current_reasoning``. Also the formatter helpers (the ``react_header`` prompt)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from nbagent.ids import new_id
from nbagent.llms.base import ChatResponse
from nbagent.llms.stream import open_stream
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole, ToolSelection
from nbagent.prompts import PromptDictType, PromptTemplate
from nbagent.tools import FunctionTool
from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    ObservationReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ReasoningStep,
    ResponseReasoningStep,
    resolve_tool_name,
)
from nbagent.workers.react.prompt import FORMAT_REMINDER, REACT_SYSTEM_PROMPT, render_system_prompt
from nbagent.workflow.agent_events import AgentInput, AgentOutput, AgentStream, ToolCallResult
from nbagent.workflow.agents import BaseWorkflowAgent, _final_chunk, _raw
from nbagent.workflow.context import Context
from nbagent.workflow.errors import WorkflowRuntimeError

__all__ = ["ReActAgent", "default_formatter"]


def default_formatter() -> ReActChatFormatter:
    """The formatter a ReActAgent gets unless it is given one (``formatter=``)."""
    return ReActChatFormatter()


def formatter_header(formatter: Any) -> str:
    """The ReAct header a formatter uses (``system_header``, or nbagent's ``system_prompt``)."""
    for attr in ("system_header", "system_prompt"):
        value = getattr(formatter, attr, None)
        if isinstance(value, str):
            return value
    return REACT_SYSTEM_PROMPT


def set_formatter_header(formatter: Any, header: str) -> None:
    """Give a formatter a new ReAct header (nbagent's formatter renders its prompt again when
    its header changes)."""
    found = False
    for attr in ("system_header", "system_prompt"):
        if hasattr(formatter, attr):
            setattr(formatter, attr, header)
            found = True
    if not found:
        formatter.system_header = header


def parse_error_text(err: Exception) -> str:
    """What the model is told when its reply does not parse (the reference's words first)."""
    return f"Error while parsing the output: {err}\n\n{FORMAT_REMINDER}."


class ReActAgent(BaseWorkflowAgent):
    """An agent for any chat model: tools are described in the prompt, the model replies in
    Thought / Action / Action Input / Answer text (parsed by nbagent's tolerant ReAct parser).

    ``formatter`` builds the model's input: nbagent's ``ReActChatFormatter`` (its header is the
    ``react_header`` prompt; ``react_system_prompt=`` sets it too), or any object with the
    reference's ``format(tools, chat_history=..., current_reasoning=...)`` and ``context``.
    """

    reasoning_key: str = "current_reasoning"
    output_parser: Any = Field(default_factory=ReActOutputParser, description="The react output parser")
    formatter: Any = Field(
        default_factory=default_formatter,
        description="The react chat formatter to format the reasoning steps and chat history into an llm input.",
    )
    react_system_prompt: str | None = Field(
        default=None, description="The ReAct header (tools, format); None: the formatter's"
    )

    @model_validator(mode="after")
    def _apply_header(self) -> ReActAgent:
        if self.react_system_prompt is not None:
            set_formatter_header(self.formatter, self.react_system_prompt)
        if not callable(getattr(self.output_parser, "parse", None)):
            raise TypeError(
                f"output_parser must have parse(text) -> reasoning step, got {type(self.output_parser).__name__}"
            )
        return self

    # ----- prompts ------------------------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        return {"react_header": PromptTemplate(formatter_header(self.formatter))}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        if "react_header" in prompts_dict:
            header = prompts_dict["react_header"].template
            set_formatter_header(self.formatter, header)
            self.react_system_prompt = header

    def system_message(self, tools: Sequence[FunctionTool], context: str | None) -> ChatMessage:
        """The ReAct system prompt for these tools, with the agent's own prompt as context.

        Example:

        >>> from nbagent import FunctionTool, ScriptedLLM
        >>> from nbagent.workflow import ReActAgent
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> agent = ReActAgent(name="calc", description="Adds.", tools=[add], llm=ScriptedLLM([]))
        >>> message = agent.system_message([FunctionTool.from_defaults(add)], context="Be brief.")
        >>> message.role.value, "add" in message.content, "Be brief." in message.content
        ('system', True, True)
        """
        text = render_system_prompt(list(tools), formatter_header(self.formatter), context)
        return ChatMessage(role=MessageRole.SYSTEM, content=text)

    def _llm_input(
        self, tools: Sequence[FunctionTool], history: list[ChatMessage], context: str | None, reasoning: list[Any]
    ) -> list[ChatMessage]:
        formatter = self.formatter
        if isinstance(formatter, ReActChatFormatter):
            role = getattr(formatter, "observation_role", None)  # who tool results come from
            rendered = (formatter.render(r, role) if role is not None else formatter.render(r) for r in reasoning)
            return [self.system_message(tools, context), *history, *(m for m, _ in rendered)]
        if hasattr(formatter, "context"):  # the reference's formatter contract
            formatter.context = context or ""
        return list(formatter.format(list(tools), chat_history=history, current_reasoning=reasoning))

    async def take_step(
        self, ctx: Context, llm_input: list[ChatMessage], tools: Sequence[FunctionTool], memory: ChatMemoryBuffer
    ) -> AgentOutput:
        context: str | None = None
        history = list(llm_input)
        if history and history[0].role == MessageRole.SYSTEM:
            context = history[0].text
            history = history[1:]
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        messages = self._llm_input(tools, history, context, reasoning)
        ctx.write_event_to_stream(AgentInput(input=messages, current_agent_name=self.name))
        last: ChatResponse | None = None
        async for chunk in await open_stream(self.llm.astream_chat(messages)):
            last = chunk
            ctx.write_event_to_stream(
                AgentStream(
                    delta=chunk.delta or "",
                    response=chunk.message.text,
                    tool_calls=[],
                    raw=_raw(chunk.raw),
                    current_agent_name=self.name,
                )
            )
        final = _final_chunk(last)
        raw = _raw(final.raw)
        text = final.message.text
        if not text.strip():
            raise WorkflowRuntimeError(
                f"Got empty message: ReActAgent {self.name!r} got an empty reply from {self.llm!r}; "
                "a ReAct reply starts with 'Thought:' (check the model, its max tokens, or the prompt)"
            )
        reply = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        try:
            parsed = self.output_parser.parse(text)
        except ValueError as err:  # ReActParseError, or a reference parser's ValueError
            # as on the reference: the model is asked again with its own reply and what was
            # wrong with it after the conversation (once; the reasoning so far is unchanged)
            retry = ChatMessage(role=MessageRole.USER, content=parse_error_text(err))
            return AgentOutput(response=reply, raw=raw, current_agent_name=self.name, retry_messages=[reply, retry])
        await ctx.set(self.reasoning_key, [*reasoning, parsed])
        if isinstance(parsed, ResponseReasoningStep):
            # as on the reference: the streamed AgentOutput is the model's reply as written;
            # finalize gives the run's result the answer alone
            return AgentOutput(response=reply, raw=raw, current_agent_name=self.name)
        if not isinstance(parsed, ActionReasoningStep):
            raise WorkflowRuntimeError(
                f"Expected ActionReasoningStep, got {type(parsed).__name__}: the output parser of "
                f"ReActAgent {self.name!r} returned neither an action nor an answer"
            )
        name = resolve_tool_name(parsed.action, [t.name for t in tools])  # "__search__": emphasis
        call = ToolSelection(tool_id=new_id(), tool_name=name, tool_kwargs=parsed.action_input)
        return AgentOutput(response=reply, tool_calls=[call], raw=raw, current_agent_name=self.name)

    async def handle_tool_call_results(
        self, ctx: Context, results: list[ToolCallResult], memory: ChatMemoryBuffer
    ) -> None:
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        for result in results:
            out = result.tool_output
            reasoning.append(ObservationReasoningStep(observation=out.content, is_error=out.is_error))
            if result.return_direct and result.tool_name != "handoff":  # as on the reference
                reasoning.append(ResponseReasoningStep(thought=out.content, response=out.content))
                break
        await ctx.set(self.reasoning_key, reasoning)

    async def finalize(self, ctx: Context, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        reasoning: list[ReasoningStep] = list(await ctx.get(self.reasoning_key, default=[]))
        if reasoning:
            text = "\n".join(r.content for r in reasoning)
            memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        await ctx.set(self.reasoning_key, [])
        if reasoning and isinstance(reasoning[-1], ResponseReasoningStep):
            # the answer without its "Thought: ... Answer:" (a copy: the streamed event stays)
            answer = ChatMessage(role=MessageRole.ASSISTANT, content=reasoning[-1].response)
            output = output.model_copy(update={"response": answer})
        return output
