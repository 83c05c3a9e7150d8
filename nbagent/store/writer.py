"""Writing one runner into a run store: in full, then, after every step and state change, only
what changed, as one log row of records (``nbagent.store.records``) in one transaction.

A step of a task already stored goes in one statement (the ``step_commit`` view of
``nbagent.store.sql``): its log row and its task's row, one implicit transaction. What the
writer remembers of what the store holds (``nbagent.store.mirrors``) tells it what changed: a
memory's or a log's new items, a state dict whose record reads differently now, a task's new
steps, outputs, snapshots and failures (``nbagent.store.task_rows``). Memories, logs and state
dicts live in rows of their own; every other record refers to them (``nbagent.store.row_encoder``).

Steps that come faster than a store's ``commit_every`` are committed in groups
(``nbagent.store.grouped``).
"""

from __future__ import annotations

import time
import uuid
import warnings
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent import events as _ev
from nbagent import ids as _ids
from nbagent.allowlist import PersistError
from nbagent.engine.state import TaskState
from nbagent.memory import ChatMemoryBuffer
from nbagent.store.codec import runner_header
from nbagent.store.encoder import SHARED_STR_CHARS, memory_record
from nbagent.store.grouped import Waiting, changed_by
from nbagent.store.links import AutosaveWarning, StoreLinks, autosave_warning
from nbagent.store.mirrors import Container, TaskMirror, common_prefix
from nbagent.store.records import ItemRecord, ItemsCut, ObjectRecord
from nbagent.store.row_encoder import StoreEncoder
from nbagent.store.sql import RUN_BITS, RUN_MOVED, StoreConnection, dumps, log_crc, run_moved, run_range, run_seed, sql_text
from nbagent.store.task_rows import write_task

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["Writer"]

_SCALARS = frozenset({int, float, bool, type(None)})
_MISSING = object()
# the events a step ends with: written in one statement when its task is in the store already
_STEP_EVENTS = (_ev.StepCompleted, _ev.StepFailed, _ev.StepUndone, _ev.StepEdited)


