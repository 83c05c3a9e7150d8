"""Autosave: keep a runner saved after every step and state change.

Two homes, picked by the path:

- a run store (``runs.db``, ``.sqlite``, an existing SQLite file, or a ``RunStore``): each
  step writes only what it changed, in one transaction (``nbagent.store.runstore``), so an
  autosaved step costs the same at step 10 and at step 10,000, and a killed process loses
  nothing that was committed;
- a run file (``run.json``): the whole file is rewritten, which costs O(steps). It is saved
  after every change while it is small (under ``JSON_SMALL_BYTES``); once it is not, saves
  are spaced so that saving takes at most 1/``JSON_SPACING`` of the time, and the last
  change is written when autosave stops, when the process exits, or by ``flush_autosave``.
  Use a store for long runs: that file can be behind by a few seconds' worth of steps.
"""

from __future__ import annotations

import atexit
import os
import time
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent.store.jsonfile import save_runner
from nbagent.store.links import AutosaveLink, AutosaveWarning, autosave_link, stop_autosave
from nbagent.store.runstore import RunStore, is_store_path

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["AutosaveWarning", "autosave_path", "set_autosave", "flush_autosave", "JSON_SMALL_BYTES", "JSON_SPACING"]

JSON_SMALL_BYTES = 256_000  # a run file smaller than this is saved after every change (~10 ms)
JSON_SPACING = 20  # else: at least this many times the last save's duration between saves


def autosave_path(runner: AgentRunner) -> Path | None:
    """Where ``runner`` autosaves (a run file or a store's file), or None."""
    link = autosave_link(runner)
    return None if link is None else link.target


def _quiet(event: Any) -> bool:
    """Events that change nothing a save holds."""
    from nbagent import events as ev

    return type(event) in (ev.StepStarted, ev.TokenStreamed) or not isinstance(event, ev.Event)


class _JsonAutosave:
    """Rewrites a run file after changes, spaced out once a save gets slow (see the module)."""

    def __init__(self, runner: AgentRunner, target: Path) -> None:
        self.runner = weakref.ref(runner)
        self.target = target
        self.cost = 0.0
        self.size = 0
        self.last_end = 0.0
        self.pending = False

    def save(self) -> None:
        runner = self.runner()
        if runner is None:
            return
        start = time.perf_counter()
        self.pending = False
        path = save_runner(runner, self.target)
        self.last_end = time.perf_counter()
        self.cost = self.last_end - start
        self.size = path.stat().st_size

    def on_event(self, event: Any) -> None:
        if _quiet(event):
            return
        if self.size >= JSON_SMALL_BYTES and time.perf_counter() - self.last_end < JSON_SPACING * self.cost:
            self.pending = True
            return
        self._try_save()

    def _try_save(self) -> None:
        try:
            self.save()
        except Exception as err:  # noqa: BLE001 - a step must not fail because a save did
            warnings.warn(f"autosave to {self.target} failed: {err}", AutosaveWarning, stacklevel=4)

    def flush(self) -> None:
        if self.pending:
            self._try_save()


_PENDING: weakref.WeakSet[_JsonAutosave] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    for saver in list(_PENDING):
        saver.flush()


def flush_autosave(runner: AgentRunner) -> None:
    """Write what autosave has put off: a spaced-out run file's last change, or the steps a
    store with grouped commits (``RunStore(path, commit_every=...)``) holds back."""
    link = autosave_link(runner)
    if link is not None and link.flush is not None:
        link.flush()


def set_autosave(runner: AgentRunner, path: str | os.PathLike[str] | RunStore | None) -> None:
    """Save ``runner`` to ``path`` now and after every step and state change (None: stop).

    ``path`` is a run store (``.db``/``.sqlite``/an existing SQLite file/a ``RunStore``) or a
    run file (see the module docstring). A failed save warns (``AutosaveWarning``) and leaves
    the last good save whole; the run goes on.
    """
    stop_autosave(runner)
    if path is None:
        return
    if is_store_path(path):
        store = path if isinstance(path, RunStore) else RunStore(path)  # type: ignore[arg-type]
        store.attach(runner)
        return
    target = Path(path).absolute()  # type: ignore[arg-type]  # a later os.chdir must not move the file
    saver = _JsonAutosave(runner, target)
    saver.save()  # fails here, loudly, if the state cannot be saved at all
    _PENDING.add(saver)
    from nbagent import events as ev

    unsubscribe = runner.events.subscribe(saver.on_event, ignore=(ev.StepStarted, ev.TokenStreamed))  # (see _quiet)
    runner._services.setdefault(AutosaveLink, lambda: AutosaveLink(target, unsubscribe, flush=saver.flush))
