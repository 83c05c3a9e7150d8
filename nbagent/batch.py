"""Run an agent over a whole dataset: one task per input, bounded concurrency, results in order.

``runner.run_batch(inputs)`` (or ``await runner.arun_batch(inputs)``) returns a ``BatchRun``:
``.results`` in input order (the ``AgentChatResponse``, or the exception that ended that
task), ``.failed``, per-task steps, tokens, cost and latency (``.items``, ``.to_pandas()``),
and every task stays in the runner (``runner.get_task(batch[i].task_id)``, ``batch.graph(i)``).

Each task is independent: it sees the runner's conversation as it was when the batch started
and adds nothing to it (a batch is an evaluation, not a conversation). One failing task never
stops the others. ``batch.stop()`` (the grid's Stop button, or Ctrl-C / a kernel interrupt
during ``run_batch``) starts no new task, cancels the running ones (the runner rolls their
step back) and keeps everything that finished.

``store="batch.db"`` writes every task to the run store (``nbagent.store.sqlite``) as it
finishes; running the same batch again, in this kernel or a new one, skips what succeeded and
runs the rest (failed, rejected by ``check``, stopped, never started).

Backends: ``"asyncio"`` (default, this process) and ``"ray"``: a Ray cluster runs the tasks;
``factory`` (a zero-argument function Ray ships) builds the runner, worker and model on each
Ray worker, which runs the same code path as the asyncio backend and sends back plain
records (the codec's JSON-able documents), never live objects. The records become tasks of
the calling runner, so they open in the notebook like any other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from nbagent import _sync
from nbagent._counts import counted
from nbagent.memory import ChatMemoryBuffer
from nbagent.registry import html_view, show
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.engine.state import TaskState

__all__ = [
    "BatchRun",
    "BatchItem",
    "BatchTaskError",
    "AnswerRejected",
    "ItemStatus",
    "run_batch",
    "arun_batch",
    "BACKENDS",
]

Backend = Literal["asyncio", "ray"]
BACKENDS = ("asyncio", "ray")
ItemStatus = Literal["queued", "running", "done", "failed", "stopped"]
_ITEM_STATUSES = ("queued", "running", "done", "failed", "stopped")


class BatchTaskError(RuntimeError):
    """A task that failed somewhere else (a Ray worker, an earlier run read from the store):
    its error's type, message and traceback as text (exceptions do not travel as records)."""

    def __init__(self, error_type: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.traceback = traceback


class AnswerRejected(AssertionError):
    """The task finished, but ``run_batch(check=...)`` did not accept its answer."""

    def __init__(self, message: str, response: Any = None) -> None:
        super().__init__(message)
        self.response = response


@dataclass
class BatchItem:
    """One input of a batch and what became of it."""

    index: int
    input: str
    key: str
    status: ItemStatus = "queued"
    task_id: str | None = None
    response: AgentChatResponse | None = None
    error: BaseException | None = None
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    latency_s: float | None = None
    resumed: bool = False  # read back from the store, not run this time
    worker: str | None = None  # where it ran (a Ray node), when not here

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def result(self) -> AgentChatResponse | BaseException | None:
        """The answer, the exception that ended the task, or None (not finished)."""
        if self.status == "done":
            return self.response
        if self.status == "failed":
            return self.error
        return None

    def row(self) -> dict[str, Any]:
        """A flat, JSON-able row (``BatchRun.to_pandas`` builds its frame from these)."""
        return {
            "index": self.index,
            "input": self.input,
            "status": self.status,
            "response": None if self.response is None else self.response.response,
            "error": None if self.error is None else _error_text(self.error),
            "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost": self.cost,
            "latency_s": self.latency_s,
            "task_id": self.task_id,
            "resumed": self.resumed,
        }


def _error_text(err: BaseException) -> str:
    return str(err) if isinstance(err, BatchTaskError) else f"{type(err).__name__}: {err}"


def input_key(index: int, text: str) -> str:
    """The store key of one input: its position and a hash of its text, so that a changed
    input is run again while an unchanged one is skipped."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{index}:{digest}"


Listener = Callable[["BatchRun", "BatchItem | None"], None]


class BatchRun:
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
        from nbagent.runner.base import AgentRunner

        if not isinstance(runner, AgentRunner):
            raise TypeError(f"run_batch needs an AgentRunner, got {type(runner).__name__}")
        texts = _check_inputs(inputs)
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
        self.store = None if store is None else _open_store(store, runner)
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
        self._counts = dict.fromkeys(_ITEM_STATUSES, 0)
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
        return self._tokens[0] + self._tokens[1]

    @property
    def prompt_tokens(self) -> int:
        return self._tokens[0]

    @property
    def completion_tokens(self) -> int:
        return self._tokens[1]

    @property
    def cost(self) -> float | None:
        """Money spent so far (None when no step had a price; see ``nbagent.costs``)."""
        return self._cost

    @property
    def elapsed_s(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.perf_counter()) - self.started_at

    def statuses(self) -> str:
        """One letter per item, in order (q r d f s): what the grid draws."""
        return "".join(item.status[0] for item in self.items)

    def rows(self) -> list[dict[str, Any]]:
        return [item.row() for item in self.items]

    def to_pandas(self) -> Any:
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

    def get_task(self, index: int) -> Any:
        """The Task of item ``index`` (same as ``runner.get_task(batch[index].task_id)``)."""
        return self.state(index).task

    def graph(self, index: int, **kwargs: Any) -> Any:
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
                import logging

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
        fut = self._future
        if fut is None:
            if not self.finished and self.started_at is None:
                raise RuntimeError("this batch was not started; use runner.run_batch(...)")
            self._done_event.wait(timeout)
            return self
        _wait_stopping(self, fut, timeout)
        return self

    def __await__(self) -> Any:
        async def _join() -> BatchRun:
            while not self.finished:
                await asyncio.sleep(0.02)
            return self

        return _join().__await__()

    # ----- running -----------------------------------------------------------------------
    async def _arun(self) -> BatchRun:
        if self.started_at is not None:
            raise RuntimeError("a BatchRun runs once; call run_batch again to run it again")
        self._loop = asyncio.get_running_loop()
        self.started_at = time.perf_counter()
        try:
            todo = self._resume()
            self._notify(None)
            if self.backend == "ray":
                from nbagent import _batch_ray

                await _batch_ray.run(self, todo)
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
        return self

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
            _fill_from_state(self.runner, item, state)
            item.latency_s = sum(o.latency_s or 0.0 for o in state.completed_steps)
            item.response = _response_of(state)
            item.resumed = True
            self._set_status(item, "done")
        return todo

    async def _run_local(self, todo: list[int]) -> None:
        runner = self.runner
        history = ChatMemoryBuffer(
            token_limit=runner.memory.token_limit,
            chat_history=runner.memory.get_all(),
            tokenizer_fn=runner.memory.tokenizer_fn,
        )  # every task reads this one frozen copy; none writes it
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
        fut = asyncio.ensure_future(run_isolated(self.runner, item.input, history, self.timeout_s, item))
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
        _fill_from_state(self.runner, item, state)
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
            import logging

            logging.getLogger("nbagent.batch").exception("could not write task %s to the store", state.task_id)

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

    def widget(self, **kwargs: Any) -> Any:
        """The live progress grid (``nbagent.viz.batch.BatchGrid``) for this batch."""
        return show(self, "widget", **kwargs)

    def summary_html(self) -> str:
        """The static summary table (what nbconvert and nbval show)."""
        return show(self, "summary_html")

    def _repr_html_(self) -> str | None:
        return html_view(self)


# ----- one task, isolated --------------------------------------------------------------------


async def run_isolated(
    runner: AgentRunner,
    text: str,
    history: ChatMemoryBuffer,
    timeout_s: float | None = None,
    item: BatchItem | None = None,
) -> tuple[TaskState | None, AgentChatResponse | None, BaseException | None]:
    """Run one task for ``text`` to its end through the runner's own step loop (the one
    ``achat`` uses), reading ``history`` and adding nothing to the runner's memory.

    Returns the task's state, its answer and the exception that ended it (one of the two
    is None). The asyncio and the Ray backend both run tasks through here.
    """
    try:
        task = runner.create_task(text)
    except Exception as err:  # noqa: BLE001 - recorded on the item: the batch goes on
        return None, None, err
    task.memory = history
    state = runner.state_of(task.task_id)
    state.adds_to_memory = False  # its messages stay on the task (its transcript), never join the conversation
    if item is not None:
        item.task_id = task.task_id
    try:
        run = runner.arun_task(task.task_id)
        output = await (asyncio.wait_for(run, timeout_s) if timeout_s is not None else run)
        response = runner.finalize_response(task.task_id, output)
        if isinstance(response, StreamingAgentChatResponse):
            response = await response.aget_response()
        return state, response, None
    except asyncio.TimeoutError:
        return state, None, TimeoutError(f"the task did not finish within timeout_s={timeout_s} s")
    except Exception as err:  # noqa: BLE001 - one failing task never stops the others
        return state, None, err


def _fill_from_state(runner: AgentRunner, item: BatchItem, state: TaskState | None) -> None:
    """Copy a task's steps, tokens and cost onto its item."""
    if state is None:
        return
    from nbagent.costs import task_cost

    item.task_id = state.task_id
    item.steps = len(state.completed_steps)
    try:
        total = task_cost(runner, state).total
    except Exception:  # noqa: BLE001 - a cost that cannot be computed is left empty
        return
    item.prompt_tokens = total.prompt_tokens
    item.completion_tokens = total.completion_tokens
    item.cost = total.amount


