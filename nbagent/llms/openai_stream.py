"""Reading an OpenAI-compatible server's streamed reply (server-sent events), checked as it comes.

Read here rather than by the openai client's stream class, because a reply has to keep
promises that class does not check:

- its end: a ``finish_reason`` or ``data: [DONE]``. A stream closed before either is an
  ``IncompleteReplyError``: the text so far is never taken for the whole reply.
- its form: every ``data:`` line a ``chat.completion.chunk`` object. Anything else is a
  ``MalformedReplyError`` naming the server, the line (cut short, escaped) and what was expected.
- its time: the whole call has one ``Deadline``; keep-alive comments and a body trickling a
  byte at a time do not stretch it.
- its text: a character outside the BMP that a server sends as two UTF-16 surrogate escapes
  in two chunks (``\\ud83d`` then ``\\ude00``) comes out as the one character.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from nbagent.llms.base import ChatResponse, IncompleteReplyError, MalformedReplyError
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.tools import RAW_ARGUMENTS_KEY

__all__ = ["Deadline", "sse_events", "StreamAccumulator", "parse_arguments", "join_surrogates"]

T = TypeVar("T")

MAX_EVENT_BYTES = 16 * 1024 * 1024  # one server-sent event; a reply of any length streams in many
_SHOWN = 200  # characters of an offending line shown in an error
_FIELD = re.compile(r"^[A-Za-z0-9_-]*$")
_EOL = re.compile(rb"\r\n|\r|\n")  # a line ends with any of the three (the SSE spec)


class Deadline:
    """One time budget for a whole call, spent only while waiting on the server.

    ``wait(aw)`` awaits with what is left and charges the time it took; when nothing is
    left it raises ``asyncio.TimeoutError``. Time the caller spends between waits (a
    notebook printing tokens) is not charged.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.left = float(seconds)

    async def wait(self, aw: Awaitable[T]) -> T:
        start = time.monotonic()
        try:
            if sys.version_info >= (3, 11):
                async with asyncio.timeout(max(self.left, 0.0)):
                    return await aw
            return await asyncio.wait_for(aw, max(self.left, 0.0))
        finally:
            self.left -= time.monotonic() - start


def shown(line: str | bytes) -> str:
    """A line from a server as an error shows it: escaped, and cut short if long."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    text = line if len(line) <= _SHOWN else line[:_SHOWN]
    out = repr(text)
    return out + f"… ({len(line)} characters)" if len(line) > _SHOWN else out


def malformed(server: str, line: str | bytes, expected: str) -> MalformedReplyError:
    return MalformedReplyError(
        f"the model server at {server} sent a streamed reply that does not fit the OpenAI "
        f"chat-completions stream: {expected}. Line: {shown(line)}"
    )


async def sse_events(body: AsyncIterator[bytes], server: str) -> AsyncIterator[tuple[str, str]]:
    """Each server-sent event's data (its ``data:`` lines joined by newlines), with its first
    ``data:`` line as received, for errors. Comments (``: keep-alive``) and ``event:``/``id:``/
    ``retry:`` lines are read past; a line that is no SSE field at all (a JSON body, an HTML
    page) is an error. An event past ``MAX_EVENT_BYTES`` is an error, not a memory sink."""
    pending = bytearray()
    data: list[str] = []
    size = 0
    first = ""

    def line_of(raw: bytes) -> tuple[str, str] | None:
        nonlocal data, size, first
        text = raw.decode("utf-8", "replace")
        if not text:  # a blank line ends the event
            if not data:
                return None
            event = ("\n".join(data), first)
            data, size, first = [], 0, ""
            return event
        if text.startswith(":"):
            return None
        field, colon, value = text.partition(":")
        if not _FIELD.match(field) or (not colon and field not in ("data", "event", "id", "retry")):
            raise malformed(server, text, "expected server-sent events ('data: {...}' lines)")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
            size += len(raw)
            first = first or text
            if size > MAX_EVENT_BYTES:
                raise malformed(server, first, f"one event longer than {MAX_EVENT_BYTES // 2**20} MiB")
        return None

    after_cr = False  # a piece ended in CR: a LF starting the next one is the same line end
    async for piece in body:
        if not piece:
            continue
        start = 1 if after_cr and piece[:1] == b"\n" else 0
        after_cr = False
        while True:
            end = _EOL.search(piece, start)
            if end is None:
                pending += piece[start:]
                if len(pending) > MAX_EVENT_BYTES:
                    raise malformed(server, bytes(pending[:_SHOWN]), f"a line longer than {MAX_EVENT_BYTES // 2**20} MiB")
                break
            pending += piece[start : end.start()]
            after_cr = end.group() == b"\r" and end.end() == len(piece)
            event = line_of(bytes(pending))
            pending.clear()
            start = end.end()
            if event is not None:
                yield event
    if pending:
        event = line_of(bytes(pending))
        if event is not None:
            yield event
    if data:  # the last event without its blank line: taken as it is
        yield "\n".join(data), first


# -- pieces shared with the non-streamed path ---------------------------------------------------


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments as a dict; text that is not a JSON object is kept under
    ``__raw_arguments__`` so the model gets an error observation rather than a crash."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {RAW_ARGUMENTS_KEY: text}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS_KEY: text}
    return value


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _whole(value: Any) -> int | None:
    """A whole number >= 0 from a server (an int, or a string of digits); None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def usage_of(raw: Any) -> TokenUsage | None:
    """Token counts from a ``usage`` object or dict; ValueError if they are not numbers."""
    if raw is None:
        return None
    get = raw.get if isinstance(raw, dict) else (lambda k, d=None: getattr(raw, k, d))
    counts = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = get(key, 0)
        n = 0 if value is None else _whole(value)
        if n is None:
            raise ValueError(f"usage.{key} is {value!r}, expected a whole number")
        counts.append(n)
    return TokenUsage(prompt_tokens=counts[0], completion_tokens=counts[1])


