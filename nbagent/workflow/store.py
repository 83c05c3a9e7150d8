"""``ctx.store``: the context's state as the 0.12 workflow docs use it.

``await ctx.store.get("state")`` / ``await ctx.store.set("state", value)`` (a dotted path reaches
inside: ``"state.name"``), ``async with ctx.store.edit_state() as s: s["state"]["count"] += 1``,
``get_state`` / ``set_state`` / ``clear``, as on llama-index-workflows. The store is a view of
the very dict ``ctx.get`` / ``ctx.set`` read and write (the reference's are deprecated aliases of
the store's), so either form sees what the other wrote, and checkpoints save it as before.

``edit_state`` holds the store's lock while its block runs, so two edits never interleave;
``get`` and ``set`` never wait for it (they cannot be interrupted half-way anyway), so reading
the store inside an edit block does not deadlock as it would on the reference.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["ContextStore", "StoreState", "MAX_DEPTH"]

MAX_DEPTH = 1000  # as the reference: a longer dotted path is an error
_MISSING: Any = Ellipsis  # the reference's "no default" marker


class StoreState(MutableMapping[str, Any]):
    """The store's keys, read and written as a dict (``s["state"]``) or as attributes
    (``s.state``), like the reference's ``DictState``. A view: changes reach the store."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", {} if data is None else data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"context keys are str, got {type(key).__name__}: {key!r}")
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"the context's state has no key {name!r}; keys: {sorted(self._data) or '(none)'}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __repr__(self) -> str:
        return f"StoreState({self._data!r})"


def _segments(path: str) -> list[str]:
    if not isinstance(path, str):
        raise TypeError(f"a store path is a str such as 'state' or 'state.name', got {type(path).__name__}")
    segments = path.split(".") if path else []
    if len(segments) > MAX_DEPTH:
        raise ValueError(f"Path length exceeds {MAX_DEPTH} segments")
    return segments


def _step(obj: Any, segment: str) -> Any:
    """One segment into ``obj``: a key, a list index or an attribute."""
    if isinstance(obj, Mapping):
        return obj[segment]
    if isinstance(obj, (list, tuple)):
        try:
            return obj[int(segment)]
        except ValueError:
            pass
    return getattr(obj, segment)


def _assign(obj: Any, segment: str, value: Any) -> None:
    if isinstance(obj, MutableMapping):
        obj[segment] = value
    elif isinstance(obj, list) and segment.lstrip("-").isdigit():
        obj[int(segment)] = value
    else:
        setattr(obj, segment, value)


class ContextStore:
    """A context's state, by dotted path (see the module docstring)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def _the_lock(self) -> asyncio.Lock:
        """The edit lock of the running loop (a context outlives the loops of its runs)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def get(self, path: str, default: Any = _MISSING) -> Any:
        """The value at ``path`` (``"state"``, ``"state.name"``, ``"items.0"``); ``default`` if
        given and nothing is there, else ``ValueError`` (the reference's)."""
        segments = _segments(path)
        value: Any = self._data
        try:
            for segment in segments:
                value = _step(value, segment)
        except (KeyError, IndexError, AttributeError, TypeError):
            if default is not _MISSING:
                return default
            raise ValueError(
                f"Path '{path}' not found in state; keys set so far: {sorted(self._data) or '(none)'}"
            ) from None
        return StoreState(value) if value is self._data else value

    async def set(self, path: str, value: Any) -> None:
        """Put ``value`` at ``path``, making the dicts on the way that do not exist yet."""
        segments = _segments(path)
        if not segments:
            raise ValueError("Path cannot be empty")
        current: Any = self._data
        for segment in segments[:-1]:
            try:
                current = _step(current, segment)
            except (KeyError, IndexError, AttributeError, TypeError):
                made: dict[str, Any] = {}
                _assign(current, segment, made)
                current = made
        _assign(current, segments[-1], value)

    @asynccontextmanager
    async def edit_state(self) -> AsyncIterator[StoreState]:
        """The whole state to edit in place (``s["state"]["count"] += 1``), one edit at a time."""
        async with self._the_lock():
            yield StoreState(self._data)

    async def get_state(self) -> StoreState:
        """A shallow copy of the whole state."""
        return StoreState(dict(self._data))

    async def set_state(self, state: Mapping[str, Any]) -> None:
        """Replace the whole state with ``state``'s keys."""
        if not isinstance(state, Mapping):
            raise TypeError(f"set_state takes a mapping of keys to values, got {type(state).__name__}")
        new = dict(state)
        for key in new:
            if not isinstance(key, str):
                raise TypeError(f"context keys are str, got {type(key).__name__}: {key!r}")
        self._data.clear()
        self._data.update(new)

    async def clear(self) -> None:
        """Forget every key."""
        self._data.clear()

    def __repr__(self) -> str:
        return f"ContextStore(keys={sorted(self._data)})"
