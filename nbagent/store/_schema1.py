"""Read-only reader of schema-1 run stores, and their migration in place to today's schema.

Why: nbagent's first run store (schema 1, one WITHOUT ROWID table per kind of piece: steps,
outputs, history, failures, objects, items) was replaced by an append-only log (schema 2/3).
Runs in an old ``runs.db`` must not be lost: opening one migrates it. The reading logic below
is schema 1's own (nbagent at d70798e, ``nbagent/store/sqlite.py``), trimmed to loading.

The migration (``migrate_if_schema1``), safe against a kill at any moment:

1. take the old file for ourselves: switch it out of WAL (SQLite refuses while any other
   connection has it open: then we refuse, naming the other process) and hold an exclusive
   lock, so nobody opens it meanwhile;
2. copy it byte for byte to ``<store>.schema1.bak`` (via a temporary name, then renamed);
3. load every run with the schema-1 reader and write it into a new store built in a temporary
   file next to it (``<store>.migrating``), with the same run ids, labels and times;
4. close that store (its log checkpointed), then rename it over the old file in one step.

A kill before 4 leaves the old store as it was (its content untouched) plus leftovers the next
migration overwrites; after 4, the complete new store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbagent.memory import ChatMemoryBuffer
from nbagent.snapshot import AppendLog
from nbagent.allowlist import PersistError
from nbagent.store.codec import FORMAT, VERSION, runner_from_dict
from nbagent.store.decoder import ValueDecoder, memory_tokenizer
from nbagent.store.sql import SCHEMA, StoreConnection
from nbagent.store.writer import Writer

__all__ = ["migrate_if_schema1", "load_schema1", "MigrationWarning"]

_MAGIC = b"SQLite format 3\x00"
_TABLES = ("runs", "tasks", "steps", "outputs", "history", "failures", "objects", "items")


class MigrationWarning(UserWarning):
    """A run store written by an older nbagent was migrated to today's layout."""


def _loads(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PersistError(f"{source}: a stored row is not valid JSON ({err.msg}); the store is corrupt") from err


def _schema_of(path: Path, timeout: float) -> str | None:
    """The store's schema mark, or None when it is no nbagent store (yet)."""
    if not path.exists() or path.stat().st_size < 100:
        return None
    with open(path, "rb") as fh:
        if fh.read(16) != _MAGIC:
            return None
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=timeout)
    try:
        if con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone() is None:
            return None
        row = con.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
        return None if row is None else str(row[0])
    finally:
        con.close()


# ----- reading (schema 1's own logic, d70798e) ---------------------------------------------


class _Rows:
    """Every row of one run, read in one transaction."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, str]] = []  # (task_id, head)
        self.steps: dict[str, list[str]] = {}
        self.outputs: dict[str, list[tuple[int, Any, int, Any, str]]] = {}
        self.history: dict[str, list[str]] = {}
        self.failures: dict[str, list[str]] = {}
        self.objects: dict[int, tuple[str, str]] = {}
        self.items: dict[int, dict[int, str]] = {}  # k -> item number -> row
        self.order: dict[int, list[int]] = {}  # k -> the item numbers in the list, in order

    @classmethod
    def read(cls, db: sqlite3.Connection, run: str, only: Sequence[str] | None) -> _Rows:
        rows = cls()
        wanted = None if only is None else set(only)
        for task_id, head in db.execute("SELECT task_id, head FROM tasks WHERE run_id=? ORDER BY seq", (run,)):
            if wanted is None or task_id in wanted:
                rows.tasks.append((task_id, head))
        if wanted is not None and len(rows.tasks) != len(wanted):
            missing = sorted(wanted - {t for t, _ in rows.tasks})
            raise PersistError(f"run {run!r} has no task(s) {missing}")
        keep = {t for t, _ in rows.tasks}
        for tid, rec in db.execute("SELECT task_id, rec FROM steps WHERE run_id=? ORDER BY task_id, ord", (run,)):
            if tid in keep:
                rows.steps.setdefault(tid, []).append(rec)
        for tid, n, cpos, done, upos, rec in db.execute(
            "SELECT task_id, n, cpos, done, upos, rec FROM outputs WHERE run_id=? ORDER BY task_id, n", (run,)
        ):
            if tid in keep:
                rows.outputs.setdefault(tid, []).append((n, cpos, done, upos, rec))
        for table in ("history", "failures"):
            target = getattr(rows, table)
            for tid, rec in db.execute(f"SELECT task_id, rec FROM {table} WHERE run_id=? ORDER BY task_id, i", (run,)):
                if tid in keep:
                    target.setdefault(tid, []).append(rec)
        for k, kind, rec in db.execute("SELECT k, kind, rec FROM objects WHERE run_id=?", (run,)):
            rows.objects[k] = (kind, rec)
        for k, i, pos, rec in db.execute("SELECT k, i, pos, rec FROM items WHERE run_id=? ORDER BY k, pos", (run,)):
            rows.items.setdefault(k, {})[i] = rec
            if pos is not None:
                lst = rows.order.setdefault(k, [])
                if pos != len(lst):
                    raise PersistError(f"run {run!r}: item {pos} of object {k} follows item {len(lst) - 1}; the store is corrupt")
                lst.append(i)
        return rows

    def task_docs(self, source: str) -> list[dict[str, Any]]:
        """Each task as the run file's task record (values still encoded)."""
        docs = []
        for tid, head_text in self.tasks:
            where = f"{source}: task {tid}"
            doc = _loads(head_text, where)
            steps, states, models = [], {}, {}
            for text in self.steps.get(tid, []):
                rec = _loads(text, where)
                sid = rec.get("step_id")
                states[sid] = rec.pop("state", {})
                model = rec.pop("model", None)
                if model is not None:
                    models[sid] = model
                steps.append(rec)
            outputs: list[Any] = []
            completed, done, undone = [], [], []
            for n, cpos, is_done, upos, text in self.outputs.get(tid, []):
                if n != len(outputs):
                    raise PersistError(f"{where}: output {n} follows output {len(outputs) - 1}; the store is corrupt")
                rec = _loads(text, where)
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
                history=[_loads(t, where) for t in self.history.get(tid, [])],
                failures=[_loads(t, where) for t in self.failures.get(tid, [])],
            )
            docs.append(doc)
        return docs


