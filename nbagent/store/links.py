"""What the store keeps on a runner: where it autosaves, which run of which store it is
saved as. Kept in the runner's service slots (``runner._services``, ``nbagent.engine.slots``)
by these state classes, never as attributes of the runner's own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nbagent.store.damage import SQLITE_ERRORS, store_error

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.store.writer import Writer

__all__ = [
    "AutosaveWarning",
    "AutosaveLink",
    "StoreLinks",
    "autosave_link",
    "stop_autosave",
    "store_origin",
    "autosave_warning",
]


class AutosaveWarning(RuntimeWarning):
    """An autosave failed; the run goes on, the file keeps its last good version."""


@dataclass
class AutosaveLink:
    """A runner's autosave: where to, how to stop listening, and its saver."""

    target: Path  # the run file, or the store's file
    unsubscribe: Callable[[], None]
    writer: Writer | None = None  # the store's writer (None: a run file)
    flush: Callable[[], None] | None = None  # writes what a spaced-out run file put off


@dataclass
class StoreLinks:
    """The runs a runner is saved as: its writer per store (every save of one runner into one
    store goes to one run), and the run it came from or was first saved to."""

    writers: dict[str, Writer] = field(default_factory=dict)  # by the store's path
    origin: tuple[str, str] | None = None  # (the store's path, the run id)


def autosave_link(runner: AgentRunner) -> AutosaveLink | None:
    """The runner's autosave, or None."""
    return runner._services.get(AutosaveLink)


def stop_autosave(runner: AgentRunner) -> None:
    """Stop the runner's autosave, writing what a run file put off."""
    link = runner._services.pop(AutosaveLink)
    if link is not None:
        link.unsubscribe()
        if link.flush is not None:
            link.flush()


def store_origin(runner: AgentRunner) -> tuple[str, str] | None:
    """``(store path, run id)``: the run of a store the runner was loaded from or saved as."""
    links = runner._services.get(StoreLinks)
    return None if links is None else links.origin


def autosave_warning(writer: Writer, err: BaseException) -> None:
    """Warn that an autosave into a store failed (the run goes on; the store keeps its last
    committed step)."""
    if isinstance(err, SQLITE_ERRORS):
        err = store_error(writer.store.path, err, "saving a step", run=writer.run_id)
    warnings.warn(
        f"autosave to {writer.store.path} failed: {err}; the store keeps its last committed step",
        AutosaveWarning,
        stacklevel=3,
    )
