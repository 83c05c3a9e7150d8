"""Reading a run back from the store: its task rows and its log replayed, in one transaction,
then rebuilt by the run file's codec with a decoder that builds the objects living in rows of
their own (``RunStore.load``; the layout is in ``nbagent.store.sqlite``).

Damage is told apart by its reach (``nbagent.store.damage``): a task row, or a log record of a
task's place, that does not read or fit damages that task; a record of an object (a memory, a
log, a state dict) damages that object, and so every task that refers to it. Those tasks are
skipped and the others load. A log row that cannot be read at all (not UTF-8, cut JSON, its
checksum fails) or is missing (a gap in the run's numbering), or a record that names neither,
may have held anything: the run is refused. Checksums (schema 4) catch the changed bytes that
still read as JSON, and rows read in a place they were not written in.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from nbagent._prefix import PrefixView
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage
from nbagent.snapshot import AppendLog, _Saved
from nbagent.store.damage import DamagedRunError, one_line
from nbagent.store.values import PersistError, _Decoder, memory_tokenizer

__all__ = [
    "read_rows", "StoreRows", "StoreDecoder", "RUN_BITS", "run_range", "py_text", "loads_row", "run_seed", "task_seed",
    "log_crc",
]

# a log row's id: the run's number in its high bits, the row's place in the run in its low ones,
# so a run's rows are one range of the table's own key (no index to keep up to date)
RUN_BITS = 36

_TASK_KINDS = frozenset({"s", "u", "p", "pd", "h", "f", "hx", "fx"})
_OBJECT_KINDS = frozenset({"o", "i", "ic"})
_MISSING = object()


def run_range(no: int) -> tuple[int, int]:
    return no << RUN_BITS, (no + 1) << RUN_BITS


# Checksums (schema 4): CRC-32 of a row's text, started from what places the row, so that a
# row read in another place (a changed row id, task place or run number) fails too.
def run_seed(run_id: str) -> int:
    """Where every checksum of run ``run_id`` starts (a run header's: its text from here)."""
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass"))


def task_seed(seed: int, task_id: str, seq: int) -> int:
    """Where the checksum of a task row starts: its run, its id and its place in the run."""
    return zlib.crc32(f"\0{task_id}\0{seq}".encode("utf-8", "surrogatepass"), seed)


def log_crc(seed: int, row_id: int, text: bytes) -> int:
    """The checksum of log row ``row_id`` of the run whose seed is ``seed``."""
    return zlib.crc32(text, zlib.crc32(row_id.to_bytes(8, "little", signed=True), seed))


def py_text(value: Any) -> Any:
    """A text column as Python text: a BLOB (``_sql_text`` wrote a str holding a lone
    surrogate as its ``surrogatepass`` bytes; ``CAST(x AS BLOB)`` reads any text as bytes)
    becomes the very same str. Raises ``UnicodeDecodeError`` for bytes no str was written as."""
    if type(value) is bytes:
        return value.decode("utf-8", "surrogatepass")
    return value


def loads_row(raw: Any) -> Any:
    """A row's JSON (text, or its bytes), or ValueError saying why it does not read."""
    try:
        return json.loads(py_text(raw) if type(raw) is bytes else raw)
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg}, character {err.pos}: cut short or overwritten?)") from err
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    except (ValueError, TypeError) as err:
        raise ValueError(f"not valid JSON ({err})") from err


def _short(op: Any) -> str:
    return one_line(repr(op), 80)


