"""A run store on SQLite: runs saved one step at a time, readable while they go on.

Why: a run file is rewritten whole after every change, so autosaving a task of N steps costs
O(N) per step. The store keeps every piece of a run (a step, an output, an undo snapshot, a
failure, an item of a memory or ``AppendLog``, a state dict) as a record of its own, and
autosave writes, in one transaction per step, only the records that step changed: one row of
the ``log`` table (the records, in order) and the task's row of ``tasks`` (what ``tasks()``
lists), so a step's commit touches two or three database pages however long the run is; a
step of a task already stored does both in one statement (the ``step_commit`` view), one
implicit transaction.
Loading replays a run's log rows in order; ``save`` writes a run in full again, which compacts
its log. When ``run_step`` returns, its step is committed: any other connection (another
kernel, ``nbagent report``) sees it, and reads a consistent run while it goes on.

Durability: SQLite's write-ahead log (WAL) with ``synchronous=NORMAL``: a commit is in the
log before ``run_step`` returns, so a process killed at any moment (``kill -9``, a crashed
kernel) leaves every committed step loadable. The log is not flushed to the disk at every
commit (that fsync would cost more than the step): a power cut or an OS crash may take back
the steps committed since the last checkpoint (SQLite syncs the log there, every ~4 MB of it,
a few hundred steps), never corrupt the store. Standard library only (``sqlite3``).

Damage (a disk, another tool): every log row, task row and run header carries a CRC-32 of its
text started from what places it (schema 4), and a run's log rows are numbered without a gap,
so a changed byte, a lost or moved row is told from an intact one; the reader skips a damaged
task or refuses a damaged run by name (``nbagent.store.reader``, ``nbagent.store.damage``).

Public API (the batch runner builds on it; everything else here is private)::

    store = RunStore("runs.db")              # open or create; several runners, tasks and
                                             # processes may share one store
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

What a record holds is the run file's record of that piece (``nbagent.store.codec``); values
in it are tagged JSON (``nbagent.store.values``) plus three references to other records:
``{"$c": k}`` a ``ChatMemoryBuffer`` or ``AppendLog`` whose items are rows of ``items``,
``{"$d": k}`` a task's ``extra_state`` or a step's ``step_state`` dict, ``{"$i": [k, i]}``
item ``i`` of container ``k`` (a tool output that a step's output and the state both hold
stays one object). Loading puts the pieces back together and rebuilds the runner exactly as
``nbagent.store.codec`` does for a run file (``nbagent.store.reader``: reading, and what a
damaged store gives; ``nbagent.store.damage``). The records of a log row (the reader replays
them): ``["o", k, kind, rec]`` an object (a state dict, a memory's or log's settings;
``["o", k, "same", k1]``: a dict holding the very objects dict ``k1`` holds at that point),
``["i", k, i, pos, rec]`` an item of container ``k``, ``["ic", k, [i...]]`` items cut off
its list (an undo), ``["s", t, ord, rec]`` a step of the task at place ``t``, ``["u", t, n,
[cpos, done, upos], rec]`` its output ``n``, ``["p", t, slot, [[value, n]...]]`` where
outputs now stand, ``["pd", t]`` none done, ``["h"|"f", t, i, rec]`` an undo snapshot or a
failure, ``["hx"|"fx", t, i]`` that list cut at ``i``. A task written again in full gets a
new place ``t``; records of a place no task holds any more are skipped.

A step's view of the first ``n`` items of log ``k`` (a ReAct output's sources) is
``{"$c": k, "v": [i, n]}``, ``i`` the number of its item ``n-1``: O(1) per step however long
the log. Loading takes the log's first ``n`` items while item ``i`` is still at ``n-1`` (only
the tail is ever cut), else rebuilds the view from the item rows (schema 3; see ``_view``).

Limits: a state value that is a plain list or dict growing every step is rewritten whole at
every step (keep growing state in an ``AppendLog``, as nbagent's own workers do); records a
deleted task, a reset or a finalized task (written again in full) left behind stay in the
log until the run is saved in full again; a task's undone links (``undone_edges``) are in its
row, which every step rewrites. A store written by schema 1 (nbagent before the log) is
migrated in place when opened (``nbagent.store._schema1``; the old file is kept as
``<store>.schema1.bak``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sqlite3
import threading
import time
import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent import costs as _costs
from nbagent import events as _ev
from nbagent import ids as _ids
from nbagent._prefix import PrefixView
from nbagent.memory import ChatMemoryBuffer, count_tokens
from nbagent.snapshot import AppendLog, _Saved, plain_snapshot
from nbagent.engine.state import StepSnapshot, TaskState, TaskStatus
from nbagent.schema import Task, TaskStep, TaskStepOutput
from nbagent.store.codec import (
    FORMAT,
    VERSION,
    _failure_record,
    _OPTIONAL_SETTINGS,
    _output_record,
    _rng_state,
    _SETTINGS,
    _snapshot_to_dict,
    _step_record,
    _worker_info,
    runner_from_dict,
)
from nbagent.store.damage import SQLITE_ERRORS, DamagedRunError, DamagedRunWarning, one_line, skips_from, store_error
from nbagent.store.reader import (
    RUN_BITS,
    StoreDecoder,
    StoreRows,
    log_crc,
    loads_row,
    py_text,
    read_rows,
    run_range,
    run_seed,
    task_seed,
)
from nbagent.store.values import (
    SHARED_STR_CHARS,
    _ALLOWED,
    _HANDLERS,
    _MODEL_PLANS,
    _is_plain_default,
    Path_,
    PersistError,
    _Encoder,
    _ref_of,
)

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["RunStore", "TaskInfo", "RunInfo", "is_store_path", "SQLITE_SUFFIXES"]

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_MAGIC = b"SQLite format 3\x00"
SCHEMA = 4
READS = (2, 3, 4)  # rows of 2 (no view records) and 3 (no checksums) read as they are; marked 4 when opened

# Schema 2: a run's pieces are records in an append-only log, one row per transaction, so a
# step writes one row at the end of one table (and updates its task's row) instead of a row in
# each of six tables: a commit then touches 2-3 database pages instead of ~16 (schema 1 put
# every piece in a WITHOUT ROWID table keyed by text, whose inner pages copy whole rows).
# Schema 3: a step's view of a log's first n items is {"$c": k, "v": [last item's number, n]},
# not n item references (a schema-2 reader would read it as the whole log: it refuses schema 3).
# Schema 4: a checksum (``crc``) on every log row, task row and run header, over its text and
# what places it (its row id or task place, its run), so that a changed byte or a row read in
# the wrong place is told from an intact one (``nbagent.store.reader``); rows without one (written
# before) are read as they are. An older writer would not fill it: it refuses schema 4.
_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
    no INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, created REAL NOT NULL, updated REAL NOT NULL,
    header TEXT NOT NULL, crc INTEGER);
CREATE TABLE IF NOT EXISTS tasks(
    run_id TEXT NOT NULL, task_id TEXT NOT NULL, seq INTEGER NOT NULL, key TEXT, tag TEXT,
    status TEXT NOT NULL, input TEXT NOT NULL, response TEXT, steps INTEGER NOT NULL,
    updated REAL NOT NULL, head TEXT NOT NULL, crc INTEGER, PRIMARY KEY(run_id, task_id));
CREATE INDEX IF NOT EXISTS tasks_by_label ON tasks(tag, key);
CREATE TABLE IF NOT EXISTS log(id INTEGER PRIMARY KEY, ops TEXT NOT NULL, crc INTEGER);
"""
_TABLES = frozenset({"meta", "runs", "tasks", "log"})

