"""RunTrace: what an AgentWorkflow run has done so far, rebuilt from its streamed events.

Plain data, updated one event at a time (``add``), so the live view, the static drawing and the
tests share one account of a run: each agent step is a ``Turn`` (with its tool calls and the
questions they asked), handoffs link turns of different agents, and the run's status, active
agent and answer are kept up to date.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbagent.messages import MessageRole
from nbagent.workflow.agent_events import AgentInput, AgentOutput, AgentStream, ToolCall, ToolCallResult
from nbagent.workflow.events import Event, HumanResponseEvent, InputRequiredEvent, StopEvent

__all__ = ["RunTrace", "Turn", "ToolCallView", "HANDOFF"]

HANDOFF = "handoff"
_ACTIVE = ("running", "waiting")


@dataclass
class ToolCallView:
    """One tool call of a turn: ``status`` is queued, running, waiting, done or error."""

    tool_id: str
    tool_name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: queued, running, waiting (for a person), done or error
    status: str = "queued"
    #: the tool's result as the model reads it, once it ended
    result: str | None = None
    #: what the tool asked a person, while it waits
    question: str | None = None
    #: what the person answered
    answer: str | None = None

    @property
    def is_handoff(self) -> bool:
        """Whether the call hands the run over to another agent."""
        return self.tool_name == HANDOFF


@dataclass
class Turn:
    """One agent step: the model's reply and the tool calls it made.

    ``status`` is running, done or retry (the reply could not be used and was asked again).
    """

    index: int
    agent: str
    #: running, done or retry
    status: str = "running"
    #: the model's reply text (so far, while it streams)
    text: str = ""
    tool_calls: list[ToolCallView] = field(default_factory=list)
    #: the agent this turn handed the run to, if it did
    handoff_to: str | None = None
    #: why, in the model's words
    handoff_reason: str | None = None
    #: how the turn was reached: start, tools, handoff, retry, next
    via: str = "start"

    def call(self, tool_id: str) -> ToolCallView | None:
        """The call of this turn with id ``tool_id``, or None."""
        return next((c for c in self.tool_calls if c.tool_id == tool_id), None)


class RunTrace:
    """The account of one run. ``agents`` (in order) and ``root`` come from the workflow."""

    def __init__(self, agents: Sequence[str] = (), root: str | None = None) -> None:
        self.agents: list[str] = list(agents)
        self.root: str | None = root if root is not None else (self.agents[0] if self.agents else None)
        self.turns: list[Turn] = []
        self.user_msg: str | None = None
        self.status = "idle"
        self.answer: str | None = None
        self.answered_by: str | None = None
        self.error: str | None = None
        self.events = 0
        self.paused = False  # a step-wise run between two steps (set by whoever drives it)
        self._question: tuple[str, str | None] | None = None  # asked before its tool call showed

    @classmethod
    def for_workflow(cls, workflow: Any) -> RunTrace:
        """An empty trace for a run of ``workflow``, knowing its agents and its root agent.

        Example:

        >>> from nbagent import ScriptedLLM
        >>> from nbagent.workflow import AgentWorkflow, FunctionAgent, RunTrace
        >>> writer = FunctionAgent(name="writer", description="Writes.", llm=ScriptedLLM([]), can_handoff_to=["editor"])
        >>> editor = FunctionAgent(name="editor", description="Edits.", llm=ScriptedLLM([]))
        >>> trace = RunTrace.for_workflow(AgentWorkflow(agents=[writer, editor], root_agent="writer"))
        >>> trace.agents, trace.root, trace.status  # empty until events are added
        (['writer', 'editor'], 'writer', 'idle')
        """
        agents = getattr(workflow, "agents", None) or {}
        return cls(list(agents), getattr(workflow, "root_agent", None))

    @classmethod
    def from_events(cls, events: Iterable[Event], agents: Sequence[str] = (), root: str | None = None) -> RunTrace:
        """The trace of a run from its events (a handler's ``events``, a saved stream).

        Example:

        >>> import asyncio
        >>> from nbagent import ScriptedLLM, tool_call
        >>> from nbagent.workflow import AgentWorkflow, FunctionAgent, RunTrace
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> calc = FunctionAgent(name="calc", description="Adds.", tools=[add], llm=ScriptedLLM([tool_call("add", a=1, b=2), "3"]))
        >>> workflow = AgentWorkflow(agents=[calc])
        >>> async def run():
        ...     handler = workflow.run(user_msg="1 + 2?")
        ...     return [event async for event in handler.stream_events()]
        >>> trace = RunTrace.from_events(asyncio.run(run()), agents=["calc"])  # e.g. a saved stream
        >>> trace.status, trace.answer, len(trace.turns)
        ('done', '3', 2)
        """
        trace = cls(agents, root)
        for ev in events:
            trace.add(ev)
        return trace

    # ----- reading ------------------------------------------------------------------------
    @property
    def active_agent(self) -> str | None:
        """The agent working now (None before the run starts and after it ends)."""
        if self.status not in _ACTIVE:
            return None
        return self.turns[-1].agent if self.turns else self.root

    def agent_turns(self, name: str) -> list[Turn]:
        """The turns the agent called ``name`` took, in order.

        Example:

        >>> import asyncio
        >>> from nbagent import ScriptedLLM, tool_call
        >>> from nbagent.workflow import AgentWorkflow, FunctionAgent, RunTrace
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> calc = FunctionAgent(name="calc", description="Adds.", tools=[add], llm=ScriptedLLM([tool_call("add", a=1, b=2), "3"]))
        >>> workflow = AgentWorkflow(agents=[calc])
        >>> async def run():
        ...     handler = workflow.run(user_msg="1 + 2?")
        ...     return [event async for event in handler.stream_events()]
        >>> trace = RunTrace.from_events(asyncio.run(run()), agents=["calc"])  # e.g. a saved stream
        >>> [[c.tool_name for c in turn.tool_calls] for turn in trace.agent_turns("calc")]  # the agent's steps
        [['add'], []]
        """
        return [t for t in self.turns if t.agent == name]

    @property
    def handoffs(self) -> list[tuple[int, int]]:
        """(from turn, to turn) index pairs of the handoffs so far."""
        return [(t.index - 1, t.index) for t in self.turns if t.via == HANDOFF and t.index > 0]

    def __repr__(self) -> str:
        who = f", active={self.active_agent!r}" if self.active_agent else ""
        by = f", answered_by={self.answered_by!r}" if self.answered_by else ""
        return f"RunTrace({self.status}, turns={len(self.turns)}{who}{by})"

    # ----- writing ------------------------------------------------------------------------
    def _agent(self, name: str) -> None:
        if name not in self.agents:
            self.agents.append(name)
        if self.root is None:
            self.root = name

    def add(self, event: Event) -> None:
        """Take one streamed event into account (unknown event types are counted, not shown)."""
        self.events += 1
        self.paused = False
        if self.status == "idle":
            self.status = "running"
        last = self.turns[-1] if self.turns else None
        if isinstance(event, AgentInput):
            self._agent(event.current_agent_name)
            if self.user_msg is None:
                users = [m for m in event.input if m.role == MessageRole.USER]
                if users:
                    self.user_msg = users[-1].text
            via = "start"
            if last is not None:
                if last.status == "running":
                    last.status = "done"
                if last.handoff_to == event.current_agent_name and last.agent != event.current_agent_name:
                    via = HANDOFF
                elif last.status == "retry":
                    via = "retry"
                elif last.tool_calls:
                    via = "tools"
                else:
                    via = "next"
            self.turns.append(Turn(index=len(self.turns), agent=event.current_agent_name, via=via))
        elif isinstance(event, AgentStream):
            if last is not None and last.agent == event.current_agent_name and last.status == "running":
                last.text = event.response
        elif isinstance(event, AgentOutput):
            if last is None or last.agent != event.current_agent_name:
                self._agent(event.current_agent_name)
                last = Turn(index=len(self.turns), agent=event.current_agent_name)
                self.turns.append(last)
            last.text = event.response.text
            last.status = "retry" if event.retry_messages else "done"
            for call in event.tool_calls:
                if last.call(call.tool_id) is None:
                    last.tool_calls.append(ToolCallView(call.tool_id, call.tool_name, dict(call.tool_kwargs)))
        elif isinstance(event, ToolCallResult):
            view = self._call_view(last, event)
            if view is not None:
                out = event.tool_output
                view.status = "error" if out.is_error else "done"
                view.result = out.content
                if view.is_handoff and not out.is_error and last is not None:
                    last.handoff_to = str(event.tool_kwargs.get("to_agent", "")) or None
                    reason = event.tool_kwargs.get("reason")
                    last.handoff_reason = None if reason is None else str(reason)
        elif isinstance(event, ToolCall):
            view = self._call_view(last, event)
            if view is not None and view.status == "queued":
                view.status = "running"
                if self._question is not None:  # a resumed run re-asks before the call shows
                    view.question, view.answer = self._question
                    view.status = "running" if view.answer is not None else "waiting"
                    self._question = None
        elif isinstance(event, InputRequiredEvent):
            tool_id = getattr(event, "tool_id", None)  # an approval question names its call
            waiting = self._by_id(tool_id) if tool_id else self._running_call(last)
            if waiting is not None and waiting.question is None:
                waiting.status = "waiting"
                waiting.question = event.prefix
            elif waiting is None:
                self._question = (event.prefix, None)
            self.status = "waiting"
        elif isinstance(event, HumanResponseEvent):
            tool_id = getattr(event, "tool_id", None)
            asked = self._by_id(tool_id) if tool_id else next(
                (c for t in reversed(self.turns) for c in t.tool_calls if c.status == "waiting"), None
            )
            if asked is not None:
                asked.status = "running"
                asked.answer = event.response
            elif self._question is not None:
                self._question = (self._question[0], event.response)
            self.status = "running"
        elif isinstance(event, StopEvent):
            if last is not None and last.status == "running":
                last.status = "done"
            result = event.result
            self.answer = str(result) if result is not None else ""
            typed = getattr(result, "structured_response", None)
            if typed is not None:  # a typed answer: show the object
                from nbagent.structured import typed_text

                self.answer = typed_text(typed)
            name = getattr(result, "current_agent_name", None)
            self.answered_by = name if isinstance(name, str) else (last.agent if last else None)
            self.status = "done"

    def _by_id(self, tool_id: str) -> ToolCallView | None:
        """The call with this id, newest turn first."""
        return next((c for t in reversed(self.turns) for c in t.tool_calls if c.tool_id == tool_id), None)

    def resume(self, agent: str | None, user_msg: str | None = None) -> None:
        """Start the account of a run resumed from a checkpoint: its earlier steps are not in
        the stream, so one placeholder step of ``agent`` stands for them (tool calls that are
        re-run attach to it).

        Example:

        >>> from nbagent.workflow import RunTrace
        >>> trace = RunTrace(agents=["helper"])
        >>> trace.resume("helper", user_msg="Weather in Oslo?")  # a run resumed from a checkpoint
        >>> [turn.agent for turn in trace.turns], trace.user_msg, trace.status  # one turn stands for the earlier steps
        (['helper'], 'Weather in Oslo?', 'running')
        """
        name = agent or self.root or "agent"
        self._agent(name)
        if user_msg is not None:
            self.user_msg = user_msg
        self.status = "running"
        self.turns.append(
            Turn(index=len(self.turns), agent=name, status="done", text="(resumed from a checkpoint)")
        )

    def _call_view(self, turn: Turn | None, event: ToolCall) -> ToolCallView | None:
        if turn is None:
            return None
        view = turn.call(event.tool_id)
        if view is None:
            view = ToolCallView(event.tool_id, event.tool_name, dict(event.tool_kwargs))
            turn.tool_calls.append(view)
        return view

    @staticmethod
    def _running_call(turn: Turn | None) -> ToolCallView | None:
        if turn is None:
            return None
        running = [c for c in turn.tool_calls if c.status == "running"]
        return running[-1] if running else None

    def fail(self, error: BaseException | str, cancelled: bool = False) -> None:
        """Mark the run as failed (or stopped) with ``error``.

        Example:

        >>> from nbagent.workflow import RunTrace
        >>> trace = RunTrace(agents=["helper"])
        >>> trace.fail(TimeoutError("the model did not answer"))
        >>> trace.status, trace.error
        ('failed', 'TimeoutError: the model did not answer')
        """
        self.status = "cancelled" if cancelled else "failed"
        self.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        for turn in self.turns:
            if turn.status == "running":
                turn.status = "done"