class StoreRows:
    """Every piece of one run, read in one transaction by replaying its log; with what of it
    is damaged (by task, by object)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, Any]] = []  # (task_id, head: its row's bytes)
        self.steps: dict[str, list[Any]] = {}
        self.outputs: dict[str, list[tuple[int, Any, int, Any, Any]]] = {}
        self.history: dict[str, list[Any]] = {}
        self.failures: dict[str, list[Any]] = {}
        self.objects: dict[int, tuple[str, Any]] = {}
        self.items: dict[int, dict[int, Any]] = {}  # k -> item number -> record
        self.order: dict[int, list[int]] = {}  # k -> the item numbers in the list, in order
        self.placed: dict[int, dict[int, list[Any]]] = {}  # k -> i -> [pos now or None, record, pos written at]
        self.damaged_tasks: dict[str, str] = {}  # task id -> what is damaged
        self.damaged_objects: dict[int, str] = {}  # object number -> what is damaged

    def task_docs(self, source: str) -> list[dict[str, Any]]:
        """Each task as the run file's task record (values still encoded); a task whose row
        or records do not fit is left out, in ``damaged_tasks``."""
        docs = []
        for tid, head in self.tasks:
            try:
                docs.append(self._task_doc(tid, head))
            except (ValueError, LookupError, TypeError, AttributeError) as err:
                self.damaged_tasks[tid] = one_line(str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}", 300)
        return docs

    def _task_doc(self, tid: str, head: Any) -> dict[str, Any]:
        try:
            doc = loads_row(head)
        except ValueError as err:
            raise ValueError(f"its row in the tasks table is {err}") from err
        if type(doc) is not dict:
            raise ValueError(f"its row in the tasks table is a JSON {type(doc).__name__}, not an object")
        steps, states, models = [], {}, {}
        for rec in self.steps.get(tid, []):
            if type(rec) is not dict:
                raise ValueError(f"a step record is a JSON {type(rec).__name__}, not an object")
            sid = rec.get("step_id")
            states[sid] = rec.pop("state", {})
            model = rec.pop("model", None)
            if model is not None:
                models[sid] = model
            steps.append(rec)
        outputs, completed, done, undone = [], [], [], []
        for n, cpos, is_done, upos, rec in self.outputs.get(tid, []):
            if type(rec) is not dict:
                raise ValueError(f"output record {n} is a JSON {type(rec).__name__}, not an object")
            for name, pos in (("completed", cpos), ("undone", upos)):
                if pos is not None and type(pos) is not int:
                    raise ValueError(f"output {n}'s place among the {name} outputs is {pos!r}, not a number")
            outputs.append(rec)
            if cpos is not None:
                completed.append((cpos, n))
            if upos is not None:
                undone.append((upos, n))
            if is_done:
                done.append((rec.get("step_id"), n))
        doc.update(
            steps=steps,
            step_states=states,
            models=models,
            outputs=outputs,
            completed=[n for _, n in sorted(completed)],
            done=dict(done),
            undone_outputs=[n for _, n in sorted(undone)],
            history=list(self.history.get(tid, [])),
            failures=list(self.failures.get(tid, [])),
        )
        return doc


def read_rows(
    db: sqlite3.Connection, path: Any, run: str, no: int, only: Sequence[str] | None, strict: bool = False
) -> StoreRows:
    """Read run ``run`` (number ``no``) of the store at ``path`` (only the tasks ``only``).
    Raises ``DamagedRunError`` when the damage's reach cannot be told (see the module).
    ``strict``: every row was written with a checksum (a store made at schema 4): one that has
    none is damaged; else such a row was written before checksums and is read as it is."""
    rows = StoreRows()
    wanted = None if only is None else set(only)
    seed = run_seed(run)
    task_of: dict[int, str] = {}  # a task's place (seq) -> its id; records of other places are stale
    for rowid, raw_id, seq, head, crc in db.execute(
        "SELECT rowid, CAST(task_id AS BLOB), seq, CAST(head AS BLOB), crc FROM tasks WHERE run_id=? "
        "ORDER BY seq, rowid",
        (run,),
    ):
        try:
            task_id = py_text(raw_id)
        except UnicodeDecodeError:
            if wanted is None:
                rows.damaged_tasks[f"(row {rowid} of the tasks table)"] = "its task id is not UTF-8 text"
            continue
        if wanted is not None and task_id not in wanted:
            continue
        if type(task_id) is not str:
            rows.damaged_tasks[f"(row {rowid} of the tasks table)"] = f"its task id is {task_id!r}, not text"
            continue
        if type(seq) is not int or seq in task_of:
            rows.damaged_tasks[task_id] = f"its place in the run ({seq!r}) is not a number of its own"
            other = task_of.pop(seq, None) if type(seq) is int else None
            if other is not None:
                rows.damaged_tasks[other] = f"its place in the run ({seq!r}) is another task's too"
            continue
        if crc is None and strict:
            rows.damaged_tasks[task_id] = "its row in the tasks table has lost its checksum"
            continue
        if crc is not None and (type(head) is not bytes or zlib.crc32(head, task_seed(seed, task_id, seq)) != crc):
            rows.damaged_tasks[task_id] = "its row in the tasks table fails its checksum (changed bytes)"
            continue
        rows.tasks.append((task_id, head))
        task_of[seq] = task_id
    rows.tasks = [(t, h) for t, h in rows.tasks if t not in rows.damaged_tasks]
    if wanted is not None:
        missing = sorted(wanted - {t for t, _ in rows.tasks} - set(rows.damaged_tasks))
        if missing:
            raise PersistError(f"{path}: run {run!r} has no task(s) {missing}")
    _Replay(rows, task_of, path, run).read(db, no, seed, strict)
    return rows


class _Replay:
    """Replays a run's log rows into ``StoreRows``."""

    def __init__(self, rows: StoreRows, task_of: dict[int, str], path: Any, run: str) -> None:
        self.rows = rows
        self.task_of = task_of
        self.path = path
        self.run = run
        self.steps: dict[int, dict[int, Any]] = {}  # seq -> step's place -> record
        self.outputs: dict[int, list[list[Any]]] = {}  # seq -> [cpos, done, upos, record] by n
        self.lists: dict[str, dict[int, list[Any]]] = {"h": {}, "f": {}}  # history, failures
        self.items: dict[int, dict[int, list[Any]]] = {}  # k -> i -> [pos, record, pos written at]
        self.twins: dict[int, list[int]] = {}  # k -> the dicts written as "the same as k" since k was
        self.bad_places: dict[int, str] = {}

    def refuse(self, what: str) -> DamagedRunError:
        return DamagedRunError(self.path, what + "; what it held cannot be told, so the run is not loaded", run=self.run)

    def read(self, db: sqlite3.Connection, no: int, seed: int, strict: bool) -> None:
        lo, hi = run_range(no)
        bad_objects = self.rows.damaged_objects
        expected = lo  # a run's rows are numbered from 0 without a gap
        for row_id, raw, crc in db.execute(
            "SELECT id, CAST(ops AS BLOB), crc FROM log WHERE id>=? AND id<? ORDER BY id", (lo, hi)
        ):
            row = f"log row {row_id - lo}"
            if not lo <= row_id < hi:
                raise self.refuse(f"the log row of id {row_id}, not this run's, was read as one of its rows")
            if row_id != expected:
                missing = f"log row {expected - lo}" + (f" to {row_id - lo - 1}" if row_id - 1 > expected else "")
                raise self.refuse(f"{missing} of the run {'is' if row_id - 1 == expected else 'are'} missing")
            expected += 1
            if crc is None and strict:
                raise self.refuse(f"{row} has lost its checksum")
            if crc is not None and (type(raw) is not bytes or log_crc(seed, row_id, raw) != crc):
                raise self.refuse(f"{row} fails its checksum (changed bytes)")
            try:
                ops = loads_row(raw)
            except ValueError as err:
                raise self.refuse(f"{row} is {err}") from err
            if type(ops) is not list:
                raise self.refuse(f"{row} is a JSON {type(ops).__name__}, not a list of records")
            for op in ops:
                if type(op) is not list or len(op) < 2 or type(op[0]) is not str or type(op[1]) is not int:
                    raise self.refuse(f"{row} holds {_short(op)}, which is no record")
                kind = op[0]
                if kind in _OBJECT_KINDS:
                    k = op[1]
                    if k in bad_objects:
                        continue
                    try:
                        self._object_op(op)
                    except (LookupError, TypeError, ValueError) as err:
                        bad_objects[k] = f"its record {_short(op)} in {row} does not fit ({err!r})"
                elif kind in _TASK_KINDS:
                    t = op[1]
                    if t not in self.task_of or t in self.bad_places:
                        continue  # a place no task holds any more (a task written again in full)
                    try:
                        self._task_op(op)
                    except (LookupError, TypeError, ValueError) as err:
                        self.bad_places[t] = f"its record {_short(op)} in {row} does not fit ({err!r})"
                else:
                    raise self.refuse(f"{row} holds a record of unknown kind {_short(kind)}")
        self._finish()

    def _object_op(self, op: list[Any]) -> None:
        kind, k = op[0], op[1]
        objects = self.rows.objects
        if kind == "o":
            if op[2] not in ("dict", "same", "mem", "log"):
                raise ValueError(f"unknown kind of object {op[2]!r}")
            if op[2] == "same":
                if type(op[3]) is not int or objects[op[3]][0] not in ("dict", "same"):
                    raise ValueError(f"object {op[3]!r} is not a dict")
                if op[3] in self.rows.damaged_objects:
                    raise ValueError(f"it copies damaged object {op[3]}")
            for other in self.twins.pop(k, ()):  # copies of what k held: now their own
                if objects.get(other) == ("same", k):
                    objects[other] = objects[k]
                    if objects[k][0] == "same":
                        self.twins.setdefault(objects[k][1], []).append(other)
            if op[2] == "same":
                self.twins.setdefault(op[3], []).append(k)
            objects[k] = (op[2], op[3])
        elif kind == "i":
            i, pos = op[2], op[3]
            found = self.items.setdefault(k, {})
            if type(i) is not int or type(pos) is not int or not 0 <= pos <= len(found):
                raise ValueError(f"item {i!r} at place {pos!r} of a list that had {len(found)} items")
            found[i] = [pos, op[4], pos]
        else:  # "ic": items cut off the list (an undo)
            found = self.items[k]
            for i in op[2]:
                found[i][0] = None

    def _task_op(self, op: list[Any]) -> None:
        kind, t = op[0], op[1]
        if kind == "s":
            if type(op[2]) is not int:
                raise ValueError(f"a step's place {op[2]!r} is not a number")
            self.steps.setdefault(t, {})[op[2]] = op[3]
        elif kind == "u":
            outs = self.outputs.setdefault(t, [])
            n, place = op[2], op[3]
            if type(place) is not list or len(place) != 3:
                raise ValueError(f"an output's places {place!r} are not [completed, done, undone]")
            if type(n) is not int or not 0 <= n <= len(outs):
                raise ValueError(f"output {n!r} follows output {len(outs) - 1}")
            if n == len(outs):
                outs.append([*place, op[4]])
            else:
                outs[n] = [*place, op[4]]
        elif kind == "p":
            outs = self.outputs[t]
            slot = op[2]
            if slot not in (0, 1, 2) or type(slot) is not int:
                raise ValueError(f"slot {slot!r}")
            for value, n in op[3]:
                if type(n) is not int or n < 0:
                    raise IndexError(n)
                outs[n][slot] = value
        elif kind == "pd":
            for out in self.outputs.get(t, ()):
                out[1] = 0
        elif kind == "h" or kind == "f":
            lst = self.lists[kind].setdefault(t, [])
            i = op[2]
            if type(i) is not int or not 0 <= i <= len(lst):
                raise ValueError(f"record {i!r} follows record {len(lst) - 1}")
            if i == len(lst):
                lst.append(op[3])
            else:
                lst[i] = op[3]
        else:  # "hx" / "fx": that list cut at op[2]
            if type(op[2]) is not int or op[2] < 0:
                raise ValueError(f"a cut at {op[2]!r}")
            del self.lists[kind[0]].get(t, [])[op[2]:]

    def _finish(self) -> None:
        rows = self.rows
        for seq, tid in self.task_of.items():
            if seq in self.bad_places:
                rows.damaged_tasks[tid] = self.bad_places[seq]
                continue
            rows.steps[tid] = [rec for _, rec in sorted(self.steps.get(seq, {}).items())]
            rows.outputs[tid] = [
                (n, cpos, done, upos, rec) for n, (cpos, done, upos, rec) in enumerate(self.outputs.get(seq, []))
            ]
            rows.history[tid] = self.lists["h"].get(seq, [])
            rows.failures[tid] = self.lists["f"].get(seq, [])
        rows.tasks = [(t, h) for t, h in rows.tasks if t not in rows.damaged_tasks]
        for k, found in self.items.items():
            if k in rows.damaged_objects:
                continue
            placed = sorted((pos, i) for i, (pos, _, _) in found.items() if pos is not None)
            gap = next((want for want, (pos, _) in enumerate(placed) if pos != want), None)
            if gap is not None:
                rows.damaged_objects[k] = f"its item {placed[gap][0]} follows item {gap - 1}"
                continue
            rows.items[k] = {i: rec for i, (_, rec, _) in found.items()}
            rows.order[k] = [i for _, i in placed]
            rows.placed[k] = found


class StoreDecoder(_Decoder):
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
                if "t" in d:  # a memory's snapshot
                    if type(c) is not ChatMemoryBuffer or type(d["t"]) is not int:
                        raise self.fail(where, f"object {d['$c']} is not a memory, or {d['t']!r} not a length")
                    return (c._messages, c._counts, d["t"])
                if "s" in d:  # a memory's or log's own snapshot
                    return _Saved(c, self.value(d["s"], where), False)
                if "v" in d:  # a view of the log's first n items
                    return self._view(d["$c"], c, d["v"], where)
                part = d.get("p")
                if part is None:
                    return c
                if type(c) is not ChatMemoryBuffer:
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
            buf = ChatMemoryBuffer(token_limit=rec["token_limit"], tokenizer_fn=memory_tokenizer(rec, where, self.fail))
            self.built[k] = buf
            pairs = [self._item(k, i, where) for i in order]
            buf._messages = [m for m, _ in pairs]
            buf._counts = [c for _, c in pairs]
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


