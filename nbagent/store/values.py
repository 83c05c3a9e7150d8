"""Values <-> tagged JSON: the encoder and decoder every nbagent run record is built with.

Values are plain JSON where they can be; the others are tagged objects::

    {"$type": "tuple", "items": [...]}           {"$type": "AppendLog", "items": [...]}
    {"$type": "ChatMemoryBuffer", "token_limit": 3000, "messages": [...], "counts": [...]}
    {"$type": "model", "class": "nbagent.messages:ChatMessage", "data": {...}}
    {"$type": "enum", "class": "module:Qualname", "value": ...}
    {"$type": "step", "id": "..."}   {"$type": "output", "n": 3}   (this task's steps/outputs)
    {"$type": "prefix", "of": <a list or AppendLog>, "n": 3}   (a step's view of its first 3 items)
    {"$ref": 7}   (the object marked "$id": 7 earlier in the file: shared values stay shared)

Classes are imported only from ``nbagent.*`` modules or from those registered with
``allow_type``: no pickle, nothing is ever eval'd.
"""

from __future__ import annotations

import base64
import enum
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from nbagent._prefix import PrefixView
from nbagent.allowlist import (  # the type allow-list lives below the store; these names stay here too
    _ALLOWED,
    _RESOLVED,
    NotAllowedError,
    PersistError,
    _is_nbagent,
    _ref_of,
    _resolve,
    allow_type,
    is_allowed_class,
)
from nbagent.memory import ChatMemoryBuffer, count_tokens
from nbagent.snapshot import AppendLog, _Saved
from nbagent.schema import StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput

__all__ = ["PersistError", "NotAllowedError", "allow_type", "is_allowed_class"]

SHARED_STR_CHARS = 4096  # texts this long are written once per file and referred to after


# ----- paths for error messages (built only when an error happens) ---------------------------

Path_ = tuple[Any, ...] | None


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


class _Encoder:
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
        for k in v:
            if type(k) is not str or k.startswith("$"):
                break
        else:
            out: dict[str, Any] = {"$id": n}
            value = self.value
            for k, item in list(v.items()):
                ti = type(item)
                if ti in _AS_IS or (ti is str and len(item) < SHARED_STR_CHARS):
                    out[k] = item  # what value() would return, without the call
                else:
                    out[k] = value(item, (path, k))
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
            "ChatMemoryBuffer, pydantic models and Enums (nbagent's own, or registered with "
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
        data: dict[str, Any] = {}
        fields = v.__dict__
        encode = self.value
        for name, attr, default, empty, info, enum_type in plan[1]:
            value = fields.get(name, None)
            if value is None:
                if default is None:
                    continue
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
        extra = v.model_extra
        if extra:
            for name, value in extra.items():
                data[name] = self.value(value, (path, f".{name}"))
        self.building.discard(n)
        return {"$type": "model", "$id": n, "class": ref, "data": data}

    def _memory(self, v: ChatMemoryBuffer, path: Path_) -> Any:
        n, first = self._number(v)
        if not first:
            return {"$ref": n}
        out: dict[str, Any] = {"$type": "ChatMemoryBuffer", "$id": n, "token_limit": v.token_limit}
        if v.tokenizer_fn is not count_tokens:
            fn = v.tokenizer_fn
            ref = _ref_of(fn) if hasattr(fn, "__qualname__") else repr(fn)
            if _ALLOWED.get(ref) is not fn:
                raise PersistError(
                    f"cannot save {_path_text(path)}.tokenizer_fn: {ref} is not nbagent's token "
                    "counter; register it with nbagent.persist.allow_type(fn) (a module-level "
                    "function) so the loaded memory counts tokens the same way"
                )
            out["tokenizer"] = ref
        out["messages"] = self.value(v._messages, (path, ".messages"))
        out["counts"] = self.value(v._counts, (path, ".counts"))
        return out


_AS_IS = frozenset({int, bool, type(None)})  # values written as they are (str: when short)
_HANDLERS: dict[type, Callable[[_Encoder, Any, Path_], Any]] = {}  # a value's exact type -> its handler


def _handler_for(t: type) -> Callable[[_Encoder, Any, Path_], Any]:
    """The handler for values of type ``t``, in the order the kinds are told apart (a subclass
    of str, int, dict, ... is not a JSON value: it goes on down the list)."""
    E = _Encoder
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
    elif t is ChatMemoryBuffer:
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
# ``_Encoder._model`` needs: (name, ".name", default, the type whose empty value is the default
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


class _Decoder:
    """The inverse of ``_Encoder``: rebuilds values, keeping shared objects shared."""

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
        return PersistError(f"{self.source}: {where}: {why}")

    def mark(self) -> Any:
        """Where decoding stands, before a task (see ``forget``)."""
        return None

    def forget(self, mark: Any, task: str) -> None:
        """After a damaged task: drop the objects it left half built, and every object
        defined after the first of them (one could hold it); a later reference to one fails,
        naming the task. Objects it built whole before stay: another task may share them."""
        if self.pending:
            numbers = list(self.objects)
            for n in numbers[numbers.index(self.pending[0]) :]:
                del self.objects[n]
                self.damaged[n] = task
            self.pending.clear()

    def adopt_orphan(self, record: Any) -> None:
        """Keep a damaged task's record: an object it defined, intact, that a later task
        refers to (a run file writes a shared object once, where it first appears) is
        rebuilt from it then (``_orphan``)."""
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
        buf = ChatMemoryBuffer(token_limit=d["token_limit"], tokenizer_fn=memory_tokenizer(d, where, self.fail))
        if "$id" in d:
            self._define(d["$id"], buf, where)
        messages = self.value(d["messages"], f"{where}.messages")
        counts = self.value(d["counts"], f"{where}.counts")
        if type(messages) is not list or type(counts) is not list or len(messages) != len(counts):
            raise self.fail(where, "a ChatMemoryBuffer needs lists of messages and counts of the same length")
        buf._messages = messages
        buf._counts = counts
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


def _str(dec: _Decoder, d: dict[str, Any], where: str) -> Any:
    value = d["value"]
    if type(value) is not str:
        raise dec.fail(where, f"a shared text must be a string, got {type(value).__name__}")
    if "$id" in d:
        dec._define(d["$id"], value, where)
    return value


_TAGS: dict[str, Callable[[_Decoder, dict[str, Any], str], Any]] = {
    "str": _str,
    "list": _Decoder._list,
    "AppendLog": _Decoder._appendlog,
    "prefix": _Decoder._prefix,
    "tuple": _Decoder._tuple,
    "set": _Decoder._set,
    "frozenset": _Decoder._frozenset,
    "dict": _Decoder._dict,
    "float": _Decoder._float,
    "bytes": _Decoder._bytes,
    "enum": _Decoder._enum,
    "model": _Decoder._model,
    "ChatMemoryBuffer": _Decoder._memory,
    "StreamingAgentChatResponse": _Decoder._stream,
    "saved": _Decoder._saved,
    "step": _Decoder._step,
    "output": _Decoder._output,
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
