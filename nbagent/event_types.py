"""The kinds of event the step engine emits: one frozen, slotted dataclass each.

They are read through ``nbagent.events`` (``events.StepCompleted``), which imports this module
when one is first asked for, not at ``import nbagent``: making seventeen dataclasses is a tenth
of that import's time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nbagent.messages import TokenUsage

__all__ = [
    "Event",
    "TaskCreated",
    "StepStarted",
    "TokenStreamed",
    "StepCompleted",
    "StepFailed",
    "StepUndone",
    "StepEdited",
    "TaskFinalized",
    "TaskAbandoned",
    "TaskDeleted",
    "RunnerReset",
    "ModelCallStarted",
    "ModelCalled",
    "ToolCallStarted",
    "ToolCalled",
    "BatchStarted",
    "BatchTaskStarted",
    "BatchEnded",
    "TaskReplayed",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all events: which task, and when (``time.time()``)."""

    #: an observation (a model or tool call, a batch), not a change of a task's state: only
    #: listeners that name its type hear it; ``subscribe(fn)`` with no types hears the changes
    named_only: ClassVar[bool] = False

    task_id: str
    at: float = field(default_factory=time.time, kw_only=True)


@dataclass(frozen=True, slots=True)
class TaskCreated(Event):
    input: str


@dataclass(frozen=True, slots=True)
class StepStarted(Event):
    step_id: str
    input: str | None


@dataclass(frozen=True, slots=True)
class TokenStreamed(Event):
    step_id: str
    token: str


@dataclass(frozen=True, slots=True)
class StepCompleted(Event):
    step_id: str
    is_last: bool
    next_step_ids: tuple[str, ...]
    latency_s: float
    #: the model tokens the step used, if it reported any (what its cost is computed from)
    usage: TokenUsage | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class StepFailed(Event):
    step_id: str
    error_type: str
    error: str


@dataclass(frozen=True, slots=True)
class StepUndone(Event):
    step_id: str


@dataclass(frozen=True, slots=True)
class StepEdited(Event):
    step_id: str
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TaskFinalized(Event):
    response: str


@dataclass(frozen=True, slots=True)
class TaskAbandoned(Event):
    pass


@dataclass(frozen=True, slots=True)
class TaskDeleted(Event):
    pass


@dataclass(frozen=True, slots=True)
class RunnerReset(Event):
    pass


@dataclass(frozen=True, slots=True)
class ModelCallStarted(Event):
    """A model call of the running step begins (built only when someone listens: tracing
    makes the call's span current while it runs). ``call_no`` numbers the step's calls; the
    call's ``ModelCalled`` carries the same number."""

    named_only: ClassVar[bool] = True

    step_id: str
    model: str
    provider: str
    call_no: int


@dataclass(frozen=True, slots=True)
class ModelCalled(Event):
    """A model call of the running step ended (built only when someone listens: tracing).

    ``messages`` and ``reply`` are the objects themselves, not copies (``messages`` is the
    list the call sent, which nothing changes after it): a listener that keeps content must
    copy what it keeps. ``reply`` is None and ``error_type`` set when it failed.
    """

    named_only: ClassVar[bool] = True

    step_id: str
    model: str
    provider: str
    started_at: float  # time.time() when the call began
    latency_s: float
    usage: TokenUsage | None = None
    messages: Sequence[Any] = ()
    reply: Any = None
    streamed: bool = False
    error_type: str | None = None
    call_no: int | None = None  # its ModelCallStarted's, if one was built


@dataclass(frozen=True, slots=True)
class ToolCallStarted(Event):
    """A tool call of the running step begins (built only when someone listens: tracing
    makes the call's span current while the tool runs). Its ``ToolCalled`` has the same
    ``call_id``."""

    named_only: ClassVar[bool] = True

    step_id: str
    call_id: str
    tool_call_id: str | None


@dataclass(frozen=True, slots=True)
class ToolCalled(Event):
    """A tool call of the running step ended (built only when someone listens: tracing).

    ``call_id`` is the task-unique id a person approves by; ``tool_call_id`` the model's own.
    ``output`` is the ``ToolOutput`` (None when something raised past the tool: then
    ``error_type`` names it).
    """

    named_only: ClassVar[bool] = True

    step_id: str
    call_id: str
    tool_call_id: str | None
    started_at: float
    latency_s: float
    output: Any = None
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class BatchStarted(Event):
    """A batch of tasks starts on this runner (``task_id`` is empty: it is no task's)."""

    named_only: ClassVar[bool] = True

    batch: str
    size: int


@dataclass(frozen=True, slots=True)
class BatchTaskStarted(Event):
    """Task ``task_id`` runs input ``index`` of batch ``batch``."""

    named_only: ClassVar[bool] = True

    batch: str
    index: int


@dataclass(frozen=True, slots=True)
class BatchEnded(Event):
    """A batch ended: how many of its items ``failed`` and whether it was ``stopped``."""

    named_only: ClassVar[bool] = True

    batch: str
    failed: int
    stopped: bool


@dataclass(frozen=True, slots=True)
class TaskReplayed(Event):
    """Task ``task_id`` ran elsewhere (a Ray worker) and is adopted here: ``events`` is what it
    did there, in order, with their own times (built only when someone listens: tracing
    draws the task as if it had run here)."""

    named_only: ClassVar[bool] = True

    events: tuple[Event, ...] = ()
