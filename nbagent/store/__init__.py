"""Saving and loading runs: no pickle, nothing is ever eval'd.

One module per concept:

- ``encoder`` / ``decoder``: values <-> tagged JSON (``values`` re-exports both);
- ``codec``: a runner and its tasks <-> JSON-able records (the fields of a run, in one place);
- ``jsonfile``: the shareable ``run.json`` file (``save_runner`` / ``load_runner``);
- ``runstore``: the run store (``RunStore``): runs saved one step at a time in SQLite, built
  from ``sql`` (the file: tables, schema, checksums, the connection), ``records`` (the records
  of its log), ``writer`` + ``task_rows`` + ``row_encoder`` (writing only what changed) and
  ``reader`` + ``row_decoder`` (replaying a run); ``_schema1`` migrates the first layout;
  ``sqlite`` re-exports the store's names (their old home);
- ``links``: what the store keeps on a runner (its autosave, the run it is saved as);
- ``autosave``: saving after every step and state change (into a store, or a run file);
- ``damage``: a damaged store or run file: one clear error, or its damaged tasks skipped.

``nbagent.persist`` re-exports the names it always had.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.allowlist import PersistError, allow_type
from nbagent.store.autosave import AutosaveWarning, autosave_path, flush_autosave, set_autosave
from nbagent.store.codec import (
    FORMAT,
    VERSION,
    SavedWorker,
    check_header,
    runner_from_dict,
    runner_to_dict,
)
from nbagent.store.damage import DamagedRunError, DamagedRunWarning, skipped_tasks
from nbagent.store.decoder import ValueDecoder
from nbagent.store.jsonfile import atomic_write_text, parse_run_text, read_run_file
from nbagent.store.runstore import RunInfo, RunStore, TaskInfo, is_store_path

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = [
    "FORMAT",
    "VERSION",
    "PersistError",
    "DamagedRunError",
    "DamagedRunWarning",
    "skipped_tasks",
    "SavedWorker",
    "allow_type",
    "save_runner",
    "load_runner",
    "runner_to_dict",
    "runner_from_dict",
    "ValueDecoder",
    "read_run_file",
    "parse_run_text",
    "check_header",
    "atomic_write_text",
    "set_autosave",
    "autosave_path",
    "flush_autosave",
    "AutosaveWarning",
    "RunStore",
    "TaskInfo",
    "RunInfo",
    "is_store_path",
]


def load_runner(path: Any, agent_worker: Any = None, **kwargs: Any) -> AgentRunner:
    """Rebuild a runner from a run file or a run store (``run=`` picks a stored run)."""
    from nbagent.store import jsonfile

    if is_store_path(path):
        if not isinstance(path, RunStore) and not Path(path).exists():
            raise PersistError(f"{path}: no such run store")
        if isinstance(path, RunStore):
            return path.load(agent_worker, **kwargs)
        with RunStore(path) as store:
            return store.load(agent_worker, **kwargs)
    kwargs.pop("run", None)
    return jsonfile.load_runner(path, agent_worker, **kwargs)


def save_runner(runner: Any, path: Any) -> Path:
    """Write ``runner`` in full to a run file (``.json``) or into a run store (``.db``)."""
    from nbagent.store import jsonfile

    if is_store_path(path):
        if isinstance(path, RunStore):
            path.save(runner)
            return path.path
        with RunStore(path) as store:
            store.save(runner)
            return store.path
    return jsonfile.save_runner(runner, path)
