"""Tagged JSON -> values: the decoder that rebuilds what ``nbagent.store.encoder`` wrote,
keeping shared objects shared.

Classes are imported only from ``nbagent.*`` modules or from those registered with
``allow_type``: no pickle, nothing is ever eval'd.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from nbagent._prefix import PrefixView
from nbagent.allowlist import _ALLOWED, NotAllowedError, PersistError, _resolve
from nbagent.memory import ChatMemoryBuffer
from nbagent.schema import StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.session_memory import Memory
from nbagent.snapshot import AppendLog, _Saved

__all__ = ["ValueDecoder", "memory_tokenizer", "new_memory", "fill_memory"]


def memory_tokenizer(rec: dict[str, Any], where: str, fail: Callable[[str, str], PersistError]) -> Any:
    """The token counter a saved memory names (None: the default one); it must be registered."""
    if "tokenizer" not in rec:
        return None
    tokenizer = _ALLOWED.get(rec["tokenizer"])
    if tokenizer is None or isinstance(tokenizer, type):
        raise NotAllowedError(str(fail(
            where,
            f"the memory counts tokens with {rec['tokenizer']!r}; register that function with "
            "nbagent.persist.allow_type(fn) before loading",
        )))
    return tokenizer


#: what a session Memory's saved record may set besides its limit and tokenizer
_MEMORY_SETTINGS = frozenset(
    {"session_id", "chat_history_token_ratio", "token_flush_size", "image_token_size_estimate", "audio_token_size_estimate"}
)


def new_memory(rec: dict[str, Any], where: str, fail: Callable[[str, str], PersistError]) -> ChatMemoryBuffer:
    """An empty memory with a saved record's settings: a ChatMemoryBuffer, or a session
    ``Memory`` when the record has ``session`` (``encoder.memory_record``)."""
    tokenizer = memory_tokenizer(rec, where, fail)
    session = rec.get("session")
    if session is None:
        return ChatMemoryBuffer(token_limit=rec["token_limit"], tokenizer_fn=tokenizer)
    if type(session) is not dict or not set(session) <= _MEMORY_SETTINGS:
        raise fail(where, f"a Memory's saved settings must be a dict of {sorted(_MEMORY_SETTINGS)}")
    try:
        return Memory(token_limit=rec["token_limit"], tokenizer_fn=tokenizer, **session)
    except (TypeError, ValueError) as err:
        raise fail(where, f"the saved Memory's settings are not valid: {err}") from err


def fill_memory(
    buf: ChatMemoryBuffer, messages: list[Any], counts: list[Any], rec: dict[str, Any], where: str,
    fail: Callable[[str, str], PersistError],
) -> None:
    """Give a memory made by ``new_memory`` its messages (and a Memory its archived count)."""
    buf._messages = messages
    buf._counts = counts
    if type(buf) is Memory:
        archived = rec.get("archived", 0)
        if type(archived) is not int or not 0 <= archived <= len(messages):
            raise fail(where, f"a Memory's archived count must be an int from 0 to its {len(messages)} messages, got {archived!r}")
        buf._archived = archived


class ValueDecoder:
    """The inverse of ``ValueEncoder``: rebuilds values, keeping shared objects shared."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.objects: dict[int, Any] = {}
        self.damaged: dict[int, str] = {}  # object number -> the damaged task that defined it
        self.pending: list[int] = []  # objects defined, not yet whole (being filled)
        self.orphans: list[Any] = []  # the records of damaged tasks (see ``_orphan``)
        self._orphan_defs: dict[int, Any] | None = None
        self.steps: dict[str, TaskStep] = {}
        self.outputs: list[TaskStepOutput] = []

    def fail(self, where: str, why: str) -> PersistError:
        """The error for a value that cannot be rebuilt, naming the file, the place in it and
        why (returned, for the caller to raise).

        The store's readers call this; code that uses nbagent does not (so no example)."""
        return PersistError(f"{self.source}: {where}: {why}")

    def mark(self) -> Any:
        """Where decoding stands, before a task (see ``forget``).

        The store's readers call this; code that uses nbagent does not (so no example)."""
        return None

    def forget(self, mark: Any, task: str) -> None:
        """After a damaged task: drop the objects it left half built, and every object
        defined after the first of them (one could hold it); a later reference to one fails,
        naming the task. Objects it built whole before stay: another task may share them.

        The store's readers call this; code that uses nbagent does not (so no example)."""
        if self.pending:
            numbers = list(self.objects)
            for n in numbers[numbers.index(self.pending[0]) :]:
                del self.objects[n]
                self.damaged[n] = task
            self.pending.clear()

    def adopt_orphan(self, record: Any) -> None:
        """Keep a damaged task's record: an object it defined, intact, that a later task
        refers to (a run file writes a shared object once, where it first appears) is
        rebuilt from it then (``_orphan``).

        The store's readers call this; code that uses nbagent does not (so no example)."""
        self.orphans.append(record)
        self._orphan_defs = None

    def _orphan(self, n: int) -> Any:
        if self._orphan_defs is None:
            defs: dict[int, Any] = {}
            stack = list(self.orphans)
            while stack:
                x = stack.pop()
                if type(x) is dict:
                    i = x.get("$id")
                    if type(i) is int:
                        defs.setdefault(i, x)
                    stack.extend(x.values())
                elif type(x) is list:
                    stack.extend(x)
            self._orphan_defs = defs
        return self._orphan_defs.get(n)

    def _define(self, n: Any, obj: Any, where: str) -> None:
        if type(n) is not int or n in self.objects or n in self.damaged:
            raise self.fail(where, f"bad or repeated object number {n!r}")
        self.objects[n] = obj
        self.pending.append(n)  # until the value that defines it is whole

    def value(self, d: Any, where: str) -> Any:
        """Rebuild one JSON value of a run: plain values as they are, ``{"$ref": n}`` the object
        defined before as number n, ``{"$type": ...}`` a tagged type (a registered one, see
        ``allow_type``); anything else fails with a ``PersistError`` naming ``where``.

        The store's readers call this; code that uses nbagent does not (so no example)."""
        if d is None or type(d) in (str, bool, int, float):
            return d
        if type(d) is list:
            return [self.value(x, where) for x in d]
        if type(d) is not dict:
            raise self.fail(where, f"unexpected JSON value {type(d).__name__}")
        if "$ref" in d:
            n = d["$ref"]
            if type(n) is int and n in self.damaged:
                raise self.fail(where, f"refers to object {n}, which belongs to damaged task {self.damaged[n]}")
            if type(n) is int and n not in self.objects and self.orphans:
                node = self._orphan(n)
                if node is not None:
                    return self.value(node, where)  # defines it
            if type(n) is not int or n not in self.objects:
                raise self.fail(where, f"reference to object {n!r}, which is not defined before it (corrupt file?)")
            return self.objects[n]
        tag = d.get("$type")
        pending = self.pending
        mark = len(pending)
        if tag is None:
            out: dict[str, Any] = {}
            if "$id" in d:
                self._define(d["$id"], out, where)
            for k, v in d.items():
                if k != "$id":
                    out[k] = self.value(v, where)
            if len(pending) > mark:
                del pending[mark:]  # whole now
            return out
        handler = _TAGS.get(tag) if isinstance(tag, str) else None
        if handler is None:
            raise self.fail(where, f"unknown value tag $type={tag!r}; known: {sorted(_TAGS)}")
        try:
            built = handler(self, d, where)
            if len(pending) > mark:
                del pending[mark:]  # whole now
            return built
        except PersistError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise self.fail(where, f"bad {tag!r} value ({type(err).__name__}: {err})") from err

    def _items(self, d: dict[str, Any], where: str) -> list[Any]:
        items = d["items"]
        if type(items) is not list:
            raise self.fail(where, f"{d['$type']!r} needs a list of items")
        return items

    def _container(self, d: dict[str, Any], where: str, obj: Any, add: Callable[[Any], Any]) -> Any:
        if "$id" in d:
            self._define(d["$id"], obj, where)
        for x in self._items(d, where):
            add(self.value(x, where))
        return obj

    def _list(self, d: dict[str, Any], where: str) -> Any:
        out: list[Any] = []
        return self._container(d, where, out, out.append)

    def _prefix(self, d: dict[str, Any], where: str) -> Any:
        of = self.value(d["of"], where)
        n = d["n"]
        if not isinstance(of, list) or type(n) is not int or not 0 <= n <= len(of):
            raise self.fail(where, "a 'prefix' needs a list 'of' and an int 'n' from 0 to its length")
        view = of.view(n) if type(of) is AppendLog else PrefixView.over(of, n)
        if "$id" in d:
            self._define(d["$id"], view, where)
        return view

    def _appendlog(self, d: dict[str, Any], where: str) -> Any:
        out: AppendLog[Any] = AppendLog()
        return self._container(d, where, out, out.append)

    def _set(self, d: dict[str, Any], where: str) -> Any:
        out: set[Any] = set()
        return self._container(d, where, out, out.add)

    def _frozenset(self, d: dict[str, Any], where: str) -> Any:
        items = [self.value(x, where) for x in self._items(d, where)]
        out = frozenset(items)
        if "$id" in d:
            self._define(d["$id"], out, where)
        return out

    def _tuple(self, d: dict[str, Any], where: str) -> Any:
        return tuple(self.value(x, where) for x in self._items(d, where))

    def _dict(self, d: dict[str, Any], where: str) -> Any:
        out: dict[Any, Any] = {}
        if "$id" in d:
            self._define(d["$id"], out, where)
        for pair in self._items(d, where):
            if type(pair) is not list or len(pair) != 2:
                raise self.fail(where, "a dict item must be a [key, value] pair")
            out[self.value(pair[0], where)] = self.value(pair[1], where)
        return out

    def _float(self, d: dict[str, Any], where: str) -> Any:
        text = d["value"]
        if text not in ("nan", "inf", "-inf"):
            raise self.fail(where, f"bad float {text!r}")
        return float(text)

    def _bytes(self, d: dict[str, Any], where: str) -> Any:
        return base64.b64decode(d["base64"], validate=True)

    def _enum(self, d: dict[str, Any], where: str) -> Any:
        cls = _resolve(d["class"], f"{self.source}: {where}")
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise self.fail(where, f"{d['class']!r} is not an Enum")
        return cls(self.value(d["value"], where))

    def _model(self, d: dict[str, Any], where: str) -> Any:
        ref = d["class"]
        cls = _resolve(ref, f"{self.source}: {where}")
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or issubclass(
            cls, (Task, TaskStep, TaskStepOutput)
        ):
            raise self.fail(where, f"{ref!r} is not a pydantic model that can be stored as a value")
        raw = d["data"]
        if type(raw) is not dict:
            raise self.fail(where, f"model {ref!r} needs a data object")
        data = {k: self.value(v, f"{where}.{k}") for k, v in raw.items()}
        try:
            obj = cls.model_validate(data)
        except ValidationError as err:
            raise self.fail(where, f"the saved {ref} does not validate: {err}") from err
        if "$id" in d:
            self._define(d["$id"], obj, where)
        return obj

    def _memory(self, d: dict[str, Any], where: str) -> Any:
        buf = new_memory(d, where, self.fail)
        if "$id" in d:
            self._define(d["$id"], buf, where)
        messages = self.value(d["messages"], f"{where}.messages")
        counts = self.value(d["counts"], f"{where}.counts")
        if type(messages) is not list or type(counts) is not list or len(messages) != len(counts):
            raise self.fail(where, "a ChatMemoryBuffer needs lists of messages and counts of the same length")
        fill_memory(buf, messages, counts, d, where, self.fail)
        return buf

    def _stream(self, d: dict[str, Any], where: str) -> Any:
        response = StreamingAgentChatResponse(None, prefix=str(d["response"]))
        if "$id" in d:
            self._define(d["$id"], response, where)
        response.sources = self.value(d["sources"], where)
        response.metadata = self.value(d["metadata"], where)
        return response

    def _saved(self, d: dict[str, Any], where: str) -> Any:
        return _Saved(self.value(d["value"], where), self.value(d["token"], where), bool(d["copy"]))

    def _step(self, d: dict[str, Any], where: str) -> Any:
        step = self.steps.get(d["id"])
        if step is None:
            raise self.fail(where, f"refers to step {d['id']!r}, which this task does not have")
        return step

    def _output(self, d: dict[str, Any], where: str) -> Any:
        n = d["n"]
        if type(n) is not int or not 0 <= n < len(self.outputs):
            raise self.fail(where, f"refers to output {n!r}, which is not defined before it")
        return self.outputs[n]


