"""JSON-safe encoding of context values and events, for checkpoints. No pickle.

Plain JSON values pass through unchanged. Everything else is a tagged object
``{"__nb__": kind, ...}``: tuples, enums, pydantic models (events among them) and
``ChatMemoryBuffer``. Classes are found again by ``module:QualName`` among modules that are
already imported (nbagent's own modules are imported on demand), so loading a checkpoint never
imports arbitrary code, and rebuilds only nbagent's classes, registered workflow events and
classes allowed with ``nbagent.persist.allow_type`` (the rule run files follow). Anything else
is a ``CheckpointError`` that names where the value sits and its type.
"""

from __future__ import annotations

import importlib
import math
import sys
from enum import Enum
from typing import Any

from pydantic import BaseModel

from nbagent.memory import ChatMemoryBuffer
from nbagent.session_memory import Memory
from nbagent.workflow.errors import CheckpointError
from nbagent.workflow.events import Event, event_class, event_type_name

__all__ = [
    "encode_value",
    "decode_value",
    "encode_event",
    "decode_event",
    "ALLOWED",
    "JsonSerializer",
    "JsonPickleSerializer",
    "check_serializer",
]

TAG = "__nb__"
ALLOWED = (
    "None, bool, int, float, str, lists, tuples, dicts with str keys, pydantic models "
    "(ChatMessage, events...), enums and ChatMemoryBuffer"
)


