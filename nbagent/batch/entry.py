"""``run_batch`` / ``arun_batch``: build a ``BatchRun``, show its progress, run it on the
right loop (this thread's, or the background loop inside a notebook cell; the page's loop
where no thread can start) and turn Ctrl-C into ``batch.stop()``, so that what finished is kept.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent.batch.results import Backend
from nbagent.batch.run import BatchRun, wait_stopping
from nbagent.registry import show
from nbagent.schema import AgentChatResponse

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["run_batch", "arun_batch"]


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
    if in_loop and not background and _sync.NO_THREADS:
        # no thread to wait on (Pyodide): the tasks run concurrently on the page's loop, and
        # this call waits for them as every sync call does there (JSPI, else CannotWaitHere)
        try:
            return _sync.run_sync(batch._arun())
        finally:
            _end_progress(view)
    if background or in_loop:
        # a notebook cell: run on the background loop and wait here, so that Ctrl-C reaches
        # this thread and becomes batch.stop() (no thread: background runs on the page's loop)
        coro = _with_view(batch, view if background else None)
        fut = asyncio.run_coroutine_threadsafe(coro, _sync.sync_loop() if _sync.NO_THREADS else _sync._portal_loop())
        batch._future = fut
        if background:
            return batch
        try:
            wait_stopping(batch, fut, None)
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
