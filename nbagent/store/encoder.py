"""Values -> tagged JSON: the encoder every nbagent run record is built with.

Values are plain JSON where they can be; the others are tagged objects::

    {"$type": "tuple", "items": [...]}           {"$type": "AppendLog", "items": [...]}
    {"$type": "ChatMemoryBuffer", "token_limit": 3000, "messages": [...], "counts": [...]}
    {"$type": "Memory", ... the same, and "session": {"session_id": ..., ...}, "archived": 2}
    {"$type": "model", "class": "nbagent.messages:ChatMessage", "data": {...}}
    {"$type": "enum", "class": "module:Qualname", "value": ...}
    {"$type": "step", "id": "..."}   {"$type": "output", "n": 3}   (this task's steps/outputs)
    {"$type": "prefix", "of": <a list or AppendLog>, "n": 3}   (a step's view of its first 3 items)
    {"$ref": 7}   (the object marked "$id": 7 earlier in the file: shared values stay shared)

A file may name a class only if it is nbagent's own or registered with ``allow_type``
(``nbagent.allowlist``); ``nbagent.store.decoder`` reads it back.
"""

from __future__ import annotations

import base64
import enum
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from nbagent._prefix import PrefixView
from nbagent.allowlist import _ALLOWED, PersistError, _is_nbagent, _ref_of
from nbagent.memory import ChatMemoryBuffer, count_tokens
from nbagent.schema import StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.session_memory import Memory
from nbagent.snapshot import AppendLog, _Saved

__all__ = ["ValueEncoder", "SHARED_STR_CHARS", "plain_items", "model_data", "model_node", "memory_record"]

SHARED_STR_CHARS = 4096  # texts this long are written once per file and referred to after


# ----- paths for error messages (built only when an error happens) ---------------------------

Path_ = tuple[Any, ...] | None


def _path_text(path: Path_) -> str:
    parts: list[str] = []
    while path is not None:
        parent, key = path
        if parent is None or (isinstance(key, str) and key.startswith(".")):
            parts.append(str(key))
        else:
            parts.append(f"[{key!r}]")
        path = parent
    return "".join(reversed(parts)) or "(top)"


# ----- encoding --------------------------------------------------------------------------------


