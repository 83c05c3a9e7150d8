"""A streamed reply readable in both calling conventions: nbagent's and LlamaIndex's.

nbagent's: ``async for chunk in llm.astream_chat(messages)``. LlamaIndex's astream methods are
coroutines that return a generator: ``gen = await llm.astream_chat(messages)``, then
``async for chunk in gen``. A ``ChatStream`` is an async iterator that, awaited, gives itself,
so a custom workflow written against LlamaIndex's LLM interface runs on nbagent's models as it
is. ``open_stream`` is the converse, for nbagent's agents: it takes what a model's astream
method returned and awaits it first when it is a coroutine, so a model written in LlamaIndex's
style (``async def astream_chat(...): return gen``) works in nbagent's agents too.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.llms.base import ChatResponse

__all__ = ["ChatStream", "open_stream", "chunks_of"]


class ChatStream(AsyncIterator["ChatResponse"]):
    """The chunks of one streamed reply; ``await`` it (LlamaIndex's way) or iterate it."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: AsyncGenerator[ChatResponse, None]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> ChatStream:
        return self

    def __anext__(self) -> Awaitable[ChatResponse]:
        return self._chunks.__anext__()

    def __await__(self) -> Generator[Any, None, ChatStream]:
        return self._itself().__await__()

    async def _itself(self) -> ChatStream:
        return self

    async def aclose(self) -> None:
        """Stop the stream early (the model's request is closed)."""
        await self._chunks.aclose()

    def __repr__(self) -> str:
        return f"ChatStream({self._chunks!r})"


async def open_stream(returned: Any) -> AsyncIterator[ChatResponse]:
    """The async iterator of chunks a model's ``astream_chat`` gave: as it is, or awaited first
    (a LlamaIndex-style coroutine that returns the generator)."""
    if hasattr(returned, "__anext__"):
        return returned  # type: ignore[no-any-return]
    if inspect.isawaitable(returned):
        returned = await returned
        if hasattr(returned, "__anext__"):
            return returned  # type: ignore[no-any-return]
    if hasattr(returned, "__aiter__"):
        return returned.__aiter__()  # type: ignore[no-any-return]
    raise TypeError(
        "a model's astream_chat must return an async iterator of ChatResponse chunks (or an "
        f"awaitable giving one, as LlamaIndex's do), got {type(returned).__name__}"
    )


async def chunks_of(returned: Any) -> AsyncGenerator[ChatResponse, None]:
    """``open_stream`` as one async generator (for sync iteration of either convention)."""
    stream = await open_stream(returned)
    async for chunk in stream:
        yield chunk