class _StoreDecoder(ValueDecoder):
    """The run file's decoder, plus the objects that live in rows of their own (built when
    first referred to, so rows may refer to each other in any order)."""

    def __init__(self, source: str, rows: _Rows) -> None:
        super().__init__(source)
        self.rows = rows
        self.built: dict[int, Any] = {}
        self.items_built: dict[tuple[int, int], Any] = {}

    def value(self, d: Any, where: str) -> Any:
        if type(d) is dict:
            if "$c" in d:
                c = self._object(d["$c"], where)
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
        entry = self.rows.objects.get(k) if type(k) is int else None
        if entry is None:
            raise self.fail(where, f"refers to stored object {k!r}, which the store does not hold")
        kind, text = entry
        rec = _loads(text, self.source)
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
            buf = ChatMemoryBuffer(token_limit=rec["token_limit"], tokenizer_fn=memory_tokenizer(rec, where, self.fail))
            self.built[k] = buf
            pairs = [self._item(k, i, where) for i in order]
            buf._messages = [m for m, _ in pairs]
            buf._counts = [c for _, c in pairs]
            return buf
        raise self.fail(where, f"stored object {k} has an unknown kind {kind!r}")

    def _item(self, k: Any, i: Any, where: str) -> Any:
        key = (k, i)
        if key in self.items_built:
            return self.items_built[key]
        items = self.rows.items.get(k) if type(k) is int else None
        text = items.get(i) if items is not None and type(i) is int else None
        if text is None:
            raise self.fail(where, f"refers to item {i!r} of stored object {k!r}, which the store does not hold")
        kind = self.rows.objects.get(k, ("?", ""))[0]
        raw = _loads(text, self.source)
        if kind == "mem":
            if not (type(raw) is list and len(raw) == 2):
                raise self.fail(where, f"item {i} of memory {k} is not a [message, count] pair")
            value: Any = (self.value(raw[0], where), raw[1])
        else:
            value = self.value(raw, where)
        self.items_built[key] = value
        return value


def load_schema1(db: sqlite3.Connection, run: str, source: str) -> Any:
    """One run of a schema-1 store as a runner (no worker: it is only written out again)."""
    head = db.execute("SELECT header FROM runs WHERE run_id=?", (run,)).fetchone()
    if head is None:
        raise PersistError(f"{source}: no run {run!r}")
    rows = _Rows.read(db, run, None)
    source = f"{source} (run {run})"
    header = _loads(head[0], source)
    doc = {"format": FORMAT, "version": VERSION, "nbagent": header.pop("nbagent", "?"), "runner": header,
           "tasks": rows.task_docs(source)}
    # a damaged task is not skipped: the migration would drop it (the store is left as it was)
    return runner_from_dict(doc, None, source=source, decoder=_StoreDecoder(source, rows), skip_damaged=False)


