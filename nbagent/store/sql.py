"""The run store's SQLite file: its tables, schema versions and checksums, the text of its
rows, and the one connection every reader and writer of it goes through.

Tables: ``meta`` (format and schema marks), ``runs`` (one header row per run: the runner's
settings, worker, memory), ``tasks`` (one row per task: what ``RunStore.tasks()`` lists, and
its head: status, queue, references to its memories and state), ``log`` (the records of every
change, one row per transaction; ``nbagent.store.records`` says what a record is).

Schema 2: a run's pieces are records in an append-only log, one row per transaction, so a step
writes one row at the end of one table (and updates its task's row) instead of a row in each
of six tables: a commit then touches 2-3 database pages instead of ~16 (schema 1 put every
piece in a WITHOUT ROWID table keyed by text, whose inner pages copy whole rows).
Schema 3: a step's view of a log's first n items is {"$c": k, "v": [last item's number, n]},
not n item references (a schema-2 reader would read it as the whole log: it refuses schema 3).
Schema 4: a checksum (``crc``) on every log row, task row and run header, over its text and
what places it (its row id or task place, its run), so that a changed byte or a row read in
the wrong place is told from an intact one (``nbagent.store.reader``); rows without one
(written before) are read as they are. An older writer would not fill it: it refuses schema 4.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from nbagent.allowlist import PersistError
from nbagent.store.damage import SQLITE_ERRORS, DamagedRunError, store_error

__all__ = [
    "SCHEMA", "READS", "SQLITE_SUFFIXES", "MAGIC", "RUN_BITS", "StoreConnection", "Tx", "run_range", "run_seed",
    "task_seed", "log_crc", "header_intact", "dumps", "sql_text", "py_text", "loads_row",
]

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
MAGIC = b"SQLite format 3\x00"
SCHEMA = 4
READS = (2, 3, 4)  # rows of 2 (no view records) and 3 (no checksums) read as they are; marked 4 when opened

SCHEMA_SQL = """
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
TABLES = frozenset({"meta", "runs", "tasks", "log"})

# a log row's id: the run's number in its high bits, the row's place in the run in its low ones,
# so a run's rows are one range of the table's own key (no index to keep up to date)
RUN_BITS = 36

# A step's change as one statement (so one implicit transaction: no BEGIN/COMMIT statements):
# inserting into this view appends the log row and updates the task's row (found by its rowid,
# checked against its key); if that row is not there, or the run's last log row is not the one
# this writer wrote last (``prev_crc``: another writer has rewritten or continued the run
# meanwhile), the whole statement is undone. (``step_commit``, the view of stores written
# before the second check, is left for the nbagent versions that use it.)
RUN_MOVED = "nbagent: the run moved"
STEP_SQL = (
    """CREATE VIEW IF NOT EXISTS step_commit2(id, ops, crc, prev_crc, task_row, task_id, run_id, status, response,
    steps, updated, head, head_crc) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL""",
    f"""CREATE TRIGGER IF NOT EXISTS step_commit2_insert INSTEAD OF INSERT ON step_commit2 BEGIN
    SELECT RAISE(ABORT, '{RUN_MOVED}') WHERE NEW.id % {1 << RUN_BITS} != 0
        AND NOT EXISTS (SELECT 1 FROM log WHERE id = NEW.id - 1 AND crc IS NEW.prev_crc);
    INSERT INTO log VALUES(NEW.id, NEW.ops, NEW.crc);
    UPDATE tasks SET status=NEW.status, response=NEW.response, steps=NEW.steps, updated=NEW.updated,
        head=NEW.head, crc=NEW.head_crc WHERE rowid=NEW.task_row AND task_id=NEW.task_id AND run_id=NEW.run_id;
    SELECT RAISE(ABORT, 'nbagent: the task row moved') WHERE changes() = 0;
    END""",
)


def run_moved(err: BaseException) -> bool:
    """``err`` says another writer rewrote or continued this writer's run since its last row
    (the step statement's check, or a log row id taken)."""
    text = str(err)
    return RUN_MOVED in text or (isinstance(err, sqlite3.IntegrityError) and "log.id" in text)


def run_range(no: int) -> tuple[int, int]:
    """The ids of run number ``no``'s log rows: from the first, up to (not including) the second."""
    return no << RUN_BITS, (no + 1) << RUN_BITS


# ----- checksums (schema 4) ------------------------------------------------------------------
# CRC-32 of a row's text, started from what places the row, so that a row read in another place
# (a changed row id, task place or run number) fails too.


def run_seed(run_id: str) -> int:
    """Where every checksum of run ``run_id`` starts (a run header's: its text from here)."""
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass"))


def task_seed(seed: int, task_id: str, seq: int) -> int:
    """Where the checksum of a task row starts: its run, its id and its place in the run."""
    return zlib.crc32(f"\0{task_id}\0{seq}".encode("utf-8", "surrogatepass"), seed)


def log_crc(seed: int, row_id: int, text: bytes) -> int:
    """The checksum of log row ``row_id`` of the run whose seed is ``seed``."""
    return zlib.crc32(text, zlib.crc32(row_id.to_bytes(8, "little", signed=True), seed))