class ValueEncoder:
    """Turns values into JSON-ready data, giving every shareable object a reference number."""

    # a PrefixView as {"$type": "prefix", "of": its log, "n": k}: right for a file written
    # whole from memory (the log's first k items are the view's); an encoder whose records
    # outlive later cuts of the log (the store's rows) sets False: the view's items, as a list
    views_by_reference = True

    def __init__(self) -> None:
        self.numbers: dict[int, int] = {}  # id(obj) -> number
        self.keep: list[Any] = []  # holds every numbered object, so no id() is reused meanwhile
        self.used: set[int] = set()
        self.building: set[int] = set()  # models being encoded (a cycle through one is refused)
        self.steps: dict[str, TaskStep] = {}
        self.output_index: dict[int, int] = {}

    def _number(self, obj: Any) -> tuple[int, bool]:
        """(number, first time seen)."""
        key = id(obj)
        n = self.numbers.get(key)
        if n is not None:
            self.used.add(n)
            return n, False
        n = len(self.keep)
        self.numbers[key] = n
        self.keep.append(obj)
        return n, True

    def value(self, v: Any, path: Path_) -> Any:
        t = type(v)
        if t is str:
            if len(v) >= SHARED_STR_CHARS:
                # a long text kept in several places (extra_state and every undo snapshot) is
                # written once: 1 MB set once must not become 30 MB after 30 steps
                n, first = self._number(v)
                if not first:
                    return {"$ref": n}
                return {"$type": "str", "$id": n, "value": v}
            return v
        if v is None or t is bool or t is int:
            return v
        if t is float:
            if math.isfinite(v):
                return v
            return {"$type": "float", "value": repr(v)}
        handler = _HANDLERS.get(t)
        if handler is None:
            handler = _handler_for(t)
        return handler(self, v, path)

    # one handler per kind of value; ``_handler_for`` picks it once per type
    def _dict(self, v: dict[Any, Any], path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        out = plain_items(v, {"$id": n}, self.value, path)
        if out is not None:
            return out
        items = [[self.value(k, (path, ".<key>")), self.value(item, (path, k))] for k, item in list(v.items())]
        return {"$type": "dict", "$id": n, "items": items}

    def _list(self, v: list[Any], path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        tag = "list" if type(v) is list else "AppendLog"
        value = self.value
        return {"$type": tag, "$id": n, "items": [value(x, (path, i)) for i, x in enumerate(list(v))]}

    def _view(self, v: PrefixView[Any], path: Path_) -> Any:
        # a step's view of its task's sources so far: its log (written once per file) and a
        # length, so a ReAct run of N steps writes N lengths, not N^2 references
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        if self.views_by_reference:
            return {"$type": "prefix", "$id": n, "of": self.value(v.log, (path, ".of")), "n": len(v)}
        value = self.value
        return {"$type": "list", "$id": n, "items": [value(x, (path, i)) for i, x in enumerate(v)]}

    def _tuple(self, v: tuple[Any, ...], path: Path_) -> Any:
        value = self.value
        items = [
            x if (type(x) in _AS_IS or (type(x) is str and len(x) < SHARED_STR_CHARS)) else value(x, (path, i))
            for i, x in enumerate(v)
        ]
        return {"$type": "tuple", "items": items}

    def _set(self, v: Any, path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        items = [self.value(x, (path, i)) for i, x in enumerate(_sorted_if_possible(v))]
        return {"$type": type(v).__name__, "$id": n, "items": items}

    def _bytes(self, v: bytes, path: Path_) -> Any:
        return {"$type": "bytes", "base64": base64.b64encode(v).decode("ascii")}

    def _enum(self, v: enum.Enum, path: Path_) -> Any:
        return {"$type": "enum", "class": self._class_ref(type(v), path), "value": self.value(v.value, (path, ".value"))}

    def _step(self, v: TaskStep, path: Path_) -> Any:
        step = self.steps.get(v.step_id)
        if step is None:
            raise PersistError(f"cannot save {_path_text(path)}: step {v.step_id!r} is not a step of this task")
        return {"$type": "step", "id": v.step_id}

    def _output(self, v: TaskStepOutput, path: Path_) -> Any:
        k = self.output_index.get(id(v))
        if k is None:
            raise PersistError(
                f"cannot save {_path_text(path)}: a TaskStepOutput that is not one of this task's outputs"
            )
        return {"$type": "output", "n": k}

    def _task(self, v: Task, path: Path_) -> Any:
        raise PersistError(
            f"cannot save {_path_text(path)}: a Task object inside task state (keep its task_id instead)"
        )

    def _streaming(self, v: StreamingAgentChatResponse, path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        return {
            "$type": "StreamingAgentChatResponse",
            "$id": n,
            "response": v.response,
            "done": v.is_done,
            "sources": self.value(v.sources, (path, ".sources")),
            "metadata": self.value(getattr(v, "metadata", {}), (path, ".metadata")),
        }

    def _saved(self, v: _Saved, path: Path_) -> Any:
        return {
            "$type": "saved",
            "copy": v.is_copy,
            "value": self.value(v.value, (path, ".value")),
            "token": self.value(v.token, (path, ".token")),
        }

    def _unsupported(self, v: Any, path: Path_) -> Any:
        t = type(v)
        raise PersistError(
            f"cannot save {_path_text(path)}: a value of type {t.__module__}.{t.__qualname__} "
            f"({_short_repr(v)}); a run file holds JSON values, tuples, sets, bytes, AppendLog, "
            "ChatMemoryBuffer, Memory, pydantic models and Enums (nbagent's own, or registered with "
            "nbagent.persist.allow_type)"
        )

    def _class_ref(self, cls: type, path: Path_) -> str:
        ref = _ref_of(cls)
        if ref in _ALLOWED or (_is_nbagent(ref) and "<locals>" not in ref):
            return ref
        raise PersistError(
            f"cannot save {_path_text(path)}: {ref} is not an nbagent class; register it with "
            f"nbagent.persist.allow_type({cls.__qualname__}) (in the saving and the loading process) "
            "so the file may name it"
        )

    def _model(self, v: BaseModel, path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            if n in self.building:
                raise PersistError(f"cannot save {_path_text(path)}: the model contains itself")
            return {"$ref": n}
        cls = type(v)
        plan = _MODEL_PLANS.get(cls)
        if plan is None:
            plan = _model_plan(cls)
        ref = plan[0] if plan[0] is not None else self._class_ref(cls, path)
        self.building.add(n)
        data = model_data(v, plan, self.value, path)
        extra = v.model_extra
        if extra:
            for name, value in extra.items():
                data[name] = self.value(value, (path, f".{name}"))
        self.building.discard(n)
        return model_node(n, ref, data)

    def _memory(self, v: ChatMemoryBuffer, path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        out: dict[str, Any] = {"$type": type(v).__name__, "$id": n, **memory_record(v, path)}
        out["messages"] = self.value(v._messages, (path, ".messages"))
        out["counts"] = self.value(v._counts, (path, ".counts"))
        return out


def memory_record(v: ChatMemoryBuffer, path: Path_ = None) -> dict[str, Any]:
    """A memory's settings as a saved run keeps them: its token limit, its tokenizer (when not
    nbagent's counter: a registered function), and for a session ``Memory`` what its
    constructor took besides and how many of its messages are archived."""
    rec: dict[str, Any] = {"token_limit": v.token_limit}
    session = type(v) is Memory
    fn = v.given_tokenizer if session else v.tokenizer_fn  # type: ignore[attr-defined]
    if fn is not None and fn is not count_tokens:
        ref = _ref_of(fn) if hasattr(fn, "__qualname__") else repr(fn)
        if _ALLOWED.get(ref) is not fn:
            raise PersistError(
                f"cannot save {_path_text(path)}.tokenizer_fn: {ref} is not nbagent's token "
                "counter; register it with nbagent.persist.allow_type(fn) (a module-level "
                "function) so the loaded memory counts tokens the same way"
            )
        rec["tokenizer"] = ref
    if session:
        rec["session"] = v.settings()  # type: ignore[attr-defined]
        rec["archived"] = v._archived  # type: ignore[attr-defined]
    return rec


Encode = Callable[[Any, Path_], Any]  # a value -> its JSON (ValueEncoder.value, or an early exit's)
_AS_IS = frozenset({int, bool, type(None)})  # values written as they are (str: when short)
_HANDLERS: dict[type, Callable[[ValueEncoder, Any, Path_], Any]] = {}  # a value's exact type -> its handler


def _handler_for(t: type) -> Callable[[ValueEncoder, Any, Path_], Any]:
    """The handler for values of type ``t``, in the order the kinds are told apart (a subclass
    of str, int, dict, ... is not a JSON value: it goes on down the list)."""
    E = ValueEncoder
    if t is dict:
        h: Any = E._dict
    elif t is list or t is AppendLog:
        h = E._list
    elif t is PrefixView:
        h = E._view
    elif t is tuple:
        h = E._tuple
    elif t is set or t is frozenset:
        h = E._set
    elif t is bytes:
        h = E._bytes
    elif issubclass(t, enum.Enum):
        h = E._enum
    elif issubclass(t, TaskStep):
        h = E._step
    elif issubclass(t, TaskStepOutput):
        h = E._output
    elif issubclass(t, Task):
        h = E._task
    elif issubclass(t, BaseModel):
        h = E._model
    elif t is ChatMemoryBuffer or t is Memory:
        h = E._memory
    elif t is StreamingAgentChatResponse:
        h = E._streaming
    elif t is _Saved:
        h = E._saved
    else:
        h = E._unsupported
    # called directly: an encoder subclass changes ``value`` (which runs first), not these
    _HANDLERS[t] = h
    return h  # type: ignore[no-any-return]


# per model class: its reference when always allowed (nbagent's own; a class registered with
# allow_type is checked every time: the registry may change), and per field what
# ``ValueEncoder._model`` needs: (name, ".name", default, the type whose empty value is the default
# (list/dict/tuple) or None, FieldInfo, the Enum class it is annotated with or None)
_Plan = tuple[str | None, tuple[tuple[str, str, Any, Any, Any, Any], ...]]
_MODEL_PLANS: dict[type, _Plan] = {}
_FACTORY_TYPES: dict[Any, type] = {}  # default_factory -> the type it makes (called once)


def _model_plan(cls: type) -> _Plan:
    ref = _ref_of(cls)
    fields = []
    for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
        ann = info.annotation
        enum_type = ann if isinstance(ann, type) and issubclass(ann, enum.Enum) else None
        factory = info.default_factory
        if factory in (list, dict, tuple):
            empty = factory
        elif factory is None and type(info.default) in (list, dict, tuple) and not info.default:
            empty = type(info.default)
        else:
            empty = None  # (any other factory: _is_plain_default asks it)
        fields.append((name, f".{name}", info.default, empty, info, enum_type))
    plan = (ref if _is_nbagent(ref) and "<locals>" not in ref else None, tuple(fields))
    _MODEL_PLANS[cls] = plan
    return plan


def _is_plain_default(value: Any, info: Any) -> bool:
    """A field left at an empty default (None, False, "", [], {}) need not be written."""
    if value is None:
        return info.default is None
    if type(value) in (list, dict, tuple) and not value:
        factory = info.default_factory
        if factory is not None:
            made = _FACTORY_TYPES.get(factory)
            if made is None:
                try:
                    made = _FACTORY_TYPES[factory] = type(factory())  # type: ignore[call-arg]
                except Exception:  # noqa: BLE001
                    return False
            return made is type(value)
        return type(info.default) is type(value) and not info.default
    if type(value) is bool and value is False:
        return info.default is False
    return False


def _sorted_if_possible(items: Any) -> list[Any]:
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _short_repr(v: Any) -> str:
    try:
        text = repr(v)
    except Exception:  # noqa: BLE001
        return "unprintable"
    return text if len(text) <= 80 else text[:79] + "…"


# ----- the pieces of a record: the encoder's, and the store's early exits' (row_encoder) -------


def plain_items(d: dict[Any, Any], out: dict[str, Any], encode: Encode, path: Path_) -> dict[str, Any] | None:
    """``out`` with the items of ``d``, as a JSON object holds them (values that are not JSON
    scalars through ``encode``); None when a key is not a text, or starts with "$" (such a dict
    is written as a list of pairs)."""
    for k in d:
        if type(k) is not str or k.startswith("$"):
            return None
    for k, item in list(d.items()):
        ti = type(item)
        if ti in _AS_IS or (ti is str and len(item) < SHARED_STR_CHARS):
            out[k] = item  # what value() would return, without the call
        else:
            out[k] = encode(item, (path, k))
    return out


def model_data(v: BaseModel, plan: _Plan, encode: Encode, path: Path_) -> dict[str, Any]:
    """A model's fields as its record's ``data`` holds them: those left at an empty default
    are left out, values that are not JSON scalars go through ``encode``."""
    data: dict[str, Any] = {}
    get = v.__dict__.get
    for name, attr, default, empty, info, enum_type in plan[1]:
        value = get(name)
        if value is None:
            if default is not None:
                data[name] = None
            continue
        tv = type(value)
        if tv is str:
            if len(value) < SHARED_STR_CHARS:
                data[name] = value
                continue
        elif value is False:
            if default is False:
                continue
        elif tv is empty:
            if not value:
                continue
        elif tv in (list, dict, tuple) and not value and _is_plain_default(value, info):
            continue
        if tv is enum_type:
            raw = value._value_  # validation restores the member
            if type(raw) is str and len(raw) < SHARED_STR_CHARS:
                data[name] = raw
            else:
                data[name] = encode(raw, (path, attr))
        else:
            data[name] = encode(value, (path, attr))
    return data


def model_node(n: int, ref: str, data: dict[str, Any]) -> dict[str, Any]:
    """A model's record: its number, its class (``module:Qualname``), its ``data``."""
    return {"$type": "model", "$id": n, "class": ref, "data": data}


def _strip_unused(node: Any, used: set[int]) -> Any:
    """Drop ``$id`` marks nobody refers to; an unshared list becomes a plain JSON array."""
    if isinstance(node, list):
        return [_strip_unused(x, used) for x in node]
    if not isinstance(node, dict):
        return node
    n = node.get("$id")
    if n is not None and n not in used:
        node = {k: v for k, v in node.items() if k != "$id"}
        if node.get("$type") == "list":
            return [_strip_unused(x, used) for x in node["items"]]
        if node.get("$type") == "str":
            return node["value"]
    for k, v in node.items():
        if isinstance(v, (list, dict)):
            node[k] = _strip_unused(v, used)
    return node


# ----- decoding --------------------------------------------------------------------------------
