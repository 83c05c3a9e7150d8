"""The LLM protocol every model implements, and the switch that forbids network requests.

An implementation writes ``_achat`` and ``_astream``; the public methods (``achat``,
``chat``, ``astream_chat``, ``stream_chat``) add timing, token accounting and token events
once, for every model.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field

from nbagent import _sync
from nbagent.events import emit_token, record_llm_call, report_model_call
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.registry import html_view
from nbagent.tools import FunctionTool, ToolMetadata

__all__ = [
    "LLM",
    "ChatResponse",
    "ToolChoice",
    "NetworkBlockedError",
    "MalformedReplyError",
    "IncompleteReplyError",
    "block_network",
    "network_blocked",
]

ToolChoice = Union[str, dict[str, Any]]
ToolSpec = Union[FunctionTool, ToolMetadata]


class ChatResponse(BaseModel):
    """One model reply, or (when streaming) the reply so far plus the newest ``delta``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    message: ChatMessage
    delta: str | None = None
    usage: TokenUsage | None = None
    latency_s: float = 0.0
    model: str = ""
    raw: Any = Field(default=None, exclude=True, repr=False)

    @property
    def tool_calls(self) -> list[ToolSelection]:
        return self.message.tool_calls

    def __str__(self) -> str:
        return self.message.text


class NetworkBlockedError(RuntimeError):
    """Raised when a model would reach a non-loopback host while the network is blocked."""


class MalformedReplyError(ValueError):
    """A model server's reply does not have the form its API promises (a streamed line that
    is not JSON, a tool-call index that is not a number...). The message names the server,
    the offending part and what was expected; the step that asked fails and stays queued."""


class IncompleteReplyError(MalformedReplyError):
    """A streamed reply stopped before its end: the server closed the stream without a
    ``finish_reason`` and without ``data: [DONE]``. What had arrived is dropped, never taken
    for the whole reply; the step that asked fails and stays queued."""


_blocked: bool | None = None


def network_blocked() -> bool:
    """Whether requests to hosts other than loopback are forbidden.

    On when ``block_network(True)`` was called or ``NBAGENT_BLOCK_NETWORK=1`` is set.
    """
    if _blocked is not None:
        return _blocked
    return os.environ.get("NBAGENT_BLOCK_NETWORK", "") not in ("", "0", "false", "no")


@contextmanager
def _restore_block(previous: bool | None) -> Iterator[None]:
    global _blocked
    try:
        yield
    finally:
        _blocked = previous


def block_network(on: bool = True) -> Any:
    """Forbid (or allow) real network requests from models; usable as a context manager."""
    global _blocked
    previous = _blocked
    _blocked = bool(on)
    return _restore_block(previous)


def to_tool_metadata(tools: Sequence[ToolSpec] | None) -> list[ToolMetadata]:
    out = []
    for t in tools or []:
        if isinstance(t, FunctionTool):
            out.append(t.metadata)
        elif isinstance(t, ToolMetadata):
            out.append(t)
        else:
            raise TypeError(f"tools must be FunctionTool or ToolMetadata, got {type(t).__name__}")
    return out


class LLM(ABC):
    """A chat model. ``model`` names it; ``is_function_calling_model`` says if it takes tools."""

    model: str = "unknown"
    #: who serves the model, as tracing names it (``gen_ai.provider.name``: "openai"...)
    provider_name: str = "nbagent"
    is_function_calling_model: bool = True
    is_multimodal: bool = False
    #: the server takes OpenAI's ``response_format`` (JSON schema); typed answers use it
    supports_response_format: bool = False

    @abstractmethod
    async def _achat(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> ChatResponse:
        """One reply."""

    async def _astream(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponse]:
        """Stream a reply; the default streams the whole reply as one chunk."""
        response = await self._achat(messages, tools, tool_choice, **kwargs)
        response.delta = response.message.text
        yield response

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """Ask the model for one reply (async)."""
        start = time.perf_counter()
        sent = list(messages)
        try:
            response = await self._achat(sent, to_tool_metadata(tools), tool_choice, **kwargs)
        except BaseException as error:
            report_model_call(self, sent, None, None, time.perf_counter() - start, error=error)
            raise
        response.latency_s = time.perf_counter() - start
        record_llm_call(response.usage, response.latency_s)
        report_model_call(self, sent, response.message, response.usage, response.latency_s)
        return response

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> ChatResponse:
        """Ask the model for one reply."""
        return _sync.run_sync(self.achat(messages, tools, tool_choice, **kwargs))

    async def astream_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponse]:
        """Stream a reply (async); every text delta is also reported to the running step."""
        start = time.perf_counter()
        last: ChatResponse | None = None
        sent = list(messages)
        try:
            async for chunk in self._astream(sent, to_tool_metadata(tools), tool_choice, **kwargs):
                if chunk.delta:
                    emit_token(chunk.delta)
                last = chunk
                yield chunk
        except BaseException as error:
            if not isinstance(error, GeneratorExit):  # a reader that stopped early is no failure
                report_model_call(self, sent, None, None, time.perf_counter() - start, streamed=True, error=error)
            raise
        latency = time.perf_counter() - start
        if last is not None:
            last.latency_s = latency
        record_llm_call(last.usage if last else None, latency)
        report_model_call(
            self, sent, None if last is None else last.message, None if last is None else last.usage, latency, streamed=True
        )

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatResponse]:
        """Stream a reply."""
        return _sync.iterate_sync(self.astream_chat(messages, tools, tool_choice, **kwargs))

    def complete(self, prompt: str, **kwargs: Any) -> ChatResponse:
        """One reply to a single user message."""
        return self.chat([ChatMessage(role=MessageRole.USER, content=prompt)], **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def _repr_html_(self) -> str | None:
        return html_view(self)
