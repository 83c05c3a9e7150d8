"""Context: the state of one workflow run, shared by its steps, and what a checkpoint saves.

A context holds the key/value state (``get``/``set``, ``store``), the events waiting for a
step, the steps that were interrupted (so a resumed run re-runs them), the buffers of
``collect_events``, and the questions steps wait on (``wait_for_event``). What it does with
events is ``context_events.py``; its saved form (``to_dict()``, ``Context.from_dict(workflow,
data)``, resumed by ``workflow.run(ctx=...)``) is ``context_saved.py``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from nbagent.workflow.base import WorkflowBase, as_workflow
from nbagent.workflow.context_events import ContextEvents
from nbagent.workflow.context_saved import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, SavedContext
from nbagent.workflow.events import Event
from nbagent.workflow.execution import Item, Waiter, current_context
from nbagent.workflow.store import ContextStore

if TYPE_CHECKING:
    from nbagent.workflow.runtime import Runner
    from nbagent.workflow.workflow import Workflow

__all__ = ["Context", "current_context", "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION"]

_MISSING: Any = object()


class Context(ContextEvents, SavedContext):
    """The shared state and the bookkeeping of one workflow run (reusable across runs)."""

    def __init__(self, workflow: Workflow) -> None:
        workflow = as_workflow(workflow)
        if not isinstance(workflow, WorkflowBase):
            raise TypeError(f"Context(workflow) needs a Workflow, got {type(workflow).__name__}")
        self._workflow = workflow
        self._state: dict[str, Any] = {}
        self._pending: deque[Item] = deque()
        self._in_progress: dict[int, Item] = {}
        self._collected: dict[str, list[tuple[int, Event]]] = {}
        self._consumed: dict[int, list[Event]] = {}
        self._waiters: dict[str, Waiter] = {}
        self._answers: dict[str, tuple[int, Event]] = {}
        # per step execution: the tool calls it ran (nbagent.calls), so that an execution run
        # again after an interruption does not run them again
        self._ran: dict[int, dict[str, Any]] = {}
        self._next_exec = 1
        self._runner: Runner | None = None
        self._store: ContextStore | None = None

    # ----- what it is ---------------------------------------------------------------------
    @property
    def workflow(self) -> Workflow:
        """The workflow this context belongs to (a run with another instance of the same
        class moves it there)."""
        return self._workflow

    @property
    def is_running(self) -> bool:
        """Whether a run is using this context now (a run whose event loop was closed, say by
        Ctrl-C in a script, is not: its context can be resumed)."""
        runner = self._runner
        return runner is not None and not runner.finished and not runner.loop.is_closed()

    @property
    def has_pending_work(self) -> bool:
        """Whether an unfinished run is saved here (events queued or steps interrupted)."""
        return bool(self._pending or self._in_progress)

    @property
    def pending_questions(self) -> list[Event]:
        """The events (questions) of the steps waiting in ``wait_for_event``, oldest first."""
        return [w.waiter_event for w in self._waiters.values() if w.waiter_event is not None]

    def keys(self) -> list[str]:
        """The state keys set so far."""
        return list(self._state)

    def __repr__(self) -> str:
        status = "running" if self.is_running else ("unfinished" if self.has_pending_work else "idle")
        return (
            f"Context(workflow={type(self._workflow).__name__}, {status}, keys={self.keys()}, "
            f"queued={len(self._pending)}, interrupted={len(self._in_progress)}, "
            f"questions={len(self._waiters)})"
        )

    # ----- state --------------------------------------------------------------------------
    @property
    def store(self) -> ContextStore:
        """The state as the 0.12 workflow docs use it: ``await ctx.store.get("state")``,
        ``ctx.store.set``, ``async with ctx.store.edit_state() as s`` (the same keys as ``get``
        and ``set``; see ``nbagent.workflow.store``)."""
        store = self._store
        if store is None or store._data is not self._state:  # from_dict swaps the dict in
            store = self._store = ContextStore(self._state)
        return store

    async def get(self, key: str, default: Any = _MISSING) -> Any:
        """The value stored under ``key``; ``default`` if given and the key is not set."""
        if key in self._state:
            return self._state[key]
        if default is not _MISSING:
            return default
        raise KeyError(f"the context has no key {key!r}; keys set so far: {sorted(self._state) or '(none)'}")

    async def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` (keep values JSON-safe if the run is to be checkpointed)."""
        if not isinstance(key, str):
            raise TypeError(f"context keys are str, got {type(key).__name__}: {key!r}")
        self._state[key] = value

    # ----- bookkeeping used by the runtime ------------------------------------------------
    def _execution_done(self, exec_id: int) -> None:
        self._in_progress.pop(exec_id, None)
        self._consumed.pop(exec_id, None)
        self._ran.pop(exec_id, None)
        for key in [k for k, (eid, _) in self._answers.items() if eid == exec_id]:
            del self._answers[key]
        for key in [k for k, w in self._waiters.items() if w.exec_id == exec_id]:
            del self._waiters[key]

    def _requeue_interrupted(self) -> None:
        """Put interrupted step executions back at the head of the queue, oldest first."""
        interrupted = [self._in_progress[k] for k in sorted(self._in_progress)]
        self._in_progress.clear()
        self._pending.extendleft(reversed(interrupted))

    def _clear_run(self) -> None:
        self._pending.clear()
        self._in_progress.clear()
        self._collected.clear()
        self._consumed.clear()
        self._waiters.clear()
        self._answers.clear()
        self._ran.clear()
