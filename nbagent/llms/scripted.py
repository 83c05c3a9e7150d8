"""Offline, deterministic models: public API, not test helpers.

``ScriptedLLM`` answers from a list of replies; ``FunctionLLM`` lets a Python function play
the model. Both stream, call tools, count tokens (with the offline counter) and record every
request they were sent in ``requests``, so a workshop or a test can look at the prompts.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Union

from nbagent.llms.base import LLM, ChatResponse, ToolChoice
from nbagent.memory import count_tokens
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.tools import ToolMetadata

__all__ = ["ScriptedLLM", "FunctionLLM", "ScriptExhaustedError", "Reply", "tool_call"]


class ScriptExhaustedError(RuntimeError):
    """A ScriptedLLM was asked for more replies than its script holds."""


Reply = Union[str, ChatMessage, ChatResponse, dict[str, Any], Exception]


def tool_call(name: str, /, **kwargs: Any) -> dict[str, Any]:
    """A scripted reply that calls one tool: ``tool_call("add", a=1, b=2)``."""
    return {"tool_calls": [{"name": name, "arguments": kwargs}]}


class _Request:
    """What the model was sent in one call."""

    __slots__ = ("messages", "tools", "tool_choice")

    def __init__(self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None) -> None:
        self.messages = messages
        self.tools = tools
        self.tool_choice = tool_choice

    @property
    def prompt(self) -> str:
        return "\n".join(m.text for m in self.messages)

    def __repr__(self) -> str:
        return f"Request(messages={len(self.messages)}, tools={[t.name for t in self.tools]})"


_TOKEN_SPLIT = re.compile(r"\S+\s*|\s+")


class _OfflineModel(LLM):
    """Shared by the offline models: reply normalisation, usage and streaming."""

    #: record every request in ``requests`` (the messages and tools the model was sent), for
    #: tests that check what the agent asked; False keeps memory flat in long runs
    keep_requests: bool = True

    def __init__(self, model: str, keep_requests: bool) -> None:
        self.model = model
        self.keep_requests = keep_requests
        self.requests: list[_Request] = []
        self._calls = 0

    def _next_call_id(self) -> str:
        self._calls += 1
        return f"call_{self._calls}"

    def _normalise(self, reply: Reply) -> ChatMessage:
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, ChatResponse):
            return reply.message
        if isinstance(reply, ChatMessage):
            return reply
        if isinstance(reply, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=reply)
        if isinstance(reply, dict):
            calls = []
            for c in reply.get("tool_calls", []):
                if isinstance(c, ToolSelection):
                    calls.append(c)
                    continue
                if not isinstance(c, dict) or "name" not in c:
                    raise ValueError(f"a scripted tool call needs a 'name', got {c!r}")
                calls.append(
                    ToolSelection(
                        tool_id=c.get("id") or self._next_call_id(),
                        tool_name=c["name"],
                        tool_kwargs=dict(c.get("arguments", {})),
                    )
                )
            return ChatMessage(
                role=MessageRole.ASSISTANT, content=reply.get("content"), tool_calls=calls
            )
        raise TypeError(
            f"{self._source} must be a str, ChatMessage, ChatResponse, dict with "
            f"'tool_calls', or an Exception to raise; got {type(reply).__name__}: {reply!r}"
        )

    _source = "a scripted reply"

    def _usage(self, messages: list[ChatMessage], reply: ChatMessage) -> TokenUsage:
        prompt = sum(4 + _message_tokens(m) for m in messages)
        completion = count_tokens(reply.text) + sum(
            count_tokens(c.tool_name) + count_tokens(str(c.tool_kwargs)) for c in reply.tool_calls
        )
        return TokenUsage(prompt_tokens=prompt, completion_tokens=completion)

    def _reply_for(self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None) -> Reply:
        raise NotImplementedError

    async def _achat(
        self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None, **kwargs: Any
    ) -> ChatResponse:
        if self.keep_requests:
            self.requests.append(_Request(messages, tools, tool_choice))
        reply: Any = self._reply_for(messages, tools, tool_choice)
        if inspect.isawaitable(reply):  # an ``async def`` playing the model
            reply = await reply
        message = self._normalise(reply)
        return ChatResponse(message=message, usage=self._usage(messages, message), model=self.model)

    async def _astream(
        self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None, **kwargs: Any
    ) -> AsyncIterator[ChatResponse]:
        full = await self._achat(messages, tools, tool_choice, **kwargs)
        text = full.message.text
        pieces = _TOKEN_SPLIT.findall(text) or [""]
        so_far = ""
        for i, piece in enumerate(pieces):
            so_far += piece
            last = i == len(pieces) - 1
            yield ChatResponse(
                message=full.message if last else ChatMessage(role=MessageRole.ASSISTANT, content=so_far),
                delta=piece,
                usage=full.usage if last else None,
                model=self.model,
            )


class ScriptedLLM(_OfflineModel):
    """A model that gives the scripted replies in order, one per call.

    A reply is text, a ``ChatMessage``, ``tool_call("name", **args)`` (or a dict with
    ``tool_calls``), or an exception to raise. Past the end of the script it raises
    ``ScriptExhaustedError``, repeats the last reply with ``repeat_last=True``, or hands over
    to ``then``: a function ``fn(messages, tools) -> reply`` (plain or ``async def``) that plays
    the model from there on, so a scripted lesson can be followed by free play.

    ``function_calling`` says whether it plays a model with a tools API; by default it is read
    from the script: a ReAct script (text with ``Thought:`` / ``Action:`` / ``Answer:`` lines
    and no tool call) plays a model without one, anything else a model with one.
    """

    provider_name = "nbagent.scripted"

    def __init__(
        self,
        replies: Sequence[Reply],
        *,
        model: str = "scripted",
        repeat_last: bool = False,
        then: ReplyFn | None = None,
        function_calling: bool | None = None,
        keep_requests: bool = True,
    ) -> None:
        super().__init__(model, keep_requests)
        if isinstance(replies, (str, dict)):
            raise TypeError("ScriptedLLM takes a list of replies, e.g. ScriptedLLM(['Hi'])")
        if then is not None and not callable(then):
            raise TypeError(f"then= must be a function fn(messages, tools) -> reply, got {type(then).__name__}")
        if then is not None and repeat_last:
            raise ValueError("pass repeat_last=True or then=..., not both: both say what comes after the script")
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.then = then
        self._function_calling = function_calling
        self.position = 0

    @property  # type: ignore[override]
    def is_function_calling_model(self) -> bool:
        """Whether it plays a model with a tools API: as given, else read from the script."""
        if self._function_calling is not None:
            return self._function_calling
        return not _reads_as_react(self.replies)

    @is_function_calling_model.setter
    def is_function_calling_model(self, value: bool) -> None:
        self._function_calling = bool(value)

    def _reply_for(self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None) -> Reply:
        if self.position >= len(self.replies):
            if self.then is not None:
                self.position += 1
                return self.then(messages, tools)
            if self.repeat_last and self.replies:
                return self.replies[-1]
            last = messages[-1].text[:200] if messages else ""
            raise ScriptExhaustedError(
                f"ScriptedLLM has no reply left: all {len(self.replies)} scripted replies were "
                f"used, and call {self.position + 1} came in (last message: {last!r}). "
                "Add replies to the script, or pass repeat_last=True or then=a function."
            )
        reply = self.replies[self.position]
        self.position += 1
        return reply

    def reset(self) -> None:
        """Start the script again from its first reply."""
        self.position = 0
        self.requests.clear()
        self._calls = 0

    def __repr__(self) -> str:
        return f"ScriptedLLM(model={self.model!r}, replies={len(self.replies)}, used={self.position})"


ReplyFn = Callable[[list[ChatMessage], list[ToolMetadata]], Union[Reply, Awaitable[Reply]]]

_REACT_LABEL = re.compile(r"^\s*(?:Thought|Action|Answer)\s*:", re.MULTILINE)


def _reads_as_react(replies: Sequence[Reply]) -> bool:
    """A script written for a ReAct agent: some reply has a ReAct label, none calls a tool."""
    labelled = False
    for reply in replies:
        if isinstance(reply, dict) and reply.get("tool_calls"):
            return False
        message = reply.message if isinstance(reply, ChatResponse) else reply
        if isinstance(message, ChatMessage):
            if message.tool_calls:
                return False
            message = message.text
        if isinstance(message, dict):
            message = message.get("content")
        if isinstance(message, str) and _REACT_LABEL.search(message):
            labelled = True
    return labelled


class FunctionLLM(_OfflineModel):
    """A model played by a Python function ``fn(messages, tools) -> reply``.

    ``fn`` may be an ``async def`` (awaited: it can call other async code, e.g. another model);
    it returns what a ``ScriptedLLM`` reply may be.
    """

    provider_name = "nbagent.function"

    _source = "what the FunctionLLM's function returns"

    def __init__(
        self,
        fn: ReplyFn,
        *,
        model: str = "function",
        function_calling: bool = True,
        keep_requests: bool = True,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionLLM needs a function, got {type(fn).__name__}")
        super().__init__(model, keep_requests)
        self.fn = fn
        self.is_function_calling_model = function_calling

    def _reply_for(self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None) -> Reply:
        return self.fn(messages, tools)

    async def _achat(
        self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None, **kwargs: Any
    ) -> ChatResponse:
        if self.keep_requests:
            self.requests.append(_Request(messages, tools, tool_choice))
        # the function may block (a local model): it runs in a worker thread, so the loop stays
        # free and an interrupt or Stop rolls the step back at once; a reply that comes after
        # that is dropped
        reply: Any
        if inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(getattr(self.fn, "__call__", None)):
            reply = await self.fn(messages, tools)  # an ``async def``: awaited on the loop
        else:
            reply = await asyncio.to_thread(self.fn, messages, tools)
            if inspect.isawaitable(reply):  # a plain function that returned a coroutine
                reply = await reply
        message = self._normalise(reply)
        return ChatResponse(message=message, usage=self._usage(messages, message), model=self.model)


# Token counts of the messages a scripted model has seen, by message: a long offline run sends
# the same history again at every call, and counting it again made each call O(history).
_COUNTED: dict[int, tuple[Any, str, int]] = {}  # id(message) -> (weakref, its text, count)


def _message_tokens(m: ChatMessage) -> int:
    text = m.text
    found = _COUNTED.get(id(m))
    if found is not None and found[0]() is m and (found[1] is text or found[1] == text):
        return found[2]
    n = count_tokens(text)
    key = id(m)
    try:
        ref = weakref.ref(m, lambda _r, key=key: _COUNTED.pop(key, None))
    except TypeError:
        return n
    _COUNTED[key] = (ref, text, n)
    return n
