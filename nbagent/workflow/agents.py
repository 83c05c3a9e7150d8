"""The base of the agents for AgentWorkflow: each knows how to take one step with its model
(``FunctionAgent`` in ``function_agent.py``, ``ReActAgent`` in ``react_agent.py``).

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

from nbagent.llms.base import LLM, ChatResponse
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole
from nbagent.prompts import PromptDictType, PromptMixin, PromptTemplate
from nbagent.registry import html_view, provided
from nbagent.tools import FunctionTool
from nbagent.workflow.agent_events import AgentOutput, ToolCallResult
from nbagent.workflow.context import Context
from nbagent.workflow.templates import checked_template
from nbagent.workflow.tools import as_workflow_tools

if TYPE_CHECKING:
    from nbagent.viz.workflow_html import DotDisplay
    from nbagent.viz.workflow_panel import WorkflowPanel
    from nbagent.workflow.handler import WorkflowHandler

__all__ = ["BaseWorkflowAgent", "DEFAULT_AGENT_DESCRIPTION"]

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
        """Tools and plain functions -> FunctionTools (a ``ctx`` parameter is hidden from the model).

        Example:

        >>> from nbagent import ScriptedLLM
        >>> from nbagent.workflow import Context, FunctionAgent
        >>> def remember(ctx: Context, fact: str) -> str:
        ...     "Keep a fact for later steps."
        ...     return "kept"
        >>> agent = FunctionAgent(name="notes", description="Keeps notes.", tools=[remember], llm=ScriptedLLM([]))
        >>> type(agent.tools[0]).__name__, list(agent.tools[0].metadata.get_parameters_dict()["properties"])  # ctx is hidden
        ('FunctionTool', ['fact'])
        """
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
        """The tools the retriever picks for ``input`` (none without a retriever).

        Example:

        >>> import asyncio
        >>> from nbagent import FunctionTool, ScriptedLLM
        >>> from nbagent.workflow import FunctionAgent
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> class Picker:  # a retriever: picks the tools for an input
        ...     def retrieve(self, input):
        ...         return [FunctionTool.from_defaults(add)] if "+" in input else []
        >>> agent = FunctionAgent(name="calc", description="Adds.", tool_retriever=Picker(), llm=ScriptedLLM([]))
        >>> [t.name for t in asyncio.run(agent.retrieve_tools("1 + 2?"))], asyncio.run(agent.retrieve_tools("hello"))
        (['add'], [])
        """
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
        """The agent as plain data: kind, name, description, model, tools, handoffs and
        system prompt (what its card shows; the same keys as a worker's ``describe()``).

        Example:

        >>> from nbagent import ScriptedLLM
        >>> from nbagent.workflow import FunctionAgent
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> info = FunctionAgent(name="calc", description="Adds numbers.", tools=[add], llm=ScriptedLLM([])).describe()
        >>> info["kind"], info["name"], info["tools"]
        ('FunctionAgent', 'calc', ['add'])
        """
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