class Writer:
    """Writes one runner into a store: in full, then one transaction per change."""

    #: build the records of a worker's usual pieces by the encoder's early exits
    #: (``nbagent.store.row_encoder``); False: always by its general path
    early_exits: bool = True

    def __init__(self, store: StoreConnection, runner: AgentRunner, run_id: str) -> None:
        self.store = store
        self.db = store._db
        self.cur = store._cur
        self.runner = runner
        self.run_id = run_id
        self.seed = run_seed(run_id)  # every checksum of the run starts from its id
        self.run_no: int | None = None  # the run's number in the runs table
        self.log_seq: int | None = None  # the next log row's place in the run (None: ask the store)
        self.last_crc: int | None = None  # the checksum of the row before it (what this writer wrote last)
        self.ops: list[tuple[Any, ...]] = []  # the records this transaction writes (JSON-ready)
        self.row_update: list[Any] | None = None  # see _one_statement
        self._reset()
        self._encoder = StoreEncoder(self)
        self._encoder.busy = False
        self.broken = False
        self.moved = False  # another writer took this run over (see _fork)
        #: steps held back (grouped commits: the store's ``commit_every``), or None
        every = getattr(store, "commit_every", 0.0)
        self.waiting = Waiting(every) if every else None

    def _reset(self) -> None:
        self.refs: dict[int, tuple[Any, Any, int]] = {}  # id(obj) -> (reference, obj, k)
        self.containers: dict[int, Container] = {}
        self.dicts: dict[int, tuple[int, dict[str, Any]]] = {}  # id(dict) -> (k, dict)
        self.mirrors: dict[str, TaskMirror] = {}
        self.touched: set[int] = set()
        self.dirty_dicts: dict[int, dict[str, Any]] = {}
        self.dict_text: dict[int, Any] = {}  # what each dict's record holds now (the record, or ("same", k))
        self.synced: set[int] = set()  # containers written in this transaction (nothing changes meanwhile)
        self.copies: dict[int, set[int]] = {}  # dict k -> the dicts last written as "the same as k"
        self.next_k = 0
        self.counter = 0
        self.header = ""
        self.seq = 0

    @property
    def records(self) -> StoreEncoder:
        """The encoder whose methods build this writer's records (their early exits first)."""
        return self._encoder

    def encoder(self) -> StoreEncoder:
        """An encoder for one record, emptied (the writer's own, unless it is in use)."""
        enc = self._encoder
        if enc.busy:  # (an error left it half way)
            enc = self._encoder = StoreEncoder(self)
            return enc
        return enc.again()

    def begin(self) -> None:
        """Before a transaction's changes: nothing buffered, no container written yet."""
        self.ops.clear()
        self.synced.clear()

    # ----- whole runs -------------------------------------------------------------------
    def rewrite(self) -> None:
        """Write the whole runner again, dropping what the store held of this run (as a new
        run if another writer has taken this one over: see ``_fork``)."""
        if self.moved:
            self._fork()
        self.begin()
        try:
            with self.store._tx():
                self._delete_run()
                self._reset()
                self.write_header(force=True)
                for state in list(self.runner._tasks.values()):
                    write_task(self, state, None)
                    if len(self.ops) > 5000:
                        self.flush()  # a long run goes in several rows
                self.flush()
        finally:
            self.ops.clear()
        self.broken = False
        if self.waiting is not None:
            self.waiting.committed(self)  # (all of it written)

    def _fork(self) -> None:
        """Another writer rewrote or continued this run since this writer's last row (a runner
        loaded from it with autosave, in this process or another): keep the run as that one
        left it, and go on as a new run (with a warning naming both)."""
        old = self.run_id
        self.run_id = "run-" + uuid.uuid4().hex[:12]  # (not from nbagent.ids: a seeded sequence stays as it is)
        self.seed = run_seed(self.run_id)
        self.run_no = self.log_seq = self.last_crc = None
        self.moved = False
        links = self.runner._services.get(StoreLinks)
        if links is not None and links.origin == (str(self.store.path), old):
            links.origin = (str(self.store.path), self.run_id)
        warnings.warn(
            f"{self.store.path}: run {old!r} was written by another runner or process (one that loaded it with "
            f"autosave, say) while this runner autosaved it; this runner goes on as run {self.run_id!r}, and run "
            f"{old!r} stays as the other one left it",
            AutosaveWarning,
            stacklevel=5,
        )

    def _delete_run(self) -> None:
        self.db.execute("DELETE FROM tasks WHERE run_id=?", (self.run_id,))
        no = self._run_no()
        if no is not None:
            self.db.execute("DELETE FROM log WHERE id>=? AND id<?", run_range(no))
        self.log_seq = 0
        self.last_crc = None

    def _run_no(self) -> int | None:
        if self.run_no is None:
            row = self.db.execute("SELECT no FROM runs WHERE run_id=?", (self.run_id,)).fetchone()
            if row is not None:
                self.run_no = row[0]
        return self.run_no

    def flush(self) -> None:
        """Write this transaction's records as one log row (inside the transaction)."""
        if not self.ops:
            return
        no = self._run_no()
        if no is None:
            raise PersistError(f"run {self.run_id!r} has no header row in {self.store.path}")
        if self.log_seq is None:  # (joining a run the store holds: after its last row)
            lo, hi = run_range(no)
            last = self.db.execute("SELECT id, crc FROM log WHERE id>=? AND id<? ORDER BY id DESC LIMIT 1", (lo, hi)).fetchone()
            self.log_seq, self.last_crc = (0, None) if last is None else (last[0] - lo + 1, last[1])
        elif self.log_seq:
            before = self.db.execute("SELECT crc FROM log WHERE id=?", ((no << RUN_BITS) + self.log_seq - 1,)).fetchone()
            if before is None or before[0] != self.last_crc:
                raise PersistError(f"{RUN_MOVED}: run {self.run_id!r} was written by another writer since")
        if self.log_seq >= 1 << RUN_BITS:
            raise PersistError(f"run {self.run_id!r} has {self.log_seq} log rows; save it in full (store.save) to compact it")
        row_id = (no << RUN_BITS) + self.log_seq
        text = dumps(self.ops)
        crc = log_crc(self.seed, row_id, text.encode())
        self.cur.execute("INSERT INTO log VALUES(?,?,?)", (row_id, text, crc))
        self.log_seq += 1
        self.last_crc = crc
        self.ops.clear()

    def write_header(self, force: bool = False) -> None:
        """The run's header row (the runner's settings, worker, memory), if it changed."""
        from nbagent._version import __version__

        runner = self.runner
        enc = self.encoder()
        header = enc.done({"nbagent": __version__, **runner_header(enc, runner, runner.memory)})
        text = dumps(header)
        now = time.time()
        if force or text != self.header or self._run_no() is None:
            self.db.execute(
                "INSERT INTO runs(run_id, created, updated, header, crc) VALUES(?,?,?,?,?) ON CONFLICT(run_id) "
                "DO UPDATE SET header=excluded.header, updated=excluded.updated, crc=excluded.crc",
                (self.run_id, now, now, text, zlib.crc32(text.encode(), self.seed)),
            )
            self.header = text
            if self._run_no() is not None and self.seq == 0 and not self.mirrors:
                # a writer joining a run the store already holds: new tasks go after its tasks
                row = self.db.execute("SELECT max(seq) FROM tasks WHERE run_id=?", (self.run_id,)).fetchone()
                self.seq = 0 if row[0] is None else row[0] + 1
        else:
            self.db.execute("UPDATE runs SET updated=? WHERE run_id=?", (now, self.run_id))

    def write_task_full(self, state: TaskState) -> None:
        # a new place (seq): its older records are stale from here on. Its row stays where it
        # is (updated in place), so the task keeps its place among the run's tasks
        self.mirrors.pop(state.task_id, None)
        write_task(self, state, None)

    def _drop_task(self, task_id: str) -> None:
        # its log records name the task by its place (seq): written again, it gets a new one,
        # and loading skips records of a place no task holds
        self.mirrors.pop(task_id, None)
        self.db.execute("DELETE FROM tasks WHERE run_id=? AND task_id=?", (self.run_id, sql_text(task_id)))

    # ----- events -----------------------------------------------------------------------
    def on_event(self, event: Any) -> None:
        """Write what ``event`` changed, in one transaction (in full if a write failed before)."""
        ev = _ev
        t = type(event)
        if t is ev.StepStarted or t is ev.TokenStreamed or not isinstance(event, ev.Event):
            return
        if not self.broken:
            waiting = self.waiting
            grouped = None if waiting is None else self._group(event, waiting)
            if grouped:
                return  # committed later, with the steps after it
            self.begin()
            try:
                if (waiting is None or not waiting.tasks) and self._one_statement(event):
                    if waiting is not None:
                        waiting.committed(self)
                    return
                with self.store._tx():
                    if waiting is not None:
                        self._write_waiting(waiting)
                    if grouped is None:  # (a step just grouped is written with the others)
                        self._apply(event)
                    self.flush()
                if waiting is not None:
                    waiting.committed(self)
                return
            except Exception as err:  # noqa: BLE001 - the mirrors may be ahead of the store
                self.broken = True
                self.moved = self.moved or run_moved(err)
            except BaseException:  # an interrupt: the mirrors may be ahead too; save in full next time
                self.broken = True
                raise
            finally:
                self.ops.clear()
        self.rewrite()  # write in full; if that fails too, the caller warns

    # ----- grouped commits (``nbagent.store.grouped``) ----------------------------------
    def _group(self, event: Any, waiting: Waiting) -> bool | None:
        """Mark what a step event changed. True: it waits (the last commit was less than
        ``commit_every`` ago); False: commit now, with what waits; None: not a change that
        waits (written now, after what waits)."""
        if type(event) not in _STEP_EVENTS:
            return None
        task_id = event.task_id
        state = self.runner._tasks.get(task_id)
        if state is None or task_id not in self.mirrors:
            return None
        changed = changed_by(event, state)
        with self.store._lock:  # (commit_waiting may read them on another thread)
            waits = waiting.add(task_id, changed, _ids.current_rng() is not None)
        if waits and waiting.timer is None and not waiting.thread:
            waiting.start(self)
        return waits

    def _write_waiting(self, waiting: Waiting) -> None:
        """The records of what changed in the tasks that wait (inside the commit)."""
        if waiting.header:
            self.write_header()
        tasks, mirrors = self.runner._tasks, self.mirrors
        for task_id, dirty in list(waiting.tasks.items()):  # (cleared once committed)
            state = tasks.get(task_id)
            if state is not None and task_id in mirrors:
                write_task(self, state, dirty)

    def in_step(self) -> bool:
        """A step of the runner is running (its state may be half changed: not written now)."""
        return any(state.running for state in self.runner._tasks.values())

    def commit_waiting(self, at_exit: bool = False) -> bool:
        """Commit the steps that wait (grouped commits); True if some did and are committed
        now. Not while a step of the runner runs (its end commits them), unless ``at_exit``.
        A failure warns (``AutosaveWarning``); the next commit writes the run in full."""
        waiting = self.waiting
        if waiting is None or not waiting.tasks or (not at_exit and self.in_step()):
            return False
        with self.store._lock:
            if not waiting.tasks:  # (committed meanwhile)
                return False
            try:
                if self.broken:
                    self.rewrite()
                    return True
                self.begin()
                try:
                    with self.store._tx():
                        self._write_waiting(waiting)
                        self.flush()
                except BaseException as err:
                    self.broken = True  # the mirrors may be ahead of the store
                    self.moved = self.moved or run_moved(err)
                    raise
                finally:
                    self.ops.clear()
                waiting.committed(self)
            except Exception as err:  # noqa: BLE001 - the run goes on; a later commit writes it in full
                if self.moved:  # another writer took the run over: go on as a new run now
                    try:
                        self.rewrite()
                        return True
                    except Exception as again:  # noqa: BLE001
                        err = again
                autosave_warning(self, err)
                return False
        return True

    def _one_statement(self, event: Any) -> bool:
        """A step of a task already in the store: its records and its task's row in one
        statement (``step_commit``). False: not such a change (the caller writes it)."""
        if type(event) not in _STEP_EVENTS or _ids.current_rng() is not None:
            return False
        state = self.runner._tasks.get(event.task_id)
        m = self.mirrors.get(event.task_id)
        if state is None or m is None or not m.row or self.log_seq is None or self.run_no is None:
            return False
        with self.store._lock:
            self.row_update = []  # write_task puts the task row's values here instead of writing them
            try:
                self._apply(event)
                status, response, steps, updated, head, head_crc, row, tid, run = self.row_update
            finally:
                self.row_update = None
            log_id = (self.run_no << RUN_BITS) + self.log_seq
            text = dumps(self.ops)
            crc = log_crc(self.seed, log_id, text.encode())
            self.cur.execute(
                "INSERT INTO step_commit2 VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (log_id, text, crc, self.last_crc, row, tid, run, status, response, steps, updated, head, head_crc),
            )
            self.log_seq += 1
            self.last_crc = crc
            self.ops.clear()
        return True

    def _apply(self, event: Any) -> None:
        ev = _ev
        runner = self.runner
        t = type(event)
        if t is ev.TaskDeleted:
            self._drop_task(event.task_id)
            self.write_header()
            return
        if t is ev.RunnerReset:
            for task_id in [tid for tid in self.mirrors if tid not in runner._tasks]:
                self._drop_task(task_id)
            self.write_header()
            return
        state = runner._tasks.get(event.task_id)
        if t not in _STEP_EVENTS or _ids.current_rng() is not None:
            self.write_header()  # a step changes none of it, but the seeded id generator's state
        if state is None:
            return
        if t is ev.TaskFinalized or event.task_id not in self.mirrors:
            # finalizing rewrites the last output (its answer and sources): write it whole once
            self.write_task_full(state)
            return
        write_task(self, state, changed_by(event, state))

    # ----- objects in rows of their own --------------------------------------------------
    def container(self, obj: Any) -> dict[str, Any]:
        """The reference of a memory or a log whose items get rows of their own."""
        found = self.refs.get(id(obj))
        if found is not None and found[1] is obj:
            self.touched.add(found[2])
            return found[0]  # type: ignore[no-any-return]
        k = self.next_k
        self.next_k += 1
        kind = "mem" if isinstance(obj, ChatMemoryBuffer) else "log"
        c = Container(k, obj, kind)
        self.containers[k] = c
        ref = {"$c": k}
        self.refs[id(obj)] = (ref, obj, k)
        self.touched.add(k)
        return ref

    def dict_ref(self, d: dict[str, Any]) -> dict[str, Any]:
        """The reference of a state dict with a row of its own (written with this change)."""
        found = self.dicts.get(id(d))
        if found is None or found[1] is not d:
            k = self.next_k
            self.next_k += 1
            self.dicts[id(d)] = (k, d)
            self.refs[id(d)] = ({"$d": k}, d, k)
        else:
            k = found[0]
        self.dirty_dicts[k] = d
        return {"$d": k}

    def sync_containers(self) -> None:
        """Write the new items (and cuts) of every container referred to in this change."""
        synced, touched = self.synced, self.touched
        if touched <= synced:  # all written in this change already (nothing changes meanwhile)
            touched.clear()
            return
        containers = self.containers
        while touched:
            ks = sorted(touched - synced) if len(touched) > 1 else [k for k in touched if k not in synced]
            touched.clear()
            for k in ks:
                c = containers.get(k)
                if c is not None:
                    synced.add(k)
                    self._sync_container(c)

    def _sync_container(self, c: Container) -> None:
        add = self.ops.append
        if c.kind == "mem":
            mem: ChatMemoryBuffer = c.obj
            # what its record is written from (a session Memory's archived count changes as it
            # archives, and goes back on undo: its record is written again then)
            meta: Any = (mem.token_limit, mem.tokenizer_fn) if type(mem) is ChatMemoryBuffer else (
                mem.token_limit, mem.tokenizer_fn, mem._archived, *mem.settings().values())  # type: ignore[attr-defined]
            if meta != c.meta:
                add(ObjectRecord.build(c.k, "mem", memory_record(mem, (None, "memory"))))
                c.meta = meta
            live: Sequence[Any] = mem._messages
            counts = mem._counts
            if live is not c.lst:
                if c.lst is not None:
                    self.refs.pop(id(c.lst), None)
                    self.refs.pop(id(c.counts), None)
                self.refs[id(live)] = ({"$c": c.k, "p": "m"}, live, c.k)
                self.refs[id(counts)] = ({"$c": c.k, "p": "c"}, counts, c.k)
                c.lst = live
                c.counts = counts
        else:
            if c.meta is None:
                add(ObjectRecord.build(c.k, "log", {}))
                c.meta = "log"
            live = c.obj
            counts = None
        items = c.items
        n, end = len(items), len(live)
        if end == n and (not n or (live[n - 1] is items[n - 1] and live[0] is items[0])):
            return  # unchanged (common_prefix's first case, without the call)
        p = common_prefix(items, live)
        if p < n:
            # cut off (an undo): the rows stay, out of the list, for what still refers to them
            add(ItemsCut.build(c.k, c.ids[p:]))
            del items[p:]
            del c.ids[p:]
        if end > p:
            item_record, refs, k, ids = self._encoder.item_record, self.refs, c.k, c.ids
            for pos in range(p, end):
                item = live[pos]
                i = c.next_i
                c.next_i = i + 1
                rec = item_record(item, None if counts is None else counts[pos], ((None, "item"), pos))
                add(ItemRecord.build(k, i, pos, rec))
                items.append(item)
                ids.append(i)
                if id(item) not in refs:
                    refs[id(item)] = ({"$i": [k, i]}, item, k)

    def write_dicts(self) -> None:
        """Write the state dicts of this change whose records read differently now."""
        written: list[tuple[int, dict[str, Any]]] = []  # (k, dict) written or checked just now
        records = self._encoder
        while self.dirty_dicts:
            k, d = self.dirty_dicts.popitem()
            twin = self._twin(d, written)
            if twin is not None:
                # holds the very objects another dict of this change holds (a worker's step state
                # merged into the task's extra state): written as "a copy of that one"
                if self.dict_text.get(k) != ("same", twin):
                    self.ops.append(ObjectRecord.same(k, twin))
                    self.dict_text[k] = ("same", twin)
                    self.copies.setdefault(twin, set()).add(k)
                continue
            rec = records.dict_record(d, (None, "state"))
            if self.dict_text.get(k) != rec:
                self.ops.append(ObjectRecord.build(k, "dict", rec))
                self.dict_text[k] = rec
                for other in self.copies.pop(k, ()):
                    if self.dict_text.get(other) == ("same", k):  # a copy of what k held: unknown now
                        self.dict_text[other] = None
            written.append((k, d))

    def _twin(self, d: dict[str, Any], written: list[tuple[int, dict[str, Any]]]) -> int | None:
        """A dict written just now with the same keys holding the same objects, if ``d``'s
        values are JSON scalars or objects with rows of their own (so nothing nested is copied)."""
        if not written or len(written) > 8:
            return None
        refs = self.refs
        for key, v in d.items():
            tv = type(v)
            if not (tv in _SCALARS or (tv is str and len(v) < SHARED_STR_CHARS)):
                found = refs.get(id(v))
                if found is None or found[1] is not v or "$i" in found[0] or "p" in found[0]:
                    return None
        for k1, d1 in written:
            if len(d1) == len(d):
                for key, v in d.items():
                    if d1.get(key, _MISSING) is not v:
                        break
                else:
                    return k1
        return None