# A step's change as one statement (so one implicit transaction: no BEGIN/COMMIT statements):
# inserting into this view appends the log row and updates the task's row (found by its rowid,
# checked against its key); if that row is not there, the whole statement is undone.
_STEP_SQL = (
    """CREATE VIEW IF NOT EXISTS step_commit(id, ops, crc, task_row, task_id, run_id, status, response, steps,
    updated, head, head_crc) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL""",
    """CREATE TRIGGER IF NOT EXISTS step_commit_insert INSTEAD OF INSERT ON step_commit BEGIN
    INSERT INTO log VALUES(NEW.id, NEW.ops, NEW.crc);
    UPDATE tasks SET status=NEW.status, response=NEW.response, steps=NEW.steps, updated=NEW.updated,
        head=NEW.head, crc=NEW.head_crc WHERE rowid=NEW.task_row AND task_id=NEW.task_id AND run_id=NEW.run_id;
    SELECT RAISE(ABORT, 'nbagent: the task row moved') WHERE changes() = 0;
    END""",
)

_JSON = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
try:  # the C encoder without encode()'s per-call set-up: a step encodes ~10 small records
    from json.encoder import c_make_encoder as _c_make_encoder, encode_basestring_ascii as _ascii

    _C_JSON = _c_make_encoder(None, _JSON.default, _ascii, None, ":", ",", False, False, False)
except (ImportError, TypeError):  # pragma: no cover - an interpreter without the C accelerator
    _C_JSON = None


def _dumps(value: Any) -> str:
    # ASCII with \u escapes: any Python str survives, lone surrogates included
    if _C_JSON is not None and type(value) in (dict, list):
        return "".join(_C_JSON(value, 0))
    return _JSON.encode(value)


def _sql_text(text: str | None) -> str | bytes | None:
    """A text as SQLite can take it: a str that holds a lone surrogate (half of a streamed
    emoji, say) is not valid UTF-8, so it goes in as its bytes (``surrogatepass``), a BLOB
    ``_py_text`` turns back into the very same str."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


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
            return fh.read(16) == _MAGIC
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
    damaged: str | None = None  # what is damaged in the run's header row (None: nothing)


# ----- the store ---------------------------------------------------------------------------


class RunStore:
    """A SQLite file holding runs (see the module docstring). Thread-safe; one connection."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path).absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                start = fh.read(16)
            if start != _MAGIC:
                raise DamagedRunError(
                    self.path,
                    f"this file is not an nbagent run store: not a SQLite file (it starts with {start[:16]!r}); "
                    "damaged, or another kind of file",
                )
            from nbagent.store._schema1 import migrate_if_schema1

            migrate_if_schema1(self.path, timeout)  # a schema-1 store becomes today's, in place
        self._db = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            self._cur = self._db.cursor()  # for the statements of every step (one cursor, not one each)
            self._open(timeout)
        except SQLITE_ERRORS as err:
            self._db.close()
            raise store_error(self.path, err, "opening it as a run store") from err
        except BaseException:
            self._db.close()
            raise

    def _open(self, timeout: float) -> None:
        """Set the store up, waiting out other processes that open the same new file at the
        same moment: switching a new file to WAL can fail at once with "database is locked"
        (SQLite's busy timeout does not cover that case), so it is tried again."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                return self._open_once()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.2)

    def _open_once(self) -> None:
        """The pragmas, the schema and its version check, in one go."""
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives the process being killed; no fsync per step
        self._db.execute("PRAGMA synchronous=NORMAL")
        # SQLite's default checkpoint (every 1,000 pages of log, ~4 MB) also bounds what a
        # power cut can take back (see the module); keep the log's file at most 64 MB
        self._db.execute("PRAGMA wal_autocheckpoint=1000")
        self._db.execute("PRAGMA journal_size_limit=67108864")
        with self._tx():
            tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "meta" not in tables:
                self._check_empty(tables)
                for stmt in _SCHEMA_SQL.split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
                self._db.execute("INSERT INTO meta VALUES('format', ?)", ("nbagent-store",))
                self._db.execute("INSERT INTO meta VALUES('schema', ?)", (str(SCHEMA),))
                # every row of this store has a checksum: one without is damaged (see the reader)
                self._db.execute("INSERT INTO meta VALUES('checksums', 'all')")
            else:
                schema = self._check_marks(tables)
                if schema in READS and schema < SCHEMA:
                    # nothing it holds reads differently now; from here on it may hold
                    # records an older reader would misread, so such a reader must refuse it
                    self._add_checksums()
                    self._db.execute("UPDATE meta SET value=? WHERE name='schema'", (str(SCHEMA),))
                self._db.execute("CREATE INDEX IF NOT EXISTS tasks_by_label ON tasks(tag, key)")
            for stmt in _STEP_SQL:  # derived, not data: put back if they were lost
                self._db.execute(stmt)

    def _add_checksums(self) -> None:
        """Schema 4's checksum columns on a store of schema 2 or 3 (its rows keep none: read as
        they are), and the step statement that fills them."""
        for table in ("runs", "tasks", "log"):
            if not any(col[1] == "crc" for col in self._db.execute(f"PRAGMA table_info({table})")):
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
        self._db.execute("DROP VIEW IF EXISTS step_commit")  # (its trigger goes with it)

    def _check_empty(self, tables: set[str]) -> None:
        """A file with no meta table must hold no table at all (a new store)."""
        ours = sorted(tables & _TABLES)
        if ours:
            raise DamagedRunError(self.path, f"the store has lost its meta table (it still has {ours})")
        others = sorted(t for t in tables if not t.startswith("sqlite_"))
        if others:
            raise PersistError(
                f"{self.path}: a SQLite file, but not an nbagent run store (it holds the table(s) {others} and no "
                "nbagent meta table); give another path"
            )

    def _check_marks(self, tables: set[str]) -> int:
        """The format and schema marks of an existing store, and its tables: its schema."""
        marks = dict(self._db.execute("SELECT name, CAST(value AS BLOB) FROM meta WHERE name IN ('format', 'schema')"))
        fmt = marks.get("format")
        if fmt is not None and fmt != b"nbagent-store":
            raise PersistError(f"{self.path}: a SQLite file, but not an nbagent run store (format {fmt[:40]!r})")
        if fmt is None:
            raise DamagedRunError(self.path, "the store's format mark is missing from its meta table")
        raw = marks.get("schema")
        try:
            schema = int(raw.decode("ascii")) if raw is not None else None
        except (UnicodeDecodeError, ValueError):
            mark = raw[:40].decode("utf-8", "replace")
            raise DamagedRunError(self.path, f"the store's schema mark is {mark!r}, not a number") from None
        if schema is None:
            raise DamagedRunError(self.path, "the store's schema mark is missing from its meta table")
        if schema > SCHEMA:
            raise PersistError(
                f"{self.path}: written by a newer nbagent (store schema {schema}); "
                f"this nbagent reads schema {SCHEMA}: upgrade nbagent to open it"
            )
        if schema not in READS:
            raise PersistError(
                f"{self.path}: written by an older nbagent (store schema {schema}, one table per "
                f"kind of piece); this nbagent reads schema {SCHEMA}: load and save its runs with "
                "the nbagent that wrote it as run files (runner.save('run.json')), or start a new store"
            )
        missing = sorted(_TABLES - tables)
        if missing:
            raise DamagedRunError(self.path, f"the store has lost its table(s) {missing}")
        return schema

    # ----- plumbing ---------------------------------------------------------------------
    def _tx(self, write: bool = True) -> _Tx:
        return _Tx(self, write)

    def close(self) -> None:
        """Close the connection (runners attached to this store stop autosaving to it)."""
        self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    # ----- writing ----------------------------------------------------------------------
    def attach(self, runner: AgentRunner) -> str:
        """Save ``runner`` in full now, then after every step and state change only what
        changed (one transaction each). Returns its run id. ``runner.autosave = None`` stops."""
        from nbagent.store.autosave import set_autosave

        set_autosave(runner, self)
        return _writer_of(runner).run_id  # type: ignore[union-attr]

    def save(self, runner: AgentRunner) -> str:
        """Write ``runner`` (every task) in full, in one transaction; returns its run id."""
        writer = self._writer(runner)
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
        writer.begin()
        try:
            with self._tx():
                writer.write_header()
                writer.write_task_full(state)
                writer.flush()
                self._label(writer.run_id, state.task_id, key, tag)
        except BaseException as err:
            writer.broken = True  # its mirrors may be ahead of the store: an autosave writes in full next
            if isinstance(err, SQLITE_ERRORS):
                raise store_error(self.path, err, f"saving task {state.task_id}", run=writer.run_id) from err
            raise
        finally:
            writer.ops.clear()
        found = self._infos("WHERE run_id=? AND task_id=?", (_sql_text(writer.run_id), _sql_text(state.task_id)))
        return found[0]

    def _writer(self, runner: AgentRunner) -> _Writer:
        """The writer keeping ``runner`` in this store: its autosave's, or one kept for it, so
        that every save of one runner goes to one run."""
        writer = _writer_of(runner)
        if writer is not None and writer.store is self:
            return writer
        kept: dict[str, _Writer] = runner.__dict__.setdefault("_store_writers", {})
        writer = kept.get(str(self.path))
        if writer is None or writer.store is not self:
            writer = kept[str(self.path)] = _Writer(self, runner, _run_id_for(self, runner))
            runner.__dict__.setdefault("_store_origin", (str(self.path), writer.run_id))
        return writer

    def label(self, runner: AgentRunner, task: Task | str, *, key: str | None = None, tag: str | None = None) -> None:
        """Label a stored task of ``runner`` (saved or autosaved) with ``key`` and ``tag``."""
        state = runner.state_of(task)
        writer = _writer_of(runner)
        if writer is None or writer.store is not self:
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
            (_sql_text(key), _sql_text(tag), _sql_text(run_id), _sql_text(task_id)),
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
                args.append(_sql_text(value))
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
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT CAST(r.run_id AS BLOB), CAST(r.header AS BLOB), r.created, r.updated, "
                    "(SELECT count(*) FROM tasks t WHERE t.run_id=r.run_id), r.crc FROM runs r ORDER BY r.created"
                ).fetchall()
                strict = self._db.execute("SELECT 1 FROM meta WHERE name='checksums' AND value='all'").fetchone()
            except SQLITE_ERRORS as err:
                raise store_error(self.path, err, "listing its runs") from err
        out = []
        for raw_id, header, created, updated, n, crc in rows:
            try:
                run_id = py_text(raw_id)
            except UnicodeDecodeError:
                run_id = raw_id.decode("utf-8", "replace")
            try:
                if not _header_intact(run_id, header, crc, strict is not None):
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
    ) -> Any:
        """Rebuild a stored runner (the newest run unless ``run`` names one; every task unless
        ``tasks`` lists some). Without ``agent_worker`` it can be viewed and reported.

        Damaged tasks are skipped with a ``DamagedRunWarning`` (the runner knows:
        ``runner.skipped_tasks``); damage whose reach cannot be told raises a
        ``DamagedRunError`` naming the store, the run and what is damaged."""
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
        runner.__dict__["_store_origin"] = (str(self.path), run)
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
            "SELECT CAST(header AS BLOB), no, crc FROM runs WHERE run_id=?", (_sql_text(run),)
        ).fetchone()
        if head is None:
            known = [py_text(r[0]) for r in self._db.execute("SELECT CAST(run_id AS BLOB) FROM runs ORDER BY created")]
            raise PersistError(f"{self.path}: no run {run!r}; stored runs: {known}")
        header, no, crc = head
        if type(no) is not int:
            raise DamagedRunError(self.path, f"its number in the runs table is {no!r}, not a number", run=run)
        strict = self._db.execute("SELECT 1 FROM meta WHERE name='checksums' AND value='all'").fetchone() is not None
        if not _header_intact(run, header, crc, strict):
            raise DamagedRunError(self.path, "its header row fails its checksum (changed bytes)", run=run)
        return run, header, read_rows(self._db, self.path, run, no, tasks, strict)


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on error), under the store's lock.
    ``write=False``: a plain ``BEGIN``, one consistent read that does not hold writers back."""

    def __init__(self, store: RunStore, write: bool = True) -> None:
        self.store = store
        self.begin = "BEGIN IMMEDIATE" if write else "BEGIN"

    def __enter__(self) -> None:
        self.store._lock.acquire()
        try:
            self.store._cur.execute(self.begin)
        except BaseException:
            self.store._lock.release()
            raise

    def __exit__(self, kind: Any, *_: Any) -> None:
        try:
            if kind is None:
                self.store._cur.execute("COMMIT")
            elif self.store._db.in_transaction:
                try:
                    self.store._cur.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # (SQLite rolled it back itself) the error that ended it says more
        finally:
            self.store._lock.release()


