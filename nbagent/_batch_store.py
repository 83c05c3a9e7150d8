"""Where a batch keeps its finished tasks so that a second run resumes: one row per input.

The interface a batch needs is small: ``read(name) -> {key: (status, record)}``,
``write(name, key, index, status, record)`` and ``close()``. Records are the codec's JSON
documents (``nbagent.batch.task_record``) plus the batch's own fields; stored as JSON text
(never pickle), one transaction per finished task, WAL so a crash loses at most the task
being written.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

__all__ = ["BatchStore", "SQLiteBatchStore", "open_batch_store"]


class BatchStore(Protocol):
    """What ``run_batch(store=...)`` needs from a store."""

    def read(self, name: str) -> dict[str, tuple[str, dict[str, Any]]]: ...

    def write(self, name: str, key: str, index: int, status: str, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_tasks (
  batch TEXT NOT NULL,
  key TEXT NOT NULL,
  idx INTEGER NOT NULL,
  status TEXT NOT NULL,
  record TEXT NOT NULL,
  updated REAL NOT NULL,
  PRIMARY KEY (batch, key)
);
"""


class SQLiteBatchStore:
    """The batch table in an SQLite file (created on first use)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"store={str(path)!r} is a directory; give a file path such as 'batch.db'")
        self._lock = threading.Lock()
        try:
            self._db: sqlite3.Connection | None = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise ValueError(f"store={str(path)!r} is not an SQLite run store ({err})") from err

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
        return self._db

    def read(self, name: str) -> dict[str, tuple[str, dict[str, Any]]]:
        with self._lock:
            rows = self._conn().execute(
                "SELECT key, status, record FROM batch_tasks WHERE batch = ?", (name,)
            ).fetchall()
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for key, status, text in rows:
            try:
                out[key] = (status, json.loads(text))
            except json.JSONDecodeError:
                continue  # a damaged row is run again
        return out

    def write(self, name: str, key: str, index: int, status: str, record: dict[str, Any]) -> None:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
        with self._lock:
            db = self._conn()
            with db:  # one transaction
                db.execute(
                    "INSERT OR REPLACE INTO batch_tasks (batch, key, idx, status, record, updated) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (name, key, index, status, text, time.time()),
                )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def open_batch_store(store: Any) -> Any:
    """A store from what the user passed: a path, or an object with read/write/close."""
    if isinstance(store, (str, os.PathLike)):
        return SQLiteBatchStore(store)
    if all(callable(getattr(store, m, None)) for m in ("read", "write", "close")):
        return store
    raise TypeError(
        f"store must be a file path (such as 'batch.db') or a batch store object, got {type(store).__name__}"
    )
