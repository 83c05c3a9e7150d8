"""Typed events for every state change, and a small dispatcher to listen to them.

The runner emits; views and widgets subscribe. Nothing here imports UI code. Events carry ids
and small values, never the mutable state itself, so a listener cannot corrupt a task.

While a step runs, ``current_step()`` is that step's ``StepContext``: a model call made from
anywhere inside the step reports its tokens and usage there without being passed a handle.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from contextvars import ContextVar
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
    "ModelCalled",
    "ToolCalled",
    "BatchStarted",
    "BatchTaskStarted",
    "BatchEnded",
    "EventDispatcher",
    "StepContext",
    "current_step",
    "emit_token",
    "record_llm_call",
    "report_model_call",
    "tool_call_wanted",
    "report_tool_call",
    "watch_sources",
    "announce_source",
]

log = logging.getLogger("nbagent.events")


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
class ModelCalled(Event):
    """A model call of the running step ended (built only when someone listens: tracing).

    ``messages`` and ``reply`` are the objects themselves, not copies: a listener that keeps
    content must copy what it keeps. ``reply`` is None and ``error_type`` set when it failed.
    """

    named_only: ClassVar[bool] = True

    step_id: str
    model: str
    provider: str
    started_at: float  # time.time() when the call began
    latency_s: float
    usage: TokenUsage | None = None
    messages: tuple[Any, ...] = ()
    reply: Any = None
    streamed: bool = False
    error_type: str | None = None


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
            named_only = event_type.named_only
            wanted = table[event_type] = any(
                issubclass(event_type, t) if t is not None else not named_only for _, t in self._listeners
            )
        return wanted

    def emit(self, event: Event) -> None:
        """Call every listener of the event's type, in the order they subscribed (an
        observation only those that named its type)."""
        named_only = event.named_only
        for fn, types in list(self._listeners):
            if types is None:
                if named_only:
                    continue
            elif not isinstance(event, types):
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


def report_model_call(
    llm: Any,
    messages: Any,
    reply: Any,
    usage: TokenUsage | None,
    latency_s: float,
    *,
    streamed: bool = False,
    error: BaseException | None = None,
) -> None:
    """Tell the running step's listeners a model call ended (nothing is built unless one
    listens to ``ModelCalled``)."""
    ctx = _current.get()
    if ctx is None or not ctx.dispatcher.wants(ModelCalled):
        return
    ctx.dispatcher.emit(
        ModelCalled(
            ctx.task_id,
            step_id=ctx.step_id,
            model=str(getattr(llm, "model", "") or ""),
            provider=str(getattr(llm, "provider_name", "") or type(llm).__name__),
            started_at=time.time() - latency_s,
            latency_s=latency_s,
            usage=usage,
            messages=tuple(messages),
            reply=reply,
            streamed=streamed,
            error_type=None if error is None else type(error).__name__,
        )
    )


def tool_call_wanted() -> StepContext | None:
    """The running step's context if someone listens to ``ToolCalled``, else None."""
    ctx = _current.get()
    if ctx is None or not ctx.dispatcher.wants(ToolCalled):
        return None
    return ctx


def report_tool_call(
    ctx: StepContext, call_id: str, tool_call_id: str | None, started: float, output: Any, error: BaseException | None
) -> None:
    """Tell ``ctx``'s listeners a tool call that began at ``started`` (``time.time()``) ended."""
    now = time.time()
    ctx.dispatcher.emit(
        ToolCalled(
            ctx.task_id,
            step_id=ctx.step_id,
            call_id=call_id,
            tool_call_id=tool_call_id,
            started_at=started,
            latency_s=max(0.0, now - started),
            output=output,
            error_type=None if error is None else type(error).__name__,
            at=now,
        )
    )


# ----- sources: every runner and workflow run a process-wide listener may attach to ----------
# ``nbagent.tracing.instrument()`` watches them: a runner made before or after it, and every
# workflow run started after it, is traced with no change to the code that made it.
_sources: weakref.WeakSet[Any] = weakref.WeakSet()  # live runners (workflow runs are not kept)
_watchers: list[Callable[[Any], Any]] = []


def announce_source(source: Any, *, keep: bool = True) -> None:
    """A new runner (``keep``: remembered while it lives) or workflow run: each watcher
    attaches to it now. A watcher that raises is logged, never breaks the caller."""
    if keep:
        try:
            _sources.add(source)
        except TypeError:  # unhashable (a subclass with __eq__ and no __hash__): new watchers miss it
            pass
    for watcher in list(_watchers):
        try:
            watcher(source)
        except Exception:
            log.exception("nbagent source watcher %r failed on %s", watcher, type(source).__name__)


def watch_sources(watcher: Callable[[Any], Any]) -> Callable[[], None]:
    """Call ``watcher(source)`` for every live runner now and every runner or workflow run
    announced from now on; returns a function that stops it."""
    if not callable(watcher):
        raise TypeError(f"watcher must be callable, got {type(watcher).__name__}")
    _watchers.append(watcher)
    for source in list(_sources):
        watcher(source)

    def unwatch() -> None:
        if watcher in _watchers:
            _watchers.remove(watcher)

    return unwatch


def _set_current(ctx: StepContext | None) -> Any:
    return _current.set(ctx)


def _reset_current(token: Any) -> None:
    _current.reset(token)