def _header_intact(run: str, header: Any, crc: Any, strict: bool = False) -> bool:
    """A run's header row is as written (or, not ``strict``, was written without a checksum)."""
    if crc is None:
        return not strict
    return type(header) is bytes and zlib.crc32(header, run_seed(run)) == crc


def _run_id_for(store: RunStore, runner: AgentRunner) -> str:
    """The run this runner continues in ``store`` (it was loaded from it), or a new run id."""
    origin = runner.__dict__.get("_store_origin")
    if origin is not None and origin[0] == str(store.path) and not skips_from(runner, store.path, origin[1]):
        return origin[1]  # type: ignore[no-any-return]
    # (a runner loaded without some damaged tasks goes in as a new run: its own stays as it is)
    import uuid

    return "run-" + uuid.uuid4().hex[:12]  # not from nbagent.ids: a seeded id sequence stays as it is


def _writer_of(runner: AgentRunner) -> _Writer | None:
    found = runner.__dict__.get("_autosave")
    writer = found[2] if found is not None and len(found) > 2 else None
    return writer if isinstance(writer, _Writer) else None


# ----- encoding pieces ---------------------------------------------------------------------


class _StoreEncoder(_Encoder):
    """The run file's encoder, plus references to the objects that live in their own rows."""

    views_by_reference = False  # a view of a log with rows of its own: {"$c": k, "v": [...]} (see _view_ref)

    def __init__(self, writer: _Writer) -> None:
        super().__init__()
        self.w = writer
        self.base = writer.counter
        self.busy = True

    def again(self) -> _StoreEncoder:
        """This encoder, emptied for the next record (a step encodes ~8: one is reused)."""
        self.numbers.clear()
        self.keep.clear()
        self.used.clear()
        self.building.clear()
        self.steps = {}
        self.output_index = {}
        self.base = self.w.counter
        self.busy = True
        return self

    def _number(self, obj: Any) -> tuple[int, bool]:
        # numbers unique across the whole run: every row is decoded with one table
        key = id(obj)
        n = self.numbers.get(key)
        if n is not None:
            self.used.add(n)
            return n, False
        n = self.base + len(self.keep)
        self.numbers[key] = n
        self.keep.append(obj)
        return n, True

    def value(self, v: Any, path: Path_) -> Any:
        t = type(v)
        if v is None or t is str or t is bool or t is int or t is float:
            return _Encoder.value(self, v, path)
        found = self.w.refs.get(id(v))
        if found is not None and found[1] is v:
            self.w.touched.add(found[2])
            return found[0]
        if t is ChatMemoryBuffer or t is AppendLog:
            return self.w.container(v)
        if t is PrefixView:
            ref = self._view_ref(v)
            if ref is not None:
                return ref
        if t is tuple and len(v) == 3 and type(v[2]) is int:
            # a memory's snapshot (its message list, its counts, how many): {"$c": k, "t": n}
            refs = self.w.refs
            m, c = refs.get(id(v[0])), refs.get(id(v[1]))
            if m is not None and c is not None and m[1] is v[0] and c[1] is v[1] and m[2] == c[2] \
                    and m[0].get("p") == "m" and c[0].get("p") == "c":
                self.w.touched.add(m[2])
                return {"$c": m[2], "t": v[2]}
        elif t is _Saved and not v.is_copy and type(v.value) in (ChatMemoryBuffer, AppendLog):
            # a memory's or log's own snapshot: {"$c": k, "s": its token}
            ref = self.w.container(v.value)
            return {"$c": ref["$c"], "s": self.value(v.token, path)}
        return _Encoder.value(self, v, path)

    def _view_ref(self, v: PrefixView[Any]) -> dict[str, Any] | None:
        """A step's view of the first n items of a log the store keeps in rows (synced in
        this change, so its rows mirror it): ``{"$c": k, "v": [number of item n-1, n]}``, O(1).
        A row outlives later cuts of the log, so it names the last item, not just n: loading
        takes the first n items when that item is still at n-1, else rebuilds the view from
        the item rows. None (written as its items): a view of an undo's frozen copy, or of a
        log not written in this change."""
        log = v.log
        w = self.w
        found = w.refs.get(id(log))
        if found is None or found[1] is not log or found[2] not in w.synced:
            return None
        c = w.containers.get(found[2])
        n = len(v)
        if c is None or c.kind != "log" or len(c.items) < n or (n and c.items[n - 1] is not log[n - 1]):
            return None
        return {"$c": c.k, "v": [c.ids[n - 1] if n else -1, n]}

    def root(self, v: Any, path: Path_) -> Any:
        """Encode ``v`` itself (it is the row), not a reference to it."""
        return super().value(v, path)

    def done(self, node: Any) -> Any:
        # the "$id" marks nobody refers to stay: harmless, and stripping them would cost a
        # second walk over every row
        self.w.counter = self.base + len(self.keep)
        self.busy = False
        return node