def _type_label(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def encode_value(value: Any, path: str) -> Any:
    """``value`` as JSON-safe data; ``path`` names it in errors (``state['memory'][3]``)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):  # before int: IntEnum is an int too
        return {TAG: "enum", "class": event_type_name(type(value)), "value": encode_value(value.value, path)}
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return {TAG: "float", "value": repr(value)}
        return value
    if isinstance(value, list):
        return [encode_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [encode_value(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise CheckpointError(
                    f"{path}: a dict key of type {_type_label(k)} ({k!r}) cannot be saved in a "
                    "checkpoint; dict keys must be str"
                )
            out[k] = encode_value(v, f"{path}[{k!r}]")
        if TAG in out:
            return {TAG: "dict", "items": out}
        return out
    if isinstance(value, Event):
        return encode_event(value, path)
    if isinstance(value, BaseModel):
        return {TAG: "model", "class": event_type_name(type(value)), "fields": _model_fields(value, path)}
    if isinstance(value, ChatMemoryBuffer):
        saved = {
            TAG: "memory",
            "token_limit": value.token_limit,
            "messages": [encode_value(m, f"{path}.messages[{i}]") for i, m in enumerate(value.get_all())],
        }
        if isinstance(value, Memory):  # a session memory stays one: its id, limits and archive
            saved["session"] = {**value.settings(), "archived": len(value.archived)}
        return saved
    raise CheckpointError(
        f"{path}: a value of type {_type_label(value)} cannot be saved in a checkpoint; "
        f"allowed are {ALLOWED}"
    )


def _model_fields(model: BaseModel, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        if info.exclude:
            continue
        value = getattr(model, name)
        if isinstance(value, Enum) and info.annotation is type(value):
            out[name] = value.value  # the field's type brings the enum back
        else:
            out[name] = encode_value(value, f"{path}.{name}")
    for name, value in (model.model_extra or {}).items():
        out[name] = encode_value(value, f"{path}.{name}")
    return out


def encode_event(event: Event, path: str = "event") -> dict[str, Any]:
    """An event as JSON-safe data (its class name and its fields)."""
    return {TAG: "event", "class": event_type_name(type(event)), "fields": _model_fields(event, path)}


def _find_class(name: str, path: str, *, event: bool = False) -> type:
    """The class ``module:Qualname`` names. A model or enum must be nbagent's or allowed; an
    event class must be a registered workflow Event (checked by the caller)."""
    from nbagent.allowlist import _ALLOWED, is_allowed_class

    if not isinstance(name, str) or ":" not in name:
        raise CheckpointError(f"{path}: bad class reference {name!r} (expected 'module:Qualname')")
    if not event and not is_allowed_class(name):
        raise CheckpointError(
            f"{path}: the checkpoint names {name!r}, which is not an nbagent class; loading "
            "rebuilds only nbagent's own classes, workflow events, and classes registered with "
            "nbagent.persist.allow_type(cls): register it first if you trust this checkpoint"
        )
    if name in _ALLOWED and isinstance(_ALLOWED[name], type):
        return _ALLOWED[name]  # type: ignore[no-any-return]
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)
    if module is None and (module_name == "nbagent" or module_name.startswith("nbagent.")):
        module = importlib.import_module(module_name)
    if module is None:
        raise CheckpointError(
            f"{path}: the checkpoint needs class {qualname!r} from module {module_name!r}, which is "
            f"not imported; import {module_name} before loading the checkpoint"
        )
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise CheckpointError(f"{path}: module {module_name!r} has no class {qualname!r}")
    if not isinstance(obj, type):
        raise CheckpointError(f"{path}: {name!r} is not a class")
    return obj


def decode_event(data: Any, path: str = "event") -> Event:
    """The event ``encode_event`` saved."""
    if not isinstance(data, dict) or data.get(TAG) != "event":
        raise CheckpointError(f"{path}: expected a saved event, got {str(data)[:80]!r}")
    name = str(data.get("class"))
    cls = event_class(name)
    if cls is None:
        found = _find_class(name, path, event=True)  # importing the module registers its events
        cls = event_class(name)
        if cls is None or cls is not found:
            raise CheckpointError(f"{path}: {name!r} is not a workflow Event class")
    fields = {k: decode_value(v, f"{path}.{k}") for k, v in dict(data.get("fields") or {}).items()}
    try:
        return cls(**fields)
    except Exception as err:
        raise CheckpointError(f"{path}: could not rebuild {cls.__qualname__}: {err}") from err


def decode_value(data: Any, path: str) -> Any:
    """The value ``encode_value`` saved."""
    if isinstance(data, list):
        return [decode_value(v, f"{path}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, dict):
        return data
    kind = data.get(TAG)
    if kind is None:
        return {k: decode_value(v, f"{path}[{k!r}]") for k, v in data.items()}
    if kind == "dict":
        return {k: decode_value(v, f"{path}[{k!r}]") for k, v in dict(data["items"]).items()}
    if kind == "tuple":
        return tuple(decode_value(v, f"{path}[{i}]") for i, v in enumerate(data["items"]))
    if kind == "float":
        return float(data["value"])
    if kind == "event":
        return decode_event(data, path)
    if kind == "enum":
        cls = _find_class(str(data["class"]), path)
        if not issubclass(cls, Enum):
            raise CheckpointError(f"{path}: {data['class']!r} is not an Enum")
        return cls(decode_value(data["value"], path))
    if kind == "model":
        cls = _find_class(str(data["class"]), path)
        if not issubclass(cls, BaseModel):
            raise CheckpointError(f"{path}: {data['class']!r} is not a pydantic model")
        fields = {k: decode_value(v, f"{path}.{k}") for k, v in dict(data["fields"]).items()}
        try:
            return cls(**fields)
        except Exception as err:
            raise CheckpointError(f"{path}: could not rebuild {cls.__qualname__}: {err}") from err
    if kind == "memory":
        messages = decode_value(data["messages"], f"{path}.messages")
        session = data.get("session")
        if isinstance(session, dict):
            try:
                return Memory(int(data["token_limit"]), messages, **session)
            except (TypeError, ValueError) as err:
                raise CheckpointError(f"{path}: could not rebuild the Memory: {err}") from err
        return ChatMemoryBuffer(token_limit=int(data["token_limit"]), chat_history=messages)
    raise CheckpointError(f"{path}: unknown saved kind {kind!r}")


class JsonSerializer:
    """The reference's ``serializer=`` for ``ctx.to_dict`` / ``Context.from_dict``: plain JSON.

    nbagent's checkpoints are always this format, so passing it changes nothing; it exists so
    code written for the reference (``ctx.to_dict(serializer=JsonSerializer())``) runs unchanged.
    """

    def __repr__(self) -> str:
        return "JsonSerializer()"


class JsonPickleSerializer(JsonSerializer):
    """The reference's pickle fallback. nbagent never unpickles: using it is an error."""


def check_serializer(serializer: Any) -> None:
    """Accept None or a ``JsonSerializer``; refuse pickle and anything else, saying why."""
    if serializer is None or type(serializer) is JsonSerializer:
        return
    if isinstance(serializer, JsonPickleSerializer) or "pickle" in type(serializer).__name__.lower():
        raise CheckpointError(
            "nbagent checkpoints are plain JSON and never pickled (loading a pickle can run any "
            "code); use serializer=JsonSerializer() or leave serializer out"
        )
    raise TypeError(
        f"serializer must be nbagent.workflow.JsonSerializer() (or left out), got {type(serializer).__name__}"
    )