def _response_of(state: TaskState) -> AgentChatResponse | None:
    response = state.final_response
    if isinstance(response, AgentChatResponse):
        return response
    if isinstance(response, StreamingAgentChatResponse):
        return AgentChatResponse(response=response.response, sources=response.sources)
    return None


# ----- records: a task <-> the codec's JSON-able document -----------------------------------


def task_record(runner: AgentRunner, state: TaskState) -> dict[str, Any]:
    """One task as the codec's run document (a runner holding just that task): plain
    JSON-able data that a store keeps and a Ray worker sends back."""
    from nbagent.store.codec import runner_to_dict

    return runner_to_dict(runner, tasks=[state], with_memory=False)  # the worker, settings and prices


def adopt_record(runner: AgentRunner, doc: dict[str, Any]) -> TaskState:
    """Make the task of a ``task_record`` document a task of ``runner`` (it can then be
    opened, drawn and costed like any other; its steps cannot be re-run from here)."""
    from nbagent.store.codec import runner_from_dict

    loaded = runner_from_dict(doc, None, restore_ids=False, source="a batch record")
    states = list(loaded.tasks.values())
    if len(states) != 1:
        raise ValueError(f"a batch record holds exactly one task, this one holds {len(states)}")
    return adopt_state(runner, states[0], loaded)


