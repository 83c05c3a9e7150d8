"""How a batch runs: resume from the store, then run what is left on asyncio (at most
``max_concurrency`` tasks at once) or on Ray, grade each answer and write each finished task.

``BatchScheduler`` is the running half of ``BatchRun`` (a mixin: ``BatchRun`` holds the
fields declared here and the status bookkeeping). Every task runs through
``isolate.run_isolated``, whichever backend runs it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent.batch.isolate import BatchRunner, adopt_state, fill_from_state, frozen_history, response_of, run_isolated
from nbagent.batch.results import AnswerRejected, Backend, BatchItem, ItemStatus
from nbagent.events import BatchEnded, BatchStarted, BatchTaskStarted, Event
from nbagent.memory import ChatMemoryBuffer
from nbagent.schema import AgentChatResponse

if TYPE_CHECKING:
    from nbagent.batch.store import BatchStore
    from nbagent.engine.state import TaskState

__all__ = ["BatchScheduler"]

_log = logging.getLogger("nbagent.batch")


class BatchScheduler:
    """Runs the items of a batch once: ``_arun`` (resume, run, mark what did not finish)."""

    runner: BatchRunner
    items: list[BatchItem]
    name: str
    backend: Backend
    max_concurrency: int
    timeout_s: float | None
    check: Callable[[str, AgentChatResponse], Any] | None
    store: BatchStore | None
    started_at: float | None
    ended_at: float | None
    stopped: bool
    _stop_requested: bool
    _loop: asyncio.AbstractEventLoop | None
    _running: dict[int, asyncio.Future[Any]]
    _done_event: threading.Event

    if TYPE_CHECKING:  # BatchRun's bookkeeping

        def _set_status(self, item: BatchItem, status: ItemStatus) -> None: ...

        def _notify(self, item: BatchItem | None) -> None: ...

    async def _arun(self) -> Any:
        if self.started_at is not None:
            raise RuntimeError("a BatchRun runs once; call run_batch again to run it again")
        self._loop = asyncio.get_running_loop()
        self.started_at = time.perf_counter()
        if self._heard(BatchStarted):
            self.runner.events.emit(BatchStarted("", batch=self.name, size=len(self.items)))  # type: ignore[attr-defined]
        try:
            todo = self._resume()
            self._notify(None)
            if self.backend == "ray":
                from nbagent.batch.ray_backend import run as run_on_ray  # Ray only when asked for

                await run_on_ray(self, todo)  # type: ignore[arg-type]  # self is a BatchRun
            else:
                await self._run_local(todo)
        except asyncio.CancelledError:
            self._stop_requested = True
            raise
        finally:
            self.ended_at = time.perf_counter()
            if self._stop_requested:
                self.stopped = True
                for item in self.items:  # what did not finish: stopped (never started, or cancelled)
                    if item.status in ("queued", "running"):
                        self._set_status(item, "stopped")
            if self.store is not None:
                self.store.close()
            self._done_event.set()
            self._notify(None)
            if self._heard(BatchEnded):
                failed = sum(1 for item in self.items if item.status == "failed")
                self.runner.events.emit(BatchEnded("", batch=self.name, failed=failed, stopped=self.stopped))  # type: ignore[attr-defined]
        return self

    def _heard(self, kind: type[Event]) -> bool:
        """Whether the runner's listeners (tracing) hear batch events of ``kind``."""
        events = getattr(self.runner, "events", None)
        return events is not None and bool(events.wants(kind))

    def _task_started(self, item: BatchItem) -> Callable[[str], None] | None:
        """What tells the runner's listeners which task runs ``item`` (None: nobody listens)."""
        if not self._heard(BatchTaskStarted):
            return None
        events = self.runner.events  # type: ignore[attr-defined]
        return lambda task_id: events.emit(BatchTaskStarted(task_id, batch=self.name, index=item.index))

    def _resume(self) -> list[int]:
        """Read what the store has for this batch; returns the indexes still to run."""
        if self.store is None:
            return list(range(len(self.items)))
        found = self.store.succeeded(self.name)
        wanted = [found[item.key] for item in self.items if item.key in found]
        live = {i.task_id: self.runner.tasks.get(i.task_id) for i in wanted}
        # tasks this very runner ran before (a re-run in the same kernel) are used as they are
        loaded = self.store.load([i for i in wanted if live[i.task_id] is None or not live[i.task_id].finalized])
        todo: list[int] = []
        for item in self.items:
            info = found.get(item.key)
            state = None if info is None else live.get(info.task_id)
            if info is not None and (state is None or not state.finalized) and info.task_id in loaded:
                state = adopt_state(self.runner, *loaded[info.task_id])
            if state is None or not state.finalized:
                todo.append(item.index)
                continue
            fill_from_state(self.runner, item, state)
            item.latency_s = sum(o.latency_s or 0.0 for o in state.completed_steps)
            item.response = response_of(state)
            item.resumed = True
            self._set_status(item, "done")
        return todo

    async def _run_local(self, todo: list[int]) -> None:
        history = frozen_history(self.runner)  # every task reads this one frozen copy; none writes it
        queue = deque(todo)

        async def worker() -> None:
            while queue and not self._stop_requested:
                index = queue.popleft()
                await self._run_item(self.items[index], history)

        n = min(self.max_concurrency, len(queue))
        await asyncio.gather(*(worker() for _ in range(n)))

    async def _run_item(self, item: BatchItem, history: ChatMemoryBuffer) -> None:
        self._set_status(item, "running")
        start = time.perf_counter()
        fut = asyncio.ensure_future(run_isolated(self.runner, item.input, history, self.timeout_s, item, self._task_started(item)))
        self._running[item.index] = fut
        try:
            state, response, error = await fut
        except asyncio.CancelledError:
            self._running.pop(item.index, None)
            if not self._stop_requested:  # cancelled from outside: the whole run stops
                self._stop_requested = True
                self._set_status(item, "stopped")
                raise
            self._set_status(item, "stopped")
            return
        self._running.pop(item.index, None)
        item.latency_s = time.perf_counter() - start
        fill_from_state(self.runner, item, state)
        item.response = response
        item.error = error
        self._check(item)
        if self.store is not None:
            self._save(item, state)
        self._set_status(item, "done" if item.error is None else "failed")

    def _check(self, item: BatchItem) -> None:
        """Apply ``check`` to a finished task's answer: False or an exception rejects it."""
        if self.check is None or item.error is not None or item.response is None:
            return
        try:
            verdict = self.check(item.input, item.response)
        except Exception as err:  # noqa: BLE001 - the check's own words become the failure
            item.error = AnswerRejected(f"check rejected the answer {item.response.response!r}: {err}", item.response)
            return
        if verdict is False:
            item.error = AnswerRejected(f"check rejected the answer {item.response.response!r}", item.response)

    def _save(self, item: BatchItem, state: TaskState | None) -> None:
        """Write a finished task to the store (a task that never started has nothing to keep)."""
        if self.store is None or state is None:
            return
        try:
            self.store.save(self.runner, state, self.name, item.key, ok=item.error is None)
        except Exception:  # noqa: BLE001 - a store that cannot write must not lose the batch
            _log.exception("could not write task %s to the store", state.task_id)
