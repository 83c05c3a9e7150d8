"""Cheap snapshots of worker state, for undo and for rolling back a failed step.

A value that knows how to snapshot itself (``snapshot()`` / ``restore()``, such as
``ChatMemoryBuffer`` and ``AppendLog``) is recorded in O(1); immutable values are kept as
they are; anything else is deep-copied. nbagent's own workers keep their growing state in
the O(1) kinds, so a step's snapshot stays small however long the task runs.
"""

from __future__ import annotations

import copy
from typing import Any, Generic, SupportsIndex, TypeVar

__all__ = ["AppendLog", "snapshot_dict", "restore_dict"]

T = TypeVar("T")

_IMMUTABLE = (str, int, float, bool, bytes, type(None), frozenset)


class AppendLog(list[T], Generic[T]):
    """A list that only grows, so a snapshot is its length.

    Appending and extending work as on a list; other in-place changes raise, because they
    would make earlier snapshots wrong (assign a new AppendLog instead).
    """

    def snapshot(self) -> int:
        return len(self)

    def restore(self, n: int) -> None:
        list.__delitem__(self, slice(n, None))

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TypeError(
            "AppendLog only grows (append/extend); to change earlier items, assign a new list"
        )

    __setitem__ = _refuse
    __delitem__ = _refuse
    insert = _refuse
    remove = _refuse
    sort = _refuse
    reverse = _refuse
    clear = _refuse

    def pop(self, index: SupportsIndex = -1) -> T:
        raise TypeError("AppendLog only grows (append/extend); pop is not allowed")


_Snap = tuple[Any, Any, int]  # (object, token, kind)
_KEEP, _SELF, _COPY = 0, 1, 2


def _snap_value(value: Any, memo: dict[int, Any]) -> _Snap:
    if isinstance(value, _IMMUTABLE):
        return (value, None, _KEEP)
    snap = getattr(value, "snapshot", None)
    if snap is not None and callable(snap) and hasattr(value, "restore"):
        return (value, snap(), _SELF)
    if isinstance(value, tuple) and all(isinstance(v, _IMMUTABLE) for v in value):
        return (value, None, _KEEP)
    return (copy.deepcopy(value, memo), None, _COPY)


def _restore_value(s: _Snap, memo: dict[int, Any]) -> Any:
    value, token, kind = s
    if kind == _SELF:
        value.restore(token)
        return value
    if kind == _COPY:
        return copy.deepcopy(value, memo)  # keep the snapshot pristine for a later restore
    return value


def snapshot_dict(d: dict[str, Any], memo: dict[int, Any] | None = None) -> dict[str, _Snap]:
    """Snapshot every value of a state dict.

    Pass one ``memo`` for several dicts taken together: a value they share stays shared.
    """
    memo = {} if memo is None else memo
    return {k: _snap_value(v, memo) for k, v in d.items()}


def restore_dict(
    d: dict[str, Any], snap: dict[str, _Snap], memo: dict[int, Any] | None = None
) -> None:
    """Put a state dict back as it was, in place (other holders of the dict see it too).

    Pass one ``memo`` when restoring several dicts snapshotted together.
    """
    memo = {} if memo is None else memo
    d.clear()
    for k, s in snap.items():
        d[k] = _restore_value(s, memo)