class _Container:
    __slots__ = ("k", "obj", "kind", "items", "ids", "next_i", "lst", "counts", "meta")

    def __init__(self, k: int, obj: Any, kind: str) -> None:
        self.k = k
        self.obj = obj
        self.kind = kind  # "mem" or "log"
        self.items: list[Any] = []  # what the rows hold, in order
        self.ids: list[int] = []  # their item numbers (never reused: references stay valid)
        self.next_i = 0
        self.lst: Any = None  # the memory's message list the rows mirror
        self.counts: Any = None  # and its token counts
        self.meta: Any = None


class _Mirror:
    """What the store holds of one task, to write only the difference."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.steps: dict[str, TaskStep] = {}
        self.registered = 0
        self.out_n: dict[int, int] = {}  # id(output) -> n
        self.outs: list[TaskStepOutput] = []
        self.completed: list[TaskStepOutput] = []
        self.done: dict[str, TaskStepOutput] = {}
        self.undone: list[TaskStepOutput] = []
        self.history: list[Any] = []
        self.failures: list[Any] = []
        self.order: dict[str, int] = {}  # step id -> its place among the task's step rows
        self.row = 0  # the rowid of the task's row in ``tasks``, once this mirror wrote it
        self.fixed: Any = None  # what the task row's fixed part was written from
        self.fixed_text = ""  # and that part's JSON (without its closing brace)
        self.seed = 0  # its row's checksum starts here (its run, id and place)


def _common_prefix(written: list[Any], live: Sequence[Any]) -> int:
    """How many leading items ``live`` still shares with ``written`` (by identity): O(1) when
    ``live`` only grew or shrank at its end, the usual case."""
    n = len(written)
    m = len(live)
    if m >= n and (n == 0 or (live[n - 1] is written[n - 1] and live[0] is written[0])):
        return n
    if m < n and (m == 0 or live[m - 1] is written[m - 1]) and all(a is b for a, b in zip(live, written)):
        return m
    p = 0
    for a, b in zip(live, written):
        if a is not b:
            break
        p += 1
    return p


class _Writer:
    """Writes one runner into a store: in full, then one transaction per change."""

    def __init__(self, store: RunStore, runner: AgentRunner, run_id: str) -> None:
        self.store = store
        self.db = store._db
        self.cur = store._cur
        self.runner = runner
        self.run_id = run_id
        self.seed = run_seed(run_id)  # every checksum of the run starts from its id
        self.run_no: int | None = None  # the run's number in the runs table
        self.log_seq: int | None = None  # the next log row's place in the run (None: ask the store)
        self.ops: list[tuple[Any, ...]] = []  # the records this transaction writes (JSON-ready)
        self.row_update: list[Any] | None = None  # see _one_statement
        self._encoder: _StoreEncoder | None = None
        self._reset()
        self.broken = False

    def _reset(self) -> None:
        self.refs: dict[int, tuple[Any, Any, int]] = {}  # id(obj) -> (reference, obj, k)
        self.containers: dict[int, _Container] = {}
        self.dicts: dict[int, tuple[int, dict[str, Any]]] = {}  # id(dict) -> (k, dict)
        self.mirrors: dict[str, _Mirror] = {}
        self.touched: set[int] = set()
        self.dirty_dicts: dict[int, dict[str, Any]] = {}
        self.dict_text: dict[int, Any] = {}  # what each dict's record holds now (the record, or ("same", k))
        self.synced: set[int] = set()  # containers written in this transaction (nothing changes meanwhile)
        self.copies: dict[int, set[int]] = {}  # dict k -> the dicts last written as "the same as k"
        self.next_k = 0
        self.counter = 0
        self.header = ""
        self.seq = 0

    def encoder(self) -> _StoreEncoder:
        """An encoder for one record (the writer's own, unless it is in use)."""
        enc = self._encoder
        if enc is None or enc.busy:
            enc = self._encoder = _StoreEncoder(self)
            return enc
        return enc.again()

    def begin(self) -> None:
        """Before a transaction's changes: nothing buffered, no container written yet."""
        self.ops.clear()
        self.synced.clear()

    # ----- whole runs -------------------------------------------------------------------
    def rewrite(self) -> None:
        """Write the whole runner again, dropping what the store held of this run."""
        self.begin()
        try:
            with self.store._tx():
                self._delete_run()
                self._reset()
                self.write_header(force=True)
                for state in list(self.runner._tasks.values()):
                    self._write_task(state, None)
                    if len(self.ops) > 5000:
                        self.flush()  # a long run goes in several rows
                self.flush()
        finally:
            self.ops.clear()
        self.broken = False

    def _delete_run(self) -> None:
        self.db.execute("DELETE FROM tasks WHERE run_id=?", (self.run_id,))
        no = self._run_no()
        if no is not None:
            self.db.execute("DELETE FROM log WHERE id>=? AND id<?", run_range(no))
        self.log_seq = 0

    def _run_no(self) -> int | None:
        if self.run_no is None:
            row = self.db.execute("SELECT no FROM runs WHERE run_id=?", (self.run_id,)).fetchone()
            if row is not None:
                self.run_no = row[0]
        return self.run_no

    def _op(self, *record: Any) -> None:
        """Add a record to this transaction (its values JSON-ready: encoded already; the
        tuple is written as a JSON array)."""
        self.ops.append(record)

    def flush(self) -> None:
        """Write this transaction's records as one log row (inside the transaction)."""
        if not self.ops:
            return
        no = self._run_no()
        if no is None:
            raise PersistError(f"run {self.run_id!r} has no header row in {self.store.path}")
        if self.log_seq is None:
            lo, hi = run_range(no)
            last = self.db.execute("SELECT max(id) FROM log WHERE id>=? AND id<?", (lo, hi)).fetchone()[0]
            self.log_seq = 0 if last is None else last - lo + 1
        if self.log_seq >= 1 << RUN_BITS:
            raise PersistError(f"run {self.run_id!r} has {self.log_seq} log rows; save it in full (store.save) to compact it")
        row_id = (no << RUN_BITS) + self.log_seq
        text = _dumps(self.ops)
        self.cur.execute("INSERT INTO log VALUES(?,?,?)", (row_id, text, log_crc(self.seed, row_id, text.encode())))
        self.log_seq += 1
        self.ops.clear()

    def write_header(self, force: bool = False) -> None:
        from nbagent._version import __version__

        runner = self.runner
        settings = {name: getattr(runner, name) for name in _SETTINGS}
        for name in _OPTIONAL_SETTINGS:
            if hasattr(runner, name):
                settings[name] = getattr(runner, name)
        extra_settings = getattr(runner, "_persist_settings", None)
        if callable(extra_settings):
            settings.update(extra_settings())
        settings["init_task_state_kwargs"] = runner.init_task_state_kwargs
        pricing = _costs.own_pricing(runner)
        rng = _ids.current_rng()
        enc = self.encoder()
        header = enc.done({
            "nbagent": __version__,
            "class": type(runner).__name__,
            "worker": _worker_info(runner),
            "settings": enc.value(settings, (None, "runner.settings")),
            "pricing": pricing.to_dict() if pricing is not None else None,
            "ids": _rng_state(rng) if rng is not None else None,
            "memory": enc.value(runner.memory, (None, "runner.memory")),
        })
        text = _dumps(header)
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
        self._drop_task(state.task_id)
        self._write_task(state, None)

    def _drop_task(self, task_id: str) -> None:
        # its log records name the task by its place (seq): written again, it gets a new one,
        # and loading skips records of a place no task holds
        self.mirrors.pop(task_id, None)
        self.db.execute("DELETE FROM tasks WHERE run_id=? AND task_id=?", (self.run_id, _sql_text(task_id)))

    # ----- events -----------------------------------------------------------------------
    def on_event(self, event: Any) -> None:
        ev = _ev
        t = type(event)
        if t is ev.StepStarted or t is ev.TokenStreamed or not isinstance(event, ev.Event):
            return
        if not self.broken:
            self.begin()
            try:
                if self._one_statement(event, ev):
                    return
                with self.store._tx():
                    self._apply(event, ev)
                    self.flush()
                return
            except Exception:  # noqa: BLE001 - the mirrors may be ahead of the store
                self.broken = True
            except BaseException:  # an interrupt: the mirrors may be ahead too; save in full next time
                self.broken = True
                raise
            finally:
                self.ops.clear()
        self.rewrite()  # write in full; if that fails too, the caller warns

    def _one_statement(self, event: Any, ev: Any) -> bool:
        """A step of a task already in the store: its records and its task's row in one
        statement (``step_commit``). False: not such a change (the caller writes it)."""
        t = type(event)
        if t not in (ev.StepCompleted, ev.StepFailed, ev.StepUndone, ev.StepEdited) or _ids.current_rng() is not None:
            return False
        state = self.runner._tasks.get(event.task_id)
        m = self.mirrors.get(event.task_id)
        if state is None or m is None or not m.row or self.log_seq is None or self.run_no is None:
            return False
        with self.store._lock:
            self.row_update = []  # _write_task puts the task row's values here instead of writing them
            try:
                self._apply(event, ev)
                status, response, steps, updated, head, head_crc, row, tid, run = self.row_update
            finally:
                self.row_update = None
            log_id = (self.run_no << RUN_BITS) + self.log_seq
            text = _dumps(self.ops)
            self.cur.execute(
                "INSERT INTO step_commit VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                (log_id, text, log_crc(self.seed, log_id, text.encode()), row, tid, run, status, response, steps,
                 updated, head, head_crc),
            )
            self.log_seq += 1
            self.ops.clear()
        return True

    def _apply(self, event: Any, ev: Any) -> None:
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
        if t not in (ev.StepCompleted, ev.StepFailed, ev.StepUndone, ev.StepEdited) or _ids.current_rng() is not None:
            self.write_header()  # a step changes none of it, but the seeded id generator's state
        if state is None:
            return
        if t is ev.TaskFinalized or event.task_id not in self.mirrors:
            # finalizing rewrites the last output (its answer and sources): write it whole once
            self.write_task_full(state)
            return
        dirty: set[str] = set()
        step_id = getattr(event, "step_id", None)
        if step_id:
            dirty.add(step_id)
        dirty.update(getattr(event, "next_step_ids", ()) or ())
        if t is ev.StepUndone:
            dirty.update(b for a, b in state.undone_edges[-64:] if a == step_id)
        self._write_task(state, dirty)

    # ----- objects in rows of their own --------------------------------------------------
    def container(self, obj: Any) -> dict[str, Any]:
        found = self.refs.get(id(obj))
        if found is not None and found[1] is obj:
            self.touched.add(found[2])
            return found[0]  # type: ignore[no-any-return]
        k = self.next_k
        self.next_k += 1
        kind = "mem" if type(obj) is ChatMemoryBuffer else "log"
        c = _Container(k, obj, kind)
        self.containers[k] = c
        ref = {"$c": k}
        self.refs[id(obj)] = (ref, obj, k)
        self.touched.add(k)
        return ref

    def dict_ref(self, d: dict[str, Any]) -> dict[str, Any]:
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

    def _sync_containers(self) -> None:
        synced = self.synced
        if self.touched.issubset(synced):  # all written in this change already (nothing changes meanwhile)
            self.touched.clear()
            return
        while self.touched:
            ks = sorted(self.touched - synced) if len(self.touched) > 1 else [k for k in self.touched if k not in synced]
            self.touched.clear()
            for k in ks:
                c = self.containers.get(k)
                if c is not None:
                    synced.add(k)
                    self._sync_container(c)

    def _sync_container(self, c: _Container) -> None:
        if c.kind == "mem":
            mem: ChatMemoryBuffer = c.obj
            meta = (mem.token_limit, mem.tokenizer_fn)
            if meta != c.meta:
                rec: dict[str, Any] = {"token_limit": mem.token_limit}
                if mem.tokenizer_fn is not count_tokens:
                    fn = mem.tokenizer_fn
                    ref = _ref_of(fn) if hasattr(fn, "__qualname__") else repr(fn)
                    if _ALLOWED.get(ref) is not fn:
                        raise PersistError(
                            f"cannot save a memory's tokenizer_fn: {ref} is not nbagent's token counter; "
                            "register it with nbagent.persist.allow_type(fn) (a module-level function)"
                        )
                    rec["tokenizer"] = ref
                self._op("o", c.k, "mem", rec)
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
                self._op("o", c.k, "log", {})
                c.meta = "log"
            live = c.obj
            counts = None
        p = _common_prefix(c.items, live)
        if p < len(c.items):
            # cut off (an undo): the rows stay, out of the list, for what still refers to them
            self._op("ic", c.k, c.ids[p:])
            del c.items[p:]
            del c.ids[p:]
        if len(live) > p:
            for pos in range(p, len(live)):
                item = live[pos]
                i = c.next_i
                c.next_i += 1
                value = self._flat_model(item)
                if value is not None:
                    rec = [value, counts[pos]] if counts is not None else value
                else:
                    enc = self.encoder()
                    value = enc.root(item, ((None, "item"), pos))  # (a path, for error messages)
                    rec = enc.done([value, counts[pos]] if counts is not None else value)
                self._op("i", c.k, i, pos, rec)
                c.items.append(item)
                c.ids.append(i)
                if id(item) not in self.refs:
                    self.refs[id(item)] = ({"$i": [c.k, i]}, item, c.k)

    def _write_dicts(self) -> None:
        written: list[tuple[int, dict[str, Any]]] = []  # (k, dict) written or checked just now
        while self.dirty_dicts:
            k, d = self.dirty_dicts.popitem()
            twin = self._twin(d, written)
            if twin is not None:
                # holds the very objects another dict of this change holds (a worker's step state
                # merged into the task's extra state): written as "a copy of that one"
                if self.dict_text.get(k) != ("same", twin):
                    self._op("o", k, "same", twin)
                    self.dict_text[k] = ("same", twin)
                    self.copies.setdefault(twin, set()).add(k)
                continue
            rec = self._flat_record(d)
            if rec is None:
                enc = self.encoder()
                rec = enc.root(d, (None, "state"))
                n = rec.get("$id")
                if n is not None and n not in enc.used:
                    del rec["$id"]  # nothing in the record refers to the dict: unchanged, it reads the same
                enc.done(rec)
            if self.dict_text.get(k) != rec:
                self._op("o", k, "dict", rec)
                self.dict_text[k] = rec
                for other in self.copies.pop(k, ()):
                    if self.dict_text.get(other) == ("same", k):  # a copy of what k held: unknown now
                        self.dict_text[other] = None
            written.append((k, d))

    def _flat_model(self, v: Any) -> dict[str, Any] | None:
        """The record of a model whose fields are JSON scalars, short strings, Enum members
        or left at their empty defaults (a message, a tool output), built without an encoder:
        what ``_Encoder._model`` writes for it (numbered alike). None for anything else."""
        cls = type(v)
        plan = _MODEL_PLANS.get(cls)
        if plan is None or plan[0] is None or _HANDLERS.get(cls) is not _Encoder._model:
            return None  # (the encoder makes the plan the first time)
        if getattr(v, "__pydantic_extra__", None):
            return None
        data: dict[str, Any] = {}
        fields = v.__dict__
        for name, _attr, default, empty, info, enum_type in plan[1]:
            value = fields.get(name, None)
            if value is None:
                if default is None:
                    continue
                data[name] = None
                continue
            tv = type(value)
            if tv is str:
                if len(value) < SHARED_STR_CHARS:
                    data[name] = value
                    continue
                return None
            elif value is False:
                if default is False:
                    continue
            elif tv is empty:
                if not value:
                    continue
            elif tv in (list, dict, tuple) and not value and _is_plain_default(value, info):
                continue
            if tv is enum_type:
                raw = value._value_
                if type(raw) is str and len(raw) < SHARED_STR_CHARS:
                    data[name] = raw
                    continue
                return None
            if tv is int or tv is bool or (tv is float and math.isfinite(value)):
                data[name] = value
                continue
            return None
        n = self.counter
        self.counter = n + 1  # the model is the one object numbered
        return {"$type": "model", "$id": n, "class": plan[0], "data": data}

    def _flat_output(self, out: TaskStepOutput) -> dict[str, Any] | None:
        """``_output_record`` of an output whose answer is a flat model (``_flat_model``) and
        that has no tool outputs, built without an encoder (numbered alike), or None."""
        tools = out.tool_outputs
        if type(tools) is not tuple or tools:
            return None
        answer = out.output
        refs = self.refs
        for obj in (answer, tools):  # an object with a row of its own is written as a reference
            found = refs.get(id(obj))
            if found is not None and found[1] is obj:
                return None
        model = self._flat_model(answer)
        if model is None:
            return None
        usage = out.usage
        return {
            "step_id": out.task_step.step_id,
            "is_last": out.is_last,
            "next_steps": [s.step_id for s in out.next_steps],
            "reasoning": out.reasoning,
            "latency_s": out.latency_s,
            "usage": None if usage is None else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            },
            "output": model,
            "tool_outputs": {"$type": "tuple", "items": []},
            "input": out.input,
        }

    def _flat_record(self, d: dict[str, Any]) -> dict[str, Any] | None:
        """The record of a state dict whose values are JSON scalars or objects with rows of
        their own (a worker's usual state: counters, its memory, its sources), built without
        an encoder: what the encoder writes for it (numbered alike), or None for any other dict."""
        refs = self.refs
        touched: list[int] = []
        rec: dict[str, Any] = {}
        for key, v in d.items():
            tv = type(v)
            if tv is str:
                if len(v) >= SHARED_STR_CHARS:
                    return None
            elif tv is float:
                if not math.isfinite(v):
                    return None
            elif tv not in _SCALARS:
                found = refs.get(id(v))
                if found is None or found[1] is not v:
                    return None
                touched.append(found[2])
                v = found[0]
            if type(key) is not str or key[:1] == "$":
                return None
            rec[key] = v
        self.touched.update(touched)
        self.counter += 1  # the number the encoder gives the dict itself (unused: not written)
        return rec

    def _flat_snapshot(self, snap: StepSnapshot) -> dict[str, Any] | None:
        """The record of an undo snapshot of a worker's usual state (one dict for the task's
        and the step's state, holding JSON scalars and snapshots of memories and logs with
        rows of their own), built without an encoder: what ``_snapshot_to_dict`` writes
        through one (numbered alike). None for any other snapshot."""
        extra = plain_snapshot(snap.extra_state)
        if type(extra) is not dict or snap.step_state is not snap.extra_state:
            return None
        refs = self.refs
        found = refs.get(id(extra))
        if found is not None and found[1] is extra:
            return None
        touched: list[int] = []
        scratch = self._memory_snapshot_ref(snap.scratch, touched)
        if scratch is None:
            return None
        n = self.counter
        values: dict[str, Any] = {"$id": n}
        for key, v in extra.items():
            if type(key) is not str or key[:1] == "$":
                return None
            tv = type(v)
            if tv is str:
                if len(v) >= SHARED_STR_CHARS:
                    return None
            elif tv is float:
                if not math.isfinite(v):
                    return None
            elif tv is _Saved:
                obj = v.value
                held = refs.get(id(obj))
                if v.is_copy or held is None or held[1] is not obj or type(obj) not in (ChatMemoryBuffer, AppendLog) \
                        or len(held[0]) != 1 or "$c" not in held[0]:
                    return None
                found = refs.get(id(v))
                if found is not None and found[1] is v:
                    return None
                token = v.token
                tt = type(token)
                if tt is tuple:
                    token = self._memory_snapshot_ref(token, touched)
                    if token is None:
                        return None
                elif not (token is None or tt is int or tt is bool):
                    return None
                touched.append(held[2])
                v = {"$c": held[0]["$c"], "s": token}
            elif tv not in _SCALARS:
                return None
            values[key] = v
        self.touched.update(touched)
        self.counter = n + 1  # the snapshot dict is the one object numbered
        return {
            "step_id": snap.step_id,
            "step_input": snap.step_input,
            "queue": None if snap.queue is None else [s.step_id for s in snap.queue],
            "extra_state": values,
            "step_state": {"$ref": n},
            "scratch": scratch,
        }

    def _memory_snapshot_ref(self, token: Any, touched: list[int]) -> dict[str, Any] | None:
        """``{"$c": k, "t": n}`` for a memory's snapshot (its message list, counts, length)
        as ``_StoreEncoder.value`` writes it, or None."""
        if type(token) is not tuple or len(token) != 3 or type(token[2]) is not int:
            return None
        refs = self.refs
        found = refs.get(id(token))
        if found is not None and found[1] is token:
            return None
        m, c = refs.get(id(token[0])), refs.get(id(token[1]))
        if m is not None and c is not None and m[1] is token[0] and c[1] is token[1] and m[2] == c[2] \
                and m[0].get("p") == "m" and c[0].get("p") == "c":
            touched.append(m[2])
            return {"$c": m[2], "t": token[2]}
        return None

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

    # ----- one task ---------------------------------------------------------------------
    def _write_task(self, state: TaskState, dirty: set[str] | None) -> None:
        """Write what changed in ``state`` since the last write (``dirty=None``: all of it)."""
        run, tid = self.run_id, state.task_id
        db = self.db
        m = self.mirrors.get(tid)
        if m is None:
            m = self.mirrors[tid] = _Mirror(self.seq)
            m.seed = task_seed(self.seed, tid, m.seq)
            self.seq += 1
            dirty = None
        task = state.task
        # 1. which steps to write
        if dirty is None:
            steps = _all_steps(state)
        else:
            steps = {}
            for sid in dirty:
                s = state.steps.get(sid) or m.steps.get(sid)
                if s is not None:
                    steps[sid] = s
            for s in state.step_queue:
                steps[s.step_id] = s
            for sid in state.running:
                s = state.steps.get(sid)
                if s is not None:
                    steps[sid] = s
            need = len(state.steps) - m.registered  # steps registered since: at the end
            if need > 0:
                for sid in reversed(state.steps):
                    if need <= 0:
                        break
                    need -= 1
                    steps[sid] = state.steps[sid]
        # 2. new outputs get their numbers
        new_outputs: list[TaskStepOutput] = []
        for lst in (state.completed_steps, state.undone_outputs):
            for out in (lst[-4:] if dirty is not None else lst):
                if id(out) not in m.out_n:
                    new_outputs.append(out)
                    m.out_n[id(out)] = len(m.outs)
                    m.outs.append(out)
        for sid in (dirty if dirty is not None else list(state.outputs)):
            out = state.outputs.get(sid)
            if out is not None and id(out) not in m.out_n:
                new_outputs.append(out)
                m.out_n[id(out)] = len(m.outs)
                m.outs.append(out)
        if len(m.out_n) < len(state.completed_steps):  # an odd change: number every output
            for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
                if id(out) not in m.out_n:
                    new_outputs.append(out)
                    m.out_n[id(out)] = len(m.outs)
                    m.outs.append(out)
        for out in new_outputs:
            for s in (out.task_step, *out.next_steps):
                if s.step_id not in m.steps:
                    steps.setdefault(s.step_id, s)
        # 3. state dicts, then the containers they (and the memories) hold
        extra_ref = self.dict_ref(task.extra_state)
        for s in steps.values():
            self.dict_ref(s.step_state)
        mem_ref = self.container(task.memory)
        scratch_ref = self.container(task.scratch_memory)
        self._write_dicts()
        self._sync_containers()
        # 4. the rows
        step_models = _costs.step_models(self.runner)
        known = _StepIndex(state, m, steps)
        seq = m.seq
        registry, written_steps, order, dicts, add = state.steps, m.steps, m.order, self.dicts, self.ops.append
        for sid, s in steps.items():
            if sid not in written_steps:
                written_steps[sid] = s
            rec = _step_record(s, sid in registry)  # ids and text only: nothing to encode
            rec["state"] = {"$d": dicts[id(s.step_state)][0]}
            model = step_models.get(sid)
            if model is not None:
                rec["model"] = model
            place = order.get(sid)
            add(("s", seq, _ord(m, sid) if place is None else place, rec))
        m.registered = len(state.steps)
        fresh = {m.out_n[id(out)]: [None, 0, None] for out in new_outputs}  # cpos, done, upos
        self._positions(state, m, dirty, fresh)
        for out in new_outputs:
            n = m.out_n[id(out)]
            rec = self._flat_output(out)
            if rec is None:
                enc = self.encoder()
                enc.steps = known  # type: ignore[assignment]
                enc.output_index = m.out_n
                rec = enc.done(_output_record(enc, out, (((None, "task"), tid), ".output")))
            self._op("u", seq, n, fresh[n], rec)
        self._list_rows("history", m.history, state.history, state, m, known)
        self._list_rows("failures", m.failures, state.failures, state, m, known)
        self._sync_containers()  # a snapshot may have named a container first
        # 5. the task's own row: what rarely changes is encoded once (the input may be long)
        fixed = (task.input, mem_ref["$c"], scratch_ref["$c"], extra_ref["$d"], state.keep_history, state.adds_to_memory)
        if m.fixed != fixed:
            m.fixed = fixed
            m.fixed_text = _dumps({
                "task_id": tid,
                "input": task.input,
                "memory": mem_ref,
                "scratch_memory": scratch_ref,
                "extra_state": extra_ref,
                "keep_history": state.keep_history,
                **({} if state.adds_to_memory else {"adds_to_memory": False}),
            })[:-1]
        final = state.final_response
        running = sorted(state.running, key=lambda sid: _ord(m, sid)) if state.running else []
        status = state.status.value
        queue = running + [s.step_id for s in state.step_queue]
        if final is None and not state.undone_edges and not state.undone_ids and not state.finalized \
                and not state.abandoned and status in _STATUS_JSON:
            # the usual step: the same text as below, without building and encoding the dict
            head = f'{m.fixed_text},"status":{_STATUS_JSON[status]},"queue":{_dumps(queue)}{_HEAD_PLAIN}'
        else:
            if final is not None:
                enc = self.encoder()
                enc.steps = known  # type: ignore[assignment]
                enc.output_index = m.out_n
                final = enc.done(enc.value(final, ((None, f"task {tid}"), ".final_response")))
            head = m.fixed_text + "," + _dumps({
                "status": status,
                "queue": queue,
                "undone_edges": [[a, b] for a, b in state.undone_edges],
                "undone_ids": sorted(state.undone_ids),
                "finalized": state.finalized,
                "abandoned": state.abandoned,
                "final_response": final,
            })[1:]
        self._sync_containers()
        response = getattr(state.final_response, "response", None)
        response = _sql_text(response) if isinstance(response, str) else None
        tid = _sql_text(tid)  # (a caller's task id may hold a lone surrogate too)
        head_crc = zlib.crc32(head.encode(), m.seed)
        if m.row and self.row_update is not None:  # written with the log row, in one statement
            self.row_update[:] = (status, response, len(state.completed_steps), time.time(), head, head_crc, m.row,
                                  tid, run)
            return
        if m.row:  # the row is there (this mirror wrote it): update it in place, found by its rowid
            self.cur.execute(
                "UPDATE tasks SET status=?, response=?, steps=?, updated=?, head=?, crc=? "
                "WHERE rowid=? AND task_id=? AND run_id=?",
                (status, response, len(state.completed_steps), time.time(), head, head_crc, m.row, tid, run),
            )
            if self.cur.rowcount != 1:  # moved (a VACUUM renumbers rows): find it by its key
                m.row = 0
        if not m.row:
            db.execute(
                "INSERT INTO tasks VALUES(?,?,?,NULL,NULL,?,?,?,?,?,?,?) ON CONFLICT(run_id, task_id) DO UPDATE SET "
                "seq=excluded.seq, status=excluded.status, response=excluded.response, steps=excluded.steps, "
                "updated=excluded.updated, head=excluded.head, crc=excluded.crc",
                (run, tid, m.seq, status, _sql_text(task.input), response, len(state.completed_steps), time.time(), head,
                 head_crc),
            )
            m.row = db.execute("SELECT rowid FROM tasks WHERE run_id=? AND task_id=?", (run, tid)).fetchone()[0]

    def _positions(self, state: TaskState, m: _Mirror, dirty: set[str] | None, fresh: dict[int, list[Any]]) -> None:
        """Which outputs are completed (in order), done (by step) and undone (in order).
        Rows about to be written (``fresh``: n -> [cpos, done, upos]) get theirs there."""
        out_n = m.out_n
        moved: tuple[list[Any], list[Any], list[Any]] = ([], [], [])  # by slot: [value, n] of rows written before

        def place(slot: int, value: Any, n: int) -> None:
            row = fresh.get(n)
            if row is not None:
                row[slot] = value
            else:
                moved[slot].append([value, n])

        for slot, written, live in ((0, m.completed, state.completed_steps), (2, m.undone, state.undone_outputs)):
            k = len(written)
            if k == len(live) and (not k or (live[k - 1] is written[k - 1] and live[0] is written[0])):
                continue  # unchanged (the undone list of almost every step)
            p = _common_prefix(written, live)
            if p < len(written):
                for o in written[p:]:
                    place(slot, None, out_n[id(o)])
                del written[p:]
            if len(live) > p:
                for i in range(p, len(live)):
                    place(slot, i, out_n[id(live[i])])
                written.extend(live[p:])
        outputs, done = state.outputs, m.done
        for sid in (outputs if dirty is None else dirty):
            live_out = outputs.get(sid)
            old = done.get(sid)
            if live_out is not old:
                if old is not None:
                    place(1, 0, out_n[id(old)])
                    del done[sid]
                if live_out is not None:
                    place(1, 1, out_n[id(live_out)])
                    done[sid] = live_out
        stale = len(done) != len(outputs)
        if not stale:
            for sid in itertools.islice(reversed(done), 2):
                if outputs.get(sid) is not done[sid]:
                    stale = True
                    break
        if stale:
            self._op("pd", m.seq)  # done=0 for every output
            moved[1].clear()
            for row in fresh.values():
                row[1] = 0
            for o in outputs.values():
                place(1, 1, out_n[id(o)])
            m.done = dict(outputs)
        for slot in (0, 1, 2):
            if moved[slot]:
                self._op("p", m.seq, slot, moved[slot])

    def _list_rows(self, table: str, written: list[Any], live: Sequence[Any], state: TaskState, m: _Mirror, known: Any) -> None:
        tid, seq = state.task_id, m.seq
        kind = "h" if table == "history" else "f"
        p = _common_prefix(written, live)
        if p < len(written):
            self._op(kind + "x", seq, p)  # cut the list at p
            del written[p:]
        for i in range(p, len(live)):
            item = live[i]
            if table == "history":
                rec = self._flat_snapshot(item) if type(item) is StepSnapshot else None
                if rec is None:
                    enc = self.encoder()
                    enc.steps = known
                    enc.output_index = m.out_n
                    rec = enc.done(_snapshot_to_dict(enc, item, (((None, "task"), tid), ".history")))
            else:
                rec = _failure_record(item)
            self._op(kind, seq, i, rec)
            written.append(item)


