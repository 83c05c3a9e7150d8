"""Small dicts that share their keys: what thousands of steps, outputs and snapshots cost.

A dict built the usual way owns a table of its keys (184 B for up to five keys, 272 B for up
to ten). CPython keeps the attributes of a class's instances in *split* dicts instead: the
keys live once, in the class, and each dict holds only its values (96-160 B). ``shared_keys``
gives a dict with the same items, in the same order, in that form, so the many small dicts
of one layout (a pydantic model's fields, a state snapshot's keys) pay for their keys once.

The result is a plain ``dict`` either way: reading, writing, copying, comparing and
iterating behave exactly the same; a key added later just gives that one dict its own table
again. Only the memory differs, and only on CPython (elsewhere dicts are returned as they
are).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["shared_keys"]

_MAX_LAYOUTS = 256  # distinct key layouts kept (each ~2 KB); past that, dicts are left as they are
_MAX_KEYS = 30  # CPython shares at most 30 keys per class
_WARM = 40  # instances made once per layout: CPython trims a class's values array per instance
_SPLITS = sys.implementation.name == "cpython"
_layouts: dict[tuple[str, ...], dict[str, Any]] = {}


def _prototype(keys: tuple[str, ...]) -> dict[str, Any] | None:
    """An empty-valued split dict of this layout (``dict.copy`` keeps a copy split)."""
    if not _SPLITS or len(_layouts) >= _MAX_LAYOUTS or not 0 < len(keys) <= _MAX_KEYS:
        return None
    if not all(type(k) is str for k in keys):
        return None
    holder = type("_Values", (), {"__module__": __name__})
    proto: dict[str, Any] = {}
    for _ in range(_WARM):
        obj = holder()
        for k in keys:
            object.__setattr__(obj, k, None)
        proto = obj.__dict__
    return proto


def shared_keys(d: dict[str, Any]) -> dict[str, Any]:
    """``d``'s items, in its order, in a dict whose keys are shared with every dict of the
    same layout (or ``d`` itself where that cannot be had)."""
    keys = tuple(d)
    proto = _layouts.get(keys)
    if proto is None:
        proto = _prototype(keys)
        if proto is None:  # not remembered: the table of layouts stays within its budget
            return d
        proto = _layouts.setdefault(keys, proto)
    new = proto.copy()
    new.update(d)  # the same keys in the same order: the copy stays split
    return new
