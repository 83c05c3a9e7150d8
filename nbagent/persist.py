"""Save and load a runner's whole state as versioned JSON: no pickle, nothing is ever eval'd.

A run file holds every task with its steps and links (by id), queue, completed and undone
outputs, memory, ``extra_state`` / ``step_state``, failures and undo history, so a task loaded
in a fresh process continues exactly where it stopped (and ``undo_step`` still works).

The document::

    {"format": "nbagent-run", "version": 1, "nbagent": "0.1.0",
     "runner": {"class", "worker" (its describe()), "settings", "pricing", "ids" (the seeded
                id generator's state, or null), "memory"},
     "tasks": [{"task_id", "input", "status", "steps" (ids, inputs, links as ids), "outputs",
                "memory", "scratch_memory", "extra_state", "step_states", "queue", "completed",
                "done", "undone_outputs", "undone_edges", "undone_ids", "history" (undo
                snapshots), "failures", "finalized", "abandoned", "keep_history",
                "final_response", "models" (the model of each step, for costs)}]}

Values are plain JSON where they can be; the others are tagged objects::

    {"$type": "tuple", "items": [...]}           {"$type": "AppendLog", "items": [...]}
    {"$type": "ChatMemoryBuffer", "token_limit": 3000, "messages": [...], "counts": [...]}
    {"$type": "model", "class": "nbagent.messages:ChatMessage", "data": {...}}
    {"$type": "enum", "class": "module:Qualname", "value": ...}
    {"$type": "step", "id": "..."}   {"$type": "output", "n": 3}   (this task's steps/outputs)
    {"$ref": 7}   (the object marked "$id": 7 earlier in the file: shared values stay shared)

Classes are imported only from ``nbagent.*`` modules or from those registered with
``allow_type``. Writes are atomic (a temporary file, then a rename).

Not saved: the worker and its model (code, not state: pass them to ``load``), event
listeners, a pydantic model's private attributes, and the unread rest of a streamed answer
(what was read is kept). A save rewrites the whole file: about 0.1 s and 2 MB for a
1,000-step ReAct task, which autosave pays after every step.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import inspect
import importlib
import json
import math
import os
import random
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from nbagent import ids as _ids
from nbagent._files import atomic_write_text
from nbagent.memory import ChatMemoryBuffer, count_tokens
from nbagent.messages import TokenUsage
from nbagent.runner.snapshot import AppendLog, _Saved
from nbagent.runner.state import _NO_STATE, StepFailure, StepSnapshot, TaskState
from nbagent.schema import StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = [
    "FORMAT",
    "VERSION",
    "PersistError",
    "SavedWorker",
    "allow_type",
    "save_runner",
    "load_runner",
    "runner_to_dict",
    "runner_from_dict",
    "read_run_file",
    "atomic_write_text",
    "set_autosave",
    "autosave_path",
    "AutosaveWarning",
]

FORMAT = "nbagent-run"
VERSION = 1

R = TypeVar("R", bound="AgentRunner")

_SETTINGS = ("keep_history", "delete_task_on_finish", "default_tool_choice", "verbose")
_OPTIONAL_SETTINGS = ("max_concurrency",)  # ParallelAgentRunner's
_ALLOWED: dict[str, Any] = {}  # "module:Qualname" -> class or function registered by the user


class PersistError(ValueError):
    """A run could not be saved, or a run file could not be read: says where and why."""


def allow_type(obj: Any) -> Any:
    """Let a class (a pydantic model or an Enum) or a tokenizer function from outside nbagent
    be saved and loaded. Loading imports only nbagent's own classes and the ones allowed here.

    Usable as a decorator; returns ``obj``.
    """
    ok = isinstance(obj, type) and issubclass(obj, (BaseModel, enum.Enum))
    if not ok and not callable(obj):
        raise TypeError(f"allow_type takes a pydantic model class, an Enum or a function, got {obj!r}")
    ref = _ref_of(obj)
    if "<locals>" in ref:
        raise PersistError(f"{ref} is defined inside a function; only module-level ones can be loaded again")
    _ALLOWED[ref] = obj
    return obj


def _ref_of(obj: Any) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def _is_nbagent(ref: str) -> bool:
    module = ref.partition(":")[0]
    return module == "nbagent" or module.startswith("nbagent.")


def _resolve(ref: str, where: str) -> Any:
    """The class or function a ``module:Qualname`` names, if nbagent's or allowed; never eval."""
    if not isinstance(ref, str) or ":" not in ref:
        raise PersistError(f"{where}: bad class reference {ref!r} (expected 'module:Qualname')")
    found = _ALLOWED.get(ref)
    if found is not None:
        return found
    if not _is_nbagent(ref):
        raise PersistError(
            f"{where}: the file names {ref!r}, which is not an nbagent class; loading imports only "
            "nbagent's own classes and those registered with nbagent.persist.allow_type(cls): "
            "register it first if you trust this file"
        )
    module_name, _, qualname = ref.partition(":")
    parts = qualname.split(".")
    names = [*module_name.split("."), *parts]
    if not qualname or any(not p.isidentifier() or p.startswith("__") for p in names):
        raise PersistError(f"{where}: bad class reference {ref!r}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in parts:
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise PersistError(f"{where}: cannot find {ref!r} ({type(err).__name__}: {err})") from err
    if not isinstance(obj, type) or not _is_nbagent(f"{obj.__module__}:"):
        raise PersistError(f"{where}: {ref!r} is not a class defined in nbagent")
    return obj


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


class _Encoder:
    """Turns values into JSON-ready data, giving every shareable object a reference number."""

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
        if v is None or t is str or t is bool or t is int:
            return v
        if t is float:
            if math.isfinite(v):
                return v
            return {"$type": "float", "value": repr(v)}
        if t is dict:
            n, first = self._number(v)
            if not first:
                return {"$ref": n}
            if all(type(k) is str and not k.startswith("$") for k in v):
                out: dict[str, Any] = {"$id": n}
                for k, item in list(v.items()):
                    out[k] = self.value(item, (path, k))
                return out
            items = [[self.value(k, (path, ".<key>")), self.value(item, (path, k))] for k, item in list(v.items())]
            return {"$type": "dict", "$id": n, "items": items}
        if t is list or t is AppendLog:
            n, first = self._number(v)
            if not first:
                return {"$ref": n}
            tag = "list" if t is list else "AppendLog"
            return {"$type": tag, "$id": n, "items": [self.value(x, (path, i)) for i, x in enumerate(list(v))]}
        if t is tuple:
            return {"$type": "tuple", "items": [self.value(x, (path, i)) for i, x in enumerate(v)]}
        if t is set or t is frozenset:
            n, first = self._number(v)
            if not first:
                return {"$ref": n}
            items = [self.value(x, (path, i)) for i, x in enumerate(_sorted_if_possible(v))]
            return {"$type": t.__name__, "$id": n, "items": items}
        if t is bytes:
            return {"$type": "bytes", "base64": base64.b64encode(v).decode("ascii")}
        if isinstance(v, enum.Enum):
            return {"$type": "enum", "class": self._class_ref(t, path), "value": self.value(v.value, (path, ".value"))}
        if isinstance(v, TaskStep):
            step = self.steps.get(v.step_id)
            if step is None:
                raise PersistError(
                    f"cannot save {_path_text(path)}: step {v.step_id!r} is not a step of this task"
                )
            return {"$type": "step", "id": v.step_id}
        if isinstance(v, TaskStepOutput):
            k = self.output_index.get(id(v))
            if k is None:
                raise PersistError(
                    f"cannot save {_path_text(path)}: a TaskStepOutput that is not one of this "
                    "task's outputs"
                )
            return {"$type": "output", "n": k}
        if isinstance(v, Task):
            raise PersistError(
                f"cannot save {_path_text(path)}: a Task object inside task state (keep its "
                "task_id instead)"
            )
        if isinstance(v, BaseModel):
            return self._model(v, path)
        if t is ChatMemoryBuffer:
            return self._memory(v, path)
        if t is StreamingAgentChatResponse:
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
        if t is _Saved:
            return {
                "$type": "saved",
                "copy": v.is_copy,
                "value": self.value(v.value, (path, ".value")),
                "token": self.value(v.token, (path, ".token")),
            }
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
        ref = self._class_ref(cls, path)
        self.building.add(n)
        data: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            value = v.__dict__.get(name, None)
            if _is_plain_default(value, info):
                continue
            if isinstance(value, enum.Enum) and info.annotation is type(value):
                data[name] = self.value(value.value, (path, f".{name}"))  # validation restores it
            else:
                data[name] = self.value(value, (path, f".{name}"))
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


def _is_plain_default(value: Any, info: Any) -> bool:
    """A field left at an empty default (None, False, "", [], {}) need not be written."""
    if value is None:
        return info.default is None
    if type(value) in (list, dict, tuple) and not value:
        if info.default_factory is not None:
            try:
                return type(info.default_factory()) is type(value)  # type: ignore[call-arg]
            except Exception:  # noqa: BLE001
                return False
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
        self.steps: dict[str, TaskStep] = {}
        self.outputs: list[TaskStepOutput] = []

    def fail(self, where: str, why: str) -> PersistError:
        return PersistError(f"{self.source}: {where}: {why}")

    def _define(self, n: Any, obj: Any, where: str) -> None:
        if type(n) is not int or n in self.objects:
            raise self.fail(where, f"bad or repeated object number {n!r}")
        self.objects[n] = obj

    def value(self, d: Any, where: str) -> Any:
        if d is None or type(d) in (str, bool, int, float):
            return d
        if type(d) is list:
            return [self.value(x, where) for x in d]
        if type(d) is not dict:
            raise self.fail(where, f"unexpected JSON value {type(d).__name__}")
        if "$ref" in d:
            n = d["$ref"]
            if type(n) is not int or n not in self.objects:
                raise self.fail(where, f"reference to object {n!r}, which is not defined before it (corrupt file?)")
            return self.objects[n]
        tag = d.get("$type")
        if tag is None:
            out: dict[str, Any] = {}
            if "$id" in d:
                self._define(d["$id"], out, where)
            for k, v in d.items():
                if k != "$id":
                    out[k] = self.value(v, where)
            return out
        handler = _TAGS.get(tag) if isinstance(tag, str) else None
        if handler is None:
            raise self.fail(where, f"unknown value tag $type={tag!r}; known: {sorted(_TAGS)}")
        try:
            return handler(self, d, where)
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
        tokenizer = None
        if "tokenizer" in d:
            tokenizer = _ALLOWED.get(d["tokenizer"])
            if tokenizer is None or isinstance(tokenizer, type):
                raise self.fail(
                    where,
                    f"the memory counts tokens with {d['tokenizer']!r}; register that function with "
                    "nbagent.persist.allow_type(fn) before loading",
                )
        buf = ChatMemoryBuffer(token_limit=d["token_limit"], tokenizer_fn=tokenizer)
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


_TAGS: dict[str, Callable[[_Decoder, dict[str, Any], str], Any]] = {
    "list": _Decoder._list,
    "AppendLog": _Decoder._appendlog,
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


# ----- the runner ------------------------------------------------------------------------------


def _jsonable_info(info: dict[str, Any]) -> dict[str, Any]:
    """A worker's ``describe()`` reduced to JSON scalars and lists of strings."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if v is None or type(v) in (str, int, float, bool):
            out[str(k)] = v
        elif isinstance(v, (list, tuple)):
            out[str(k)] = [str(x) for x in v]
        else:
            out[str(k)] = str(v)
    return out


def _worker_info(runner: AgentRunner) -> dict[str, Any]:
    worker = runner.agent_worker
    try:
        info = dict(worker.describe())
    except Exception:  # noqa: BLE001 - the file is still useful without it
        info = {"kind": type(worker).__name__}
    if isinstance(worker, SavedWorker):
        info = dict(worker.info)
    return _jsonable_info(info)


def runner_to_dict(runner: AgentRunner) -> dict[str, Any]:
    """The runner's whole state as JSON-ready data (see the module docstring for the format)."""
    from nbagent import __version__

    enc = _Encoder()
    settings = {name: getattr(runner, name) for name in _SETTINGS}
    for name in _OPTIONAL_SETTINGS:
        if hasattr(runner, name):
            settings[name] = getattr(runner, name)
    extra_settings = getattr(runner, "_persist_settings", None)
    if callable(extra_settings):
        settings.update(extra_settings())
    settings["init_task_state_kwargs"] = runner.init_task_state_kwargs
    pricing = runner.__dict__.get("_pricing")
    rng = _ids._rng
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "nbagent": __version__,
        "runner": {
            "class": type(runner).__name__,
            "worker": _worker_info(runner),
            "settings": enc.value(settings, (None, "runner.settings")),
            "pricing": pricing.to_dict() if pricing is not None else None,
            "ids": _rng_state(rng) if rng is not None else None,
            "memory": enc.value(runner.memory, (None, "runner.memory")),
        },
        "tasks": [_task_to_dict(enc, runner, state) for state in list(runner._tasks.values())],
    }
    return _strip_unused(doc, enc.used)  # type: ignore[no-any-return]


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _task_to_dict(enc: _Encoder, runner: AgentRunner, state: TaskState) -> dict[str, Any]:
    task = state.task
    root: Path_ = (None, f"task {task.task_id}")
    enc.steps = dict(state.steps)
    for step in state.step_queue:  # normally registered already; be tolerant of odd states
        enc.steps.setdefault(step.step_id, step)
    outputs: list[TaskStepOutput] = []
    enc.output_index = {}
    for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
        if id(out) not in enc.output_index:
            enc.output_index[id(out)] = len(outputs)
            outputs.append(out)
    for out in outputs:
        enc.steps.setdefault(out.task_step.step_id, out.task_step)
        for nxt in out.next_steps:
            enc.steps.setdefault(nxt.step_id, nxt)
    for snap in state.history:
        for s in snap.queue or ():
            enc.steps.setdefault(s.step_id, s)
    pending = list(enc.steps.values())
    while pending:  # steps reachable only through links (odd states) are saved too
        s = pending.pop()
        for linked in [*s.next_steps.values(), *s.prev_steps.values()]:
            if linked.step_id not in enc.steps:
                enc.steps[linked.step_id] = linked
                pending.append(linked)
    models: dict[str, str] = runner.__dict__.get("_step_models", {})
    running = [enc.steps[sid] for sid in enc.steps if sid in state.running]
    steps = []
    for s in enc.steps.values():
        step_record: dict[str, Any] = {
            "step_id": s.step_id,
            "input": s.input,
            "is_ready": s.is_ready,
            "next_steps": list(s.next_steps),
            "prev_steps": list(s.prev_steps),
        }
        if s.step_id not in state.steps:
            step_record["registered"] = False  # reachable, but not in the task's registry
        steps.append(step_record)
    out_records = []
    for i, out in enumerate(outputs):
        p: Path_ = (root, f".outputs[{i}] (step {out.task_step.step_id})")
        usage = out.usage
        out_records.append(
            {
                "step_id": out.task_step.step_id,
                "is_last": out.is_last,
                "next_steps": [s.step_id for s in out.next_steps],
                "reasoning": out.reasoning,
                "latency_s": out.latency_s,
                "usage": None if usage is None else {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                },
                "output": enc.value(out.output, (p, ".output")),
                "tool_outputs": enc.value(out.tool_outputs, (p, ".tool_outputs")),
            }
        )
    record: dict[str, Any] = {
        "task_id": task.task_id,
        "input": task.input,
        "status": state.status.value,
        "steps": steps,
        "outputs": out_records,
        "memory": enc.value(task.memory, (root, ".memory")),
        "scratch_memory": enc.value(task.scratch_memory, (root, ".scratch_memory")),
        "extra_state": enc.value(task.extra_state, (root, ".extra_state")),
        "step_states": {
            sid: enc.value(s.step_state, (root, f".steps[{sid!r}].step_state"))
            for sid, s in enc.steps.items()
        },
        "queue": [s.step_id for s in running] + [s.step_id for s in state.step_queue],
        "completed": [enc.output_index[id(o)] for o in state.completed_steps],
        "done": {sid: enc.output_index[id(o)] for sid, o in state.outputs.items()},
        "undone_outputs": [enc.output_index[id(o)] for o in state.undone_outputs],
        "undone_edges": [[a, b] for a, b in state.undone_edges],
        "undone_ids": sorted(state.undone_ids),
        "history": [_snapshot_to_dict(enc, snap, (root, f".history[{i}]")) for i, snap in enumerate(state.history)],
        "failures": [
            {
                "step_id": f.step_id,
                "error_type": f.error_type,
                "message": f.message,
                "traceback": f.traceback,
                "at": f.at,
                "attempt": f.attempt,
            }
            for f in state.failures
        ],
        "finalized": state.finalized,
        "abandoned": state.abandoned,
        "keep_history": state.keep_history,
        "final_response": enc.value(state.final_response, (root, ".final_response")),
        "models": {sid: models[sid] for sid in enc.steps if sid in models},
    }
    return record


_SNAPSHOT_FIELDS = frozenset(f.name for f in dataclasses.fields(StepSnapshot))


def _snapshot_to_dict(enc: _Encoder, snap: StepSnapshot, path: Path_) -> dict[str, Any]:
    record: dict[str, Any] = {
        "step_id": snap.step_id,
        "step_input": snap.step_input,
        "queue": None if snap.queue is None else [s.step_id for s in snap.queue],
        "extra_state": enc.value(snap.extra_state, (path, ".extra_state")),
        "step_state": enc.value(snap.step_state, (path, ".step_state")),
        "scratch": enc.value(snap.scratch, (path, ".scratch")),
    }
    if type(snap) is not StepSnapshot:  # a runner's own kind (ParallelAgentRunner's BranchSnapshot)
        record["class"] = enc._class_ref(type(snap), path)
        record["more"] = {
            f.name: enc.value(getattr(snap, f.name), (path, f".{f.name}"))
            for f in dataclasses.fields(snap)
            if f.name not in _SNAPSHOT_FIELDS
        }
    return record


def save_runner(runner: AgentRunner, path: str | os.PathLike[str]) -> Path:
    """Write the runner's state to ``path`` as JSON, atomically. Returns the path."""
    doc = runner_to_dict(runner)
    # ASCII with \u escapes: any Python str survives, lone surrogates included
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return atomic_write_text(path, text)


# ----- loading -------------------------------------------------------------------------------


class SavedWorker(BaseAgentWorker):
    """Stands in for the worker of a run loaded without one: the views and reports work, and
    running a step says how to continue the run."""

    def __init__(self, info: dict[str, Any], source: str = "a run file") -> None:
        self.info = dict(info)
        self.source = source

    @property
    def saved_model(self) -> str | None:
        model = self.info.get("model")
        return model if isinstance(model, str) else None

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    def _refuse(self) -> Exception:
        from nbagent.runner.base import TaskStateError

        kind = self.info.get("kind", "its worker")
        return TaskStateError(
            f"this runner was loaded from {self.source} without a worker, so it can show the run "
            f"but not run steps; load it with AgentRunner.load(path, agent_worker=...) passing a "
            f"{kind} to continue"
        )

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        raise self._refuse()

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        raise self._refuse()

    def __repr__(self) -> str:
        return f"SavedWorker({self.info.get('kind', '?')!r}, from {self.source})"


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


def read_run_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a run file's JSON, format and version (not yet its contents)."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PersistError(f"{source}: no such run file") from None
    except UnicodeDecodeError as err:
        raise PersistError(f"{source}: not a run file (not UTF-8 text: {err})") from err
    return parse_run_text(text, source)


def parse_run_text(text: str, source: str = "run data") -> dict[str, Any]:
    """Parse a run file's text and check its format and version."""
    if not text.strip():
        raise PersistError(f"{source}: the file is empty (an interrupted write from another tool?)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise PersistError(
            f"{source}: not valid JSON at line {err.lineno} column {err.colno} ({err.msg}); the "
            "file is truncated or corrupt"
        ) from err
    return check_header(doc, source)


def check_header(doc: Any, source: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PersistError(f"{source}: not an nbagent run file (no \"format\": {FORMAT!r})")
    version = doc.get("version")
    if type(version) is not int or version < 1:
        raise PersistError(f"{source}: bad format version {version!r}")
    if version > VERSION:
        raise PersistError(
            f"{source}: written by a newer nbagent ({doc.get('nbagent', '?')}, run format version "
            f"{version}); this nbagent reads versions up to {VERSION}: upgrade nbagent to load it"
        )
    _need(doc, "runner", dict, "file", source)
    _need(doc, "tasks", list, "file", source)
    return doc


def load_runner(
    path: str | os.PathLike[str],
    agent_worker: BaseAgentWorker | None = None,
    *,
    runner_cls: type[R] | None = None,
    restore_ids: bool = True,
    **runner_kwargs: Any,
) -> R:
    """Rebuild a runner from a run file (see ``AgentRunner.load``)."""
    source = os.fspath(path)
    doc = read_run_file(source)
    return runner_from_dict(
        doc, agent_worker, runner_cls=runner_cls, restore_ids=restore_ids, source=source, **runner_kwargs
    )


def runner_from_dict(
    doc: dict[str, Any],
    agent_worker: BaseAgentWorker | None = None,
    *,
    runner_cls: type[R] | None = None,
    restore_ids: bool = True,
    source: str = "run data",
    **runner_kwargs: Any,
) -> R:
    """Rebuild a runner from ``runner_to_dict`` data."""
    from nbagent.costs import Pricing, register_runner
    from nbagent.runner.base import AgentRunner

    doc = check_header(doc, source)
    cls: type[Any] = runner_cls or AgentRunner
    rdoc = doc["runner"]
    dec = _Decoder(source)
    info = _need(rdoc, "worker", dict, "runner", source)
    settings = dec.value(_need(rdoc, "settings", dict, "runner", source), "runner.settings")
    pricing_doc = rdoc.get("pricing")
    ids_state = rdoc.get("ids")
    memory = dec.value(_need(rdoc, "memory", dict, "runner", source), "runner.memory")
    if not isinstance(memory, ChatMemoryBuffer):
        raise PersistError(f"{source}: runner.memory is not a ChatMemoryBuffer")
    if agent_worker is None:
        worker: BaseAgentWorker = SavedWorker(info, source)
    else:
        worker = agent_worker
        saved_kind = info.get("kind")
        if saved_kind and saved_kind != type(agent_worker).__name__:
            warnings.warn(
                f"{source} was saved with a {saved_kind}; continuing it with a "
                f"{type(agent_worker).__name__} may fail at its next step",
                stacklevel=3,
            )
    accepted = _init_params(cls)
    kwargs = {k: v for k, v in settings.items() if accepted is None or k in accepted}
    kwargs.update(runner_kwargs)
    runner = cls(worker, memory=memory, **kwargs)
    if pricing_doc is not None:
        runner.pricing = Pricing.from_dict(pricing_doc)
    models: dict[str, str] = {}
    for i, tdoc in enumerate(doc["tasks"]):
        state = _task_from_dict(dec, tdoc, f"tasks[{i}]", runner, models)
        runner._tasks[state.task_id] = state
        register_runner(state.task_id, runner)
    if models:
        runner.__dict__.setdefault("_step_models", {}).update(models)
    if restore_ids and ids_state is not None:
        _restore_rng(ids_state, source)
    return runner  # type: ignore[no-any-return]


def _init_params(cls: type) -> set[str] | None:
    """The keyword names ``cls(...)`` accepts (None: any), so that a setting saved by another
    runner class (``max_concurrency``) is not forced on one that has no such option."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _restore_rng(ids_state: Any, source: str) -> None:
    try:
        version, internal, gauss = ids_state
        rng = random.Random()
        rng.setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError) as err:
        raise PersistError(f"{source}: runner.ids is not a saved id generator state ({err})") from err
    _ids._rng = rng  # continue the seeded id sequence where the saved run left it


def _task_from_dict(
    dec: _Decoder, tdoc: Any, where: str, runner: AgentRunner, models: dict[str, str]
) -> TaskState:
    src = dec.source
    task_id = _need(tdoc, "task_id", str, where, src)
    where = f"{where} (task {task_id})"
    task_input = _need(tdoc, "input", str, where, src)
    # 1. steps, without state, then their links
    dec.steps = {}
    raw_steps = _need(tdoc, "steps", list, where, src)
    for j, sd in enumerate(raw_steps):
        w = f"{where}.steps[{j}]"
        sid = _need(sd, "step_id", str, w, src)
        if sid in dec.steps:
            raise PersistError(f"{src}: {w}: step id {sid!r} appears twice")
        step_input = sd.get("input")
        if step_input is not None and not isinstance(step_input, str):
            raise PersistError(f"{src}: {w}.input should be a string or null")
        dec.steps[sid] = TaskStep(
            task_id=task_id, step_id=sid, input=step_input, is_ready=bool(sd.get("is_ready", True))
        )
    for j, sd in enumerate(raw_steps):
        w = f"{where}.steps[{j}]"
        step = dec.steps[sd["step_id"]]
        step.__dict__["next_steps"] = {i: _step_of(dec, i, w) for i in _need(sd, "next_steps", list, w, src)}
        step.__dict__["prev_steps"] = {i: _step_of(dec, i, w) for i in _need(sd, "prev_steps", list, w, src)}
    # 2. outputs
    dec.outputs = []
    for j, od in enumerate(_need(tdoc, "outputs", list, where, src)):
        w = f"{where}.outputs[{j}]"
        step = _step_of(dec, _need(od, "step_id", str, w, src), w)
        output = dec.value(od.get("output"), f"{w}.output")
        tool_outputs = dec.value(od.get("tool_outputs", []), f"{w}.tool_outputs")
        try:
            out = TaskStepOutput(
                output=output,
                task_step=step,
                next_steps=[_step_of(dec, i, w) for i in _need(od, "next_steps", list, w, src)],
                is_last=bool(od.get("is_last", False)),
                reasoning=od.get("reasoning"),
                tool_outputs=tool_outputs if isinstance(tool_outputs, (list, tuple)) else [],
            )
        except (ValidationError, TypeError) as err:
            raise PersistError(f"{src}: {w}: not a valid step output ({err})") from err
        latency = od.get("latency_s")
        if latency is not None:
            out.__dict__["latency_s"] = float(latency)
        usage = od.get("usage")
        if usage is not None:
            out.__dict__["usage"] = TokenUsage(
                prompt_tokens=int(usage["prompt_tokens"]), completion_tokens=int(usage["completion_tokens"])
            )
        dec.outputs.append(out)
    # 3. memory and state
    memory = dec.value(_need(tdoc, "memory", dict, where, src), f"{where}.memory")
    scratch = dec.value(_need(tdoc, "scratch_memory", dict, where, src), f"{where}.scratch_memory")
    extra = dec.value(_need(tdoc, "extra_state", dict, where, src), f"{where}.extra_state")
    for name, value in (("memory", memory), ("scratch_memory", scratch)):
        if not isinstance(value, ChatMemoryBuffer):
            raise PersistError(f"{src}: {where}.{name} is not a ChatMemoryBuffer")
    if not isinstance(extra, dict):
        raise PersistError(f"{src}: {where}.extra_state is not a dict")
    task = Task(task_id=task_id, input=task_input, memory=memory, scratch_memory=scratch)
    task.__dict__["extra_state"] = extra  # the very dict: step_state may share it
    task._runner = runner
    step_states = _need(tdoc, "step_states", dict, where, src)
    for sid, raw in step_states.items():
        step = _step_of(dec, sid, f"{where}.step_states")
        value = dec.value(raw, f"{where}.step_states[{sid!r}]")
        if not isinstance(value, dict):
            raise PersistError(f"{src}: {where}.step_states[{sid!r}] is not a dict")
        step.__dict__["step_state"] = value
    # 4. the task state
    state = TaskState(task=task, keep_history=bool(tdoc.get("keep_history", True)))
    state.steps = {sid: dec.steps[sid] for sid, sd in zip(dec.steps, raw_steps) if sd.get("registered", True)}
    state.step_queue = deque(_step_of(dec, i, f"{where}.queue") for i in _need(tdoc, "queue", list, where, src))
    state.completed_steps = [_output_of(dec, n, f"{where}.completed") for n in _need(tdoc, "completed", list, where, src)]
    state.outputs = {
        sid: _output_of(dec, n, f"{where}.done") for sid, n in _need(tdoc, "done", dict, where, src).items()
    }
    state.undone_outputs = [
        _output_of(dec, n, f"{where}.undone_outputs") for n in _need(tdoc, "undone_outputs", list, where, src)
    ]
    edges = _need(tdoc, "undone_edges", list, where, src)
    if not all(isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in edges):
        raise PersistError(f"{src}: {where}.undone_edges must be [from, to] pairs of step ids")
    state.undone_edges = [(a, b) for a, b in edges]
    state.undone_ids = set(_need(tdoc, "undone_ids", list, where, src))
    history = []
    for j, hd in enumerate(_need(tdoc, "history", list, where, src)):
        w = f"{where}.history[{j}]"
        queue = hd.get("queue")
        extra_snap = dec.value(hd.get("extra_state", {}), f"{w}.extra_state")
        step_snap = dec.value(hd.get("step_state", {}), f"{w}.step_state")
        scratch_snap = dec.value(_need(hd, "scratch", dict, w, src), f"{w}.scratch")
        if not (isinstance(scratch_snap, tuple) and len(scratch_snap) == 3):
            raise PersistError(f"{src}: {w}.scratch is not a memory snapshot")
        snap_cls: Any = StepSnapshot
        more: dict[str, Any] = {}
        if "class" in hd:
            snap_cls = _resolve(hd["class"], f"{src}: {w}")
            if not (isinstance(snap_cls, type) and issubclass(snap_cls, StepSnapshot)):
                raise PersistError(f"{src}: {w}: {hd['class']!r} is not a step snapshot class")
            more = {k: dec.value(v, f"{w}.{k}") for k, v in _need(hd, "more", dict, w, src).items()}
        try:
            snap = snap_cls(
                step_id=_step_of(dec, _need(hd, "step_id", str, w, src), w).step_id,
                step_input=hd.get("step_input"),
                queue=None if queue is None else tuple(_step_of(dec, i, w) for i in queue),
                extra_state=extra_snap if extra_snap else _NO_STATE,
                step_state=step_snap if step_snap else _NO_STATE,
                scratch=scratch_snap,
                **more,
            )
        except TypeError as err:
            raise PersistError(f"{src}: {w}: not a valid step snapshot ({err})") from err
        history.append(snap)
    _rebase_clock(history)
    state.history = history
    failures = []
    for j, fd in enumerate(_need(tdoc, "failures", list, where, src)):
        w = f"{where}.failures[{j}]"
        failures.append(
            StepFailure(
                step_id=_need(fd, "step_id", str, w, src),
                error_type=_need(fd, "error_type", str, w, src),
                message=_need(fd, "message", str, w, src),
                traceback=str(fd.get("traceback", "")),
                at=float(fd.get("at", 0.0)),
                attempt=int(fd.get("attempt", 1)),
            )
        )
    state.failures = failures
    state.finalized = bool(tdoc.get("finalized", False))
    state.abandoned = bool(tdoc.get("abandoned", False))
    state.final_response = dec.value(tdoc.get("final_response"), f"{where}.final_response")
    saved_models = tdoc.get("models", {})
    if isinstance(saved_models, dict):
        models.update({k: v for k, v in saved_models.items() if isinstance(v, str)})
    return state


def _rebase_clock(history: list[StepSnapshot]) -> None:
    """Snapshots that carry a process-wide start/end order (``started``/``ended``, as
    ParallelAgentRunner's do) get numbers <= 0, order kept, so that any step run after
    loading, numbered from 1 by this process's clock, comes after them."""
    marks = [
        v for snap in history for name in ("started", "ended")
        if isinstance(v := getattr(snap, name, None), int) and not isinstance(v, bool)
    ]
    if not marks:
        return
    shift = max(marks)
    for snap in history:
        for name in ("started", "ended"):
            v = getattr(snap, name, None)
            if isinstance(v, int) and not isinstance(v, bool):
                setattr(snap, name, v - shift)


def _step_of(dec: _Decoder, sid: Any, where: str) -> TaskStep:
    step = dec.steps.get(sid) if isinstance(sid, str) else None
    if step is None:
        raise PersistError(f"{dec.source}: {where}: unknown step id {sid!r}")
    return step


def _output_of(dec: _Decoder, n: Any, where: str) -> TaskStepOutput:
    if type(n) is not int or not 0 <= n < len(dec.outputs):
        raise PersistError(f"{dec.source}: {where}: unknown output number {n!r}")
    return dec.outputs[n]


# ----- autosave --------------------------------------------------------------------------------

# Every event that changes what a run file holds (not StepStarted or TokenStreamed).
def _autosave_events() -> tuple[type, ...]:
    from nbagent import events as ev

    return (
        ev.TaskCreated,
        ev.StepCompleted,
        ev.StepFailed,
        ev.StepUndone,
        ev.StepEdited,
        ev.TaskFinalized,
        ev.TaskAbandoned,
        ev.TaskDeleted,
        ev.RunnerReset,
    )


class AutosaveWarning(RuntimeWarning):
    """An autosave failed; the run goes on, the file keeps its last good version."""


def autosave_path(runner: AgentRunner) -> Path | None:
    found = runner.__dict__.get("_autosave")
    return None if found is None else found[0]  # type: ignore[no-any-return]


def set_autosave(runner: AgentRunner, path: str | os.PathLike[str] | None) -> None:
    """Save ``runner`` to ``path`` now and after every step and state change (None: stop).

    A crashed kernel loses at most the step that was running. A failed save warns
    (``AutosaveWarning``) and leaves the previous file whole.
    """
    found = runner.__dict__.pop("_autosave", None)
    if found is not None:
        found[1]()  # unsubscribe
    if path is None:
        return
    target = Path(path).absolute()  # a later os.chdir must not move the file
    save_runner(runner, target)  # fails here, loudly, if the state cannot be saved at all

    def on_event(_event: Any) -> None:
        try:
            save_runner(runner, target)
        except Exception as err:  # noqa: BLE001 - a step must not fail because a save did
            warnings.warn(f"autosave to {target} failed: {err}", AutosaveWarning, stacklevel=2)

    unsubscribe = runner.subscribe(on_event, _autosave_events())
    runner.__dict__["_autosave"] = (target, unsubscribe)
