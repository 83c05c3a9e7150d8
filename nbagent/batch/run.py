"""``BatchRun``: the inputs of a batch, what became of each (in input order), the counts the
views read while it runs, and the controls (``stop``, ``wait``).

Its running half is ``scheduler.BatchScheduler``; its views (the summary table, the live
grid, the progress bar) are looked up in the view registry, so nothing here imports a view.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent._counts import counted
from nbagent.batch.isolate import BatchRunner, check_runner
from nbagent.batch.results import (
    BACKENDS,
    ITEM_STATUSES,
    Backend,
    BatchItem,
    ItemStatus,
    check_inputs,
    input_key,
)
from nbagent.batch.scheduler import BatchScheduler
from nbagent.registry import html_view, show
from nbagent.schema import AgentChatResponse

if TYPE_CHECKING:
    from pandas import DataFrame

    from nbagent.batch.store import BatchStore
    from nbagent.engine.state import TaskState
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task
    from nbagent.viz.batch import BatchGrid
    from nbagent.viz.graph import StepGraph

__all__ = ["BatchRun", "Listener", "wait_stopping"]

Listener = Callable[["BatchRun", "BatchItem | None"], None]


class BatchRun(BatchScheduler):
    """The inputs of a batch, what became of each, and the controls (``stop``).

    Read it while it runs (the widget does) or after. ``results`` are in input order.
    """

    def __init__(
        self,
        runner: AgentRunner,
        inputs: Sequence[str],
        *,
        max_concurrency: int = 16,
        backend: Backend = "asyncio",
        factory: Callable[[], Any] | None = None,
        store: Any = None,
        name: str = "batch",
        timeout_s: float | None = None,
        ray_options: dict[str, Any] | None = None,
        check: Callable[[str, AgentChatResponse], Any] | None = None,
    ) -> None:
        runner = check_runner(runner, "run_batch needs")
        texts = check_inputs(inputs)
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
        if backend == "ray":
            if factory is None or not callable(factory):
                raise ValueError(
                    "backend='ray' needs factory=...: a zero-argument function that builds the "
                    "runner (worker and model included) on each Ray worker"
                )
        elif factory is not None:
            raise ValueError("factory=... is for backend='ray'; the asyncio backend runs this runner")
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a number of seconds > 0 or None, got {timeout_s!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        if check is not None and not callable(check):
            raise TypeError(f"check must be a function check(input, response), got {type(check).__name__}")
        self.check = check
        self.runner = runner
        self.inputs = texts
        self.max_concurrency = max_concurrency
        self.backend: Backend = backend
        self.factory = factory
        self.name = name
        self.timeout_s = timeout_s
        self.ray_options = dict(ray_options or {})
        self.items = [BatchItem(i, t, input_key(i, t)) for i, t in enumerate(texts)]
        self.store: BatchStore | None = None if store is None else _open_store(store, runner)
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.stopped = False
        self.interrupted = False  # stopped by Ctrl-C / a kernel interrupt
        self._stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: dict[int, asyncio.Future[Any]] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._done_event = threading.Event()
        self._future: concurrent.futures.Future[BatchRun] | None = None
        self._counts = dict.fromkeys(ITEM_STATUSES, 0)
        self._counts["queued"] = len(self.items)
        self._tokens = [0, 0]
        self._cost: float | None = None

    # ----- reading -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> BatchItem:
        return self.items[index]

    def __iter__(self) -> Iterator[BatchItem]:
        return iter(self.items)

    @property
    def results(self) -> list[AgentChatResponse | BaseException | None]:
        """One entry per input, in input order: the answer, the exception that ended the task,
        or None for a task that did not finish (the batch was stopped)."""
        return [item.result for item in self.items]

    @property
    def failed(self) -> list[BatchItem]:
        """The items whose task ended with an exception."""
        return [item for item in self.items if item.status == "failed"]

    @property
    def failed_inputs(self) -> list[str]:
        """The inputs of the failed items (to run them again)."""
        return [item.input for item in self.failed]

    @property
    def unfinished(self) -> list[BatchItem]:
        """Items that neither succeeded nor failed (stopped, or never started)."""
        return [item for item in self.items if item.status in ("queued", "running", "stopped")]

    def counts(self) -> dict[str, int]:
        """How many items are queued, running, done, failed and stopped."""
        with self._lock:
            return dict(self._counts)

    @property
    def finished(self) -> bool:
        """True once the run has ended (all done, or stopped)."""
        return self._done_event.is_set()

    @property
    def tokens(self) -> int:
        """Tokens the finished tasks used, prompt and completion."""
        return self._tokens[0] + self._tokens[1]

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens the finished tasks used."""
        return self._tokens[0]

    @property
    def completion_tokens(self) -> int:
        """Completion tokens the finished tasks used."""
        return self._tokens[1]

    @property
    def cost(self) -> float | None:
        """Money spent so far (None when no step had a price; see ``nbagent.costs``)."""
        return self._cost

    @property
    def elapsed_s(self) -> float:
        """Seconds since the run started (until it ended, once it has)."""
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.perf_counter()) - self.started_at

    def statuses(self) -> str:
        """One letter per item, in order (q r d f s): what the grid draws."""
        return "".join(item.status[0] for item in self.items)

    def rows(self) -> list[dict[str, Any]]:
        """One flat, JSON-able row per item (``BatchItem.row``), in input order."""
        return [item.row() for item in self.items]

    def to_pandas(self) -> DataFrame:
        """A DataFrame with one row per input (pandas is optional: ``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as err:  # pragma: no cover - pandas is in the dev extra
            raise ImportError("BatchRun.to_pandas() needs pandas: pip install pandas") from err
        return pd.DataFrame(self.rows()).set_index("index")

    def state(self, index: int) -> TaskState:
        """The runner's TaskState of item ``index`` (its task must have started)."""
        item = self._item(index)
        if item.task_id is None:
            raise ValueError(f"item {index} ({item.status}) has no task: it never started")
        return self.runner.state_of(item.task_id)

    def get_task(self, index: int) -> Task:
        """The Task of item ``index`` (same as ``runner.get_task(batch[index].task_id)``)."""
        return self.state(index).task

    def graph(self, index: int, **kwargs: Any) -> StepGraph:
        """The step DAG of item ``index``'s task."""
        return self.runner.graph(self.state(index).task_id, **kwargs)

    def transcript(self, index: int) -> list[Any]:
        """The messages of item ``index``'s task: what it saw, what it added, its answer."""
        state = self.state(index)
        messages = [*state.task.memory.get_all(), *state.task.scratch_memory.get_all()]
        from nbagent.messages import ChatMessage, MessageRole

        answer = state.final_response
        text = getattr(answer, "response", None)
        if isinstance(text, str) and text:
            last = next((m for m in reversed(messages) if m.role == MessageRole.ASSISTANT), None)
            if last is None or last.text.strip() != text.strip():
                messages.append(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        return messages

    def _item(self, index: int) -> BatchItem:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"an item index is an int, got {type(index).__name__}")
        if not -len(self.items) <= index < len(self.items):
            raise IndexError(f"item {index} is out of range: the batch has {len(self.items)} items")
        return self.items[index]

    # ----- listening (the views) ---------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(batch, item)`` whenever an item changes (``item`` None: the run
        started or ended). Called on the loop running the batch; keep it quick."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self, item: BatchItem | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(self, item)
            except Exception:  # noqa: BLE001 - a view must never break the run
                logging.getLogger("nbagent.batch").exception("a batch listener failed")

    def _set_status(self, item: BatchItem, status: ItemStatus) -> None:
        with self._lock:
            self._counts[item.status] -= 1
            self._counts[status] += 1
            item.status = status
            if status in ("done", "failed"):
                self._tokens[0] += item.prompt_tokens
                self._tokens[1] += item.completion_tokens
                if item.cost is not None:
                    self._cost = (self._cost or 0.0) + item.cost
        self._notify(item)

    # ----- control -----------------------------------------------------------------------
    def stop(self) -> None:
        """Start no new task and cancel the running ones (their step is rolled back); what
        finished is kept. Safe to call from any thread (the grid's Stop button does)."""
        self._stop_requested = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self._cancel_running()
            else:
                loop.call_soon_threadsafe(self._cancel_running)

    def _cancel_running(self) -> None:
        for fut in list(self._running.values()):
            fut.cancel()

    def wait(self, timeout: float | None = None) -> BatchRun:
        """Block until a background run ends (Ctrl-C stops it, keeping what finished)."""
        if _sync.NO_THREADS and not self.finished:  # nothing can block: wait as a sync call does
            _sync.run_sync(self._until_finished(timeout))
            return self
        fut = self._future
        if fut is None:
            if not self.finished and self.started_at is None:
                raise RuntimeError("this batch was not started; use runner.run_batch(...)")
            self._done_event.wait(timeout)
            return self
        wait_stopping(self, fut, timeout)
        return self

    def __await__(self) -> Any:
        return self._join().__await__()

    async def _join(self) -> BatchRun:
        await self._until_finished()
        return self

    async def _until_finished(self, timeout: float | None = None) -> None:
        # returns None, not the batch: Pyodide's JSPI wait would await an awaitable result
        end = None if timeout is None else time.monotonic() + timeout
        while not self.finished and (end is None or time.monotonic() < end):
            await asyncio.sleep(0.02)

    # ----- display -----------------------------------------------------------------------
    def __repr__(self) -> str:
        c = self.counts()
        state = "stopped" if self.stopped else ("finished" if self.finished else "running")
        if self.started_at is None:
            state = "not started"
        return (
            f"BatchRun({counted(len(self.items), 'task')}, {state}: {c['done']} done, {c['failed']} failed, "
            f"{c['running']} running, {c['queued']} queued, {c['stopped']} stopped; "
            f"{counted(self.tokens, 'token')}, {self.elapsed_s:.2f} s)"
        )

    def widget(self, **kwargs: Any) -> BatchGrid:
        """The live progress grid (``nbagent.viz.batch.BatchGrid``) for this batch."""
        return show(self, "widget", **kwargs)

    def summary_html(self) -> str:
        """The static summary table (what nbconvert and nbval show)."""
        return show(self, "summary_html")

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _open_store(store: Any, runner: BatchRunner) -> BatchStore:
    from nbagent.batch.store import BatchStore  # the run store (sqlite) only when asked for

    return BatchStore(store, runner)


def wait_stopping(batch: BatchRun, fut: concurrent.futures.Future[Any], timeout: float | None) -> None:
    """Wait for the run; the first Ctrl-C stops the batch (what finished is kept), a second
    one gives up waiting."""
    try:
        fut.result(timeout)
    except KeyboardInterrupt:
        batch.interrupted = True
        batch.stop()
        try:
            fut.result()
        except KeyboardInterrupt:
            fut.cancel()
            raise
    except concurrent.futures.TimeoutError:
        return


