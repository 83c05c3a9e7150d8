"""The events of AgentWorkflow, streamed in this order for each agent step:
``AgentInput`` (what the model is sent), ``AgentStream`` (each streamed piece), ``AgentOutput``
(the reply), then per tool call ``ToolCall`` and ``ToolCallResult``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from nbagent.messages import ChatMessage, ToolOutput, ToolSelection
from nbagent.workflow.events import Event

__all__ = ["AgentInput", "AgentSetup", "AgentStream", "AgentOutput", "ToolCall", "ToolCallResult"]


class AgentInput(Event):
    """The messages an agent works from (streamed: the full request the model is sent)."""

    input: list[ChatMessage]
    current_agent_name: str


class AgentSetup(Event):
    """An agent's input with its system prompt in front (internal to AgentWorkflow)."""

    input: list[ChatMessage]
    current_agent_name: str


class AgentStream(Event):
    """One streamed piece of an agent's reply: ``delta`` is new, ``response`` is all so far."""

    delta: str
    response: str
    current_agent_name: str
    tool_calls: list[ToolSelection] = Field(default_factory=list)
    raw: Any = None


class AgentOutput(Event):
    """An agent's reply. As the run's result it is the answer, and names the agent that gave it.

    ``retry_messages`` is set when the reply could not be used (e.g. a ReAct reply that does
    not parse); the agent is then asked again.
    """

    response: ChatMessage
    tool_calls: list[ToolSelection] = Field(default_factory=list)
    raw: Any = None
    current_agent_name: str
    retry_messages: list[ChatMessage] = Field(default_factory=list)

    def __str__(self) -> str:
        return self.response.text


class ToolCall(Event):
    """A tool call an agent asked for."""

    tool_name: str
    tool_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_id: str


class ToolCallResult(ToolCall):
    """A tool call and its output (``tool_output.is_error`` when it failed or was unknown)."""

    tool_output: ToolOutput
    return_direct: bool = False
