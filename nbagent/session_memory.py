"""Memory: one session's chat history, the default memory of the reference's workflow agents.

A first-in first-out queue of messages. When the active messages grow past
``token_limit * chat_history_token_ratio`` tokens, the oldest ones are archived in chunks of
about ``token_flush_size`` tokens, and the queue always starts on a user message (a turn is
never cut in half). ``get()`` gives the active messages, ``get_all()`` every message, archived
ones included, as LlamaIndex 0.12's ``llama_index.core.memory.Memory`` does. The async methods
(``aput``, ``aget`` ...) are the reference's; the sync ones are ``ChatMemoryBuffer``'s, so a
``Memory`` goes wherever a ``ChatMemoryBuffer`` does (runners, workflow agents, undo).

The reference keeps messages in a SQL chat store and can feed archived messages to memory
blocks; here they stay in the object (no store, no blocks: asking for one is an error).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Any

from nbagent.memory import ChatMemoryBuffer, count_tokens
from nbagent.messages import ChatMessage, MessageRole

__all__ = ["Memory", "DEFAULT_SESSION_TOKEN_LIMIT", "DEFAULT_FLUSH_SIZE"]

DEFAULT_SESSION_TOKEN_LIMIT = 30000
DEFAULT_FLUSH_SIZE = int(DEFAULT_SESSION_TOKEN_LIMIT * 0.1)

# (messages, counts, length, archived): the buffer's snapshot plus where the active part starts
SessionSnapshot = tuple[list[ChatMessage], list[int], int, int]


def _status_name(status: Any) -> str | None:
    """``None``, ``"active"`` or ``"archived"``, from a string or the reference's ``MessageStatus``."""
    value = getattr(status, "value", status)
    if value not in (None, "active", "archived"):
        raise ValueError(f"status must be None, 'active' or 'archived', got {status!r}")
    return value  # type: ignore[no-any-return]


def _token_counter(tokenizer_fn: Callable[[str], Any] | None) -> Callable[[str], int]:
    """A counter returning an int, from either kind of tokenizer: nbagent's (returns a count)
    or the reference's (returns the tokens, which are counted)."""
    if tokenizer_fn is None:
        return count_tokens
    if not callable(tokenizer_fn):
        raise TypeError(f"tokenizer_fn must be a function of a text, got {type(tokenizer_fn).__name__}")

    def count(text: str) -> int:
        tokens = tokenizer_fn(text)
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            return tokens
        if isinstance(tokens, Sized):
            return len(tokens)
        raise TypeError(f"tokenizer_fn must return an int or a list of tokens, got {type(tokens).__name__}")

    return count