def adopt_state(runner: AgentRunner, state: TaskState, loaded: Any) -> TaskState:
    """Move a task that ``loaded`` (a runner rebuilt from a record or the store) holds into
    ``runner``, with the models its steps ran with (for their cost)."""
    from nbagent.costs import adopt_step_models, register_runner, step_models

    # the models first: a store that hears TaskCreated writes them with the task
    adopt_step_models(runner, {sid: m for sid, m in step_models(loaded).items() if sid in state.steps})
    register_runner(state.task_id, runner)
    return runner.adopt_task(state)


# ----- the store ---------------------------------------------------------------------------


def _open_store(store: Any, runner: AgentRunner) -> Any:
    from nbagent._batch_store import BatchStore

    return BatchStore(store, runner)


# ----- entry points ------------------------------------------------------------------------


def _check_inputs(inputs: Any) -> list[str]:
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise TypeError(
            f"inputs must be a list (or other iterable) of str, one per task; got {type(inputs).__name__}"
        )
    texts = list(inputs)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"inputs[{i}] must be a str (a task's input), got {type(t).__name__}: {t!r:.80}")
    return texts


async def arun_batch(runner: AgentRunner, inputs: Iterable[str], **options: Any) -> BatchRun:
    """Run one task per input on the running loop; see ``run_batch``."""
    progress = options.pop("progress", False)
    batch = BatchRun(runner, list(inputs) if not isinstance(inputs, (str, bytes)) else inputs, **options)
    view = _start_progress(batch, progress)
    try:
        await batch._arun()
    finally:
        _end_progress(view)
    return batch