# ----- migration ---------------------------------------------------------------------------


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def migrate_if_schema1(path: Path, timeout: float) -> None:
    """Migrate ``path`` in place if it is a schema-1 store (see the module); else do nothing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            schema = _schema_of(path, timeout)
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            return  # not readable as a store: RunStore says why
        if schema != "1":
            return
        try:
            if _migrate_once(path, max(0.05, deadline - time.monotonic())):
                return
        except sqlite3.DatabaseError as err:
            raise PersistError(
                f"{path}: written by an older nbagent (store schema 1), but it cannot be migrated ({err}); "
                "the store is left as it was"
            ) from err
        # another process migrated it meanwhile: look again


def _migrate_once(path: Path, timeout: float) -> bool:
    """False when the file at ``path`` changed under us (another process migrated it)."""
    before = os.stat(path)
    con = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    try:
        first = con.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
        if first is None or str(first[0]) != "1":
            return False  # the file at `path` is already another one (migrated meanwhile)
        try:
            # WAL -> rollback journal: SQLite checkpoints and drops the -wal, and only while no
            # other connection (in any process) has the store open: wait a little, not the
            # whole timeout, for one that is only reading it
            con.execute(f"PRAGMA busy_timeout={int(min(timeout, 2.0) * 1000)}")
            mode = con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
            con.execute("PRAGMA locking_mode=EXCLUSIVE")
            con.execute("BEGIN EXCLUSIVE")  # held to the end: nobody opens it meanwhile
        except sqlite3.OperationalError as err:
            if "locked" in str(err) or "busy" in str(err):
                raise PersistError(
                    f"{path}: a run store written by an older nbagent (schema 1) must be migrated to "
                    "today's layout, but another process has it open; close the other process "
                    "(a notebook kernel or script using this store) and open it again"
                ) from err
            raise
        now = os.stat(path)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            return False
        if str(mode).lower() != "delete":
            raise PersistError(f"{path}: cannot take the schema-1 store for migration (journal mode {mode})")
        row = con.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
        if row is None or str(row[0]) != "1":
            return False
        try:
            _migrate_locked(path, con)
        except (sqlite3.DatabaseError, KeyError, TypeError, ValueError) as err:
            raise PersistError(
                f"{path}: written by an older nbagent (store schema 1), but it cannot be migrated ({err}); "
                "the store is left as it was"
            ) from err
        return True
    finally:
        con.close()


def _migrate_locked(path: Path, con: sqlite3.Connection) -> None:
    missing = [t for t in _TABLES if con.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (t,)).fetchone() is None]
    if missing or con.execute("SELECT 1 FROM pragma_table_info('runs') WHERE name='no'").fetchone():
        raise PersistError(
            f"{path}: written by an older nbagent (store schema 1), but it does not hold schema 1's tables "
            f"(missing {missing or 'none'}; the store is damaged); it is left as it was"
        )
    for stale in (Path(f"{path}-wal"), Path(f"{path}-journal")):
        if stale.exists() and stale.stat().st_size:
            raise PersistError(f"{path}: {stale.name} is still there; open the store with the nbagent that wrote it first")
    bak = Path(f"{path}.schema1.bak")
    tmp = Path(f"{path}.migrating")
    # 2. the backup, whole before it has its name
    bak_tmp = Path(f"{bak}.tmp")
    shutil.copyfile(path, bak_tmp)
    _fsync(bak_tmp)
    os.replace(bak_tmp, bak)
    # 3. every run, read as schema 1 read it, written as today's store writes it
    source = str(path)
    runs = con.execute("SELECT run_id, created, updated FROM runs ORDER BY created").fetchall()
    labels = con.execute("SELECT run_id, task_id, key, tag, updated FROM tasks").fetchall()
    _remove(tmp)
    new = StoreConnection(tmp)
    try:
        for run_id, _, _ in runs:
            Writer(new, load_schema1(con, run_id, source), run_id).rewrite()  # the same run id
        with new._tx():
            for run_id, created, updated in runs:
                new._db.execute("UPDATE runs SET created=?, updated=? WHERE run_id=?", (created, updated, run_id))
            for run_id, task_id, key, tag, updated in labels:
                new._db.execute(
                    "UPDATE tasks SET key=?, tag=?, updated=? WHERE run_id=? AND task_id=?",
                    (key, tag, updated, run_id, task_id),
                )
        new._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        new.close()  # the last connection: the log is copied into the file and removed
    if Path(f"{tmp}-wal").exists() and Path(f"{tmp}-wal").stat().st_size:
        raise PersistError(f"{tmp}: the migrated store's log was not checkpointed; {path} is left as it was")
    for side in (Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        if side.exists():
            side.unlink()
    _fsync(tmp)
    # 4. the switch: one rename (the old file stays locked until it is no longer at `path`)
    os.replace(tmp, path)
    _fsync(path.parent)
    warnings.warn(
        f"{path} was a run store written by an older nbagent (schema 1): migrated in place to schema "
        f"{SCHEMA} ({len(runs)} runs); the old store is kept as {bak}",
        MigrationWarning,
        stacklevel=6,  # the caller of RunStore(...)
    )
