"""The store's decoder: the run file's decoder, plus the objects that live in rows of their own
(memories, logs, state dicts, items), built from the rows ``nbagent.store.reader`` read.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from nbagent._prefix import PrefixView
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage
from nbagent.snapshot import AppendLog, _Saved
from nbagent.session_memory import Memory
from nbagent.store.decoder import ValueDecoder, fill_memory, new_memory

if TYPE_CHECKING:
    from nbagent.store.reader import StoreRows

__all__ = ["StoreDecoder"]

_MISSING = object()


class StoreDecoder(ValueDecoder):
    """The run file's decoder, plus the objects that live in rows of their own (built when
    first referred to, so rows may refer to each other in any order)."""

    def __init__(self, source: str, rows: StoreRows) -> None:
        super().__init__(source)
        self.rows = rows
        self.built: dict[int, Any] = {}
        self.building: set[int] = set()  # objects being built now (half built if decoding fails)
        self.items_built: dict[tuple[int, int], Any] = {}
        self.views: dict[tuple[int, int, int], PrefixView[Any]] = {}
        self.at: dict[int, list[list[int]]] = {}  # k -> by position: the numbers of the items written there
        self.frozen: dict[int, dict[int, tuple[list[Any], int]]] = {}  # k -> i -> (a rebuilt list, i's place)

    def mark(self) -> Any:
        return None

    def forget(self, mark: Any, task: str) -> None:
        """After a damaged task: drop the objects it left half built (a later task that refers
        to one builds it again from its rows). What was built whole stays: it is intact."""
        for k in self.building:
            self.built.pop(k, None)
        self.building.clear()
        self.frozen.clear()  # (a cache of rebuilt views: rebuilt again when needed)

    def _define(self, n: Any, obj: Any, where: str) -> None:
        # numbers are unique in the run and a reference never leaves its row: an object built
        # again (after a damaged task left it half built) defines its numbers again
        if type(n) is not int:
            raise self.fail(where, f"bad object number {n!r}")
        self.objects[n] = obj

    def value(self, d: Any, where: str) -> Any:
        if type(d) is dict:
            if "$c" in d:
                c = self._object(d["$c"], where)
                if "t" in d:  # a memory's snapshot (a session Memory's: how many archived too)
                    if not isinstance(c, ChatMemoryBuffer) or type(d["t"]) is not int:
                        raise self.fail(where, f"object {d['$c']} is not a memory, or {d['t']!r} not a length")
                    if "a" not in d:
                        return (c._messages, c._counts, d["t"])
                    if type(c) is not Memory or type(d["a"]) is not int:
                        raise self.fail(where, f"object {d['$c']} is not a session Memory, or {d['a']!r} not a count")
                    return (c._messages, c._counts, d["t"], d["a"])
                if "s" in d:  # a memory's or log's own snapshot
                    return _Saved(c, self.value(d["s"], where), False)
                if "v" in d:  # a view of the log's first n items
                    return self._view(d["$c"], c, d["v"], where)
                part = d.get("p")
                if part is None:
                    return c
                if not isinstance(c, ChatMemoryBuffer):
                    raise self.fail(where, f"object {d['$c']} is not a memory")
                return c._messages if part == "m" else c._counts
            if "$d" in d:
                return self._object(d["$d"], where)
            if "$i" in d:
                k, i = d["$i"]
                item = self._item(k, i, where)
                return item[0] if self.rows.objects.get(k, ("",))[0] == "mem" else item
        return super().value(d, where)

    def _object(self, k: Any, where: str) -> Any:
        found = self.built.get(k)
        if found is not None:
            return found
        damage = self.rows.damaged_objects.get(k) if type(k) is int else None
        if damage is not None:
            raise self.fail(where, f"refers to stored object {k}, which is damaged: {damage}")
        entry = self.rows.objects.get(k) if type(k) is int else None
        if entry is None:
            raise self.fail(where, f"refers to stored object {k!r}, which the store does not hold")
        self.building.add(k)
        built = self._build(k, entry, where)
        self.building.discard(k)
        return built

    def _build(self, k: int, entry: tuple[str, Any], where: str) -> Any:
        kind, rec = entry
        if kind == "same":  # the same objects as dict ``rec`` holds
            same: dict[str, Any] = {}
            self.built[k] = same
            src = self._object(rec, where)
            if not isinstance(src, dict):
                raise self.fail(where, f"stored object {k} copies {rec}, which is not a dict")
            same.update(src)
            return same
        if kind == "dict":
            out: dict[str, Any] = {}
            self.built[k] = out
            value = super().value(rec, where)  # the dict's own row
            if not isinstance(value, dict):
                raise self.fail(where, f"stored object {k} is not a dict")
            out.update(value)
            return out
        order = self.rows.order.get(k, [])
        if kind == "log":
            log: AppendLog[Any] = AppendLog()
            self.built[k] = log
            for i in order:
                list.append(log, self._item(k, i, where))
            return log
        if kind == "mem":
            if type(rec) is not dict or type(rec.get("token_limit")) is not int:
                raise self.fail(where, f"stored memory {k} has no token limit")
            buf = new_memory(rec, where, self.fail)
            self.built[k] = buf
            pairs = [self._item(k, i, where) for i in order]
            fill_memory(buf, [m for m, _ in pairs], [c for _, c in pairs], rec, where, self.fail)
            return buf
        raise self.fail(where, f"stored object {k} has an unknown kind {kind!r}")

    def _view(self, k: int, log: Any, v: Any, where: str) -> PrefixView[Any]:
        """The view ``{"$c": k, "v": [last, n]}`` stands for: the log's first n items while
        item ``last`` is still at n-1 (only the tail is ever cut), else the items that stood at
        0..n-1 when it was written: at each place, the newest item written there numbered at
        most ``last`` (items are numbered in the order they were written)."""
        if type(log) is not AppendLog or type(v) is not list or len(v) != 2 or any(type(x) is not int for x in v):
            raise self.fail(where, f"a view needs a log and [last item, n]; got object {k} and {v!r}")
        last, n = v
        key = (k, last, n)
        view = self.views.get(key)
        if view is not None:
            return view
        order = self.rows.order.get(k, [])
        if n == 0 or (n <= len(order) and order[n - 1] == last):
            view = log.view(n)
        else:
            frozen = self.frozen.setdefault(k, {})
            hit = frozen.get(last)
            if hit is not None and hit[1] == n - 1:
                view = PrefixView.over(hit[0], n)
            else:
                at = self.at.get(k)
                if at is None:
                    at = self.at[k] = []
                    for i, (_, _, pos) in sorted(self.rows.placed.get(k, {}).items()):
                        while len(at) <= pos:
                            at.append([])
                        at[pos].append(i)  # ascending: the items are sorted by number
                numbers = []
                for p in range(n):
                    written = at[p] if p < len(at) else ()
                    j = bisect_right(written, last) - 1  # type: ignore[arg-type]
                    if j < 0:
                        raise self.fail(
                            where, f"a view of {n} items of log {k} up to item {last}: no item at place {p}"
                        )
                    numbers.append(written[j])
                if numbers[-1] != last:
                    raise self.fail(
                        where, f"a view of {n} items of log {k}: item {last} was not written at place {n - 1}"
                    )
                items = [self._item(k, i, where) for i in numbers]
                for p, i in enumerate(numbers):
                    frozen.setdefault(i, (items, p))
                view = PrefixView.over(items, n)
        self.views[key] = view
        return view

    def _item(self, k: Any, i: Any, where: str) -> Any:
        key = (k, i)
        if key in self.items_built:
            return self.items_built[key]
        damage = self.rows.damaged_objects.get(k) if type(k) is int else None
        if damage is not None:
            raise self.fail(where, f"refers to item {i!r} of stored object {k}, which is damaged: {damage}")
        items = self.rows.items.get(k) if type(k) is int else None
        raw = items.get(i, _MISSING) if items is not None and type(i) is int else _MISSING
        if raw is _MISSING:
            raise self.fail(where, f"refers to item {i!r} of stored object {k!r}, which the store does not hold")
        kind = self.rows.objects.get(k, ("?", ""))[0]
        if kind == "mem":
            if not (type(raw) is list and len(raw) == 2 and type(raw[1]) is int):
                raise self.fail(where, f"item {i} of memory {k} is not a [message, count] pair")
            value: Any = (self.value(raw[0], where), raw[1])
            if not isinstance(value[0], ChatMessage):
                raise self.fail(where, f"item {i} of memory {k} is a {type(value[0]).__name__}, not a message")
        else:
            value = self.value(raw, where)
        self.items_built[key] = value
        return value