_SCALARS = frozenset({int, float, bool, type(None)})
_MISSING = object()
_STATUS_JSON = {st.value: _dumps(st.value) for st in TaskStatus}  # a task row's status, as JSON
_HEAD_PLAIN = ',"undone_edges":[],"undone_ids":[],"finalized":false,"abandoned":false,"final_response":null}'


def _ord(m: _Mirror, sid: str) -> int:
    """A step's place among the task's steps (new ones go last)."""
    n = m.order.get(sid)
    if n is None:
        n = m.order[sid] = len(m.order)
    return n


class _StepIndex(dict):  # type: ignore[type-arg]
    """The steps a value may refer to: the task's, the ones written before, the ones now."""

    def __init__(self, state: TaskState, m: _Mirror, steps: dict[str, TaskStep]) -> None:
        super().__init__()
        self.sources = (state.steps, m.steps, steps)

    def get(self, key: Any, default: Any = None) -> Any:
        for src in self.sources:
            found = src.get(key)
            if found is not None:
                return found
        return default

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Any:
        seen: set[str] = set()
        for src in self.sources:
            for sid in src:
                if sid not in seen:
                    seen.add(sid)
                    yield sid


def _all_steps(state: TaskState) -> dict[str, TaskStep]:
    """Every step the task can reach (as the run file saves them)."""
    steps = dict(state.steps)
    for step in state.step_queue:
        steps.setdefault(step.step_id, step)
    for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
        steps.setdefault(out.task_step.step_id, out.task_step)
        for nxt in out.next_steps:
            steps.setdefault(nxt.step_id, nxt)
    for snap in state.history:
        for s in snap.queue or ():
            steps.setdefault(s.step_id, s)
    pending = list(steps.values())
    while pending:
        s = pending.pop()
        for linked in [*s.next_steps.values(), *s.prev_steps.values()]:
            if linked.step_id not in steps:
                steps[linked.step_id] = linked
                pending.append(linked)
    return steps


# ----- autosave into a store ---------------------------------------------------------------


def start_autosave(runner: AgentRunner, store: RunStore) -> _Writer:
    """Write ``runner`` in full into ``store`` and return the writer that keeps it saved."""
    writer = _Writer(store, runner, _run_id_for(store, runner))
    try:
        writer.rewrite()
    except SQLITE_ERRORS as err:
        raise store_error(store.path, err, "saving a run", run=writer.run_id) from err
    runner.__dict__["_store_origin"] = (str(store.path), writer.run_id)
    return writer


def autosave_warning(writer: _Writer, err: BaseException) -> None:
    from nbagent.store.autosave import AutosaveWarning

    if isinstance(err, SQLITE_ERRORS):
        err = store_error(writer.store.path, err, "saving a step", run=writer.run_id)
    warnings.warn(
        f"autosave to {writer.store.path} failed: {err}; the store keeps its last committed step",
        AutosaveWarning,
        stacklevel=3,
    )
