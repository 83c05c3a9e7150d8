"""A batch's view of the run store (``nbagent.store.sqlite.RunStore``): resume needs only
"which inputs of this batch already succeeded" and "write this finished task".

Every finished task is saved in full (``RunStore.save_task``) with ``tag`` = the batch's name
and ``key`` = the input's key (its position and a hash of its text). A task that failed or
whose answer the check rejected is saved too, for inspection, under ``key + "!failed"``, so a
new run of the batch runs it again. On resume the succeeded tasks are loaded back (grouped by
the run that saved them) and become tasks of the calling runner.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.engine.state import TaskState
    from nbagent.store.sqlite import TaskInfo

__all__ = ["BatchStore", "BatchStores", "FAILED_SUFFIX"]

FAILED_SUFFIX = "!failed"


class BatchStores:
    """The run stores a runner's batches opened, by absolute path (kept in
    ``runner._services``): the run store keeps one writer per runner and store, so every
    batch of a runner writes into the same run, incrementally."""

    def __init__(self) -> None:
        self.by_path: dict[str, Any] = {}


class BatchStore:
    """Wraps a ``RunStore`` (opened from a path, or given) for one batch at a time.

    A path is opened once per runner and kept open with it (its ``BatchStores``).
    """

    def __init__(self, store: Any, runner: Any = None) -> None:
        from nbagent.store.damage import DamagedRunError
        from nbagent.store.sqlite import RunStore
        from nbagent.store.values import PersistError

        if isinstance(store, RunStore):
            self.store = store
            return
        if not isinstance(store, (str, os.PathLike)):
            raise TypeError(
                f"store must be a file path (such as 'batch.db') or a RunStore, got {type(store).__name__}"
            )
        path = Path(store)
        if path.is_dir():
            raise ValueError(f"store={str(store)!r} is a directory; give a file path such as 'batch.db'")
        kept: dict[str, Any] = {} if runner is None else runner._services.setdefault(BatchStores).by_path
        key = str(path.absolute())
        opened = kept.get(key)
        if opened is not None and path.exists():
            self.store = opened
            return
        try:
            self.store = kept[key] = RunStore(path)
        except DamagedRunError:
            raise  # names the file and what is damaged
        except PersistError as err:
            raise ValueError(f"store={str(store)!r} is not an nbagent run store: {err}") from err

    def succeeded(self, name: str) -> dict[str, TaskInfo]:
        """The newest successful task of each input key of batch ``name``."""
        found: dict[str, TaskInfo] = {}
        for info in self.store.tasks(tag=name, status="finalized"):  # oldest first: newest wins
            if info.key is not None and not info.key.endswith(FAILED_SUFFIX):
                found[info.key] = info
        return found

    def load(self, infos: list[TaskInfo]) -> dict[str, tuple[TaskState, Any]]:
        """The stored tasks ``infos``, each with the runner that loaded it (for its models).
        A task the store cannot give back whole (damaged) is left out: the batch runs it again."""
        import warnings

        from nbagent.store.damage import DamagedRunWarning
        from nbagent.store.values import PersistError

        by_run: dict[str, list[str]] = {}
        for info in infos:
            by_run.setdefault(info.run_id, []).append(info.task_id)
        out: dict[str, tuple[TaskState, Any]] = {}
        for run_id, task_ids in by_run.items():
            try:
                loaded = self.store.load(None, run=run_id, tasks=task_ids, restore_ids=False)
            except PersistError as err:
                warnings.warn(
                    f"{len(task_ids)} finished task(s) of this batch cannot be read back from the store, so they "
                    f"run again: {err}",
                    DamagedRunWarning,
                    stacklevel=3,
                )
                continue
            for task_id in task_ids:
                state = loaded.tasks.get(task_id)
                if state is not None:
                    out[task_id] = (state, loaded)
        return out

    def save(self, runner: AgentRunner, state: TaskState, name: str, key: str, ok: bool) -> None:
        """Write one finished task (one transaction)."""
        self.store.save_task(runner, state.task_id, key=key if ok else key + FAILED_SUFFIX, tag=name)

    def close(self) -> None:
        """Nothing to do: the store stays open with its runner (see the class docstring)."""