def header_intact(run: str, header: Any, crc: Any, strict: bool = False) -> bool:
    """A run's header row is as written (or, not ``strict``, was written without a checksum)."""
    if crc is None:
        return not strict
    return type(header) is bytes and zlib.crc32(header, run_seed(run)) == crc


# ----- the text of a row -----------------------------------------------------------------------

# a row is a tree the encoder just built (shared objects are numbered, never nested in themselves):
# no need to watch for cycles
_JSON = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=False)


def _row_encoder() -> Any:
    """``_JSON``'s C encoder, made once (``JSONEncoder.encode`` makes one per call: about a
    tenth of an autosaved step's writing), or None where the json module has none."""
    encoder = json.encoder
    make = getattr(encoder, "c_make_encoder", None)
    if make is None or encoder.c_encode_basestring_ascii is None:
        return None
    j = _JSON
    return make(None, j.default, encoder.c_encode_basestring_ascii, None, j.key_separator, j.item_separator,
                j.sort_keys, j.skipkeys, j.allow_nan)


#: None: every row through ``_JSON.encode`` (the same text; bench/bench_autosave.py measures both)
ROW_JSON = _row_encoder()


def dumps(value: Any) -> str:
    """A row's JSON: ASCII with \\u escapes, so any Python str survives, lone surrogates included."""
    fast = ROW_JSON
    if fast is None:
        return _JSON.encode(value)
    return "".join(fast(value, 0))


def sql_text(text: str | None) -> str | bytes | None:
    """A text as SQLite can take it: a str that holds a lone surrogate (half of a streamed
    emoji, say) is not valid UTF-8, so it goes in as its bytes (``surrogatepass``), a BLOB
    ``py_text`` turns back into the very same str."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


def py_text(value: Any) -> Any:
    """A text column as Python text: a BLOB (``sql_text`` wrote a str holding a lone
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


# ----- the connection --------------------------------------------------------------------------


class StoreConnection:
    """One connection to a store file, set up (tables, marks, pragmas) and checked when opened;
    thread-safe (one lock). ``RunStore`` builds on it; a migration writes a new file with one."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path).absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                start = fh.read(16)
            if start != MAGIC:
                raise DamagedRunError(
                    self.path,
                    f"this file is not an nbagent run store: not a SQLite file (it starts with {start[:16]!r}); "
                    "damaged, or another kind of file",
                )
            self._before_open(timeout)
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

    def _before_open(self, timeout: float) -> None:
        """What to do with an existing SQLite file before it is opened (``RunStore``: migrate
        a store of an older layout)."""

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
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives the process being killed; no fsync per step
        db.execute("PRAGMA synchronous=NORMAL")
        # SQLite's default checkpoint (every 1,000 pages of log, ~4 MB) also bounds what a
        # power cut can take back (see RunStore); keep the log's file at most 64 MB
        db.execute("PRAGMA wal_autocheckpoint=1000")
        db.execute("PRAGMA journal_size_limit=67108864")
        with self._tx():
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "meta" not in tables:
                self._check_empty(tables)
                for stmt in SCHEMA_SQL.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute("INSERT INTO meta VALUES('format', ?)", ("nbagent-store",))
                db.execute("INSERT INTO meta VALUES('schema', ?)", (str(SCHEMA),))
                # every row of this store has a checksum: one without is damaged (see the reader)
                db.execute("INSERT INTO meta VALUES('checksums', 'all')")
            else:
                schema = self._check_marks(tables)
                if schema in READS and schema < SCHEMA:
                    # nothing it holds reads differently now; from here on it may hold
                    # records an older reader would misread, so such a reader must refuse it
                    self._add_checksums()
                    db.execute("UPDATE meta SET value=? WHERE name='schema'", (str(SCHEMA),))
                db.execute("CREATE INDEX IF NOT EXISTS tasks_by_label ON tasks(tag, key)")
            for stmt in STEP_SQL:  # derived, not data: put back if they were lost
                db.execute(stmt)

    def _add_checksums(self) -> None:
        """Schema 4's checksum columns on a store of schema 2 or 3 (its rows keep none: read as
        they are), and the step statement that fills them."""
        for table in ("runs", "tasks", "log"):
            if not any(col[1] == "crc" for col in self._db.execute(f"PRAGMA table_info({table})")):
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
        self._db.execute("DROP VIEW IF EXISTS step_commit")  # (its trigger goes with it)
        self._db.execute("DROP VIEW IF EXISTS step_commit2")

    def _check_empty(self, tables: set[str]) -> None:
        """A file with no meta table must hold no table at all (a new store)."""
        ours = sorted(tables & TABLES)
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
        missing = sorted(TABLES - tables)
        if missing:
            raise DamagedRunError(self.path, f"the store has lost its table(s) {missing}")
        return schema

    def _tx(self, write: bool = True) -> Tx:
        return Tx(self, write)

    def checksums_everywhere(self) -> bool:
        """Whether every row of this store was written with a checksum (made at schema 4)."""
        return self._db.execute("SELECT 1 FROM meta WHERE name='checksums' AND value='all'").fetchone() is not None

    def close(self) -> None:
        """Close the connection (runners attached to this store stop autosaving to it)."""
        self._db.close()


class Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on error), under the store's lock.
    ``write=False``: a plain ``BEGIN``, one consistent read that does not hold writers back."""

    def __init__(self, store: StoreConnection, write: bool = True) -> None:
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
