"""The Ray backend of ``run_batch``: tasks run on a Ray cluster, records come back.

Each Ray task receives the factory (shipped once with ``ray.put``), a key naming this batch
and one input. The first task of a batch on a worker process builds the runner with the
factory and keeps it for the batch's later tasks on that process; each task runs through
``nbagent.batch.isolate.run_isolated`` (the asyncio backend's code path: the runner's own step loop,
nothing added to its memory) and returns a plain record: the codec's JSON-able document of
that one task, its latency and where it ran, and its error as text. The task is then
dropped from the worker's runner, so a long batch does not grow a worker.

On the calling side the record's task becomes a task of the calling runner
(``adopt_record``), so ``runner.get_task`` / ``runner.graph`` open it in the notebook.
At most ``max_concurrency`` Ray tasks are in flight; Stop cancels those.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent import events as ev
from nbagent.batch.isolate import (
    adopt_record,
    check_runner,
    fill_from_state,
    frozen_history,
    response_of,
    run_isolated,
    task_record,
)
from nbagent.batch.remote_events import EventLog, decode_events, encode_events
from nbagent.batch.results import BatchTaskError

if TYPE_CHECKING:
    from nbagent.batch.results import BatchItem
    from nbagent.batch.run import BatchRun

__all__ = ["run", "run_task_remote"]

_RUNNERS: dict[str, Any] = {}  # on a Ray worker: batch key -> the runner its factory built
_MAX_CACHED = 4


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "backend='ray' needs Ray: pip install 'nbagent[ray]' (or pip install ray)"
        ) from err
    return ray


def run_task_remote(
    factory: Any, batch_key: str, text: str, timeout_s: float | None, record_events: bool = False
) -> dict[str, Any]:
    """What a Ray worker runs for one input (a plain function: Ray wraps it); with
    ``record_events`` the record holds the task's events too (``remote_events``)."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    runner = _RUNNERS.get(batch_key)
    if runner is None:
        runner = check_runner(factory(), "the batch factory must return")
        while len(_RUNNERS) >= _MAX_CACHED:
            _RUNNERS.pop(next(iter(_RUNNERS)))
        _RUNNERS[batch_key] = runner
    history = frozen_history(runner)
    log = EventLog(runner) if record_events else None
    start = time.perf_counter()
    try:
        state, response, error = _sync.run_sync(run_isolated(runner, text, history, timeout_s))
    finally:
        if log is not None:
            log.close()
    latency = time.perf_counter() - start
    record: dict[str, Any] = {
        "latency_s": latency,
        "worker": where,
        "error": None,
        "doc": None,
    }
    if log is not None and state is not None:
        record["events"] = encode_events(log.of(state.task_id))
    if error is not None:
        import traceback

        record["error"] = {
            "type": type(error).__name__,
            "message": str(error),
            "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
        }
    if state is not None:
        try:
            record["doc"] = task_record(runner, state)
        finally:
            if state.task_id in runner.tasks:  # a long batch does not grow the worker's runner
                runner.delete_task(state.task_id)
    return record


async def run(batch: BatchRun, todo: list[int]) -> None:
    """Run the items ``todo`` of ``batch`` on Ray, ``max_concurrency`` at a time."""
    ray = _import_ray()
    remote = ray.remote(run_task_remote)
    if batch.ray_options:
        remote = remote.options(**batch.ray_options)
    factory_ref = ray.put(batch.factory)
    batch_key = uuid.uuid4().hex
    record_events = batch.runner.events.wants(ev.TaskReplayed)  # someone here draws remote tasks (tracing)
    pending = list(reversed(todo))
    in_flight: dict[asyncio.Future[Any], tuple[BatchItem, Any, float]] = {}

    async def fetch(ref: Any) -> Any:
        return await ref

    try:
        while pending or in_flight:
            while pending and len(in_flight) < batch.max_concurrency and not batch._stop_requested:
                item = batch.items[pending.pop()]
                ref = remote.remote(factory_ref, batch_key, item.input, batch.timeout_s, record_events)
                fut = asyncio.ensure_future(fetch(ref))
                in_flight[fut] = (item, ref, time.perf_counter())
                batch._running[item.index] = fut
                batch._set_status(item, "running")
            if batch._stop_requested:
                for fut, (item, ref, _) in list(in_flight.items()):
                    ray.cancel(ref)
                    fut.cancel()
                    batch._running.pop(item.index, None)
                    batch._set_status(item, "stopped")
                in_flight.clear()
                return
            done, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                item, ref, started = in_flight.pop(fut)
                batch._running.pop(item.index, None)
                if fut.cancelled():  # batch.stop() cancelled it: the loop above marks the rest
                    ray.cancel(ref)
                    batch._set_status(item, "stopped")
                    continue
                _finish(batch, item, fut, started)
    except asyncio.CancelledError:
        for fut, (item, ref, _) in in_flight.items():
            ray.cancel(ref)
            fut.cancel()
        raise


def _finish(batch: BatchRun, item: BatchItem, fut: asyncio.Future[Any], started: float) -> None:
    err = fut.exception()
    if err is not None:  # Ray could not run it (the factory failed, the worker died...)
        item.error = err
        item.latency_s = time.perf_counter() - started
        if batch.store is not None:
            batch._save(item, None)
        batch._set_status(item, "failed")
        return
    record = fut.result()
    item.latency_s = record.get("latency_s")
    item.worker = record.get("worker")
    state = None
    if record.get("doc") is not None:
        try:
            if record.get("events") is not None:  # told before the task is adopted: its story first
                _replay(batch, item, record)
            state = adopt_record(batch.runner, record["doc"])
        except Exception as adopt_err:  # noqa: BLE001 - a record that does not load fails its item
            item.error = adopt_err
    fill_from_state(batch.runner, item, state)
    failure = record.get("error")
    if failure is not None and item.error is None:
        item.error = BatchTaskError(failure["type"], failure["message"], failure.get("traceback", ""))
    if item.error is None and state is not None:
        item.response = response_of(state)
        batch._check(item)  # the check runs here, on the calling side
    if batch.store is not None:
        batch._save(item, state)
    batch._set_status(item, "done" if item.error is None else "failed")


def _replay(batch: BatchRun, item: BatchItem, record: dict[str, Any]) -> None:
    """Tell the calling runner's listeners what the task did on its worker (``TaskReplayed``),
    its batch entry among its events as if it had run here."""
    try:
        events = decode_events(record["events"], "a batch record")
    except Exception as err:  # noqa: BLE001 - what the task did is still adopted; only its trace is lost
        import logging

        logging.getLogger("nbagent.batch").warning("batch item %d: its events could not be read (%s)", item.index, err)
        return
    if not events:
        return
    first = events[0]
    task_id = first.task_id
    entry = ev.BatchTaskStarted(task_id, batch=batch.name, index=item.index, at=first.at)
    batch.runner.events.emit(ev.TaskReplayed(task_id, events=(first, entry, *events[1:])))