def _str(dec: ValueDecoder, d: dict[str, Any], where: str) -> Any:
    value = d["value"]
    if type(value) is not str:
        raise dec.fail(where, f"a shared text must be a string, got {type(value).__name__}")
    if "$id" in d:
        dec._define(d["$id"], value, where)
    return value


_TAGS: dict[str, Callable[[ValueDecoder, dict[str, Any], str], Any]] = {
    "str": _str,
    "list": ValueDecoder._list,
    "AppendLog": ValueDecoder._appendlog,
    "prefix": ValueDecoder._prefix,
    "tuple": ValueDecoder._tuple,
    "set": ValueDecoder._set,
    "frozenset": ValueDecoder._frozenset,
    "dict": ValueDecoder._dict,
    "float": ValueDecoder._float,
    "bytes": ValueDecoder._bytes,
    "enum": ValueDecoder._enum,
    "model": ValueDecoder._model,
    "ChatMemoryBuffer": ValueDecoder._memory,
    "Memory": ValueDecoder._memory,
    "StreamingAgentChatResponse": ValueDecoder._stream,
    "saved": ValueDecoder._saved,
    "step": ValueDecoder._step,
    "output": ValueDecoder._output,
}


def _need(obj: Any, key: str, kinds: type | tuple[type, ...], where: str, source: str) -> Any:
    if not isinstance(obj, dict):
        raise PersistError(f"{source}: {where} should be a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise PersistError(f"{source}: {where} lacks {key!r} (truncated or not a run file?)")
    value = obj[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _as_tuple(kinds)):
        names = "/".join(k.__name__ for k in _as_tuple(kinds))
        raise PersistError(f"{source}: {where}.{key} should be {names}, got {type(value).__name__}")
    return value


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)
