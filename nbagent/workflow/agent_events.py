"""The events of AgentWorkflow, streamed in this order for each agent step:
``AgentInput`` (what the model is sent), ``AgentStream`` (each streamed piece), ``AgentOutput``
(the reply), then per tool call ``ToolCall`` and ``ToolCallResult``; with a typed answer
(``output_cls`` or ``structured_output_fn``), ``AgentStreamStructuredOutput`` before the end.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from nbagent.messages import ChatMessage, ToolOutput, ToolSelection
from nbagent.workflow.events import Event

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "AgentInput",
    "AgentSetup",
    "AgentStream",
    "AgentOutput",
    "AgentStreamStructuredOutput",
    "ToolCall",
    "ToolCallResult",
]


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
    raw: Any = Field(default=None, exclude=True)  # the model's raw chunk, as on the reference


class AgentOutput(Event):
    """An agent's reply. As the run's result it is the answer, and names the agent that gave it.

    ``retry_messages`` is set when the reply could not be used (e.g. a ReAct reply that does
    not parse); the agent is then asked again.
    """

    response: ChatMessage
    tool_calls: list[ToolSelection | ToolCallResult] = Field(
        default_factory=list,
        description="The reply's tool calls; as a run's result, every tool call the run made with its "
        "output (ToolCallResult), as on the reference",
    )
    # the model's raw reply; left out of model_dump (and checkpoints), as on the reference
    raw: Any = Field(default=None, exclude=True)
    current_agent_name: str
    retry_messages: list[ChatMessage] = Field(default_factory=list)
    structured_response: Any = Field(
        default=None, description="The typed answer (an output_cls instance) when one was asked for."
    )

    def __str__(self) -> str:
        return self.response.text

    def get_pydantic_model(self, model: type[M]) -> M:
        """The typed answer as ``model`` (validated; works on a loaded run's plain dict too).

        Example:

        >>> from pydantic import BaseModel
        >>> from nbagent import ChatMessage
        >>> from nbagent.workflow import AgentOutput
        >>> class City(BaseModel):
        ...     name: str
        >>> out = AgentOutput(response=ChatMessage(role="assistant", content="Oslo"), current_agent_name="guide",
        ...                   structured_response={"name": "Oslo"})  # as a loaded run holds it
        >>> out.get_pydantic_model(City)
        City(name='Oslo')
        """
        if self.structured_response is None:
            raise ValueError("this output has no structured_response (was output_cls given?)")
        if isinstance(self.structured_response, model):
            return self.structured_response
        data = self.structured_response
        return model.model_validate(data.model_dump() if hasattr(data, "model_dump") else data)


class AgentStreamStructuredOutput(Event):
    """The typed answer of a run, streamed as soon as it is made (as the reference streams it):
    ``output`` is its data as a dict; ``get_pydantic_model(Model)`` validates it."""

    output: Any = Field(description="The typed answer's fields (a dict), or what structured_output_fn returned.")

    def get_pydantic_model(self, model: type[M]) -> M | None:
        """``output`` as ``model`` (validated); None when there is no output.

        Example:

        >>> from pydantic import BaseModel
        >>> from nbagent.workflow import AgentStreamStructuredOutput
        >>> class City(BaseModel):
        ...     name: str
        >>> AgentStreamStructuredOutput(output={"name": "Oslo"}).get_pydantic_model(City)
        City(name='Oslo')
        """
        if self.output is None:
            return None
        return model.model_validate(self.output)

    def __str__(self) -> str:
        return json.dumps(self.output, indent=4, default=str)


class ToolCall(Event):
    """A tool call an agent asked for."""

    tool_name: str
    tool_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_id: str


class ToolCallResult(ToolCall):
    """A tool call and its output (``tool_output.is_error`` when it failed or was unknown)."""

    tool_output: ToolOutput
    return_direct: bool = False


AgentOutput.model_rebuild()  # tool_calls names ToolCallResult, defined after it
