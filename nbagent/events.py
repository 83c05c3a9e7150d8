"""Typed events for every state change, and a small dispatcher to listen to them.

The runner emits; views and widgets subscribe. Nothing here imports UI code. Events carry ids
and small values, never the mutable state itself, so a listener cannot corrupt a task.

While a step runs, ``current_step()`` is that step's ``StepContext``: a model call made from
anywhere inside the step reports its tokens and usage there without being passed a handle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

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
    "EventDispatcher",
    "StepContext",
    "current_step",
    "emit_token",
    "record_llm_call",
]

log = logging.getLogger("nbagent.events")


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all events: which task, and when (``time.time()``)."""

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


Listener = Callable[[Event], Any]


class EventDispatcher:
    """Subscribe / unsubscribe / emit. A listener that raises is logged, never breaks a run.

    ``wants(EventType)`` says whether anyone would hear an event of that type, so that the
    engine builds an event only when someone listens to its kind (a listener of completed
    steps does not make every step build a ``StepStarted``).
    """

    def __init__(self) -> None:
        self._listeners: list[tuple[Listener, tuple[type[Event], ...] | None]] = []
        self._wanted: dict[type[Event], bool] = {}  # event type -> wanted; cleared on any change

    def subscribe(
        self, listener: Listener, types: type[Event] | tuple[type[Event], ...] | None = None
    ) -> Callable[[], None]:
        """Call ``listener(event)`` for every event (or only those of ``types``).

        Returns a function that unsubscribes it.
        """
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        if isinstance(types, type):
            types = (types,)
        self._listeners.append((listener, types))
        self._wanted = {}
        return lambda: self.unsubscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener`` (every subscription of it); unknown listeners are ignored."""
        self._listeners = [(fn, t) for fn, t in self._listeners if fn is not listener]
        self._wanted = {}

    @property
    def active(self) -> bool:
        """Whether anyone listens (the runner skips building events otherwise)."""
        return bool(self._listeners)

    def wants(self, event_type: type[Event]) -> bool:
        """Whether a listener would hear an event of ``event_type`` (build one only then)."""
        table = self._wanted  # a (un)subscribe meanwhile replaces it: no stale answer is kept
        wanted = table.get(event_type)
        if wanted is None:
            wanted = table[event_type] = any(t is None or issubclass(event_type, t) for _, t in self._listeners)
        return wanted

    def emit(self, event: Event) -> None:
        """Call every listener of the event's type, in the order they subscribed."""
        for fn, types in list(self._listeners):
            if types is not None and not isinstance(event, types):
                continue
            try:
                fn(event)
            except Exception:  # a broken view must not break the agent
                log.exception("nbagent event listener %r failed on %r", fn, event)


class StepContext:
    """What the runner knows about the step that is running now."""

    __slots__ = (
        "task_id", "step_id", "dispatcher", "usage", "llm_calls", "llm_latency_s", "journal", "issued",
        "tokens_muted",
    )

    def __init__(
        self,
        task_id: str,
        step_id: str,
        dispatcher: EventDispatcher,
        journal: dict[str, Any] | None = None,
        issued: list[str] | None = None,
    ) -> None:
        self.task_id = task_id
        self.step_id = step_id
        self.dispatcher = dispatcher
        self.journal = journal  # the tool calls this step's attempts ran (nbagent.calls)
        self.issued = issued  # the call ids this attempt issued (freed if it fails first)
        self.usage: TokenUsage | None = None
        self.llm_calls = 0
        self.llm_latency_s = 0.0
        #: set while the step's caller reads its streamed reply: the stream reports its tokens
        self.tokens_muted = False

    def token(self, token: str) -> None:
        if not self.tokens_muted and self.dispatcher.wants(TokenStreamed):
            self.dispatcher.emit(TokenStreamed(self.task_id, step_id=self.step_id, token=token))


_current: ContextVar[StepContext | None] = ContextVar("nbagent_step", default=None)


def current_step() -> StepContext | None:
    """The running step's context, or None outside a step."""
    return _current.get()


def emit_token(token: str) -> None:
    """Report a streamed token of the running step (a no-op outside a step)."""
    ctx = _current.get()
    if ctx is not None:
        ctx.token(token)


def record_llm_call(usage: TokenUsage | None, latency_s: float) -> None:
    """Add one model call's tokens and latency to the running step."""
    ctx = _current.get()
    if ctx is None:
        return
    ctx.llm_calls += 1
    ctx.llm_latency_s += latency_s
    if usage is not None:
        ctx.usage = usage if ctx.usage is None else ctx.usage + usage


def _set_current(ctx: StepContext | None) -> Any:
    return _current.set(ctx)


def _reset_current(token: Any) -> None:
    _current.reset(token)
