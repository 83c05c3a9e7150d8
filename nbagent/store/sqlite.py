"""The run store on SQLite (old import path): ``RunStore`` and its records live in
``nbagent.store.runstore`` (the store), ``sql`` (the file, its tables and checksums),
``records`` (the log's records), ``writer``/``task_rows``/``row_encoder`` (writing) and
``reader``/``row_decoder`` (reading). The names users and tests import from here stay."""

from __future__ import annotations

from nbagent.store.runstore import RunInfo, RunStore, TaskInfo, is_store_path, start_autosave
from nbagent.store.sql import READS, SCHEMA, SQLITE_SUFFIXES, run_range

__all__ = ["RunStore", "TaskInfo", "RunInfo", "is_store_path", "SQLITE_SUFFIXES", "SCHEMA", "READS", "run_range",
           "start_autosave"]
