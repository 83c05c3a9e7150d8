"""Record a real model's replies once to a JSON cassette, then replay them offline.

``ReplayLLM(path, llm=real_model, mode="record")`` sends every request to ``real_model`` and
writes each reply to the cassette; ``ReplayLLM(path)`` (``mode="replay"``) answers the same
requests from the cassette with no network at all. ``mode="auto"`` replays what is recorded
and records only what is missing.

A request is found by its key: a hash of what the model was sent (the model name, every
message's role, content, tool calls, ``tool_call_id`` and name, the tools' names and argument
schemas, and ``tool_choice``). A request the cassette lacks is an error that names it: the
last user message, how many messages, the tools, the closest recorded request and where they
part, the cassette's path, and how to record it.

The same request can come more than once (after ``undo_step``, or when a cell is run again):
each time it is recorded its reply is appended to that request's list, and replay gives them
back in the same order. Asked more often than it was recorded, replay gives the last reply
again (``mode="auto"`` records a new one instead). ``rewind()`` starts every list over.

The cassette is plain JSON, sorted keys and indented, one entry per distinct request in the
order first seen, each with a readable summary of the request beside its replies. It is
rewritten atomically after every recorded reply, so a crash mid-run loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from nbagent._counts import counted
from nbagent._files import atomic_write_text
from nbagent.llms.base import LLM, ChatResponse, ToolChoice
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.tools import ToolMetadata

__all__ = ["ReplayLLM", "ReplayMissError", "CassetteError", "request_key", "CASSETTE_FORMAT"]

CASSETTE_FORMAT = "nbagent-cassette"
CASSETTE_VERSION = 1
Mode = Literal["replay", "record", "auto"]
_MODES = ("replay", "record", "auto")
_TOKEN_SPLIT = re.compile(r"\S+\s*|\s+")
_PREVIEW = 120


class CassetteError(ValueError):
    """A cassette file that cannot be used: missing in replay mode, not JSON, wrong format."""


class ReplayMissError(LookupError):
    """A request that the cassette has no reply for (in ``mode="replay"``)."""


# ----- the request key -----------------------------------------------------------------------


def _message_json(m: ChatMessage) -> dict[str, Any]:
    return {
        "role": m.role.value,
        "content": m.content,
        "tool_calls": [
            {"id": c.tool_id, "name": c.tool_name, "arguments": c.tool_kwargs} for c in m.tool_calls
        ],
        "tool_call_id": m.tool_call_id,
        "name": m.name,
    }


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _digest(value: Any, n: int = 64) -> str:
    return hashlib.sha256(_canonical(value).encode("utf-8")).hexdigest()[:n]


def normalise_request(
    model: str,
    messages: list[ChatMessage],
    tools: list[ToolMetadata],
    tool_choice: ToolChoice | None,
) -> dict[str, Any]:
    """What identifies a request: model, messages, tool names and schemas, tool_choice."""
    return {
        "model": model,
        "messages": [_message_json(m) for m in messages],
        "tools": [{"name": t.name, "parameters": t.parameters()} for t in tools],
        "tool_choice": tool_choice,
    }


def request_key(
    model: str,
    messages: list[ChatMessage],
    tools: list[ToolMetadata],
    tool_choice: ToolChoice | None = None,
) -> str:
    """The cassette key of a request: sha256 of its normalised JSON (64 hex characters)."""
    return _digest(normalise_request(model, messages, tools, tool_choice))


def _preview(text: Any, n: int = _PREVIEW) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _last_user(messages: list[ChatMessage]) -> str | None:
    for m in reversed(messages):
        if m.role == MessageRole.USER:
            return m.text
    return None


def _summary(normal: dict[str, Any], messages: list[ChatMessage]) -> dict[str, Any]:
    """A readable description of a request, stored beside its replies for debugging."""
    last = messages[-1] if messages else None
    return {
        "model": normal["model"],
        "n_messages": len(messages),
        "last_user_message": _preview(_last_user(messages)) if _last_user(messages) is not None else None,
        "last_message": f"{last.role.value}: {_preview(last.text)}" if last is not None else None,
        "tools": [t["name"] for t in normal["tools"]],
        "tool_choice": normal["tool_choice"],
        "message_hashes": [_digest(m, 12) for m in normal["messages"]],
    }


# ----- replies as JSON -----------------------------------------------------------------------


def _reply_json(response: ChatResponse) -> dict[str, Any]:
    m = response.message
    usage = response.usage
    return {
        "message": {
            "role": m.role.value,
            "content": m.content,
            "tool_calls": [
                {"id": c.tool_id, "name": c.tool_name, "arguments": c.tool_kwargs} for c in m.tool_calls
            ],
        },
        "usage": None
        if usage is None
        else {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
        "model": response.model,
    }


def _reply_from_json(data: dict[str, Any], default_model: str) -> ChatResponse:
    msg = data.get("message") or {}
    calls = [
        ToolSelection(tool_id=c["id"], tool_name=c["name"], tool_kwargs=dict(c.get("arguments") or {}))
        for c in msg.get("tool_calls") or []
    ]
    usage = data.get("usage")
    return ChatResponse(
        message=ChatMessage(
            role=MessageRole(msg.get("role", "assistant")), content=msg.get("content"), tool_calls=calls
        ),
        usage=None if usage is None else TokenUsage(**usage),
        model=data.get("model") or default_model,
    )


# ----- the model -----------------------------------------------------------------------------


class ReplayLLM(LLM):
    """A model that answers from a JSON cassette, recording it first from a real model.

    ``mode``: ``"replay"`` (the default: only the cassette, never the network; a missing
    request is a ``ReplayMissError``), ``"record"`` (every request goes to ``llm`` and the
    cassette is written anew), ``"auto"`` (replay what is recorded, record what is missing).
    ``model`` names the model in the keys; it defaults to ``llm.model``, else the cassette's.
    """

    provider_name = "nbagent.replay"

    def __init__(
        self,
        cassette: str | os.PathLike[str],
        llm: LLM | None = None,
        mode: Mode = "replay",
        *,
        model: str | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if mode in ("record", "auto") and llm is None:
            raise ValueError(
                f"ReplayLLM(mode={mode!r}) needs llm=... : the real model to record from, "
                "e.g. OpenAILLM(model='gpt-4o-mini')"
            )
        if llm is not None and not isinstance(llm, LLM):
            raise TypeError(f"llm must be an nbagent LLM, got {type(llm).__name__}")
        self.path = Path(cassette)
        self.llm = llm
        self.mode: Mode = mode
        self._lock = threading.Lock()
        self._cursor: dict[str, int] = {}
        self._entries: dict[str, dict[str, Any]] = {}  # key -> {"key", "request", "replies"}
        self._meta: dict[str, Any] = {}
        if mode != "record":  # record mode writes the cassette anew
            self._load(must_exist=mode == "replay")
        recorded_model = self._meta.get("model")
        self.model = model or (llm.model if llm is not None else None) or recorded_model or "replay"

    # -- identity --------------------------------------------------------------------------

    @property
    def is_function_calling_model(self) -> bool:  # type: ignore[override]
        if self.llm is not None:
            return bool(self.llm.is_function_calling_model)
        return bool(self._meta.get("function_calling", True))

    @property
    def recorded(self) -> int:
        """How many replies the cassette holds."""
        return sum(len(e["replies"]) for e in self._entries.values())

    def __repr__(self) -> str:
        inner = f", llm={self.llm!r}" if self.llm is not None else ""
        return (
            f"ReplayLLM(cassette={str(self.path)!r}, mode={self.mode!r}, model={self.model!r}, "
            f"requests={len(self._entries)}, replies={self.recorded}{inner})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Copy or pickle without the lock (it is made anew)."""
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def rewind(self) -> None:
        """Replay every request's replies from the first one again.

        Example:

        >>> import tempfile
        >>> from pathlib import Path
        >>> from nbagent import ReplayLLM, ScriptedLLM
        >>> cassette = Path(tempfile.mkdtemp()) / "demo.json"
        >>> recorder = ReplayLLM(cassette, llm=ScriptedLLM(["first", "second"]), mode="record")
        >>> [str(recorder.complete("hi")) for _ in range(2)]
        ['first', 'second']
        >>> replay = ReplayLLM(cassette)  # only the cassette: never a model, never the network
        >>> [str(replay.complete("hi")) for _ in range(2)]
        ['first', 'second']
        >>> replay.rewind()  # a workshop's second run of the same cells
        >>> str(replay.complete("hi"))
        'first'
        """
        with self._lock:
            self._cursor.clear()

    # -- the cassette file -----------------------------------------------------------------

    def _load(self, must_exist: bool) -> None:
        if not self.path.exists():
            if must_exist:
                raise CassetteError(
                    f"cassette {str(self.path)!r} does not exist. Record it once with a real "
                    f"model: ReplayLLM({str(self.path)!r}, llm=OpenAILLM(model=...), mode='record')"
                )
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CassetteError(f"cannot read cassette {str(self.path)!r}: {err}") from err
        if not isinstance(data, dict) or data.get("format") != CASSETTE_FORMAT:
            raise CassetteError(
                f"{str(self.path)!r} is not an nbagent cassette (expected a JSON object with "
                f"\"format\": {CASSETTE_FORMAT!r})"
            )
        if data.get("version") != CASSETTE_VERSION:
            raise CassetteError(
                f"cassette {str(self.path)!r} has version {data.get('version')!r}; this nbagent "
                f"reads version {CASSETTE_VERSION}: record it again"
            )
        for entry in data.get("interactions", []):
            if not isinstance(entry, dict) or "key" not in entry or not isinstance(entry.get("replies"), list):
                raise CassetteError(
                    f"cassette {str(self.path)!r} has a malformed interaction (each needs "
                    f"'key', 'request' and a list of 'replies'): {_preview(entry, 200)}"
                )
            self._entries[entry["key"]] = entry
        self._meta = {k: data[k] for k in ("model", "function_calling") if k in data}

    def _save(self) -> None:
        data = {
            "format": CASSETTE_FORMAT,
            "version": CASSETTE_VERSION,
            "model": self.model,
            "function_calling": self.is_function_calling_model,
            "note": "Recorded by nbagent.ReplayLLM; replay with ReplayLLM(path). "
            "Each interaction: a request's key (sha256), a summary of the request, and its "
            "replies in the order they were recorded.",
            "interactions": list(self._entries.values()),
        }
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        atomic_write_text(self.path, text)

    # -- lookup and record -----------------------------------------------------------------

    def _request(
        self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: ToolChoice | None
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        normal = normalise_request(self.model, messages, tools, tool_choice)
        return _digest(normal), normal, _summary(normal, messages)

    def _lookup(self, key: str) -> dict[str, Any] | None:
        """The next recorded reply for ``key`` (the last one again past the end), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not entry["replies"]:
                return None
            i = self._cursor.get(key, 0)
            replies = entry["replies"]
            if i >= len(replies):
                if self.mode == "auto":
                    return None  # record another reply for this request
                return replies[-1]
            self._cursor[key] = i + 1
            return replies[i]

    def _record(self, key: str, summary: dict[str, Any], response: ChatResponse) -> None:
        with self._lock:
            entry = self._entries.setdefault(key, {"key": key, "request": summary, "replies": []})
            entry["replies"].append(_reply_json(response))
            self._cursor[key] = len(entry["replies"])
            self._save()

    def _miss(self, key: str, summary: dict[str, Any]) -> ReplayMissError:
        tools = summary["tools"]
        lines = [
            f"ReplayLLM has no recorded reply for this request in cassette {str(self.path)!r} "
            f"(mode={self.mode!r}, {counted(len(self._entries), 'recorded request')}):",
            f"  last user message: {summary['last_user_message']!r}",
            f"  {counted(summary['n_messages'], 'message')}, the last one {summary['last_message']!r}",
            f"  tools: {tools}, tool_choice: {summary['tool_choice']!r}, model: {summary['model']!r}",
            f"  key: {key}",
        ]
        closest = self._closest(summary)
        if closest is not None:
            lines.append("  " + closest)
        lines.append(
            "The request differs from every recorded one (a changed prompt, tool, model name or "
            "earlier reply changes it). To record it, run once with the real model: "
            f"ReplayLLM({str(self.path)!r}, llm=OpenAILLM(model=...), mode='auto') records what "
            "is missing; mode='record' records the whole cassette anew."
        )
        return ReplayMissError("\n".join(lines))

    def _closest(self, summary: dict[str, Any]) -> str | None:
        """Which recorded request shares the longest run of leading messages, and where they part."""
        mine = summary["message_hashes"]
        best: tuple[int, int, dict[str, Any]] | None = None
        for n, entry in enumerate(self._entries.values(), start=1):
            theirs = entry.get("request", {}).get("message_hashes") or []
            same = 0
            for a, b in zip(mine, theirs):
                if a != b:
                    break
                same += 1
            if best is None or same > best[0]:
                best = (same, n, entry)
        if best is None:
            return None
        same, n, entry = best
        req = entry.get("request", {})
        theirs = req.get("message_hashes") or []
        if same == len(mine) == len(theirs):
            where = "all messages are the same; the tools, tool_choice or model differ"
            return (
                f"closest recorded request: #{n} ({where}: recorded tools {req.get('tools')}, "
                f"tool_choice {req.get('tool_choice')!r}, model {req.get('model')!r})"
            )
        if same == min(len(mine), len(theirs)):
            where = f"the first {same} messages are the same; recorded {len(theirs)} messages, now {len(mine)}"
        else:
            where = f"the first {same} messages are the same; message {same + 1} differs"
        return (
            f"closest recorded request: #{n} ({where}; its last user message "
            f"{req.get('last_user_message')!r})"
        )

    # -- the LLM protocol ------------------------------------------------------------------

    async def _achat(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> ChatResponse:
        key, _, summary = self._request(messages, tools, tool_choice)
        if self.mode != "record":
            found = self._lookup(key)
            if found is not None:
                return _reply_from_json(found, self.model)
            if self.mode == "replay":
                raise self._miss(key, summary)
        assert self.llm is not None
        response = await self.llm._achat(messages, tools, tool_choice, **kwargs)
        self._record(key, summary, response)
        return response

    async def _astream(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponse]:
        key, _, summary = self._request(messages, tools, tool_choice)
        if self.mode != "record":
            found = self._lookup(key)
            if found is not None:
                for chunk in _replay_chunks(_reply_from_json(found, self.model)):
                    yield chunk
                return
            if self.mode == "replay":
                raise self._miss(key, summary)
        assert self.llm is not None
        last: ChatResponse | None = None
        async for chunk in self.llm._astream(messages, tools, tool_choice, **kwargs):
            last = chunk
            yield chunk
        if last is not None:
            self._record(key, summary, last)


def _replay_chunks(full: ChatResponse) -> list[ChatResponse]:
    """A recorded reply as a stream: its text in word-sized chunks, the whole reply last."""
    text = full.message.text
    pieces = _TOKEN_SPLIT.findall(text) or [""]
    chunks: list[ChatResponse] = []
    so_far = ""
    for i, piece in enumerate(pieces):
        so_far += piece
        if i == len(pieces) - 1:
            chunks.append(full.model_copy(update={"delta": piece}))
        else:
            chunks.append(
                ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=so_far),
                    delta=piece,
                    model=full.model,
                )
            )
    return chunks
