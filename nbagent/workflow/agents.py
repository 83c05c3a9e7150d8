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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from nbagent.ids import new_id
from nbagent.llms.base import LLM, ChatResponse
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole, ToolSelection
from nbagent.registry import html_view, provided
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
from nbagent.prompts import PromptDictType, PromptMixin, PromptTemplate
from nbagent.workers.react.prompt import FORMAT_REMINDER, REACT_SYSTEM_PROMPT, render_system_prompt
from nbagent.workflow.agent_events import AgentInput, AgentOutput, AgentStream, ToolCallResult
from nbagent.workflow.context import Context
from nbagent.workflow.errors import WorkflowRuntimeError
from nbagent.workflow.templates import checked_template
from nbagent.workflow.tools import as_workflow_tools

if TYPE_CHECKING:
    from nbagent.viz.workflow_html import DotDisplay
    from nbagent.viz.workflow_panel import WorkflowPanel
    from nbagent.workflow.handler import WorkflowHandler

__all__ = ["BaseWorkflowAgent", "FunctionAgent", "ReActAgent", "DEFAULT_AGENT_DESCRIPTION", "default_formatter"]

DEFAULT_AGENT_DESCRIPTION = "An agent that can perform a task"


class BaseWorkflowAgent(BaseModel, PromptMixin, ABC):
    """An agent's configuration (name, model, tools, who it may hand off to) and its step logic.

    A pydantic model, as on the reference page (``model_dump``, field validation). ``tools`` may
    mix FunctionTools and plain functions (made FunctionTools); a function that takes
    ``ctx: Context`` gets the run's context. ``tool_retriever`` (an object with
    ``retrieve(text)`` or async ``aretrieve(text)`` returning tools) adds tools chosen for the
    current input. ``can_handoff_to`` lists the agents this one may hand off to (None: any).

    An agent is also a workflow on its own: ``agent.run(user_msg=...)`` runs it as a one-agent
    ``AgentWorkflow`` and returns the same handler (``Context(agent)`` makes its context).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")  # a misspelt option is an error

    name: str = Field(default="Agent", description="The name of the agent")
    description: str = Field(
        default=DEFAULT_AGENT_DESCRIPTION,
        description="The description of what the agent does and is responsible for",
    )
    system_prompt: str | None = Field(default=None, description="The system prompt for the agent")
    tools: list[FunctionTool] = Field(default_factory=list, description="The tools that the agent can use")
    tool_retriever: Any = Field(
        default=None, description="The tool retriever for the agent, can be provided instead of tools"
    )
    can_handoff_to: list[str] | None = Field(
        default=None, description="The agent names that this agent can hand off to"
    )
    llm: LLM = Field(default=None, description="The LLM that the agent uses")  # type: ignore[assignment]
    output_cls: Any = Field(
        default=None, description="A pydantic model the answer must be (see nbagent.workflow.typed)"
    )
    structured_output_fn: Any = Field(
        default=None, description="fn(messages) -> dict making the typed answer instead of the model"
    )
    initial_state: dict[str, Any] = Field(
        default_factory=dict, description="The state a run of this agent on its own starts with"
    )
    state_prompt: str | PromptTemplate | None = Field(
        default=None, description="Wraps the user message when the state is not empty ({state}, {msg})"
    )

    _solo: Any = PrivateAttr(default=None)
    _timeout: float | None = PrivateAttr(default=None)
    _verbose: bool = PrivateAttr(default=False)

    def __init__(
        self,
        name: str = "Agent",
        description: str = DEFAULT_AGENT_DESCRIPTION,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        tool_retriever: Any = None,
        can_handoff_to: list[str] | None = None,
        llm: LLM | None = None,
        initial_state: dict[str, Any] | None = None,
        state_prompt: str | PromptTemplate | None = None,
        output_cls: Any = None,
        structured_output_fn: Any = None,
        timeout: float | None = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        """The reference's arguments in its order (a subclass's own, e.g. ``scratchpad_key``,
        by keyword). ``initial_state``, ``state_prompt``, ``timeout`` and ``verbose`` apply
        when the agent runs on its own (``agent.run``); in an ``AgentWorkflow``, the
        workflow's own do."""
        super().__init__(
            name=name,
            description=description,
            system_prompt=system_prompt,
            tools=tools,
            tool_retriever=tool_retriever,
            can_handoff_to=can_handoff_to,
            llm=llm,
            initial_state={} if initial_state is None else initial_state,
            state_prompt=state_prompt,
            output_cls=output_cls,
            structured_output_fn=structured_output_fn,
            **kwargs,
        )
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
        self._timeout = timeout
        self._verbose = bool(verbose)

    @model_validator(mode="before")
    @classmethod
    def _needs_llm(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("llm") is None:
            name = data.get("name", "Agent")
            raise ValueError(
                f"agent {name!r} needs llm=...: e.g. OpenAILLM(model=...) or, offline, "
                "ScriptedLLM([...]) / FunctionLLM(fn)"
            )
        return data

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not v.strip():
            raise ValueError(f"an agent needs a non-empty name (str), got {v!r}")
        return v

    @field_validator("tools", mode="before")
    @classmethod
    def validate_tools(cls, v: Any) -> list[FunctionTool]:
        """Tools and plain functions -> FunctionTools (a ``ctx`` parameter is hidden from the model)."""
        if v is None:
            return []
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
            raise TypeError(f"tools must be a list of FunctionTools or functions, got {type(v).__name__}")
        return as_workflow_tools(list(v))

    @field_validator("output_cls")
    @classmethod
    def _check_output_cls(cls, v: Any) -> Any:
        from nbagent.structured import check_output_cls

        check_output_cls(v)
        return v

    @field_validator("llm", mode="before")
    @classmethod
    def _check_llm(cls, v: Any) -> Any:
        if not isinstance(v, LLM):
            raise TypeError(f"llm must be an nbagent LLM, got {type(v).__name__}: {v!r}")
        return v

    @field_validator("state_prompt")
    @classmethod
    def _check_state_prompt(cls, v: Any) -> Any:
        if v is not None:
            checked_template(v, "state_prompt", ("state", "msg"))  # the same check as AgentWorkflow's
        return v

    @field_validator("tool_retriever")
    @classmethod
    def _check_retriever(cls, v: Any) -> Any:
        if v is not None and not (
            callable(getattr(v, "retrieve", None)) or callable(getattr(v, "aretrieve", None))
        ):
            raise TypeError(
                "tool_retriever must have retrieve(text) -> tools (or async aretrieve(text)), got "
                f"{type(v).__name__}"
            )
        return v

    @field_validator("can_handoff_to", mode="before")
    @classmethod
    def _check_handoff(cls, v: Any) -> Any:
        if v is not None and (
            isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(n, str) for n in v)
        ):
            raise TypeError(f"can_handoff_to must be a list of agent names, got {v!r}")
        return None if v is None else list(v)

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

    # ----- prompts (the reference's PromptMixin) ------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        return {}

    def _get_prompt_modules(self) -> dict[str, PromptMixin]:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        return None

    # ----- the agent's step logic ---------------------------------------------------------
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

    # ----- an agent is a workflow on its own ----------------------------------------------
    def _as_workflow(self) -> Any:
        """The one-agent AgentWorkflow that ``run`` uses (made once, kept)."""
        solo = self._solo
        if solo is None or solo.agents.get(self.name) is not self:  # new, renamed, or a copy
            solo = self._solo = provided("agent_workflow")(
                agents=[self],
                initial_state=self.initial_state,
                state_prompt=self.state_prompt,
                timeout=self._timeout,
                verbose=self._verbose,
                _standalone=True,
            )
        return solo

    def run(
        self,
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        memory: ChatMemoryBuffer | None = None,
        ctx: Context | None = None,
        stepwise: bool = False,
        checkpoint_callback: Any = None,
        max_iterations: int | None = None,
        start_event: Any = None,
        **kwargs: Any,
    ) -> WorkflowHandler:
        """Run this agent alone, exactly as ``AgentWorkflow([agent]).run(...)`` would."""
        return self._as_workflow().run(  # type: ignore[no-any-return]
            user_msg=user_msg,
            chat_history=chat_history,
            memory=memory,
            ctx=ctx,
            stepwise=stepwise,
            checkpoint_callback=checkpoint_callback,
            max_iterations=max_iterations,
            start_event=start_event,
            **kwargs,
        )

    def run_from(self, checkpoint: Any, **kwargs: Any) -> WorkflowHandler:
        """Resume a run of this agent from a ``Checkpoint``."""
        return self._as_workflow().run_from(checkpoint, **kwargs)  # type: ignore[no-any-return]

    def draw(self, *, rankdir: str | None = None, max_label: int | None = None, wrap: int | None = None
             ) -> DotDisplay:
        """The steps of the workflow this agent runs in, as a displayable graph (options as in
        ``Workflow.draw``)."""
        return self._as_workflow().draw(rankdir=rankdir, max_label=max_label, wrap=wrap)  # type: ignore[no-any-return]

    def panel(self, *, throttle_s: float | None = None, renderer: str | None = None, **run_kwargs: Any
              ) -> WorkflowPanel:
        """A notebook panel that runs this agent step by step (options as in ``Workflow.panel``)."""
        return self._as_workflow().panel(throttle_s=throttle_s, renderer=renderer, **run_kwargs)  # type: ignore[no-any-return]

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

    def __str__(self) -> str:
        return repr(self)

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _raw(value: Any) -> Any:
    """The model's raw reply as plain data (a pydantic object is dumped, as the reference does)."""
    if isinstance(value, BaseModel):
        try:
            return value.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - an odd object: keep what python mode gives
            return value.model_dump()
    return value


def _final_chunk(last: ChatResponse | None) -> ChatResponse:
    """The reply a stream ended on; a stream with no chunk at all is an empty reply (as on the
    reference: a FunctionAgent's answer is then empty, a ReActAgent's "Got empty message")."""
    if last is None:
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=""))
    return last


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
        async for chunk in self.llm.astream_chat(messages, tools=list(tools)):
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
    found = False
    for attr in ("system_header", "system_prompt"):
        if hasattr(formatter, attr):
            setattr(formatter, attr, header)
            found = True
    if not found:
        formatter.system_header = header
    cache = getattr(formatter, "_system_cache", None)
    if isinstance(cache, dict):
        cache.clear()


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
        """The ReAct system prompt for these tools, with the agent's own prompt as context."""
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
        async for chunk in self.llm.astream_chat(messages):
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
