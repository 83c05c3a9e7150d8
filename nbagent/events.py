"""Typed events for every state change, and a small dispatcher to listen to them.

The runner emits; views and widgets subscribe. Nothing here imports UI code. Events carry ids
and small values, never the mutable state itself, so a listener cannot corrupt a task.

While a step runs, ``current_step()`` is that step's ``StepContext``: a model call made from
anywhere inside the step reports its tokens and usage there without being passed a handle.

The event classes (``StepCompleted``...) are defined in ``nbagent.event_types`` and read from
here (``events.StepCompleted``, ``from nbagent.events import StepCompleted``): that module is
imported when one is first asked for, so ``import nbagent`` does not make them.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.event_types import (
        BatchEnded,
        BatchStarted,
        BatchTaskStarted,
        Event,
        ModelCalled,
        RunnerReset,
        StepCompleted,
        StepEdited,
        StepFailed,
        StepStarted,
        StepUndone,
        TaskAbandoned,
        TaskCreated,
        TaskDeleted,
        TaskFinalized,
        TokenStreamed,
        ToolCalled,
    )
    from nbagent.messages import TokenUsage

#: the event classes, defined in ``nbagent.event_types`` (see ``__getattr__``)
_EVENT_TYPES = (
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
)

__all__ = [
    *_EVENT_TYPES,
    "EventDispatcher",
    "StepContext",
    "current_step",
    "emit_token",
    "record_llm_call",
    "start_model_call",
    "report_model_call",
    "tool_call_wanted",
    "start_tool_call",
    "report_tool_call",
    "watch_sources",
    "announce_source",
]


def __getattr__(name: str) -> Any:
    """An event class: ``nbagent.event_types`` is imported on the first one asked for, and all
    of them are then set here, so later reads are plain attribute reads."""
    if name not in _EVENT_TYPES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from nbagent import event_types

    for kind in _EVENT_TYPES:
        globals()[kind] = getattr(event_types, kind)
    return globals()[name]


def _log() -> Any:
    import logging  # only when a listener or watcher fails

    return logging.getLogger("nbagent.events")


Listener = Callable[["Event"], Any]


class EventDispatcher:
    """Subscribe / unsubscribe / emit. A listener that raises is logged, never breaks a run.

    ``wants(EventType)`` says whether anyone would hear an event of that type, so that the
    engine builds an event only when someone listens to its kind (a listener of completed
    steps does not make every step build a ``StepStarted``).
    """

    def __init__(self) -> None:
        # (listener, the types it hears or None for every change, the types it never hears)
        self._listeners: list[tuple[Listener, tuple[type[Event], ...] | None, tuple[type[Event], ...]]] = []
        # event type -> the listeners that hear it, in the order they subscribed; cleared on any change
        self._wanted: dict[type[Event], tuple[Listener, ...]] = {}

    def subscribe(
        self,
        listener: Listener,
        types: type[Event] | tuple[type[Event], ...] | None = None,
        *,
        ignore: type[Event] | tuple[type[Event], ...] = (),
    ) -> Callable[[], None]:
        """Call ``listener(event)`` for every event (or only those of ``types``), except
        those of ``ignore`` (events it has no use for: the engine builds none for it, as a
        store that skips ``StepStarted`` and ``TokenStreamed``).

        Returns a function that unsubscribes it.
        """
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        if isinstance(types, type):
            types = (types,)
        if isinstance(ignore, type):
            ignore = (ignore,)
        self._listeners.append((listener, types, tuple(ignore)))
        self._wanted = {}
        return lambda: self.unsubscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener`` (every subscription of it); unknown listeners are ignored.

        Example:

        >>> from nbagent import EventDispatcher
        >>> from nbagent.events import TaskCreated
        >>> events, heard = EventDispatcher(), []
        >>> listener = heard.append
        >>> _ = events.subscribe(listener)
        >>> events.unsubscribe(listener)
        >>> events.emit(TaskCreated("t1", input="hi"))
        >>> heard, events.active
        ([], False)
        """
        self._listeners = [entry for entry in self._listeners if entry[0] is not listener]
        self._wanted = {}

    @property
    def active(self) -> bool:
        """Whether anyone listens (the runner skips building events otherwise)."""
        return bool(self._listeners)

    def wants(self, event_type: type[Event]) -> bool:
        """Whether a listener would hear an event of ``event_type`` (build one only then).

        Example:

        >>> from nbagent import EventDispatcher
        >>> from nbagent.events import StepStarted, TaskCreated
        >>> events = EventDispatcher()
        >>> _ = events.subscribe(print, TaskCreated)
        >>> events.wants(TaskCreated), events.wants(StepStarted)  # build a StepStarted only if someone listens
        (True, False)
        """
        heard = self._wanted.get(event_type)  # a (un)subscribe meanwhile replaces the table
        if heard is None:
            heard = self._hearing(event_type)
        return True if heard else False

    def _hearing(self, event_type: type[Event]) -> tuple[Listener, ...]:
        """The listeners an event of ``event_type`` goes to, worked out once per type."""
        table = self._wanted
        named_only = event_type.named_only
        heard = table[event_type] = tuple(
            fn
            for fn, t, ig in self._listeners
            if (issubclass(event_type, t) if t is not None else not named_only) and not issubclass(event_type, ig)
        )
        return heard

    def emit(self, event: Event) -> None:
        """Call every listener of the event's type, in the order they subscribed (an
        observation only those that named its type).

        Example:

        >>> from nbagent import EventDispatcher
        >>> from nbagent.events import TaskCreated
        >>> events, heard = EventDispatcher(), []
        >>> _ = events.subscribe(heard.append, TaskCreated)
        >>> events.emit(TaskCreated("t1", input="hi"))
        >>> [e.task_id for e in heard]
        ['t1']
        """
        heard = self._wanted.get(type(event))
        for fn in self._hearing(type(event)) if heard is None else heard:
            try:
                fn(event)
            except Exception:  # a broken view must not break the agent
                _log().exception("nbagent event listener %r failed on %r", fn, event)