# -- surrogates ---------------------------------------------------------------------------------


def _high(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def _low(ch: str) -> bool:
    return "\udc00" <= ch <= "\udfff"


def join_surrogates(held: str, piece: str) -> tuple[str, str]:
    """``(text to pass on, high surrogate held back)`` for the next piece of a stream.

    JSON decoding joins a surrogate pair inside one string; a pair split across two chunks
    arrives as two lone halves. A high half at the end of a piece waits for the next piece,
    and joins its low half when it comes. A half that stays lone is passed on as it is.
    """
    if held:
        if piece and _low(piece[0]):
            piece = chr(0x10000 + ((ord(held) - 0xD800) << 10) + (ord(piece[0]) - 0xDC00)) + piece[1:]
        else:
            piece = held + piece
    if piece and _high(piece[-1]):
        return piece[:-1], piece[-1]
    return piece, ""


class _PartialCall:
    """One tool call being assembled from stream fragments."""

    __slots__ = ("id", "name", "arguments", "held")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str = ""
        self.arguments: str = ""
        self.held: str = ""


class StreamAccumulator:
    """Puts a streamed reply back together from checked chunks: text, tool calls by index,
    usage, model, and whether the reply reached its end."""

    def __init__(self, model: str, server: str) -> None:
        self.model = model
        self.server = server
        self.text = ""
        self.held = ""  # a high surrogate waiting for its low half
        self.calls: dict[int, _PartialCall] = {}
        self.usage: TokenUsage | None = None
        self.saw_choice = False
        self.finished = False  # a finish_reason came
        self.chunks = 0

    def add(self, chunk: Any, line: str) -> str:
        """Take one decoded ``data:`` payload in; return its new text (may be empty)."""
        self.chunks += 1
        if not isinstance(chunk, dict):
            raise malformed(self.server, line, f"expected a JSON object (a chat.completion.chunk), got a JSON {_kind(chunk)}")
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        try:
            usage = usage_of(chunk.get("usage"))
        except ValueError as err:
            raise malformed(self.server, line, str(err)) from None
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if choices is None or choices == []:
            return ""
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise malformed(self.server, line, "expected 'choices' to be a list of objects")
        choice = next((c for c in choices if c.get("index", 0) == 0), choices[0])
        self.saw_choice = True
        if choice.get("finish_reason"):
            self.finished = True
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise malformed(self.server, line, "expected 'delta' to be an object")
        self._add_calls(delta.get("tool_calls"), line)
        content = delta.get("content")
        if content is None:
            return ""
        if not isinstance(content, str):
            raise malformed(self.server, line, f"expected 'delta.content' to be a string, got a JSON {_kind(content)}")
        piece, self.held = join_surrogates(self.held, content)
        self.text += piece
        return piece

    def _add_calls(self, frags: Any, line: str) -> None:
        if frags is None:
            return
        if not isinstance(frags, list):
            raise malformed(self.server, line, "expected 'delta.tool_calls' to be a list")
        for frag in frags:
            if not isinstance(frag, dict):
                raise malformed(self.server, line, "expected each of 'delta.tool_calls' to be an object")
            raw_index = frag.get("index")
            index = len(self.calls) if raw_index is None else _whole(raw_index)
            if index is None:
                raise malformed(
                    self.server, line, f"a tool call's 'index' is {raw_index!r}, expected a whole number >= 0"
                )
            call = self.calls.setdefault(index, _PartialCall())
            call_id = frag.get("id")
            if call_id is not None and not isinstance(call_id, str):
                raise malformed(self.server, line, f"tool call {index}'s 'id' is {call_id!r}, expected a string")
            if call_id:
                call.id = call_id
            function = frag.get("function")
            if function is None:
                continue
            if not isinstance(function, dict):
                raise malformed(self.server, line, f"tool call {index}'s 'function' is not an object")
            for key in ("name", "arguments"):
                value = function.get(key)
                if value is not None and not isinstance(value, str):
                    raise malformed(
                        self.server, line, f"tool call {index}'s 'function.{key}' is a JSON {_kind(value)}, expected a string"
                    )
            if function.get("name"):
                call.name += function["name"]
            if function.get("arguments"):
                piece, call.held = join_surrogates(call.held, function["arguments"])
                call.arguments += piece

    def missing_end(self) -> IncompleteReplyError:
        """The error for a stream that stopped here, saying what had arrived."""
        parts = []
        if self.text or self.held:
            parts.append(f"{len(self.text + self.held)} characters of text")
        for index in sorted(self.calls):
            call = self.calls[index]
            parts.append(f"tool call {call.name or index!r} with {len(call.arguments)} characters of arguments")
        got = ", ".join(parts) or "no content"
        return IncompleteReplyError(
            f"the model server at {self.server} ended its streamed reply before the end: no "
            f"finish_reason and no 'data: [DONE]' after {self.chunks} chunk(s) ({got}). The "
            "partial reply was dropped, not taken for the whole one; the step stays queued: "
            "run it again, and check the server (or a proxy in between) if this repeats."
        )

    def final(self) -> ChatResponse:
        """The whole reply, with tool calls and usage; raises if no choice ever came.

        A high surrogate still held back (its low half never came) stays in the text as it
        is, a lone code point: lossless, and the final response's ``delta`` carries it.
        """
        if not self.saw_choice:
            raise MalformedReplyError(
                f"the model server at {self.server} sent a streamed reply of {self.chunks} "
                "chunk(s) with no 'choices': expected chat.completion.chunk objects"
            )
        tail, self.held = self.held, ""
        self.text += tail
        calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            if not partial.name:
                raise MalformedReplyError(
                    f"the model server at {self.server} streamed tool call {index} without a "
                    "function name: expected 'function.name' in its first fragment"
                )
            calls.append(
                ToolSelection(
                    tool_id=partial.id or new_call_id(),
                    tool_name=partial.name,
                    tool_kwargs=parse_arguments(partial.arguments + partial.held),
                )
            )
        message = ChatMessage(role=MessageRole.ASSISTANT, content=self.text or None, tool_calls=calls)
        if not calls and message.content is None:
            message.content = ""
        return ChatResponse(message=message, delta=tail, usage=self.usage, model=self.model)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
