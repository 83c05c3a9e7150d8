"""``AgentRunner``'s saving and loading: ``save``, ``load``, ``autosave`` (``nbagent.persist``,
``nbagent.store``), and what a load skipped as damaged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from nbagent.engine.step_engine import StepEngine
from nbagent.workers.base import BaseAgentWorker

__all__ = ["RunnerPersistence"]

R = TypeVar("R", bound="RunnerPersistence")


class RunnerPersistence(StepEngine):
    """Save a runner's tasks to a file or a run store, load them back, save after every change."""

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write every task (steps, links, queue, outputs, memory, state, failures, undo
        history) to ``path`` as versioned JSON, atomically. See ``nbagent.persist``."""
        from nbagent.persist import save_runner

        return save_runner(self, path)

    @classmethod
    def load(
        cls: type[R],
        path: str | os.PathLike[str],
        agent_worker: BaseAgentWorker | None = None,
        *,
        autosave: bool = False,
        restore_ids: bool = True,
        **runner_kwargs: Any,
    ) -> R:
        """A runner rebuilt from a file ``save`` wrote: its tasks continue where they stopped.

        Without ``agent_worker`` the run can be viewed and reported, not stepped.
        ``autosave=True`` keeps saving to ``path``. A run saved while ids were seeded
        (``seed_ids``) continues that id sequence unless ``restore_ids=False``.
        """
        from nbagent.persist import load_runner

        runner: R = load_runner(path, agent_worker, runner_cls=cls, restore_ids=restore_ids, **runner_kwargs)
        if autosave:
            runner.autosave = path
        return runner

    @property
    def autosave(self) -> Path | None:
        """The file saved after every step and state change, or None (set a path to start)."""
        from nbagent.persist import autosave_path

        return autosave_path(self)

    @autosave.setter
    def autosave(self, path: str | os.PathLike[str] | None) -> None:
        from nbagent.persist import set_autosave

        set_autosave(self, path)

    @property
    def skipped_tasks(self) -> dict[str, str]:
        """Tasks the load that built this runner skipped as damaged: task id -> what was damaged
        (empty for a runner made here, or loaded whole). See ``nbagent.store.damage``."""
        from nbagent.store.damage import skipped_tasks

        return skipped_tasks(self)