class StepContext:
    """What the runner knows about the step that is running now."""

    __slots__ = (
        "task_id", "step_id", "dispatcher", "usage", "llm_calls", "llm_latency_s", "journal", "issued",
        "tokens_muted", "closers", "calls_started",
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
        self.closers: list[Callable[[], None]] | None = None
        self.calls_started = 0  # model calls announced (ModelCallStarted) so far

    def on_exit(self, close: Callable[[], None]) -> None:
        """Call ``close`` when the step's own code ends: what a listener opened for that code,
        heard in the step's own context (tracing makes a span current there, so the spans a
        tool or an HTTP client makes go under it), is closed in that context too. The engine
        and the workflow runtime run closers last-in first-out, each once; one that raises is
        logged."""
        if self.closers is None:
            self.closers = []
        self.closers.append(close)

    def _close(self) -> None:
        closers, self.closers = self.closers, None
        for close in reversed(closers or ()):
            try:
                close()
            except Exception:  # a listener's scope must not break the step
                _log().exception("nbagent step closer %r failed", close)

    def token(self, token: str) -> None:
        from nbagent.event_types import TokenStreamed

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


def _model_names(llm: Any) -> tuple[str, str]:
    """What a model call's events name: the model, and who serves it."""
    return str(getattr(llm, "model", "") or ""), str(getattr(llm, "provider_name", "") or type(llm).__name__)


def start_model_call(llm: Any) -> int | None:
    """Tell the running step's listeners a model call begins; returns its number for
    ``report_model_call`` (None, and nothing built, unless one listens to ``ModelCallStarted``)."""
    from nbagent.event_types import ModelCallStarted

    ctx = _current.get()
    if ctx is None or not ctx.dispatcher.wants(ModelCallStarted):
        return None
    ctx.calls_started += 1
    model, provider = _model_names(llm)
    ctx.dispatcher.emit(
        ModelCallStarted(ctx.task_id, step_id=ctx.step_id, model=model, provider=provider, call_no=ctx.calls_started)
    )
    return ctx.calls_started


def report_model_call(
    llm: Any,
    messages: Any,
    reply: Any,
    usage: TokenUsage | None,
    latency_s: float,
    *,
    streamed: bool = False,
    error: BaseException | None = None,
    call_no: int | None = None,
) -> None:
    """Tell the running step's listeners a model call ended (nothing is built unless one
    listens to ``ModelCalled``); ``call_no`` is what ``start_model_call`` returned."""
    from nbagent.event_types import ModelCalled

    ctx = _current.get()
    if ctx is None or not ctx.dispatcher.wants(ModelCalled):
        return
    model, provider = _model_names(llm)
    ctx.dispatcher.emit(
        ModelCalled(
            ctx.task_id,
            step_id=ctx.step_id,
            model=model,
            provider=provider,
            started_at=time.time() - latency_s,
            latency_s=latency_s,
            usage=usage,
            messages=messages,  # the call's own list (LLM.achat's copy): no second copy per call
            reply=reply,
            streamed=streamed,
            error_type=None if error is None else type(error).__name__,
            call_no=call_no,
        )
    )


def tool_call_wanted() -> StepContext | None:
    """The running step's context if someone listens to ``ToolCalled``, else None."""
    from nbagent.event_types import ToolCalled

    ctx = _current.get()
    if ctx is None or not ctx.dispatcher.wants(ToolCalled):
        return None
    return ctx


def start_tool_call(ctx: StepContext, call_id: str, tool_call_id: str | None) -> None:
    """Tell ``ctx``'s listeners a tool call begins (nothing is built unless one listens to
    ``ToolCallStarted``)."""
    from nbagent.event_types import ToolCallStarted

    if ctx.dispatcher.wants(ToolCallStarted):
        ctx.dispatcher.emit(ToolCallStarted(ctx.task_id, step_id=ctx.step_id, call_id=call_id, tool_call_id=tool_call_id))


def report_tool_call(
    ctx: StepContext, call_id: str, tool_call_id: str | None, started: float, output: Any, error: BaseException | None
) -> None:
    """Tell ``ctx``'s listeners a tool call that began at ``started`` (``time.time()``) ended."""
    from nbagent.event_types import ToolCalled

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
            _log().exception("nbagent source watcher %r failed on %s", watcher, type(source).__name__)


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
    ctx = _current.get()
    if ctx is not None and ctx.closers is not None:  # what listeners opened for the step's code
        ctx._close()
    _current.reset(token)
