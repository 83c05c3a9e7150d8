"""The reference's ``BaseAgent``: the chat-engine face every runner has.

It lives in the engine so that the step engine, and every runner built on it, is a
``BaseAgent`` (code written for the reference checks ``isinstance(agent, BaseAgent)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent.prompts import PromptMixin

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage
    from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse

__all__ = ["BaseAgent", "query_text"]


def query_text(str_or_query_bundle: object) -> str:
    """The question in a ``query`` call: a string, or a reference QueryBundle's ``query_str``."""
    if isinstance(str_or_query_bundle, str):
        return str_or_query_bundle
    text = getattr(str_or_query_bundle, "query_str", None)
    if isinstance(text, str):
        return text
    raise TypeError(
        f"query() takes a string or a query bundle with a query_str string, "
        f"got {type(str_or_query_bundle).__name__}"
    )


class BaseAgent(PromptMixin, ABC):
    """The reference's ``BaseAgent``: a chat engine that also answers one-off queries.

    ``AgentRunner`` is nbagent's implementation (step by step); this base is here so code
    written for the reference can subclass it or check ``isinstance(agent, BaseAgent)``.
    As on the reference, streaming is optional: by default it raises NotImplementedError.
    """

    @property
    @abstractmethod
    def chat_history(self) -> list[ChatMessage]:
        """The conversation so far."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the conversation."""

    @abstractmethod
    def chat(self, message: str, chat_history: Sequence[ChatMessage] | None = None) -> AgentChatResponse:
        """Answer ``message``; ``chat_history``, if given, replaces the conversation first."""

    @abstractmethod
    async def achat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> AgentChatResponse:
        """Async ``chat``."""

    def stream_chat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        """Answer ``message`` as a stream of tokens (optional, as on the reference: by default
        NotImplementedError)."""
        raise NotImplementedError("stream_chat not implemented")

    async def astream_chat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        """Async ``stream_chat`` (optional, as on the reference: by default NotImplementedError)."""
        raise NotImplementedError("astream_chat not implemented")

    def query(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Answer a question with no conversation history (the reference's query engine side)."""
        return self.chat(query_text(str_or_query_bundle), chat_history=[])

    async def aquery(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Async ``query``."""
        return await self.achat(query_text(str_or_query_bundle), chat_history=[])

