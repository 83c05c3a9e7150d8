"""Per-runner state of the services above the engine (store links, autosave, costs, batch
stores), in one declared attribute, ``runner._services``.

Why: a service must not write attributes of its own into another object's ``__dict__``. A
service keeps its state in an object of its own class, and asks the runner's slots for it
by that class: no magic strings, and a type checker knows what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["ServiceSlots"]

S = TypeVar("S")


class ServiceSlots:
    """One state object per service class: ``get``, ``setdefault`` (make it on first use),
    ``pop``. Iterating gives the classes that hold state."""

    __slots__ = ("_by_class",)

    def __init__(self) -> None:
        self._by_class: dict[type[Any], Any] = {}

    def get(self, cls: type[S]) -> S | None:
        """The state of service class ``cls``, or None if it has none yet."""
        return self._by_class.get(cls)

    def setdefault(self, cls: type[S], make: Callable[[], S] | None = None) -> S:
        """The state of ``cls``, made by ``make()`` (default: ``cls()``) if there is none."""
        found = self._by_class.get(cls)
        if found is None:
            found = (make or cls)()
            if not isinstance(found, cls):
                raise TypeError(f"the state made for {cls.__qualname__} is a {type(found).__qualname__}")
            self._by_class[cls] = found
        return found

    def pop(self, cls: type[S]) -> S | None:
        """Drop and return the state of ``cls`` (None if it had none)."""
        return self._by_class.pop(cls, None)

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_class

    def __iter__(self) -> Iterator[type[Any]]:
        return iter(list(self._by_class))

    def __len__(self) -> int:
        return len(self._by_class)

    def __repr__(self) -> str:
        names = ", ".join(c.__qualname__ for c in self._by_class)
        return f"ServiceSlots({names})"
