"""ChatMemoryBuffer: a chat window that keeps the newest messages within a token budget.

The message list is append-only: ``set`` and ``reset`` swap in a new list instead of editing
the old one. That makes a snapshot two numbers' worth of memory (the list and its length), so
the runner can snapshot memory before every step for undo at no real cost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, ForwardRef

from nbagent._lazy import LazyModule
from nbagent.registry import html_view

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage


@LazyModule
def messages_mod() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import messages as module

    return module


__all__ = ["ChatMemoryBuffer", "count_tokens", "DEFAULT_TOKEN_LIMIT"]

DEFAULT_TOKEN_LIMIT = 3000
TOKEN_LIMIT_RATIO = 0.75  # share of a model's context window the memory may fill (as the reference)
_TOKEN_RE = re.compile(r"\w{1,4}|[^\w\s]")
_PER_MESSAGE_OVERHEAD = 4


def count_tokens(text: str) -> int:
    """Estimate tokens offline: chunks of up to four word characters, and each symbol.

    It tracks BPE tokenizers within about 20% on English prose and code, and needs no download.
    """
    return len(_TOKEN_RE.findall(text))


# the model by name, resolved in its module: ``import nbagent`` defines no model
MemorySnapshot = tuple[list[ForwardRef("ChatMessage", module="nbagent.messages")], list[int], int]




class ChatMemoryBuffer:
    """A token-limited chat history.

    ``get()`` returns the newest messages that fit in ``token_limit``; ``get_all()`` returns
    everything that was ever kept.
    """

    def __init__(
        self,
        token_limit: int = DEFAULT_TOKEN_LIMIT,
        chat_history: Iterable[ChatMessage] | None = None,
        tokenizer_fn: Callable[[str], int] | None = None,
    ) -> None:
        if not isinstance(token_limit, int) or token_limit <= 0:
            raise ValueError(f"token_limit must be a positive int, got {token_limit!r}")
        self.token_limit = token_limit
        self.tokenizer_fn: Callable[[str], int] = tokenizer_fn or count_tokens
        self._messages: list[ChatMessage] = []
        self._counts: list[int] = []
        self._last_snapshot: MemorySnapshot | None = None
        if chat_history:
            self.set(chat_history)

    @classmethod
    def from_defaults(
        cls,
        chat_history: Iterable[ChatMessage] | None = None,
        llm: Any = None,
        token_limit: int | None = None,
        tokenizer_fn: Callable[[str], int] | None = None,
        **kwargs: Any,
    ) -> ChatMemoryBuffer:
        """Build a buffer the way the reference API does.

        With no ``token_limit``, an ``llm`` that knows its context window (``context_window``,
        or ``metadata.context_window`` as on LlamaIndex's models) sets it to 3/4 of that
        window, as on the reference; otherwise ``DEFAULT_TOKEN_LIMIT``. Other keywords (the
        reference's ``chat_store``, ...) are an error, not silently dropped.
        """
        if kwargs:
            raise TypeError(
                f"ChatMemoryBuffer.from_defaults got unexpected keyword argument(s) {sorted(kwargs)}; "
                "it takes chat_history, llm, token_limit, tokenizer_fn (there are no chat stores)"
            )
        if token_limit is None and llm is not None:
            window = getattr(llm, "context_window", None)
            if window is None:
                window = getattr(getattr(llm, "metadata", None), "context_window", None)
            if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                token_limit = int(window * TOKEN_LIMIT_RATIO)
        return cls(token_limit or DEFAULT_TOKEN_LIMIT, chat_history, tokenizer_fn)

    def _count(self, message: ChatMessage) -> int:
        n = _PER_MESSAGE_OVERHEAD + self.tokenizer_fn(message.text)
        for call in message.tool_calls:
            n += self.tokenizer_fn(call.tool_name) + self.tokenizer_fn(str(call.tool_kwargs))
        return n

    def put(self, message: ChatMessage) -> None:
        """Append one message (a LlamaIndex ``ChatMessage`` is taken as one of ours)."""
        if not isinstance(message, messages_mod.ChatMessage):
            message = messages_mod.as_chat_message(message, "put() takes a ChatMessage")
        self._messages.append(message)
        self._counts.append(self._count(message))

    def put_messages(self, messages: Iterable[ChatMessage]) -> None:
        """Append messages in order (``put`` for each).

        Example:

        >>> from nbagent import ChatMemoryBuffer, ChatMessage
        >>> memory = ChatMemoryBuffer.from_defaults(token_limit=1000)
        >>> memory.put_messages([ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="hello")])
        >>> [m.content for m in memory.get()]
        ['hi', 'hello']
        """
        for m in messages:
            self.put(m)

    def set(self, messages: Iterable[ChatMessage]) -> None:
        """Replace the whole history."""
        new = [m if isinstance(m, messages_mod.ChatMessage) else messages_mod.as_chat_message(m, "set() takes ChatMessage objects") for m in messages]
        self._messages = new
        self._counts = [self._count(m) for m in new]

    def reset(self) -> None:
        """Forget everything."""
        self._messages = []
        self._counts = []

    def get_all(self) -> list[ChatMessage]:
        """Every message, oldest first."""
        return list(self._messages)

    def get(self, input: str | None = None, **_: Any) -> list[ChatMessage]:
        """The newest messages that fit in the token limit (less ``input``'s tokens).

        The window never starts with a tool reply whose call was cut off, and a window that
        had to leave older messages out starts on a person's message (an answer or tool reply
        left first is dropped too, as on the reference).
        """
        budget = self.token_limit - (self.tokenizer_fn(input) if input else 0)
        start = len(self._messages)
        used = 0
        while start > 0 and used + self._counts[start - 1] <= budget:
            start -= 1
            used += self._counts[start]
        role = messages_mod.MessageRole
        leading = (role.TOOL, role.ASSISTANT) if start > 0 else (role.TOOL,)
        while start < len(self._messages) and self._messages[start].role in leading:
            start += 1
        return self._messages[start:]

    def token_count(self) -> int:
        """Tokens in the whole history, by this buffer's counter."""
        return sum(self._counts)

    def __len__(self) -> int:
        return len(self._messages)

    def snapshot(self) -> MemorySnapshot:
        """An O(1) marker of the current content (see the module docstring)."""
        snap = self._last_snapshot
        if snap is None or snap[0] is not self._messages or snap[2] != len(self._messages):
            snap = self._last_snapshot = (self._messages, self._counts, len(self._messages))
        return snap  # unchanged since the last snapshot: the same (shared) tuple

    def restore(self, snap: MemorySnapshot) -> None:
        """Go back to a snapshot taken earlier.

        Example:

        >>> from nbagent import ChatMemoryBuffer, ChatMessage
        >>> memory = ChatMemoryBuffer.from_defaults()
        >>> memory.put(ChatMessage(role="user", content="hi"))
        >>> before = memory.snapshot()  # cheap: a marker, not a copy
        >>> memory.put(ChatMessage(role="assistant", content="a reply to take back"))
        >>> memory.restore(before)
        >>> [m.content for m in memory.get_all()]
        ['hi']
        """
        messages, counts, n = snap
        self._messages = messages[:n]
        self._counts = counts[:n]

    def __repr__(self) -> str:
        return f"ChatMemoryBuffer(messages={len(self._messages)}, token_limit={self.token_limit})"

    def _repr_html_(self) -> str | None:
        return html_view(self)
