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

The package, bottom up: ``results`` (items, errors, input keys) < ``isolate`` (one task
through the runner's API, records) < ``store`` (the run store, for resume) and
``ray_backend`` < ``scheduler`` (resume, run, grade, save) < ``run`` (``BatchRun``) <
``entry`` (``run_batch``, progress, Ctrl-C).
"""

from __future__ import annotations

from nbagent.batch.entry import arun_batch, run_batch
from nbagent.batch.isolate import (
    BatchRunner,
    adopt_record,
    adopt_state,
    run_isolated,
    task_record,
)
from nbagent.batch.results import (
    BACKENDS,
    AnswerRejected,
    BatchItem,
    BatchTaskError,
    ItemStatus,
    input_key,
)
from nbagent.batch.results import error_text as _error_text  # the views' old name
from nbagent.batch.run import BatchRun

__all__ = [
    "BatchRun",
    "BatchItem",
    "BatchTaskError",
    "AnswerRejected",
    "ItemStatus",
    "BatchRunner",
    "run_batch",
    "arun_batch",
    "BACKENDS",
    "input_key",
    "task_record",
    "adopt_record",
    "adopt_state",
    "run_isolated",
]
