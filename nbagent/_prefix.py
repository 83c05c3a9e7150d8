"""PrefixView: the first ``n`` items of an ``AppendLog``, read like a list, kept in O(1).

A ReAct step's output shows every tool output of its task so far. A copy per step costs
8 bytes per source per step, so a long tool loop kept O(N^2) bytes; a view keeps the log and
a length instead. The log only grows, so the items a view covers never change, except when
an undo or a failed step cuts the log: ``AppendLog.restore`` then hands the views it gave out
a frozen copy of what they covered (copy-on-write) before cutting, so an earlier step's
output keeps showing the sources as they were at that step, whatever runs after.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, Generic, TypeVar, overload

__all__ = ["PrefixView"]

T = TypeVar("T")


class _Cell:
    """What the views of one log read: the live log, or (after a cut) a frozen copy of it.

    ``high`` is the longest view given out on this cell: a cut at or above it changes no
    view, so it copies nothing.
    """

    __slots__ = ("items", "high")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.high = 0


class PrefixView(Sequence[T], Generic[T]):
    """The first ``len(self)`` items of a log, immutable: indexing, slices (a list),
    iteration, ``==`` with a list, ``repr`` and ``+`` behave as on the list it stands for."""

    __slots__ = ("_cell", "_n")

    def __init__(self, cell: _Cell, n: int) -> None:
        self._cell = cell
        self._n = n

    @classmethod
    def of(cls, items: Sequence[T]) -> PrefixView[T]:
        """A view of a copy of ``items`` (for a view built from plain data, e.g. a loaded file)."""
        cell = _Cell(list(items))
        cell.high = len(cell.items)
        return cls(cell, cell.high)

    @classmethod
    def over(cls, items: list[T], n: int) -> PrefixView[T]:
        """A view of the first ``n`` of ``items``, which nobody may change (a run file's
        frozen copy, shared by the views that read it)."""
        cell = _Cell(items)
        cell.high = n
        return cls(cell, n)

    @property
    def log(self) -> list[T]:
        """The list this view reads: its first ``len(self)`` items are the view (the task's
        live log, or a frozen copy after an undo cut the log below this view)."""
        return self._cell.items  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        items = self._cell.items
        n = self._n
        if isinstance(index, slice):
            return [items[i] for i in range(*index.indices(n))]
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} sources")
        return items[i]  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[T]:
        return islice(self._cell.items, self._n)

    def __reversed__(self) -> Iterator[T]:
        items = self._cell.items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PrefixView):
            if self._cell is other._cell:  # the same log: equal lengths, equal items
                return self._n == other._n
            return self._n == other._n and all(a == b for a, b in zip(self, other))
        if isinstance(other, list):
            return self._n == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list: equal to a list, so not hashable

    def __add__(self, other: Any) -> list[T]:
        if isinstance(other, (list, PrefixView)):
            return [*self, *other]
        return NotImplemented

    def __radd__(self, other: Any) -> list[T]:
        if isinstance(other, list):
            return [*other, *self]
        return NotImplemented

    def copy(self) -> list[T]:
        """A plain list of the items (as ``list.copy``)."""
        return list(self)

    def __repr__(self) -> str:
        return repr(list(self))

    def __copy__(self) -> PrefixView[T]:
        return self  # immutable: a copy is the view itself

    def __deepcopy__(self, memo: dict[int, Any]) -> PrefixView[T]:
        return PrefixView.of(copy.deepcopy(list(self), memo))

    def _shares_storage_with(self, other: PrefixView[Any]) -> bool:
        """Whether both views read the same list (for tests: no copy per view)."""
        return self._cell.items is other._cell.items