class Memory(ChatMemoryBuffer):
    """A session's messages: a FIFO queue whose oldest messages are archived past the limit.

    ``archived=n`` says the first ``n`` messages of ``chat_history`` were archived already (a
    saved memory restored)."""

    def __init__(
        self,
        token_limit: int = DEFAULT_SESSION_TOKEN_LIMIT,
        chat_history: Iterable[ChatMessage] | None = None,
        tokenizer_fn: Callable[[str], Any] | None = None,
        *,
        session_id: str | None = None,
        chat_history_token_ratio: float = 0.7,
        token_flush_size: int = DEFAULT_FLUSH_SIZE,
        image_token_size_estimate: int = 256,
        audio_token_size_estimate: int = 256,
        archived: int = 0,
    ) -> None:
        if not isinstance(token_limit, int) or isinstance(token_limit, bool) or token_limit < 1:
            raise ValueError(f"token_limit must be a positive int, got {token_limit!r}")
        if not isinstance(chat_history_token_ratio, (int, float)) or not 0 < chat_history_token_ratio <= 1:
            raise ValueError(
                f"chat_history_token_ratio must be a number in (0, 1], got {chat_history_token_ratio!r}"
            )
        if session_id is not None and not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
        if not isinstance(token_flush_size, int) or token_flush_size < 1 or token_flush_size > token_limit:
            token_flush_size = int(token_limit * 0.1) or 1  # as the reference's validator does
        self.session_id: str = session_id or f"chat_store_key_{uuid.uuid4()}"
        self.chat_history_token_ratio = float(chat_history_token_ratio)
        self.token_flush_size = token_flush_size
        for name, value in (("image", image_token_size_estimate), ("audio", audio_token_size_estimate)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}_token_size_estimate must be an int >= 0, got {value!r}")
        self.image_token_size_estimate = image_token_size_estimate
        self.audio_token_size_estimate = audio_token_size_estimate
        self._archived = 0
        self.given_tokenizer = tokenizer_fn  # what a saved run names (tokenizer_fn wraps it)
        super().__init__(token_limit, chat_history, _token_counter(tokenizer_fn))
        if not isinstance(archived, int) or isinstance(archived, bool) or not 0 <= archived <= len(self._messages):
            raise ValueError(
                f"archived must be an int from 0 to the {len(self._messages)} messages given, got {archived!r}"
            )
        self._archived = archived  # a saved memory restored: its first messages were archived

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        session_id: str | None = None,
        chat_history: Iterable[ChatMessage] | None = None,
        token_limit: int = DEFAULT_SESSION_TOKEN_LIMIT,
        memory_blocks: Sequence[Any] | None = None,
        tokenizer_fn: Callable[[str], Any] | None = None,
        chat_history_token_ratio: float = 0.7,
        token_flush_size: int = DEFAULT_FLUSH_SIZE,
        memory_blocks_template: Any = None,
        insert_method: Any = "system",
        image_token_size_estimate: int = 256,
        audio_token_size_estimate: int = 256,
        table_name: str = "llama_index_memory",
        async_database_uri: str | None = None,
        async_engine: Any = None,
    ) -> Memory:
        """Build a memory as the reference's ``Memory.from_defaults`` does (a new session id
        when none is given; a flush size over the limit becomes 70% of it), in the same order.
        What needs memory blocks or a SQL store is refused by name (nothing would honour it)."""
        given = {
            "memory_blocks": bool(memory_blocks),
            "memory_blocks_template": memory_blocks_template is not None,
            "table_name": table_name != "llama_index_memory",
            "async_database_uri": async_database_uri is not None,
            "async_engine": async_engine is not None,
        }
        unsupported = [name for name, used in given.items() if used]
        if unsupported:
            raise TypeError(
                f"Memory.from_defaults got {unsupported}: nbagent's Memory keeps its messages in the "
                "object and has no memory blocks or SQL store; it takes session_id, chat_history, "
                "token_limit, tokenizer_fn, chat_history_token_ratio, token_flush_size, "
                "image_token_size_estimate, audio_token_size_estimate"
            )
        if getattr(insert_method, "value", insert_method) not in ("system", "user"):
            raise ValueError(f"insert_method must be 'system' or 'user', got {insert_method!r}")
        if isinstance(token_limit, int) and token_flush_size > token_limit:
            token_flush_size = int(token_limit * 0.7)
        return cls(
            token_limit,
            chat_history,
            tokenizer_fn,
            session_id=session_id,
            chat_history_token_ratio=chat_history_token_ratio,
            token_flush_size=token_flush_size,
            image_token_size_estimate=image_token_size_estimate,
            audio_token_size_estimate=audio_token_size_estimate,
        )

    def _count(self, message: ChatMessage) -> int:
        """A message's tokens as the reference counts them: its text, a fixed estimate per
        image or audio part, and its tool calls, with no per-message overhead (so the same
        tokenizer archives the same messages)."""
        n = self.tokenizer_fn(message.text)
        if isinstance(message.content, list):
            for part in message.content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in ("image_url", "image"):
                    n += self.image_token_size_estimate
                elif kind in ("input_audio", "audio"):
                    n += self.audio_token_size_estimate
        for call in message.tool_calls:
            n += self.tokenizer_fn(call.tool_name) + self.tokenizer_fn(str(call.tool_kwargs))
        return n

    # -- the queue ------------------------------------------------------------------------

    def _archive_oldest(self) -> None:
        """Archive the oldest active messages while they are over the limit (the reference's
        waterfall: chunks of ``token_flush_size``, then up to the next user message; at least
        one message stays active)."""
        limit = self.token_limit * self.chat_history_token_ratio
        end = len(self._messages)
        start = self._archived
        tokens = sum(self._counts[start:])
        while tokens > limit and end - start > 1:
            flushed, cut = 0, start
            while flushed < self.token_flush_size and end - cut > 1:
                flushed += self._counts[cut]
                cut += 1
            while end - cut > 1 and self._messages[cut].role != MessageRole.USER:
                cut += 1
            if cut == start:
                break
            tokens -= sum(self._counts[start:cut])
            start = cut
        self._archived = start

    def put(self, message: ChatMessage) -> None:
        """Append one message, then archive the oldest ones if over the limit."""
        super().put(message)
        self._archive_oldest()

    def put_messages(self, messages: Iterable[ChatMessage]) -> None:
        """Append messages, then archive the oldest ones if over the limit (once, at the end).

        Example:

        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> memory.put_messages([ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="hello")])
        >>> [m.content for m in memory.get()]
        ['hi', 'hello']
        """
        for message in messages:
            super().put(message)
        self._archive_oldest()

    def set(self, messages: Iterable[ChatMessage]) -> None:
        """Replace the whole history; every message is active (as on the reference)."""
        super().set(messages)
        self._archived = 0

    def reset(self, status: Any = None) -> None:
        """Forget every message, archived ones too; with ``status``, only the active or only
        the archived ones."""
        which = _status_name(status)
        if which is None:
            super().reset()
            self._archived = 0
        elif which == "active":
            super().set(self._messages[: self._archived])
        else:
            super().set(self._messages[self._archived :])
            self._archived = 0

    def get(self, input: str | None = None, **block_kwargs: Any) -> list[ChatMessage]:
        """The active messages, oldest first (``input`` is accepted, as on the reference, and
        does not change what is returned)."""
        return self._messages[self._archived :]

    def get_all(self, status: Any = None) -> list[ChatMessage]:
        """Every message, archived ones first; ``status="active"`` or ``"archived"`` (or the
        reference's ``MessageStatus``) gives only those."""
        which = _status_name(status)
        if which == "active":
            return self._messages[self._archived :]
        if which == "archived":
            return self._messages[: self._archived]
        return list(self._messages)

    @property
    def archived(self) -> list[ChatMessage]:
        """The messages moved out of the active queue, oldest first."""
        return self._messages[: self._archived]

    # -- the reference's async interface --------------------------------------------------

    async def aput(self, message: ChatMessage) -> None:
        """``put`` for code written against the reference's async interface (nothing waits).

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> asyncio.run(memory.aput(ChatMessage(role="user", content="hi")))
        >>> [m.content for m in memory.get()]
        ['hi']
        """
        self.put(message)

    async def aput_messages(self, messages: Iterable[ChatMessage]) -> None:
        """``put_messages``, awaitable as on the reference.

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> async def remember():
        ...     await memory.aput_messages([ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="hello")])
        ...     return [m.content for m in await memory.aget()], len(await memory.aget_all())
        >>> asyncio.run(remember())
        (['hi', 'hello'], 2)
        """
        self.put_messages(messages)

    async def aset(self, messages: Iterable[ChatMessage]) -> None:
        """``set``, awaitable as on the reference.

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> memory.put(ChatMessage(role="user", content="forget me"))
        >>> asyncio.run(memory.aset([ChatMessage(role="user", content="hi")]))  # the whole history, replaced
        >>> [m.content for m in memory.get_all()]
        ['hi']
        """
        self.set(messages)

    async def aget(self, input: str | None = None, **block_kwargs: Any) -> list[ChatMessage]:
        """``get``, awaitable as on the reference (``block_kwargs``, the reference's options
        for memory blocks, are accepted and change nothing: there are no blocks).

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> memory.put(ChatMessage(role="user", content="hi"))
        >>> [m.content for m in asyncio.run(memory.aget())]
        ['hi']
        """
        return self.get(input, **block_kwargs)

    async def aget_all(self, status: Any = None) -> list[ChatMessage]:
        """``get_all``, awaitable as on the reference.

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=30, chat_history_token_ratio=0.5, token_flush_size=10)
        >>> memory.put_messages([ChatMessage(role="user", content="word " * 20), ChatMessage(role="user", content="hi")])
        >>> len(asyncio.run(memory.aget_all())), len(asyncio.run(memory.aget_all("archived")))
        (2, 1)
        """
        return self.get_all(status)

    async def areset(self, status: Any = None) -> None:
        """``reset``, awaitable as on the reference.

        Example:

        >>> import asyncio
        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> async def start_over():
        ...     await memory.aset([ChatMessage(role="user", content="hi")])  # replaces what was kept
        ...     before = len(await memory.aget_all())
        ...     await memory.areset()
        ...     return before, len(await memory.aget_all())
        >>> asyncio.run(start_over())
        (1, 0)
        """
        self.reset(status)

    def settings(self) -> dict[str, Any]:
        """What the constructor took besides the limit, the history and the tokenizer: what a
        saved run keeps to build the same memory again.

        Example:

        >>> from nbagent import Memory
        >>> Memory.from_defaults(session_id="demo", token_limit=1000).settings()["session_id"]
        'demo'
        """
        return {
            "session_id": self.session_id,
            "chat_history_token_ratio": self.chat_history_token_ratio,
            "token_flush_size": self.token_flush_size,
            "image_token_size_estimate": self.image_token_size_estimate,
            "audio_token_size_estimate": self.audio_token_size_estimate,
        }

    # -- undo -----------------------------------------------------------------------------

    def snapshot(self) -> SessionSnapshot:  # type: ignore[override]
        """The buffer's O(1) marker, plus where the active messages start."""
        messages, counts, n = super().snapshot()
        return messages, counts, n, self._archived

    def restore(self, snap: SessionSnapshot) -> None:  # type: ignore[override]
        """Go back to a ``snapshot`` (undo): the messages and where the active ones start.

        Example:

        >>> from nbagent import ChatMessage, Memory
        >>> memory = Memory.from_defaults(session_id="demo", token_limit=1000)
        >>> memory.put(ChatMessage(role="user", content="hi"))
        >>> before = memory.snapshot()
        >>> memory.put(ChatMessage(role="user", content="a message to take back"))
        >>> memory.restore(before)
        >>> [m.content for m in memory.get_all()]
        ['hi']
        """
        messages, counts, n, archived = snap
        super().restore((messages, counts, n))
        self._archived = archived

    def __repr__(self) -> str:
        return (
            f"Memory(session_id={self.session_id!r}, messages={len(self._messages)}, "
            f"archived={self._archived}, token_limit={self.token_limit})"
        )