def run_batch(
    runner: AgentRunner,
    inputs: Iterable[str],
    *,
    max_concurrency: int = 16,
    store: Any = None,
    backend: Backend = "asyncio",
    factory: Callable[[], Any] | None = None,
    progress: bool | str = "auto",
    background: bool = False,
    name: str = "batch",
    timeout_s: float | None = None,
    ray_options: dict[str, Any] | None = None,
    check: Callable[[str, AgentChatResponse], Any] | None = None,
) -> BatchRun:
    """Run one task per input (at most ``max_concurrency`` at once) and return the BatchRun.

    ``progress``: "auto" shows the live grid in Jupyter and a tqdm bar elsewhere (if tqdm is
    installed); "grid", "tqdm" or False. ``background=True`` returns at once while the batch
    runs on a background loop (the grid's Stop button works meanwhile; ``batch.wait()``).
    Ctrl-C (a kernel interrupt) stops the batch and returns it with what finished.
    ``store``: a path to the run store (resume), ``timeout_s``: a limit per task.
    ``check(input, response)``: grades each answer; returning False or raising marks the task
    failed (``AnswerRejected``), so an evaluation's wrong answers show up as failures.
    """
    batch = BatchRun(
        runner,
        inputs if isinstance(inputs, (str, bytes)) else list(inputs),
        max_concurrency=max_concurrency,
        backend=backend,
        factory=factory,
        store=store,
        name=name,
        timeout_s=timeout_s,
        ray_options=ray_options,
        check=check,
    )
    view = _start_progress(batch, progress)
    in_loop = _running_loop() is not None
    if background or in_loop:
        # a notebook cell: run on the background loop and wait here, so that Ctrl-C reaches
        # this thread and becomes batch.stop()
        coro = _with_view(batch, view if background else None)
        fut = asyncio.run_coroutine_threadsafe(coro, _sync._portal_loop())
        batch._future = fut
        if background:
            return batch
        try:
            _wait_stopping(batch, fut, None)
        finally:
            _end_progress(view)
        return batch
    loop = _sync.sync_loop()
    try:
        with _ctrl_c_stops(batch):
            loop.run_until_complete(batch._arun())
    finally:
        _end_progress(view)
    return batch


async def _with_view(batch: BatchRun, view: Any) -> BatchRun:
    try:
        return await batch._arun()
    finally:
        _end_progress(view)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _wait_stopping(batch: BatchRun, fut: concurrent.futures.Future[Any], timeout: float | None) -> None:
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


class _ctrl_c_stops:
    """While the batch runs on this (main) thread's loop, Ctrl-C stops it instead of tearing
    the loop down in the middle of a step; a second Ctrl-C interrupts as usual."""

    def __init__(self, batch: BatchRun) -> None:
        self.batch = batch
        self.saved: Any = None

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # someone else handles Ctrl-C here: leave it to them

        def handler(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.batch.interrupted = True
            self.batch.stop()

        self.saved = signal.default_int_handler
        signal.signal(signal.SIGINT, handler)

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            signal.signal(signal.SIGINT, self.saved)


def _start_progress(batch: BatchRun, progress: bool | str) -> Any:
    if progress is False or progress is None:
        return None
    if progress not in (True, "auto", "grid", "tqdm"):
        raise ValueError(f"progress must be 'auto', 'grid', 'tqdm' or False, got {progress!r}")
    return show(batch, "progress", "auto" if progress is True else str(progress))


def _end_progress(view: Any) -> None:
    if view is not None:
        try:
            view.finish()
        except Exception:  # noqa: BLE001 - a view must never break the run
            pass
