"""Autosave: write a runner's state after every step and state change."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.store.jsonfile import save_runner

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["AutosaveWarning", "autosave_path", "set_autosave"]


# Every event that changes what a run file holds (not StepStarted or TokenStreamed).
def _autosave_events() -> tuple[type, ...]:
    from nbagent import events as ev

    return (
        ev.TaskCreated,
        ev.StepCompleted,
        ev.StepFailed,
        ev.StepUndone,
        ev.StepEdited,
        ev.TaskFinalized,
        ev.TaskAbandoned,
        ev.TaskDeleted,
        ev.RunnerReset,
    )


class AutosaveWarning(RuntimeWarning):
    """An autosave failed; the run goes on, the file keeps its last good version."""


def autosave_path(runner: AgentRunner) -> Path | None:
    found = runner.__dict__.get("_autosave")
    return None if found is None else found[0]  # type: ignore[no-any-return]


def set_autosave(runner: AgentRunner, path: str | os.PathLike[str] | None) -> None:
    """Save ``runner`` to ``path`` now and after every step and state change (None: stop).

    A crashed kernel loses at most the step that was running. A failed save warns
    (``AutosaveWarning``) and leaves the previous file whole.
    """
    found = runner.__dict__.pop("_autosave", None)
    if found is not None:
        found[1]()  # unsubscribe
    if path is None:
        return
    target = Path(path).absolute()  # a later os.chdir must not move the file
    save_runner(runner, target)  # fails here, loudly, if the state cannot be saved at all

    def on_event(_event: Any) -> None:
        try:
            save_runner(runner, target)
        except Exception as err:  # noqa: BLE001 - a step must not fail because a save did
            warnings.warn(f"autosave to {target} failed: {err}", AutosaveWarning, stacklevel=2)

    unsubscribe = runner.subscribe(on_event, _autosave_events())
    runner.__dict__["_autosave"] = (target, unsubscribe)
