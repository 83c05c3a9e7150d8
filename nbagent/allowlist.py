"""The type allow-list: which classes and functions a saved run (or a workflow checkpoint)
may name, and how a ``module:Qualname`` reference becomes the class again.

Loading imports only nbagent's own classes and those registered with ``allow_type``: no pickle,
nothing is ever eval'd. Below the store, so that typed answers (``nbagent.structured``) and
workflow checkpoints use the same rule without importing the store.
"""

from __future__ import annotations

import enum
import importlib
from typing import Any, TypeVar

__all__ = ["PersistError", "NotAllowedError", "allow_type", "is_allowed_class"]

T = TypeVar("T")

_ALLOWED: dict[str, Any] = {}  # "module:Qualname" -> class or function registered by the user


class PersistError(ValueError):
    """A run could not be saved, or a run file could not be read: says where and why."""


class NotAllowedError(PersistError):
    """A saved run names a class or function from outside nbagent that was not registered
    with ``allow_type``: not damage, a choice to make (loading never skips over it)."""


def allow_type(obj: T) -> T:
    """Let a class (a pydantic model or an Enum) or a tokenizer function from outside nbagent
    be saved and loaded. Loading imports only nbagent's own classes and the ones allowed here.

    Usable as a decorator; returns ``obj``.

    Example:

    >>> from enum import Enum
    >>> from nbagent import allow_type
    >>> @allow_type  # saved runs holding a Colour can be loaded again
    ... class Colour(Enum):
    ...     RED = "red"
    >>> Colour.RED.value
    'red'
    """
    from pydantic import BaseModel

    ok = isinstance(obj, type) and issubclass(obj, (BaseModel, enum.Enum))
    if not ok and not callable(obj):
        raise TypeError(f"allow_type takes a pydantic model class, an Enum or a function, got {obj!r}")
    ref = _ref_of(obj)
    if "<locals>" in ref:
        raise PersistError(f"{ref} is defined inside a function; only module-level ones can be loaded again")
    _ALLOWED[ref] = obj
    return obj


def is_allowed_class(ref: str) -> bool:
    """Whether a ``module:Qualname`` may be loaded: nbagent's own, or registered with
    ``allow_type`` (workflow checkpoints follow the same rule as run files)."""
    return ref in _ALLOWED or _is_nbagent(ref)


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
    found = _RESOLVED.get(ref)
    if found is not None:
        return found
    if not _is_nbagent(ref):
        raise NotAllowedError(
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
    _RESOLVED[ref] = obj
    return obj


_RESOLVED: dict[str, type] = {}  # nbagent's own classes found by _resolve (a load names a few, 10,000s of times)
