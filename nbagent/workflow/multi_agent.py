"""AgentWorkflow: several agents that answer a request together, handing off to each other.

One agent is active at a time (the root agent first). It sees the shared chat memory, its own
system prompt and its tools, plus a ``handoff`` tool naming the agents it may pass the request
to. Steps, in order: ``init_run`` (StartEvent -> AgentInput), ``setup_agent`` (-> AgentSetup),
``run_agent_step`` (-> AgentOutput), ``parse_agent_output`` (answer -> StopEvent, else one
ToolCall per call), ``call_tool`` (-> ToolCallResult, four at a time) and
``aggregate_tool_results`` (all results in -> next AgentInput, or StopEvent for a
``return_direct`` tool).

Rules that differ from the reference on purpose: a tool output only ends the run
(``return_direct``) when the tool succeeded; ``handoff`` checks ``can_handoff_to`` and reports a
bad target as an error the model sees; the handoff target is cleared once used; the initial
state is copied per context, never shared between runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import field_validator

from nbagent._counts import counted
from nbagent.llms.base import LLM
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection, as_chat_message
from nbagent.prompts import PromptDictType, PromptMixin, PromptTemplate
from nbagent.registry import show
from nbagent.tools import FunctionTool, acall_tool, tools_by_name
from nbagent.workflow.agent_events import (
    AgentInput,
    AgentOutput,
    AgentSetup,
    ToolCall,
    ToolCallResult,
)
from nbagent.workflow.agents import BaseWorkflowAgent
from nbagent.workflow.function_agent import FunctionAgent
from nbagent.workflow.context import Context
from nbagent.workflow.decorators import step
from nbagent.workflow.errors import WorkflowRuntimeError
from nbagent.workflow.events import StartEvent, StopEvent
from nbagent.workflow.handler import WorkflowHandler

if TYPE_CHECKING:
    from nbagent.viz.workflow_html import DotDisplay
from nbagent.workflow.react_agent import ReActAgent
from nbagent.workflow.templates import checked_template
from nbagent.workflow.tools import workflow_tool
from nbagent.workflow.workflow import Workflow

__all__ = [
    "AgentWorkflow",
    "DEFAULT_HANDOFF_PROMPT",
    "DEFAULT_STATE_PROMPT",
    "DEFAULT_HANDOFF_OUTPUT_PROMPT",
    "HANDOFF_TOOL_NAME",
    "MaxAgentIterationsError",
]

HANDOFF_TOOL_NAME = "handoff"
# the context key (the reference's) of the run's ToolCallResults so far: the result lists them
RUN_TOOL_CALLS_KEY = "current_tool_calls"

# the reference's words (llama_index 0.12.52)
#: the description of the handoff tool (``{agent_info}``: the agents it may hand off to);
#: ``AgentWorkflow(handoff_prompt=...)`` replaces it
DEFAULT_HANDOFF_PROMPT = """Useful for handing off to another agent.
If you are currently not equipped to handle the user's request, or another agent is better suited to handle the request, please hand off to the appropriate agent.

Currently available agents:
{agent_info}
"""

#: wraps each user message when the workflow's state is not empty (``{state}``, ``{msg}``);
#: ``state_prompt=...`` replaces it
DEFAULT_STATE_PROMPT = """Current state:
{state}

