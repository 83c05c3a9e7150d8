"""Grouped commits (``RunStore(path, commit_every=s)``; off by default): a step that ends less
than ``s`` seconds after its writer's last commit waits, and the next commit writes what
changed in every task that waits, in one transaction.

Why: one commit per step makes an autosaved step cost about 4.5 times a plain one in a tight
loop (a scripted or cached model, a replay), and most of it is spent once per commit (the
records of the task's row and state, the JSON, SQLite's statement). Steps of a real model
come slower than any sensible ``s``, so each of them is still committed before ``run_step``
returns; only steps that come faster than ``s`` wait, at most about ``s``.

What commits what waits: the writer's next change ``s`` or more after its last commit (a
step, or any change that is not a step: creating, finalizing or deleting a task...), a timer
on the event loop of an awaited step, the end of an IPython cell, a read of the store
(``tasks``, ``runs``, ``load``), ``flush_autosave``, stopping autosave, closing the store,
the process's exit. Never while a step of the runner runs (its state may be half changed):
its own end commits then. A process killed (``kill -9``) loses the steps that waited.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from nbagent import events as _ev

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.store.writer import Writer

__all__ = ["Waiting", "changed_by", "commit_all", "MAX_COMMIT_EVERY"]

MAX_COMMIT_EVERY = 60.0  # seconds: longer is not a group of fast steps but a save now and then
_clock = time.monotonic  # (tests move it)
#: writers holding steps back: what ``commit_all`` and the exit commit (held, so that a runner
#: dropped while its steps wait still has them committed)
_WAITING: set[Writer] = set()


def check_commit_every(value: Any) -> float:
    """``commit_every`` as seconds, or ValueError naming what is allowed."""
    if type(value) not in (int, float) or not 0 <= value <= MAX_COMMIT_EVERY:
        raise ValueError(
            f"commit_every must be a number of seconds from 0 to {MAX_COMMIT_EVERY:g} (0: commit every step), "
            f"got {value!r}"
        )
    return float(value)


class Waiting:
    """What one writer holds back: the tasks whose steps changed since its last commit (each
    with those steps, in the order they changed), and what commits them."""

    __slots__ = ("every", "last_commit", "tasks", "header", "thread", "timer")

    def __init__(self, every: float) -> None:
        self.every = every
        self.last_commit = 0.0  # _clock() of the writer's last commit
        self.tasks: dict[str, dict[str, None]] = {}  # task id -> its steps changed since
        self.header = False  # the run's header changed with them (a seeded id generator moved)
        self.thread = 0  # the thread of the step that started the wait (0: nothing waits)
        self.timer: tuple[Any, Any] | None = None  # (loop, its call that commits them)

    def add(self, task_id: str, changed: dict[str, None], header: bool) -> bool:
        """Mark a step's changes; True if they wait (the last commit was less than ``every``
        ago), False if they are to be committed now, with the others."""
        steps = self.tasks.get(task_id)
        if steps is None:
            self.tasks[task_id] = changed
        else:
            steps.update(changed)  # (a dict: new steps keep the order they were made in)
        self.header = self.header or header
        return _clock() - self.last_commit < self.every

    def start(self, writer: Writer) -> None:
        """The first step that waits: commit it ``every`` from now, on the event loop the
        step ran on if the code that drives the runner runs on it too (an awaited step). A
        sync call runs its step on a loop of nbagent's own in another thread while its caller
        goes on (``nbagent._sync``): no timer then, which could write while the caller changes
        the runner; the next change, a read, the cell's end or the exit commits them."""
        from nbagent import _sync

        self.thread = threading.get_ident()
        _WAITING.add(writer)
        _watch_cells()
        loop = _sync._running()  # (a sync step stepped in place sets its thread's loop, not running)
        if loop is not None and loop.is_running() and loop is not _sync._portal and not _sync.NO_THREADS:
            self.timer = (loop, loop.call_later(self.every, writer.commit_waiting))

    def committed(self, writer: Writer) -> None:
        """After any commit of the writer: nothing waits."""
        self.last_commit = _clock()
        self.tasks.clear()
        self.header = False
        _WAITING.discard(writer)
        timer, self.timer = self.timer, None
        if timer is not None:
            loop, handle = timer
            if threading.get_ident() == self.thread:
                handle.cancel()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(handle.cancel)
        self.thread = 0


def changed_by(event: Any, state: TaskState) -> dict[str, None]:
    """The steps a step event may have changed (their records are written again), in order:
    a new step is placed in its task where it is first named."""
    step_id = getattr(event, "step_id", None)
    dirty: dict[str, None] = {step_id: None} if step_id else {}
    for sid in getattr(event, "next_step_ids", ()) or ():
        dirty[sid] = None
    if type(event) is _ev.StepUndone:
        for a, b in state.undone_edges[-64:]:
            if a == step_id:
                dirty[b] = None
    return dirty


def commit_all(store: Any = None) -> None:
    """Commit what every writer of this process (into ``store``'s file, or any) holds back;
    a failure warns (``AutosaveWarning``)."""
    if not _WAITING:
        return
    path = getattr(store, "path", None)
    for writer in list(_WAITING):
        if store is None or writer.store is store or writer.store.path == path:
            writer.commit_waiting()


_cells_watched = False


def _watch_cells() -> None:
    """In IPython, commit what waits when a cell ends (registered once per process)."""
    global _cells_watched
    if _cells_watched:
        return
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    if shell is not None:
        shell.events.register("post_run_cell", _after_cell)
        _cells_watched = True


def _after_cell(*_: Any) -> None:
    commit_all()


@atexit.register
def _at_exit() -> None:
    for writer in list(_WAITING):
        writer.commit_waiting(at_exit=True)
