"""Chat messages, tool calls and tool outputs: the vocabulary shared by LLMs, tools and workers."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nbagent._lean import LeanModel
from nbagent.registry import html_view

__all__ = ["MessageRole", "ChatMessage", "ToolSelection", "ToolOutput", "TokenUsage"]


class MessageRole(str, Enum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolSelection(BaseModel):
    """A model's request to call one tool with some arguments."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a light import

    tool_id: str = Field(description="Id of the call, echoed back in the tool's reply message.")
    tool_name: str = Field(description="Name of the tool the model asked for.")
    tool_kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments, parsed.")


class ChatMessage(LeanModel):
    """One message of a conversation.

    ``content`` is text, or a list of OpenAI content parts (text and images) for vision models.
    """

    model_config = ConfigDict(use_enum_values=False)

    role: MessageRole = MessageRole.USER
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolSelection] = Field(default_factory=list)
    tool_call_id: str | None = Field(default=None, description="For role=tool: the call answered.")
    name: str | None = Field(default=None, description="For role=tool: the tool's name.")
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        """The message's text, with image parts left out."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")

    def __str__(self) -> str:
        return f"{self.role.value}: {self.text}"

    def _repr_html_(self) -> str | None:
        return html_view(self)


class TokenUsage(BaseModel):
    """Tokens one model call (or a sum of calls) used."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a light import

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class ToolOutput(LeanModel):
    """What a tool returned (or the error it raised), as the model will see it."""

    content: str = Field(description="Text shown to the model as the observation.")
    tool_name: str
    raw_input: dict[str, Any] = Field(default_factory=dict, description="Arguments of the call.")
    raw_output: Any = Field(default=None, description="The Python value the tool returned.")
    is_error: bool = False
    tool_call_id: str | None = None

    def __str__(self) -> str:
        return self.content

    def _repr_html_(self) -> str | None:
        return html_view(self)