Current message:
{msg}
"""

#: what the handoff tool returns to the model (``{to_agent}``, ``{reason}``);
#: ``handoff_output_prompt=...`` replaces it
DEFAULT_HANDOFF_OUTPUT_PROMPT = (
    "Agent {to_agent} is now handling the request due to the following reason: {reason}.\n"
    "Please continue with the current request."
)


class MaxAgentIterationsError(WorkflowRuntimeError):
    """A run used all the agent steps ``max_iterations`` allows without an answer."""


class AgentWorkflowStartEvent(StartEvent):
    """The event that starts an AgentWorkflow run: ``run(user_msg=...)`` makes one, or pass
    ``run(start_event=AgentWorkflowStartEvent(...))``. Extra fields are kept (``ev.get(...)``)."""

    user_msg: str | ChatMessage | None = None
    chat_history: list[ChatMessage] | None = None
    memory: Any = None
    max_iterations: int | None = None

    @field_validator("user_msg", mode="before")
    @classmethod
    def _user_msg_of_llamaindex(cls, value: Any) -> Any:
        """A LlamaIndex ``ChatMessage`` is taken as one of ours."""
        if value is None or isinstance(value, (str, ChatMessage, dict)):
            return value
        return as_chat_message(value, "user_msg must be a str or a ChatMessage")

    @field_validator("chat_history", mode="before")
    @classmethod
    def _history_of_llamaindex(cls, value: Any) -> Any:
        """LlamaIndex ``ChatMessage`` objects are taken as ours."""
        if not isinstance(value, (list, tuple)):
            return value
        return [m if isinstance(m, (ChatMessage, dict)) else as_chat_message(m, "chat_history takes ChatMessages") for m in value]


def _fill(template: PromptTemplate, **values: str) -> str:
    """Fill ``{name}`` placeholders (other braces, e.g. JSON, stay as they are)."""
    return template.format(**values)


class AgentWorkflow(Workflow, PromptMixin):
    """A workflow of agents handing off to each other (see the module docstring).

    ``root_agent`` names the agent that starts (needed with more than one agent).
    ``initial_state`` is a dict every run's context starts with (under the key ``"state"``);
    when it is not empty, each user message is wrapped in ``state_prompt`` (``{state}`` and
    ``{msg}``). ``handoff_prompt`` is the handoff tool's description (``{agent_info}``);
    ``handoff_output_prompt`` is what the tool answers (``{to_agent}`` and ``{reason}``).
    ``max_iterations`` caps the agent steps of one run (default 20).
    """

    def __init__(
        self,
        agents: Sequence[BaseWorkflowAgent],
        initial_state: dict[str, Any] | None = None,
        root_agent: str | None = None,
        handoff_prompt: str | PromptTemplate | None = None,
        handoff_output_prompt: str | PromptTemplate | None = None,
        state_prompt: str | PromptTemplate | None = None,
        timeout: float | None = None,
        output_cls: Any = None,
        structured_output_fn: Any = None,
        *,
        max_iterations: int = 20,
        approve_tools: Any = None,
        _standalone: bool = False,
        **workflow_kwargs: Any,
    ) -> None:
        super().__init__(timeout=timeout, **workflow_kwargs)
        from nbagent.approval import check_policy
        from nbagent.structured import check_output_cls

        check_output_cls(output_cls)
        if structured_output_fn is not None and not callable(structured_output_fn):
            raise TypeError(f"structured_output_fn must be callable, got {structured_output_fn!r}")
        self.output_cls = output_cls  # the answer's type (see nbagent.workflow.typed)
        self.structured_output_fn = structured_output_fn
        self.approve_tools = check_policy(approve_tools)  # see nbagent.workflow.approval
        if isinstance(agents, BaseWorkflowAgent):
            agents = [agents]
        agents = list(agents or [])
        if not agents:
            raise ValueError("At least one agent must be provided (AgentWorkflow(agents=[...]))")
        for a in agents:
            if not isinstance(a, BaseWorkflowAgent):
                raise TypeError(
                    f"agents must be FunctionAgent / ReActAgent objects, got {type(a).__name__}: {a!r}"
                )
        self.agents: dict[str, BaseWorkflowAgent] = {}
        for a in agents:
            if a.name in self.agents:
                raise ValueError(f"two agents are named {a.name!r}; agent names must be unique")
            self.agents[a.name] = a
        names = list(self.agents)
        if len(agents) == 1 and root_agent is None:
            root_agent = agents[0].name
        elif root_agent is None:
            raise ValueError(
                f"Exactly one root agent must be provided: with more than one agent, say which "
                f"starts with root_agent=... (one of {names})"
            )
        if root_agent not in self.agents:
            raise ValueError(
                f"Root agent {root_agent} not found in provided agents: root_agent {root_agent!r} "
                f"is not one of the agents {names}"
            )
        for a in agents:
            unknown = [n for n in a.can_handoff_to or [] if n not in self.agents]
            if unknown and not _standalone:  # an agent run on its own has nobody to hand off to
                raise ValueError(f"agent {a.name!r} can_handoff_to unknown agents {unknown}; agents: {names}")
            if any(t.name == HANDOFF_TOOL_NAME for t in a.tools):
                raise ValueError(
                    f"agent {a.name!r} has a tool named {HANDOFF_TOOL_NAME!r}; that name is the "
                    "workflow's own handoff tool, rename yours"
                )
        if initial_state is not None and not isinstance(initial_state, dict):
            raise TypeError(f"initial_state must be a dict, got {type(initial_state).__name__}")
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
        self.root_agent: str = root_agent
        self.initial_state: dict[str, Any] = dict(initial_state or {})
        self.handoff_prompt: PromptTemplate = checked_template(
            handoff_prompt or DEFAULT_HANDOFF_PROMPT, "handoff_prompt", ("agent_info",)
        )
        self.handoff_output_prompt: PromptTemplate = checked_template(
            handoff_output_prompt or DEFAULT_HANDOFF_OUTPUT_PROMPT, "handoff_output_prompt", ("to_agent", "reason")
        )
        self.state_prompt: PromptTemplate = checked_template(
            state_prompt or DEFAULT_STATE_PROMPT, "state_prompt", ("state", "msg")
        )
        self.max_iterations = max_iterations
        self._handoff_tools: dict[str, FunctionTool | None] = {}
        self._build_handoff_tools()

    # ----- prompts (the reference's keys: handoff_prompt, state_prompt, "<agent>:<key>") ----
    def _get_prompts(self) -> PromptDictType:
        return {
            "handoff_prompt": self.handoff_prompt,
            "handoff_output_prompt": self.handoff_output_prompt,
            "state_prompt": self.state_prompt,
        }

    def _get_prompt_modules(self) -> dict[str, PromptMixin]:
        return dict(self.agents)

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        handoff = prompts_dict.get("handoff_prompt")
        output = prompts_dict.get("handoff_output_prompt")
        state = prompts_dict.get("state_prompt")
        # checked before anything changes
        new_handoff = None if handoff is None else checked_template(handoff, "handoff_prompt", ("agent_info",))
        new_output = (
            None if output is None else checked_template(output, "handoff_output_prompt", ("to_agent", "reason"))
        )
        new_state = None if state is None else checked_template(state, "state_prompt", ("state", "msg"))
        if new_output is not None:
            self.handoff_output_prompt = new_output
        if new_handoff is not None:
            self.handoff_prompt = new_handoff
            self._build_handoff_tools()  # the handoff tool's description is made from it
        if new_state is not None:
            self.state_prompt = new_state

    def _build_handoff_tools(self) -> None:
        self._handoff_tools = {name: self._make_handoff_tool(agent) for name, agent in self.agents.items()}

    # ----- handoff ------------------------------------------------------------------------
    def handoff_targets(self, agent_name: str) -> list[str]:
        """The agents ``agent_name`` may hand off to (never itself)."""
        agent = self.agents[agent_name]
        allowed = agent.can_handoff_to
        return [n for n in self.agents if n != agent_name and (allowed is None or n in allowed)]

    def _make_handoff_tool(self, agent: BaseWorkflowAgent) -> FunctionTool | None:
        targets = self.handoff_targets(agent.name)
        if not targets:
            return None
        info = "\n".join(f"- {n}: {self.agents[n].description}" for n in targets)
        workflow = self

        async def handoff(ctx: Context, to_agent: str, reason: str) -> str:
            """Hand off to another agent."""
            current = await ctx.get("current_agent_name")
            allowed = workflow.handoff_targets(current)
            # as on the reference: the model reads what was wrong and the run goes on
            if to_agent not in workflow.agents:
                valid = ", ".join(n for n in workflow.agents if n != current)
                return f"Agent {to_agent} not found. Please select a valid agent to hand off to. Valid agents: {valid}"
            if to_agent not in allowed:
                return (
                    f"Agent {current} cannot hand off to {to_agent}. Please select a valid agent to hand off to. "
                    f"Valid agents: {', '.join(allowed)}"
                )
            await ctx.set("next_agent", to_agent)
            return _fill(workflow.handoff_output_prompt, to_agent=to_agent, reason=reason)

        return workflow_tool(
            handoff,
            name=HANDOFF_TOOL_NAME,
            description=_fill(self.handoff_prompt, agent_info=info),
            return_direct=True,
        )

    async def get_tools(self, agent_name: str, input_str: str | None = None) -> list[FunctionTool]:
        """The tools ``agent_name`` is offered: its own, the retriever's for ``input_str``, handoff."""
        agent = self.agents[agent_name]
        tools = [*agent.tools, *(await agent.retrieve_tools(input_str or ""))]
        handoff_tool = self._handoff_tools.get(agent_name)
        if handoff_tool is not None:
            tools.append(handoff_tool)
        tools_by_name(tools)  # two tools with one name: a clear error now, not a confused model
        return tools

    # ----- steps --------------------------------------------------------------------------
    async def _init_context(self, ctx: Context, ev: StartEvent) -> None:
        if await ctx.get("memory", default=None) is None:
            memory = ev.get("memory")
            if memory is None:
                memory = ChatMemoryBuffer.from_defaults()
            elif not isinstance(memory, ChatMemoryBuffer):
                raise TypeError(f"memory must be a ChatMemoryBuffer, got {type(memory).__name__}")
            await ctx.set("memory", memory)
        if await ctx.get("agents", default=None) is None:
            await ctx.set("agents", list(self.agents))
        if await ctx.get("state", default=None) is None:
            await ctx.set("state", copy.deepcopy(self.initial_state))
        if await ctx.get("current_agent_name", default=None) is None:
            await ctx.set("current_agent_name", self.root_agent)

    @step
    async def init_run(self, ctx: Context, ev: AgentWorkflowStartEvent) -> AgentInput:
        """Set up the context; the user's message goes into memory."""
        await self._init_context(ctx, ev)
        user_msg = ev.get("user_msg")
        chat_history = ev.get("chat_history")
        if user_msg is not None and chat_history:
            raise ValueError("Cannot provide both user_msg and chat_history: give one of them")
        if user_msg is None and not chat_history:
            raise ValueError("AgentWorkflow.run needs user_msg='...' (or chat_history=[...])")
        memory: ChatMemoryBuffer = await ctx.get("memory")
        if user_msg is not None:
            if isinstance(user_msg, str):
                user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
            if not isinstance(user_msg, ChatMessage):
                raise TypeError(f"user_msg must be a str or ChatMessage, got {type(user_msg).__name__}")
            state = await ctx.get("state", default=None)
            if state:
                text = _fill(self.state_prompt, state=str(state), msg=user_msg.text)
                user_msg = user_msg.model_copy(update={"content": text})
            memory.put(user_msg)
            await ctx.set("user_msg_str", user_msg.text)
        else:
            memory.set(list(chat_history))
            last_user = next((m for m in reversed(memory.get_all()) if m.role == MessageRole.USER), None)
            await ctx.set("user_msg_str", last_user.text if last_user else "")
        max_iterations = ev.get("max_iterations")
        await ctx.set("max_iterations", int(max_iterations or self.max_iterations))
        await ctx.set("num_iterations", 0)
        if await ctx.get(RUN_TOOL_CALLS_KEY, default=None):  # left by a run that failed: not this run's
            await ctx.set(RUN_TOOL_CALLS_KEY, [])
        current: str = await ctx.get("current_agent_name")
        return AgentInput(input=memory.get(), current_agent_name=current)

    @step
    async def setup_agent(self, ctx: Context, ev: AgentInput) -> AgentSetup:
        """Put the active agent's system prompt in front of its input."""
        agent = self.agents[ev.current_agent_name]
        llm_input = list(ev.input)
        if agent.system_prompt:
            llm_input = [ChatMessage(role=MessageRole.SYSTEM, content=agent.system_prompt), *llm_input]
        return AgentSetup(input=llm_input, current_agent_name=ev.current_agent_name)

    @step
    async def run_agent_step(self, ctx: Context, ev: AgentSetup) -> AgentOutput:
        """One step of the active agent: one model call."""
        done = int(await ctx.get("num_iterations", default=0))
        limit = int(await ctx.get("max_iterations", default=self.max_iterations))
        if done >= limit:
            raise MaxAgentIterationsError(
                f"Max iterations of {limit} reached! Either something went wrong, or you can increase "
                f"the max iterations with `.run(.., max_iterations=...)` (the agents took {counted(done, 'step')} "
                f"without an answer, max_iterations={limit}; check the agents' prompts and tools)"
            )
        memory: ChatMemoryBuffer = await ctx.get("memory")
        agent = self.agents[ev.current_agent_name]
        query = ev.input[-1].text if ev.input else ""
        await ctx.set("tool_query", query)
        tools = await self.get_tools(ev.current_agent_name, query)
        output = await agent.take_step(ctx, list(ev.input), tools, memory)
        # counted once the model has answered: a call that failed (and is retried when the
        # run resumes) does not spend an iteration
        await ctx.set("num_iterations", done + 1)
        ctx.write_event_to_stream(output)
        return output

    @step
    async def parse_agent_output(self, ctx: Context, ev: AgentOutput) -> StopEvent | AgentInput | ToolCall | None:
        """An answer ends the run; tool calls go out one event each; an unusable reply is retried."""
        memory: ChatMemoryBuffer = await ctx.get("memory")
        if ev.retry_messages:  # asked again: the conversation, then the retry messages
            return AgentInput(input=[*memory.get(), *ev.retry_messages], current_agent_name=ev.current_agent_name)
        if not ev.tool_calls:
            agent = self.agents[ev.current_agent_name]
            output = await agent.finalize(ctx, ev, memory)
            # as on the reference: the result lists every tool call of the run, with its output
            # (a copy: the AgentOutput already streamed keeps the reply's own tool calls)
            ran: list[ToolCallResult] = await ctx.get(RUN_TOOL_CALLS_KEY, default=[])
            await ctx.set(RUN_TOOL_CALLS_KEY, [])
            output = output.model_copy(update={"tool_calls": [*output.tool_calls, *ran]})
            return StopEvent(result=await self._typed(ctx, agent, output, memory))
        await ctx.set("num_tool_calls", len(ev.tool_calls))
        await ctx.set("tool_call_ids", [c.tool_id for c in ev.tool_calls])
        for call in ev.tool_calls:
            ctx.send_event(ToolCall(tool_name=call.tool_name, tool_kwargs=call.tool_kwargs, tool_id=call.tool_id))
        return None

    @step(num_workers=4)
    async def call_tool(self, ctx: Context, ev: ToolCall) -> ToolCallResult:
        """Run one tool; an unknown tool or one that raises gives an error output the model sees."""
        ctx.write_event_to_stream(ToolCall(tool_name=ev.tool_name, tool_kwargs=ev.tool_kwargs, tool_id=ev.tool_id))
        agent_name: str = await ctx.get("current_agent_name")
        tools = await self.get_tools(agent_name, await ctx.get("tool_query", default=""))
        by_name = tools_by_name(tools)
        tool = by_name.get(ev.tool_name)
        if tool is None:  # the reference's words, then what there is
            output = ToolOutput(
                content=f"Tool {ev.tool_name} not found. Please select a tool that is available. "
                f"Available tools: {', '.join(sorted(by_name)) or '(none)'}",
                tool_name=ev.tool_name,
                raw_input=ev.tool_kwargs,
                is_error=True,
                tool_call_id=ev.tool_id,
            )
        else:
            from nbagent.workflow.approval import gate  # a person may have to decide first

            call, rejected = await gate(
                ctx, tool, ToolSelection(tool_id=ev.tool_id, tool_name=ev.tool_name, tool_kwargs=ev.tool_kwargs),
                self.approve_tools, agent_name,
            )
            output = rejected or await ctx.run_tool_once(  # resumed, it is not run again
                call.tool_id,
                lambda: acall_tool(
                    by_name, call, in_thread=True, error="{error} ({type})"  # the reference's words, then the type
                ),  # threads: calls overlap
            )
        result = ToolCallResult(
            tool_name=ev.tool_name,
            tool_kwargs=ev.tool_kwargs,
            tool_id=ev.tool_id,
            tool_output=output,
            return_direct=bool(tool is not None and tool.return_direct and not output.is_error),
        )
        ctx.write_event_to_stream(result)
        return result

    @step
    async def aggregate_tool_results(self, ctx: Context, ev: ToolCallResult) -> AgentInput | StopEvent | None:
        """Once every call of the reply is back: record them, hand off or answer, or go on."""
        expected = int(await ctx.get("num_tool_calls", default=0))
        if expected == 0:
            raise WorkflowRuntimeError("a tool result arrived, but no tool calls were expected")
        collected = ctx.collect_events(ev, [ToolCallResult] * expected)
        if collected is None:
            return None
        results = [r for r in collected if isinstance(r, ToolCallResult)]
        order = {tid: i for i, tid in enumerate(await ctx.get("tool_call_ids", default=[]))}
        results = sorted(results, key=lambda r: order.get(r.tool_id, len(order)))
        memory: ChatMemoryBuffer = await ctx.get("memory")
        agent = self.agents[await ctx.get("current_agent_name")]
        ran: list[ToolCallResult] = [*(await ctx.get(RUN_TOOL_CALLS_KEY, default=[])), *results]
        await ctx.set(RUN_TOOL_CALLS_KEY, ran)
        await agent.handle_tool_call_results(ctx, results, memory)
        await ctx.set("num_tool_calls", 0)
        next_agent = await ctx.get("next_agent", default=None)
        if next_agent is not None:
            await ctx.set("next_agent", None)
            await ctx.set("current_agent_name", next_agent)
        direct = next((r for r in results if r.return_direct), None)
        if direct is not None:
            output = AgentOutput(  # the run's calls so far, as the reference lists them here
                response=ChatMessage(role=MessageRole.ASSISTANT, content=direct.tool_output.content),
                tool_calls=[
                    ToolSelection(tool_id=r.tool_id, tool_name=r.tool_name, tool_kwargs=r.tool_kwargs)
                    for r in ran
                ],
                raw=direct.tool_output.raw_output,
                current_agent_name=agent.name,
            )
            output = await agent.finalize(ctx, output, memory)
            if direct.tool_name != HANDOFF_TOOL_NAME:
                await ctx.set(RUN_TOOL_CALLS_KEY, [])
                return StopEvent(result=await self._typed(ctx, agent, output, memory))
        current: str = await ctx.get("current_agent_name")
        return AgentInput(input=memory.get(), current_agent_name=current)

    async def _typed(self, ctx: Context, agent: Any, output: AgentOutput, memory: ChatMemoryBuffer) -> AgentOutput:
        """The answer with its typed form, when this workflow or the agent has an output_cls."""
        from nbagent.workflow.typed import add_structured_response

        return await add_structured_response(self, ctx, agent, output, memory)

    # ----- running ------------------------------------------------------------------------
    def run(  # type: ignore[override]
        self,
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        memory: ChatMemoryBuffer | None = None,
        ctx: Context | None = None,
        stepwise: bool = False,
        checkpoint_callback: Any = None,
        max_iterations: int | None = None,
        start_event: AgentWorkflowStartEvent | None = None,
        **kwargs: Any,
    ) -> WorkflowHandler:
        """Start a run with ``user_msg`` (or resume the unfinished run saved in ``ctx``).

        ``await handler`` gives the answering agent's ``AgentOutput`` (``str()`` is the text,
        ``current_agent_name`` the agent). Reusing ``ctx`` continues the conversation.
        ``stepwise`` and ``checkpoint_callback`` are as for ``Workflow.run``; a
        ``start_event`` (an ``AgentWorkflowStartEvent``) carries the input instead.
        """
        if start_event is not None:  # the event carries the input
            return super().run(
                ctx=ctx, stepwise=stepwise, checkpoint_callback=checkpoint_callback, start_event=start_event, **kwargs
            )
        return super().run(
            ctx=ctx,
            stepwise=stepwise,
            checkpoint_callback=checkpoint_callback,
            user_msg=user_msg,
            chat_history=chat_history,
            memory=memory,
            max_iterations=max_iterations,
            **kwargs,
        )

    @classmethod
    def from_tools_or_functions(
        cls,
        tools_or_functions: Sequence[FunctionTool | Callable[..., Any]],
        llm: LLM | None = None,
        system_prompt: str | None = None,
        state_prompt: str | PromptTemplate | None = None,
        initial_state: dict[str, Any] | None = None,
        output_cls: Any = None,
        structured_output_fn: Any = None,
        timeout: float | None = None,
        verbose: bool = False,
    ) -> AgentWorkflow:
        """A one-agent workflow: a FunctionAgent if the model has a tools API, else a ReActAgent.

        ``output_cls`` / ``structured_output_fn`` type the answer; ``verbose`` prints each step.

        Example:

        >>> from nbagent import AgentWorkflow, ScriptedLLM
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> workflow = AgentWorkflow.from_tools_or_functions([add], llm=ScriptedLLM(["3"]))
        >>> [(type(agent).__name__, agent.tools[0].name) for agent in workflow.agents.values()]
        [('FunctionAgent', 'add')]
        >>> print(workflow.run_sync(user_msg="1 + 2?"))
        3
        """
        if llm is None:
            raise ValueError(
                "from_tools_or_functions needs llm=...: e.g. OpenAILLM(model=...) or, offline, "
                "ScriptedLLM([...])"
            )
        agent_cls: type[BaseWorkflowAgent] = (
            FunctionAgent if getattr(llm, "is_function_calling_model", False) else ReActAgent
        )
        agent = agent_cls(
            name="Agent",
            description="A single agent that uses the provided tools or functions.",
            tools=list(tools_or_functions),
            llm=llm,
            system_prompt=system_prompt,
        )
        return cls(
            agents=[agent],
            state_prompt=state_prompt,
            initial_state=initial_state,
            output_cls=output_cls,
            structured_output_fn=structured_output_fn,
            timeout=timeout,
            verbose=verbose,
        )

    # ----- views --------------------------------------------------------------------------
    def draw_agents(self) -> DotDisplay:
        """The agents and who may hand off to whom, as a displayable graph."""
        return show(self, "draw_agents")  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(agents={list(self.agents)}, root_agent={self.root_agent!r}, "
            f"timeout={self.timeout})"
        )
