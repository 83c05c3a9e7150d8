"""What a batch produces for each input: a ``BatchItem`` (status, answer or error, steps,
tokens, cost, latency), the errors only a batch raises, and the key an input is stored under.

Plain data with no runner in it, so the scheduler, the Ray backend, the store and the views
all read the same record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from nbagent.schema import AgentChatResponse

__all__ = [
    "BatchItem",
    "BatchTaskError",
    "AnswerRejected",
    "ItemStatus",
    "Backend",
    "BACKENDS",
    "ITEM_STATUSES",
    "input_key",
    "error_text",
    "check_inputs",
]

Backend = Literal["asyncio", "ray"]
BACKENDS = ("asyncio", "ray")
ItemStatus = Literal["queued", "running", "done", "failed", "stopped"]
ITEM_STATUSES: tuple[ItemStatus, ...] = ("queued", "running", "done", "failed", "stopped")


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
    #: queued, running, done, failed or stopped
    status: ItemStatus = "queued"
    #: the item's task, once it has one (``batch.get_task(i)``)
    task_id: str | None = None
    #: the answer, when done
    response: AgentChatResponse | None = None
    #: what stopped it, when failed
    error: BaseException | None = None
    #: steps its task ran
    steps: int = 0
    #: tokens its task's model calls read
    prompt_tokens: int = 0
    #: tokens its task's model calls wrote
    completion_tokens: int = 0
    #: what those tokens cost (None: no price known for the model)
    cost: float | None = None
    #: how long it took, in seconds
    latency_s: float | None = None
    #: read back from the store, not run this time
    resumed: bool = False
    #: where it ran (a Ray node), when not here
    worker: str | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens of the item's task."""
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
            "error": None if self.error is None else error_text(self.error),
            "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost": self.cost,
            "latency_s": self.latency_s,
            "task_id": self.task_id,
            "resumed": self.resumed,
        }


def error_text(err: BaseException) -> str:
    """How an item's error reads in a row or a view: ``Type: message`` (a ``BatchTaskError``
    already carries its type)."""
    return str(err) if isinstance(err, BatchTaskError) else f"{type(err).__name__}: {err}"


def input_key(index: int, text: str) -> str:
    """The store key of one input: its position and a hash of its text, so that a changed
    input is run again while an unchanged one is skipped."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{index}:{digest}"


def check_inputs(inputs: Any) -> list[str]:
    """The inputs as a list of str, or a TypeError naming the first one that is not."""
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise TypeError(
            f"inputs must be a list (or other iterable) of str, one per task; got {type(inputs).__name__}"
        )
    texts = list(inputs)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"inputs[{i}] must be a str (a task's input), got {type(t).__name__}: {t!r:.80}")
    return texts
