"""Cheap snapshots of worker state, for undo and for rolling back a failed step.

A value that knows how to snapshot itself (``snapshot()`` / ``restore()``, such as
``ChatMemoryBuffer`` and ``AppendLog``) is recorded in O(1); immutable values are kept as
they are; anything else is deep-copied. nbagent's own workers keep their growing state in
the O(1) kinds, so a step's snapshot stays small however long the task runs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from itertools import chain, islice
from typing import Any, Generic, NoReturn, SupportsIndex, TypeVar

from nbagent._dicts import shared_keys
from nbagent._prefix import PrefixView, _Cell

__all__ = ["AppendLog", "OneChange", "snapshot_dict", "restore_dict", "plain_snapshot"]

T = TypeVar("T")

_IMMUTABLE = (str, int, float, bool, bytes, type(None), frozenset)
_IMMUTABLE_TYPES = frozenset(_IMMUTABLE)  # (their exact types: one look-up, before isinstance)


class AppendLog(list[T], Generic[T]):
    """A list that only grows, so a snapshot is its length.

    Appending and extending work as on a list; other in-place changes raise, because they
    would make earlier snapshots wrong (assign a new AppendLog instead).
    """

    def snapshot(self) -> int:
        """Where the log is now (its length): all an undo needs to come back here."""
        return len(self)

    def restore(self, n: int) -> None:
        """Cut the log back to a ``snapshot`` (undo); views given out earlier keep what
        they showed.

        Example:

        >>> from nbagent import AppendLog
        >>> log = AppendLog(["a"])
        >>> mark = log.snapshot()  # its length
        >>> log.extend(["b", "c"])
        >>> log.restore(mark)  # undo
        >>> list(log)
        ['a']
        """
        cell = self.__dict__.get("_cell")
        if cell is not None and cell.high > n:
            # copy-on-write: the views given out keep a frozen copy of what they cover; the
            # next view gets a new cell on this (cut) log
            cell.items = list(self[: cell.high])
            del self.__dict__["_cell"]
        list.__delitem__(self, slice(n, None))

    def view(self, n: int | None = None) -> PrefixView[T]:
        """The items so far (or the first ``n``), read-only, in O(1): later appends do not
        show in it, and an undo that cuts this log leaves it as it was (see ``nbagent._prefix``).

        Example:

        >>> from nbagent import AppendLog
        >>> log = AppendLog(["a", "b"])
        >>> seen = log.view()
        >>> log.append("c")
        >>> list(seen), list(log)  # the view keeps what it showed
        (['a', 'b'], ['a', 'b', 'c'])
        """
        if n is None:
            n = len(self)
        elif not 0 <= n <= len(self):
            raise ValueError(f"a view of the first {n} items of a log of {len(self)}")
        cell = self.__dict__.get("_cell")
        if cell is None:
            cell = self.__dict__["_cell"] = _Cell(self)
        if n > cell.high:
            cell.high = n
        return PrefixView(cell, n)

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        """Refused with a ``TypeError``: an ``AppendLog`` only grows (``append``, ``extend``),
        as a change to earlier items would make the snapshots taken before it wrong.

        Example:

        >>> from nbagent import AppendLog
        >>> log = AppendLog(["a", "b"])
        >>> log.sort()
        Traceback (most recent call last):
        ...
        TypeError: AppendLog only grows (append/extend); to change earlier items, assign a new list
        """
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
        """Refused with a ``TypeError``, as every change but ``append`` and ``extend`` is."""
        raise TypeError("AppendLog only grows (append/extend); pop is not allowed")


class _Saved:
    """A snapshotted value that is not kept as it is: its own snapshot, or a deep copy."""

    __slots__ = ("value", "token", "is_copy")

    def __init__(self, value: Any, token: Any, is_copy: bool) -> None:
        self.value = value
        self.token = token
        self.is_copy = is_copy


def _snap_value(value: Any, memo: dict[int, Any], prev: Any = None) -> Any:
    if type(value) in _IMMUTABLE_TYPES or isinstance(value, _IMMUTABLE):
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


_NO_KEY: Any = object()  # equal to no key of a state dict

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


class OneChange(Mapping[str, Any]):
    """A state snapshot that is an earlier full one (``base``) with one value changed.

    The usual step changes one value of its state (a counter, the last answer) and leaves
    the rest (memory and sources that did not grow, values equal to their last copy) as it
    was: this keeps that value and a reference, not a dict per step. ``base`` is always a
    full snapshot dict, so reading a value never walks a chain. Read it as a mapping;
    ``plain_snapshot`` gives the dict it stands for (what the run files save).
    """

    __slots__ = ("base", "key", "value")

    def __init__(self, base: dict[str, Any], key: str, value: Any) -> None:
        self.base = base
        self.key = key
        self.value = value

    def __getitem__(self, key: str) -> Any:
        if key == self.key:
            return self.value
        return self.base[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)

    def __repr__(self) -> str:
        return f"OneChange({self.key!r}: {self.value!r}, base={self.base!r})"


def plain_snapshot(snap: Any) -> Any:
    """A state snapshot as a plain dict or tuple (a ``OneChange`` written out)."""
    if type(snap) is OneChange:
        return {k: (snap.value if k == snap.key else v) for k, v in snap.base.items()}
    return snap


def snapshot_dict(
    d: dict[str, Any], memo: dict[int, Any] | None = None, prev: Any = None
) -> Mapping[str, Any] | tuple[Any, ...]:
    """Snapshot every value of a state dict.

    Pass one ``memo`` for several dicts taken together: a value they share stays shared. A
    dict of immutable values only is saved as a flat ``(key, value, ...)`` tuple, a third of
    the size of a dict: the runner keeps one of these per step. ``prev``, the previous
    snapshot of the same dict: a value equal to its copy there shares that copy, and a
    snapshot that differs from ``prev``'s full dict in one value only is a ``OneChange``.
    """
    for v in d.values():
        if not isinstance(v, _IMMUTABLE):
            break
    else:  # (a few pairs are quicker added than chained; adding is quadratic, so only a few)
        return sum(d.items(), ()) if len(d) <= 8 else tuple(chain.from_iterable(d.items()))
    memo = {} if memo is None else memo
    if type(prev) is OneChange:
        base: Any = prev.base
        # prev.get(k) is its changed value for its key, else the base's (read below as bv)
        one_key: Any = prev.key
        one_value = prev.value
    else:
        base = prev if type(prev) is dict else None
        one_key = one_value = _NO_KEY  # prev is the base itself
    if base is None or len(base) != len(d):
        before = prev if isinstance(prev, Mapping) else {}
        return shared_keys({k: _snap_value(v, memo, before.get(k)) for k, v in d.items()})
    values: list[Any] = []
    changed = -1
    for (k, v), (bk, bv) in zip(d.items(), base.items()):
        if k != bk:  # another layout: a full snapshot
            changed = -2
            break
        snap = _snap_value(v, memo, one_value if k == one_key else bv)
        if snap is not bv:
            changed = len(values) if changed == -1 else -2
        values.append(snap)
    if changed >= 0:
        key = next(islice(d, changed, None))
        return OneChange(base, key, values[changed])
    if changed == -2 and len(values) < len(d):
        values.extend(_snap_value(v, memo, prev.get(k)) for k, v in islice(d.items(), len(values), None))  # type: ignore[union-attr]
    return shared_keys(dict(zip(d, values)))


def restore_dict(
    d: dict[str, Any], snap: Mapping[str, Any] | tuple[Any, ...], memo: dict[int, Any] | None = None
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
