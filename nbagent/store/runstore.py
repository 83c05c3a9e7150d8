"""A run store on SQLite: runs saved one step at a time, readable while they go on.

Why: a run file is rewritten whole after every change, so autosaving a task of N steps costs
O(N) per step. The store keeps every piece of a run (a step, an output, an undo snapshot, a
failure, an item of a memory or ``AppendLog``, a state dict) as a record of its own, and
autosave writes, in one transaction per step, only the records that step changed: one row of
the ``log`` table (the records, in order) and the task's row of ``tasks`` (what ``tasks()``
lists), so a step's commit touches two or three database pages however long the run is.
Loading replays a run's log rows in order; ``save`` writes a run in full again, which compacts
its log. When ``run_step`` returns, its step is committed: any other connection (another
kernel, ``nbagent report``) sees it, and reads a consistent run while it goes on.

Durability: SQLite's write-ahead log (WAL) with ``synchronous=NORMAL``: a commit is in the
log before ``run_step`` returns, so a process killed at any moment (``kill -9``, a crashed
kernel) leaves every committed step loadable. The log is not flushed to the disk at every
commit (that fsync would cost more than the step): a power cut or an OS crash may take back
the steps committed since the last checkpoint (SQLite syncs the log there, every ~4 MB of it,
a few hundred steps), never corrupt the store. Standard library only (``sqlite3``).

Grouped commits (``RunStore(path, commit_every=0.01)``; off by default): steps that come
faster than ``commit_every`` seconds are committed together, which makes an autosaved step of
a tight loop (a scripted or cached model, a replay) cost about 2.5 plain steps instead of
4.5. A step that ends ``commit_every`` or more after the last commit is still committed before
``run_step`` returns, so steps of a real model are not held back; faster ones wait at most
about ``commit_every`` (a read of the store, the end of a notebook cell, ``flush_autosave``
and the exit commit them too), and a process killed meanwhile loses them
(``nbagent.store.grouped``).

Two writers of one run (a runner loaded from it with autosave, here or in another process,
while the runner that made it still autosaves it): each commit checks that the run's last log
row is the one its writer wrote last; the writer that finds another's goes on as a new run and
warns (``AutosaveWarning``), so neither run is damaged.

Damage (a disk, another tool): every log row, task row and run header carries a CRC-32 of its
text started from what places it (schema 4), and a run's log rows are numbered without a gap,
so a changed byte, a lost or moved row is told from an intact one; the reader skips a damaged
task or refuses a damaged run by name (``nbagent.store.reader``, ``nbagent.store.damage``).

Public API (the batch runner builds on it; everything else here is private)::

    store = RunStore("runs.db")              # open or create; several runners, tasks and
                                             # processes may share one store
    RunStore("runs.db", commit_every=0.01)   # group the commits of steps faster than 10 ms
    store.flush()                            # commit what such a store's runners hold back
    run_id = store.attach(runner)            # autosave into the store (what
                                             # AgentRunner(worker, autosave="runs.db") does)
    store.save(runner)                       # write a runner in full now; returns its run id
    store.save_task(runner, task, key="row-7", tag="batch-1")   # one task in full, labelled
    store.label(runner, task, key=..., tag=...)                 # label a task autosave keeps
    store.tasks(tag="batch-1", status="finalized")  # -> [TaskInfo], oldest first
    store.task(key="row-7", tag="batch-1")          # -> TaskInfo | None (the newest)
    store.runs()                                    # -> [RunInfo], oldest first
    store.load(agent_worker=None, run=None)         # -> AgentRunner (the newest run by default)
    store.load(agent_worker, run=run_id, tasks=[task_id])   # only some of its tasks
    store.close()

``TaskInfo`` holds ``run_id, task_id, key, tag, status`` (a ``TaskStatus`` value: "finalized",
"completed", "active", ...), ``input``, ``response`` (the final answer's text once finalized,
else None), ``steps`` (completed steps) and ``updated`` (``time.time()`` of the last write).

Where things are: the file, its tables and checksums ``nbagent.store.sql``; the records of the
log ``nbagent.store.records``; writing ``nbagent.store.writer`` (a task's records and row:
``task_rows``; values: ``row_encoder``); reading ``nbagent.store.reader`` (values:
``row_decoder``); a store of schema 1 (nbagent before the log) is migrated in place when opened
(``nbagent.store._schema1``; the old file is kept as ``<store>.schema1.bak``).

Limits: a state value that is a plain list or dict growing every step is rewritten whole at
every step (keep growing state in an ``AppendLog``, as nbagent's own workers do); records a
deleted task, a reset or a finalized task (written again in full) left behind stay in the
log until the run is saved in full again; a task's undone links (``undone_edges``) are in its
row, which every step rewrites.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.allowlist import PersistError
from nbagent.schema import Task
from nbagent.store.codec import FORMAT, VERSION, runner_from_dict
from nbagent.store.damage import SQLITE_ERRORS, DamagedRunError, DamagedRunWarning, one_line, skips_from, store_error
from nbagent.store.grouped import check_commit_every, commit_all
from nbagent.store.links import AutosaveLink, StoreLinks, autosave_link, autosave_warning, stop_autosave
from nbagent.store.reader import StoreRows, read_rows
from nbagent.store.row_decoder import StoreDecoder
from nbagent.store.sql import MAGIC, SQLITE_SUFFIXES, StoreConnection, header_intact, loads_row, py_text, run_moved, sql_text
from nbagent.store.writer import Writer

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["RunStore", "TaskInfo", "RunInfo", "is_store_path", "SQLITE_SUFFIXES", "start_autosave"]


def is_store_path(path: Any) -> bool:
    """True for a ``RunStore``, an existing SQLite file, or a new path ending in .db/.sqlite."""
    if isinstance(path, RunStore):
        return True
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path)
    if p.suffix.lower() in SQLITE_SUFFIXES:
        return True  # even while empty: another process may just have created it
    try:
        with open(p, "rb") as fh:
            return fh.read(16) == MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class TaskInfo:
    """One stored task, as ``RunStore.tasks`` lists it."""

    run_id: str
    task_id: str
    key: str | None
    tag: str | None
    status: str
    input: str
    response: str | None
    steps: int
    updated: float


@dataclass(frozen=True)
class RunInfo:
    """One stored run (one runner)."""

    run_id: str
    kind: str  # the runner's class
    worker: str  # the worker's kind
    tasks: int
    created: float
    updated: float
    #: what is damaged in the run's header row (None: nothing)
    damaged: str | None = None


class RunStore(StoreConnection):
    """A SQLite file holding runs (see the module docstring). Thread-safe; one connection.

    ``commit_every``: 0 (the default) commits every step before ``run_step`` returns; a
    number of seconds groups the commits of steps that come faster than that (see the module
    docstring's *Grouped commits*)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0, commit_every: float = 0.0) -> None:
        self.commit_every = check_commit_every(commit_every)  # (before the file is made)
        super().__init__(path, timeout=timeout)

    def _before_open(self, timeout: float) -> None:
        from nbagent.store._schema1 import migrate_if_schema1

        migrate_if_schema1(self.path, timeout)  # a schema-1 store becomes today's, in place

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        every = f", commit_every={self.commit_every!r}" if self.commit_every else ""
        return f"RunStore({str(self.path)!r}{every})"

    def flush(self) -> None:
        """Commit the steps this process's runners hold back from this store's file (grouped
        commits, ``commit_every``); a read does it first."""
        commit_all(self)

    def close(self) -> None:
        """Commit what waits, then close the connection (runners attached to this store stop
        autosaving to it)."""
        commit_all(self)
        super().close()

    # ----- writing ----------------------------------------------------------------------
    def attach(self, runner: AgentRunner) -> str:
        """Save ``runner`` in full now, then after every step and state change only what
        changed (one transaction each). Returns its run id. ``runner.autosave = None`` stops."""
        stop_autosave(runner)
        writer = start_autosave(runner, self)  # fails here, loudly, if the state cannot be saved

        def on_store_event(event: Any) -> None:
            try:
                writer.on_event(event)
            except Exception as err:  # noqa: BLE001 - a step must not fail because a save did
                autosave_warning(writer, err)

        from nbagent import events as ev

        # (a step's start and a streamed token change nothing a store holds: none is built for it)
        unsubscribe = runner.events.subscribe(on_store_event, ignore=(ev.StepStarted, ev.TokenStreamed))
        link = AutosaveLink(self.path, unsubscribe, writer, flush=writer.commit_waiting)
        runner._services.setdefault(AutosaveLink, lambda: link)
        return writer.run_id

    def save(self, runner: AgentRunner) -> str:
        """Write ``runner`` (every task) in full, in one transaction; returns its run id."""
        writer = self._writer(runner)  # (a rewrite: what autosave held back goes with it)
        try:
            writer.rewrite()
        except SQLITE_ERRORS as err:
            raise store_error(self.path, err, "saving a run", run=writer.run_id) from err
        return writer.run_id

    def save_task(
        self, runner: AgentRunner, task: Task | str, *, key: str | None = None, tag: str | None = None
    ) -> TaskInfo:
        """Write one task of ``runner`` in full (and the runner's header), labelled with
        ``key`` and ``tag`` for ``tasks``/``task`` to find; one transaction."""
        state = runner.state_of(task)
        writer = self._writer(runner)
        if writer.broken:  # a write failed half-way: what it remembers may be ahead of the store
            writer.rewrite()
        store = writer.store  # (this object, or the autosave's own for this file: one connection writes)
        writer.begin()
        try:
            with store._tx():
                writer.write_header()
                writer.write_task_full(state)
                writer.flush()
                store._label(writer.run_id, state.task_id, key, tag)
        except BaseException as err:
            writer.broken = True  # its mirrors may be ahead of the store: an autosave writes in full next
            writer.moved = writer.moved or run_moved(err)  # (as a new run, if another writer took this one over)
            if isinstance(err, SQLITE_ERRORS):
                raise store_error(self.path, err, f"saving task {state.task_id}", run=writer.run_id) from err
            raise
        finally:
            writer.ops.clear()
        found = self._infos("WHERE run_id=? AND task_id=?", (sql_text(writer.run_id), sql_text(state.task_id)))
        return found[0]

    def _writer(self, runner: AgentRunner) -> Writer:
        """The writer keeping ``runner`` in this store: its autosave's, or one kept for it, so
        that every save of one runner goes to one run."""
        writer = writer_of(runner)
        if writer is not None and self._holds(writer):
            # (a second writer would rewrite the run under its autosave, which then writes
            # after log rows that are gone: the run would no longer load)
            return writer
        links = runner._services.setdefault(StoreLinks)
        writer = links.writers.get(str(self.path))
        if writer is None or writer.store is not self:
            writer = links.writers[str(self.path)] = Writer(self, runner, run_id_for(self, runner))
            if links.origin is None:
                links.origin = (str(self.path), writer.run_id)
        return writer

    def _holds(self, writer: Writer) -> bool:
        """``writer`` writes into this store's file (through this object or another one)."""
        return writer.store is self or writer.store.path == self.path

    def label(self, runner: AgentRunner, task: Task | str, *, key: str | None = None, tag: str | None = None) -> None:
        """Label a stored task of ``runner`` (saved or autosaved) with ``key`` and ``tag``."""
        state = runner.state_of(task)
        writer = writer_of(runner)
        if writer is None or not self._holds(writer):
            raise PersistError(
                f"task {state.task_id!r} is not autosaved to {self.path}; use save_task(runner, task, key=..., tag=...)"
            )
        try:
            with self._lock, self._tx():
                self._label(writer.run_id, state.task_id, key, tag)
        except SQLITE_ERRORS as err:
            raise store_error(self.path, err, f"labelling task {state.task_id}", run=writer.run_id) from err

    def _label(self, run_id: str, task_id: str, key: str | None, tag: str | None) -> None:
        for name, value in (("key", key), ("tag", tag)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        self._db.execute(
            "UPDATE tasks SET key=coalesce(?, key), tag=coalesce(?, tag) WHERE run_id=? AND task_id=?",
            (sql_text(key), sql_text(tag), sql_text(run_id), sql_text(task_id)),
        )

    # ----- reading ----------------------------------------------------------------------
    def tasks(
        self,
        *,
        run: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        status: str | Iterable[str] | None = None,
    ) -> list[TaskInfo]:
        """Stored tasks matching every given filter, oldest first."""
        where, args = [], []
        for column, value in (("run_id", run), ("key", key), ("tag", tag)):
            if value is not None:
                where.append(f"{column}=?")
                args.append(sql_text(value))
        if status is not None:
            wanted = [status] if isinstance(status, str) else [getattr(s, "value", s) for s in status]
            where.append(f"status IN ({','.join('?' * len(wanted))})")
            args.extend(wanted)
        sql = ("WHERE " + " AND ".join(where)) if where else ""
        return self._infos(sql, tuple(args))

    def task(self, *, key: str, tag: str | None = None, run: str | None = None) -> TaskInfo | None:
        """The newest stored task labelled ``key`` (and ``tag``), or None."""
        found = self.tasks(key=key, tag=tag, run=run)
        return max(found, key=lambda t: t.updated) if found else None

    def _infos(self, where: str, args: tuple[Any, ...]) -> list[TaskInfo]:
        commit_all(self)
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT CAST(run_id AS BLOB), CAST(task_id AS BLOB), CAST(key AS BLOB), CAST(tag AS BLOB), "
                    "CAST(status AS BLOB), CAST(input AS BLOB), CAST(response AS BLOB), steps, updated, rowid "
                    f"FROM tasks {where} ORDER BY updated, seq",
                    args,
                ).fetchall()
            except SQLITE_ERRORS as err:
                raise store_error(self.path, err, "listing its tasks") from err
        out, bad = [], []
        for row in rows:
            try:
                info = TaskInfo(*(py_text(v) for v in row[:-1]))
                if not (all(type(v) is str for v in (info.run_id, info.task_id, info.status, info.input))
                        and type(info.steps) is int and type(info.updated) in (int, float)):
                    raise ValueError("a column holds a value of the wrong type")
            except (UnicodeDecodeError, ValueError) as err:
                bad.append(f"row {row[-1]} ({one_line(str(err), 80)})")
                continue
            out.append(info)
        if bad:
            warnings.warn(
                f"{self.path}: {len(bad)} damaged task row(s) left out of the list: {'; '.join(bad[:20])}",
                DamagedRunWarning,
                stacklevel=3,
            )
        return out

    def runs(self) -> list[RunInfo]:
        """Every stored run, oldest first (``damaged`` says what of a run's header is)."""
        commit_all(self)
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT CAST(r.run_id AS BLOB), CAST(r.header AS BLOB), r.created, r.updated, "
                    "(SELECT count(*) FROM tasks t WHERE t.run_id=r.run_id), r.crc FROM runs r ORDER BY r.created"
                ).fetchall()
                strict = self.checksums_everywhere()
            except SQLITE_ERRORS as err:
                raise store_error(self.path, err, "listing its runs") from err
        out = []
        for raw_id, header, created, updated, n, crc in rows:
            try:
                run_id = py_text(raw_id)
            except UnicodeDecodeError:
                run_id = raw_id.decode("utf-8", "replace")
            try:
                if not header_intact(run_id, header, crc, strict):
                    raise ValueError("changed bytes: it fails its checksum")
                head = loads_row(header)
                if type(head) is not dict or type(head.get("worker", {})) is not dict:
                    raise ValueError(f"a JSON {type(head).__name__} that is not a run's header")
                out.append(RunInfo(run_id, str(head.get("class", "?")), str(head.get("worker", {}).get("kind", "?")),
                                   n, created, updated))
            except ValueError as err:
                out.append(RunInfo(run_id, "?", "?", n, created, updated, damaged=f"its header row is {err}"))
        return out

    def load(
        self,
        agent_worker: Any = None,
        *,
        run: str | None = None,
        tasks: Sequence[str] | None = None,
        runner_cls: type | None = None,
        restore_ids: bool = True,
        **runner_kwargs: Any,
    ) -> AgentRunner:
        """Rebuild a stored runner (the newest run unless ``run`` names one; every task unless
        ``tasks`` lists some). Without ``agent_worker`` it can be viewed and reported.

        Damaged tasks are skipped with a ``DamagedRunWarning`` (the runner knows:
        ``runner.skipped_tasks``); damage whose reach cannot be told raises a
        ``DamagedRunError`` naming the store, the run and what is damaged."""
        commit_all(self)
        try:
            with self._tx(write=False):  # one consistent read, even while a run writes
                run, header, rows = self._read_run(run, tasks)
        except SQLITE_ERRORS as err:
            raise store_error(self.path, err, "reading a run" if run is None else f"reading run {run}", run=run) from err
        source = f"{self.path} (run {run})"
        try:
            header = loads_row(header)
            if type(header) is not dict:
                raise ValueError(f"a JSON {type(header).__name__}, not an object")
        except ValueError as err:
            raise DamagedRunError(self.path, f"its header row is {err}", run=run) from err
        doc = {"format": FORMAT, "version": VERSION, "nbagent": header.pop("nbagent", "?"), "runner": header,
               "tasks": rows.task_docs(source)}
        runner = runner_from_dict(
            doc, agent_worker, runner_cls=runner_cls, restore_ids=restore_ids, source=source,
            decoder=StoreDecoder(source, rows), path=self.path, run=run, skipped=rows.damaged_tasks, **runner_kwargs,
        )
        runner._services.setdefault(StoreLinks).origin = (str(self.path), run)
        return runner

    def _read_run(self, run: str | None, tasks: Sequence[str] | None) -> tuple[str, Any, StoreRows]:
        """Run ``run`` (the newest if None): its id, its header row and its rows."""
        if run is None:
            row = self._db.execute("SELECT CAST(run_id AS BLOB) FROM runs ORDER BY updated DESC, created DESC LIMIT 1").fetchone()
            if row is None:
                raise PersistError(f"{self.path}: the store holds no run yet")
            try:
                run = py_text(row[0])
            except UnicodeDecodeError:
                raise DamagedRunError(self.path, f"the newest run's id {row[0][:40]!r} is not UTF-8 text") from None
        head = self._db.execute(
            "SELECT CAST(header AS BLOB), no, crc FROM runs WHERE run_id=?", (sql_text(run),)
        ).fetchone()
        if head is None:
            known = [py_text(r[0]) for r in self._db.execute("SELECT CAST(run_id AS BLOB) FROM runs ORDER BY created")]
            raise PersistError(f"{self.path}: no run {run!r}; stored runs: {known}")
        header, no, crc = head
        if type(no) is not int:
            raise DamagedRunError(self.path, f"its number in the runs table is {no!r}, not a number", run=run)
        strict = self.checksums_everywhere()
        if not header_intact(run, header, crc, strict):
            raise DamagedRunError(self.path, "its header row fails its checksum (changed bytes)", run=run)
        return run, header, read_rows(self._db, self.path, run, no, tasks, strict)


def run_id_for(store: StoreConnection, runner: AgentRunner) -> str:
    """The run this runner continues in ``store`` (it was loaded from it), or a new run id."""
    links = runner._services.get(StoreLinks)
    origin = None if links is None else links.origin
    if origin is not None and origin[0] == str(store.path) and not skips_from(runner, store.path, origin[1]):
        return origin[1]
    # (a runner loaded without some damaged tasks goes in as a new run: its own stays as it is)
    return "run-" + uuid.uuid4().hex[:12]  # not from nbagent.ids: a seeded id sequence stays as it is


def writer_of(runner: AgentRunner) -> Writer | None:
    """The writer of the runner's autosave into a store, or None."""
    link = autosave_link(runner)
    return None if link is None else link.writer


def start_autosave(runner: AgentRunner, store: RunStore) -> Writer:
    """Write ``runner`` in full into ``store`` and return the writer that keeps it saved."""
    writer = Writer(store, runner, run_id_for(store, runner))
    try:
        writer.rewrite()
    except SQLITE_ERRORS as err:
        raise store_error(store.path, err, "saving a run", run=writer.run_id) from err
    runner._services.setdefault(StoreLinks).origin = (str(store.path), writer.run_id)
    return writer

