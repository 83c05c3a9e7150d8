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

    #: the instructions the model is given before the conversation
    SYSTEM = "system"
    #: the person (or the code standing in for them)
    USER = "user"
    #: the model: its answers and its tool calls
    ASSISTANT = "assistant"
    #: a tool's result, answering one tool call by its id
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


def _call_of(raw: Any) -> ToolSelection | None:
    """One tool call kept by a LlamaIndex message: a ToolSelection-like object or dict, or an
    OpenAI tool call (``id``, ``function.name``, ``function.arguments`` as JSON)."""
    get = raw.get if isinstance(raw, dict) else lambda key, default=None: getattr(raw, key, default)
    if get("tool_name") is not None:
        kwargs = get("tool_kwargs") or {}
        return ToolSelection(tool_id=str(get("tool_id") or ""), tool_name=str(get("tool_name")), tool_kwargs=dict(kwargs))
    function = get("function")
    if function is not None:
        fget = function.get if isinstance(function, dict) else lambda key, default=None: getattr(function, key, default)
        arguments = fget("arguments") or "{}"
        import json  # here: import nbagent does not load json

        try:
            kwargs = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except (ValueError, TypeError):
            kwargs = {"__raw__": arguments}
        return ToolSelection(tool_id=str(get("id") or ""), tool_name=str(fget("name") or ""), tool_kwargs=kwargs if isinstance(kwargs, dict) else {"__raw__": kwargs})
    return None


def as_chat_message(value: Any, what: str = "expected a ChatMessage") -> ChatMessage:
    """``value`` as one of our ChatMessages: ours as it is; a LlamaIndex ``ChatMessage`` (code
    written for the reference passes them: a chat history, a memory's ``put``) converted, its
    role, text, and the tool calls and call id it keeps in ``additional_kwargs``; anything else
    a TypeError that says ``what``."""
    if isinstance(value, ChatMessage):
        return value
    if hasattr(value, "role") and hasattr(value, "additional_kwargs"):
        return ChatMessage(**foreign_message_fields(value))
    raise TypeError(f"{what}, got {type(value).__name__}")


def foreign_message_fields(message: Any) -> dict[str, Any]:
    """The fields of one of our ChatMessages for a LlamaIndex ``ChatMessage``."""
    role = getattr(message, "role", "user")
    extra = dict(getattr(message, "additional_kwargs", None) or {})
    fields: dict[str, Any] = {"role": getattr(role, "value", role), "content": getattr(message, "content", None)}
    calls = [c for c in (_call_of(raw) for raw in extra.get("tool_calls") or []) if c is not None]
    if calls:
        fields["tool_calls"] = calls
        extra.pop("tool_calls")
    for key in ("tool_call_id", "name"):
        if extra.get(key) is not None:
            fields[key] = str(extra.pop(key))
    fields["additional_kwargs"] = extra
    return fields


class TokenUsage(BaseModel):
    """Tokens one model call (or a sum of calls) used."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a light import

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together: what a call costs in tokens."""
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
