"""The LLM protocol every model implements, and the switch that forbids network requests.

An implementation writes ``_achat`` and ``_astream``; the public methods (``achat``,
``chat``, ``astream_chat``, ``stream_chat``) add timing, token accounting and token events
once, for every model. LlamaIndex's calling convention works too: ``await
llm.astream_chat(...)`` gives the stream, and the function-calling interface
(``achat_with_tools``, ``astream_chat_with_tools``, ``get_tool_calls_from_response``...) is
there for custom workflows written against it.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field

from nbagent import _sync
from nbagent.events import emit_token, record_llm_call, report_model_call, start_model_call
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.llms.stream import ChatStream, chunks_of
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
        """The tools the model asked to call in this reply (its message's), in order."""
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

    Example:

    >>> from nbagent import block_network
    >>> from nbagent.llms import network_blocked
    >>> with block_network():
    ...     network_blocked()
    True
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


def block_network(on: bool = True) -> AbstractContextManager[None]:
    """Forbid (or allow) real network requests from models; usable as a context manager.

    Example:

    >>> from nbagent import block_network
    >>> from nbagent.llms import network_blocked
    >>> with block_network():  # a real model's request now raises NetworkBlockedError
    ...     network_blocked()
    True
    """
    global _blocked
    previous = _blocked
    _blocked = bool(on)
    return _restore_block(previous)


def _first_call_only(response: ChatResponse) -> ChatResponse:
    """The reply with its first tool call only (LlamaIndex's ``force_single_tool_call``)."""
    calls = response.message.tool_calls
    if len(calls) <= 1:
        return response
    response.message = response.message.model_copy(update={"tool_calls": calls[:1]})
    return response


async def _first_calls_only(chunks: AsyncIterator[ChatResponse]) -> AsyncGenerator[ChatResponse, None]:
    async for chunk in chunks:
        yield _first_call_only(chunk)


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

    #: the model's name as its server knows it (costs and traces use it)
    model: str = "unknown"
    #: who serves the model, as tracing names it (``gen_ai.provider.name``: "openai"...)
    provider_name: str = "nbagent"
    #: the model takes tools and answers with tool calls
    is_function_calling_model: bool = True
    #: the model reads images in messages
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
        call_no = start_model_call(self)
        start = time.perf_counter()
        sent = list(messages)
        try:
            response = await self._achat(sent, to_tool_metadata(tools), tool_choice, **kwargs)
        except BaseException as error:
            report_model_call(self, sent, None, None, time.perf_counter() - start, error=error, call_no=call_no)
            raise
        response.latency_s = time.perf_counter() - start
        record_llm_call(response.usage, response.latency_s)
        report_model_call(self, sent, response.message, response.usage, response.latency_s, call_no=call_no)
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

    def astream_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> ChatStream:
        """Stream a reply (async): ``async for chunk in llm.astream_chat(...)``, or, as on
        LlamaIndex, ``gen = await llm.astream_chat(...)`` first. Every text delta is also
        reported to the running step."""
        return ChatStream(self._stream_chat(messages, tools, tool_choice, **kwargs))

    async def _stream_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncGenerator[ChatResponse, None]:
        call_no = start_model_call(self)
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
                report_model_call(
                    self, sent, None, None, time.perf_counter() - start, streamed=True, error=error, call_no=call_no
                )
            raise
        latency = time.perf_counter() - start
        if last is not None:
            last.latency_s = latency
        record_llm_call(last.usage if last else None, latency)
        report_model_call(
            self, sent, None if last is None else last.message, None if last is None else last.usage, latency,
            streamed=True, call_no=call_no,
        )

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatResponse]:
        """Stream a reply."""
        return _sync.iterate_sync(chunks_of(self.astream_chat(messages, tools, tool_choice, **kwargs)))

    # ----- LlamaIndex's function-calling interface (FunctionCallingLLM) ------------------
    def _tool_request(
        self,
        tools: Sequence[ToolSpec],
        user_msg: str | ChatMessage | None,
        chat_history: Sequence[ChatMessage] | None,
        tool_required: bool,
        kwargs: dict[str, Any],
    ) -> tuple[list[ChatMessage], ToolChoice | None]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(ChatMessage(role=MessageRole.USER, content=user_msg) if isinstance(user_msg, str) else user_msg)
        choice = kwargs.pop("tool_choice", "required" if tool_required else None)
        return messages, choice

    async def achat_with_tools(
        self,
        tools: Sequence[ToolSpec],
        user_msg: str | ChatMessage | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """One reply with ``tools`` offered, as LlamaIndex's function-calling models take them:
        the history, then ``user_msg``; ``tool_required`` makes the model call one; without
        ``allow_parallel_tool_calls`` only the reply's first call is kept (as the reference).

        Example:

        >>> import asyncio
        >>> from nbagent import FunctionTool, ScriptedLLM, tool_call
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> llm = ScriptedLLM([tool_call("add", a=2, b=3)])
        >>> reply = asyncio.run(llm.achat_with_tools([FunctionTool.from_defaults(add)], user_msg="2 + 3?"))
        >>> [(c.tool_name, c.tool_kwargs) for c in reply.message.tool_calls]
        [('add', {'a': 2, 'b': 3})]
        """
        messages, choice = self._tool_request(tools, user_msg, chat_history, tool_required, kwargs)
        response = await self.achat(messages, tools, choice, **kwargs)
        return response if allow_parallel_tool_calls else _first_call_only(response)

    def chat_with_tools(
        self,
        tools: Sequence[ToolSpec],
        user_msg: str | ChatMessage | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """``achat_with_tools``, from sync code.

        Example:

        >>> from nbagent import FunctionTool, ScriptedLLM, tool_call
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> llm = ScriptedLLM([tool_call("add", a=2, b=3)])
        >>> reply = llm.chat_with_tools([FunctionTool.from_defaults(add)], user_msg="What is 2 + 3?")
        >>> [(c.tool_name, c.tool_kwargs) for c in llm.get_tool_calls_from_response(reply)]
        [('add', {'a': 2, 'b': 3})]
        """
        return _sync.run_sync(
            self.achat_with_tools(
                tools, user_msg, chat_history, verbose, allow_parallel_tool_calls, tool_required, **kwargs
            )
        )

    def astream_chat_with_tools(
        self,
        tools: Sequence[ToolSpec],
        user_msg: str | ChatMessage | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatStream:
        """``achat_with_tools`` streamed; awaitable and async-iterable like ``astream_chat``.

        Example:

        >>> import asyncio
        >>> from nbagent import FunctionTool, ScriptedLLM
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> llm = ScriptedLLM(["Hello there."])
        >>> async def deltas():
        ...     stream = await llm.astream_chat_with_tools([FunctionTool.from_defaults(add)], user_msg="Hi")
        ...     return [chunk.delta async for chunk in stream]
        >>> asyncio.run(deltas())
        ['Hello ', 'there.']
        """
        messages, choice = self._tool_request(tools, user_msg, chat_history, tool_required, kwargs)
        chunks = self._stream_chat(messages, tools, choice, **kwargs)
        return ChatStream(chunks if allow_parallel_tool_calls else _first_calls_only(chunks))

    def stream_chat_with_tools(
        self,
        tools: Sequence[ToolSpec],
        user_msg: str | ChatMessage | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> Iterator[ChatResponse]:
        """``astream_chat_with_tools``, from sync code.

        Example:

        >>> from nbagent import FunctionTool, ScriptedLLM
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> llm = ScriptedLLM(["Hello there."])
        >>> [chunk.delta for chunk in llm.stream_chat_with_tools([FunctionTool.from_defaults(add)], user_msg="Hi")]
        ['Hello ', 'there.']
        """
        return _sync.iterate_sync(
            self.astream_chat_with_tools(
                tools, user_msg, chat_history, verbose, allow_parallel_tool_calls, tool_required, **kwargs
            )
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The reply's tool calls; none at all is the reference's ValueError unless
        ``error_on_no_tool_call=False``.

        Example:

        >>> from nbagent import ScriptedLLM, tool_call
        >>> llm = ScriptedLLM([tool_call("add", a=2, b=3)])
        >>> reply = llm.complete("What is 2 + 3?")
        >>> [(c.tool_name, c.tool_kwargs) for c in llm.get_tool_calls_from_response(reply)]
        [('add', {'a': 2, 'b': 3})]
        """
        calls = list(response.message.tool_calls)
        if not calls and error_on_no_tool_call:
            raise ValueError(f"Expected at least one tool call, but got {len(calls)} tool calls.")
        return calls

    def complete(self, prompt: str, **kwargs: Any) -> ChatResponse:
        """One reply to a single user message.

        Example:

        >>> from nbagent import ScriptedLLM
        >>> print(ScriptedLLM(["Hello."]).complete("Hi"))
        Hello.
        """
        return self.chat([ChatMessage(role=MessageRole.USER, content=prompt)], **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def _repr_html_(self) -> str | None:
        return html_view(self)
