"""Cheap snapshots of worker state, for undo and for rolling back a failed step.

A value that knows how to snapshot itself (``snapshot()`` / ``restore()``, such as
``ChatMemoryBuffer`` and ``AppendLog``) is recorded in O(1); immutable values are kept as
they are; anything else is deep-copied. nbagent's own workers keep their growing state in
the O(1) kinds, so a step's snapshot stays small however long the task runs.
"""

from __future__ import annotations

import copy
from typing import Any, Generic, SupportsIndex, TypeVar

from nbagent._dicts import shared_keys

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


class _Saved:
    """A snapshotted value that is not kept as it is: its own snapshot, or a deep copy."""

    __slots__ = ("value", "token", "is_copy")

    def __init__(self, value: Any, token: Any, is_copy: bool) -> None:
        self.value = value
        self.token = token
        self.is_copy = is_copy


def _snap_value(value: Any, memo: dict[int, Any], prev: Any = None) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value  # kept as it is: nothing to save
    snap = getattr(value, "snapshot", None)
    if snap is not None and callable(snap) and hasattr(value, "restore"):
        token = snap()
        if isinstance(prev, _Saved) and prev.value is value and not prev.is_copy and _same_token(prev.token, token):
            return prev  # unchanged since the previous step: restoring either is the same
        return _Saved(value, token, False)
    if isinstance(value, tuple) and all(isinstance(v, _IMMUTABLE) for v in value):
        return value
    if (
        isinstance(prev, _Saved)
        and prev.is_copy
        and type(prev.value) is type(value)
        and type(value) in _PLAIN
        and id(value) not in memo
        and _equal(prev.value, value)
    ):
        # unchanged since the previous step's snapshot: share that pristine copy (a big
        # value set once is not copied, kept and saved again with every step)
        memo[id(value)] = prev.value
        return prev
    return _Saved(copy.deepcopy(value, memo), None, True)


def _same_token(a: Any, b: Any) -> bool:
    """Two snapshot tokens restore the same: the same object, or equal plain scalars (an
    ``AppendLog``'s length)."""
    return a is b or (type(a) is type(b) and type(a) in (int, str) and a == b)


_PLAIN = (dict, list, set)  # containers whose == compares contents (cheaper than a deep copy)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) is True
    except Exception:  # noqa: BLE001  (an element with an odd __eq__: just copy)
        return False


def _restore_value(saved: Any, memo: dict[int, Any]) -> Any:
    if not isinstance(saved, _Saved):
        return saved
    if saved.is_copy:
        return copy.deepcopy(saved.value, memo)  # keep the snapshot pristine for a later restore
    saved.value.restore(saved.token)
    return saved.value


def snapshot_dict(
    d: dict[str, Any], memo: dict[int, Any] | None = None, prev: Any = None
) -> dict[str, Any] | tuple[Any, ...]:
    """Snapshot every value of a state dict.

    Pass one ``memo`` for several dicts taken together: a value they share stays shared. A
    dict of immutable values only is saved as a flat ``(key, value, ...)`` tuple, a third of
    the size of a dict: the runner keeps one of these per step. ``prev``, the previous
    snapshot of the same dict: a value equal to its copy there shares that copy.
    """
    if all(isinstance(v, _IMMUTABLE) for v in d.values()):
        return tuple(x for item in d.items() for x in item)
    memo = {} if memo is None else memo
    before = prev if isinstance(prev, dict) else {}
    return shared_keys({k: _snap_value(v, memo, before.get(k)) for k, v in d.items()})


def restore_dict(
    d: dict[str, Any], snap: dict[str, Any] | tuple[Any, ...], memo: dict[int, Any] | None = None
) -> None:
    """Put a state dict back as it was, in place (other holders of the dict see it too).

    Pass one ``memo`` when restoring several dicts snapshotted together.
    """
    d.clear()
    if isinstance(snap, tuple):
        d.update(zip(snap[::2], snap[1::2]))
        return
    memo = {} if memo is None else memo
    for k, saved in snap.items():
        d[k] = _restore_value(saved, memo)
