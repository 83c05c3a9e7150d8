"""Reading a run back from the store: its task rows and its log replayed, in one transaction,
then rebuilt by the run file's codec with a decoder that builds the objects living in rows of
their own (``RunStore.load``; the layout is in ``nbagent.store.sql`` and ``nbagent.store.records``).

Damage is told apart by its reach (``nbagent.store.damage``): a task row, or a log record of a
task's place, that does not read or fit damages that task; a record of an object (a memory, a
log, a state dict) damages that object, and so every task that refers to it. Those tasks are
skipped and the others load. A log row that cannot be read at all (not UTF-8, cut JSON, its
checksum fails) or is missing (a gap in the run's numbering), or a record that names neither,
may have held anything: the run is refused. Checksums (schema 4) catch the changed bytes that
still read as JSON, and rows read in a place they were not written in.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Sequence
from typing import Any

from nbagent.allowlist import PersistError
from nbagent.store.damage import DamagedRunError, one_line
from nbagent.store.records import KINDS, Replayed
from nbagent.store.row_decoder import StoreDecoder
from nbagent.store.sql import RUN_BITS, log_crc, loads_row, py_text, run_range, run_seed, task_seed

__all__ = [
    "read_rows", "StoreRows", "StoreDecoder", "RUN_BITS", "run_range", "py_text", "loads_row", "run_seed", "task_seed",
    "log_crc",
]


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
        "ORDER BY rowid",  # (the order the run's tasks were made in; a task written again in full keeps its row)
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
    """Replays a run's log rows into ``StoreRows`` (each record by its kind: ``nbagent.store.records``)."""

    def __init__(self, rows: StoreRows, task_of: dict[int, str], path: Any, run: str) -> None:
        self.rows = rows
        self.task_of = task_of
        self.path = path
        self.run = run
        self.replayed = Replayed(rows.damaged_objects)
        self.bad_places: dict[int, str] = {}

    def refuse(self, what: str) -> DamagedRunError:
        return DamagedRunError(self.path, what + "; what it held cannot be told, so the run is not loaded", run=self.run)

    def read(self, db: sqlite3.Connection, no: int, seed: int, strict: bool) -> None:
        lo, hi = run_range(no)
        bad_objects = self.rows.damaged_objects
        bad_places, task_of, replayed = self.bad_places, self.task_of, self.replayed
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
                kind = KINDS.get(op[0])
                if kind is None:
                    raise self.refuse(f"{row} holds a record of unknown kind {_short(op[0])}")
                about = op[1]
                if kind.of_object:
                    if about in bad_objects:
                        continue
                    try:
                        kind.apply(replayed, op)
                    except (LookupError, TypeError, ValueError) as err:
                        bad_objects[about] = f"its record {_short(op)} in {row} does not fit ({err!r})"
                else:
                    if about not in task_of or about in bad_places:
                        continue  # a place no task holds any more (a task written again in full)
                    try:
                        kind.apply(replayed, op)
                    except (LookupError, TypeError, ValueError) as err:
                        bad_places[about] = f"its record {_short(op)} in {row} does not fit ({err!r})"
        self._finish()

    def _finish(self) -> None:
        rows, replayed = self.rows, self.replayed
        rows.objects = replayed.objects
        for seq, tid in self.task_of.items():
            if seq in self.bad_places:
                rows.damaged_tasks[tid] = self.bad_places[seq]
                continue
            rows.steps[tid] = [rec for _, rec in sorted(replayed.steps.get(seq, {}).items())]
            rows.outputs[tid] = [
                (n, cpos, done, upos, rec) for n, (cpos, done, upos, rec) in enumerate(replayed.outputs.get(seq, []))
            ]
            rows.history[tid] = replayed.lists["h"].get(seq, [])
            rows.failures[tid] = replayed.lists["f"].get(seq, [])
        rows.tasks = [(t, h) for t, h in rows.tasks if t not in rows.damaged_tasks]
        for k, found in replayed.items.items():
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
