"""Context: the state of one workflow run, shared by its steps, and what a checkpoint saves.

A context holds the key/value state (``get``/``set``), the events waiting for a step, the steps
that were interrupted (so a resumed run re-runs them), the buffers of ``collect_events``, and the
questions steps wait on (``wait_for_event``). ``to_dict()`` saves all of it as JSON-safe data;
``Context.from_dict(workflow, data)`` loads it, and ``workflow.run(ctx=...)`` resumes it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from nbagent.calls import run_call
from nbagent.messages import ToolOutput
from nbagent.workflow.base import WorkflowBase
from nbagent.workflow.errors import CheckpointError, WorkflowRuntimeError
from nbagent.workflow.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StopEvent,
    event_type_name,
)
from nbagent.workflow.serde import check_serializer, decode_event, decode_value, encode_event, encode_value
from nbagent.workflow.store import ContextStore

if TYPE_CHECKING:
    from nbagent.workflow.runtime import Runner
    from nbagent.workflow.workflow import Workflow

__all__ = ["Context", "current_context", "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION"]

CHECKPOINT_FORMAT = "nbagent.workflow.Context"
CHECKPOINT_VERSION = 1
E = TypeVar("E", bound=Event)
_MISSING: Any = object()


@dataclass
class Item:
    """An event for one step; ``exec_id`` is set once the step starts on it."""

    step: str
    event: Event
    exec_id: int | None = None


@dataclass
class Waiter:
    """A step waiting in ``wait_for_event``; ``future`` is None while no run is live."""

    key: str
    exec_id: int
    event_type: type[Event]
    requirements: dict[str, Any]
    waiter_event: Event | None
    future: asyncio.Future[Event] | None = None
    announced: Any = None  # the run whose stream has shown the question (not saved)


@dataclass
class Execution:
    """The step execution running in this asyncio task (a context variable)."""

    ctx: Context
    step: str
    exec_id: int
    waits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


_CURRENT: ContextVar[Execution | None] = ContextVar("nbagent_workflow_step", default=None)


def _as_workflow(obj: Any) -> Any:
    """A workflow agent stands for the one-agent workflow it runs in (``Context(agent)``)."""
    as_workflow = getattr(obj, "_as_workflow", None)
    return as_workflow() if callable(as_workflow) else obj


def current_execution() -> Execution | None:
    return _CURRENT.get()


def current_context() -> Context:
    """The context of the workflow step running now (tools use it to reach the run)."""
    ex = _CURRENT.get()
    if ex is None:
        raise RuntimeError(
            "no workflow step is running here: the workflow Context is only available inside "
            "a step (and the tools a step calls) of a running workflow"
        )
    return ex.ctx


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:159] + "…"


class Context:
    """The shared state and the bookkeeping of one workflow run (reusable across runs)."""

    def __init__(self, workflow: Workflow) -> None:
        workflow = _as_workflow(workflow)
        if not isinstance(workflow, WorkflowBase):
            raise TypeError(f"Context(workflow) needs a Workflow, got {type(workflow).__name__}")
        self._workflow = workflow
        self._state: dict[str, Any] = {}
        self._pending: deque[Item] = deque()
        self._in_progress: dict[int, Item] = {}
        self._collected: dict[str, list[tuple[int, Event]]] = {}
        self._consumed: dict[int, list[Event]] = {}
        self._waiters: dict[str, Waiter] = {}
        self._answers: dict[str, tuple[int, Event]] = {}
        # per step execution: the tool calls it ran (nbagent.calls), so that an execution run
        # again after an interruption does not run them again
        self._ran: dict[int, dict[str, Any]] = {}
        self._next_exec = 1
        self._runner: Runner | None = None
        self._store: ContextStore | None = None

    # ----- what it is ---------------------------------------------------------------------
    @property
    def workflow(self) -> Workflow:
        """The workflow this context belongs to (a run with another instance of the same
        class moves it there)."""
        return self._workflow

    @property
    def is_running(self) -> bool:
        """Whether a run is using this context now (a run whose event loop was closed, say by
        Ctrl-C in a script, is not: its context can be resumed)."""
        runner = self._runner
        return runner is not None and not runner.finished and not runner.loop.is_closed()

    @property
    def has_pending_work(self) -> bool:
        """Whether an unfinished run is saved here (events queued or steps interrupted)."""
        return bool(self._pending or self._in_progress)

    @property
    def pending_questions(self) -> list[Event]:
        """The events (questions) of the steps waiting in ``wait_for_event``, oldest first."""
        return [w.waiter_event for w in self._waiters.values() if w.waiter_event is not None]

    def keys(self) -> list[str]:
        """The state keys set so far."""
        return list(self._state)

    def __repr__(self) -> str:
        status = "running" if self.is_running else ("unfinished" if self.has_pending_work else "idle")
        return (
            f"Context(workflow={type(self._workflow).__name__}, {status}, keys={self.keys()}, "
            f"queued={len(self._pending)}, interrupted={len(self._in_progress)}, "
            f"questions={len(self._waiters)})"
        )

    # ----- state --------------------------------------------------------------------------
    @property
    def store(self) -> ContextStore:
        """The state as the 0.12 workflow docs use it: ``await ctx.store.get("state")``,
        ``ctx.store.set``, ``async with ctx.store.edit_state() as s`` (the same keys as ``get``
        and ``set``; see ``nbagent.workflow.store``)."""
        store = self._store
        if store is None or store._data is not self._state:  # from_dict swaps the dict in
            store = self._store = ContextStore(self._state)
        return store

    async def get(self, key: str, default: Any = _MISSING) -> Any:
        """The value stored under ``key``; ``default`` if given and the key is not set."""
        if key in self._state:
            return self._state[key]
        if default is not _MISSING:
            return default
        raise KeyError(f"the context has no key {key!r}; keys set so far: {sorted(self._state) or '(none)'}")

    async def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` (keep values JSON-safe if the run is to be checkpointed)."""
        if not isinstance(key, str):
            raise TypeError(f"context keys are str, got {type(key).__name__}: {key!r}")
        self._state[key] = value

    # ----- events -------------------------------------------------------------------------
    def send_event(self, event: Event, step: str | None = None) -> None:
        """Send ``event`` to the steps that take it (or only to ``step``), or to a waiting step.

        Safe to call from another thread (e.g. a widget's callback) while a run is live.
        """
        if not isinstance(event, Event):
            raise TypeError(f"send_event() takes an Event, got {type(event).__name__}: {event!r}")
        runner = self._runner
        if runner is not None and runner.take_reported(event):
            return  # returned by run_step() and already delivered (the reference's loop sends it back)
        if runner is not None and not runner.finished and not runner.on_loop_thread():
            if step is not None:
                self._targets(event, step)  # a bad step name fails here, in the caller's thread
            runner.call_soon_threadsafe(self._dispatch_safely, event, step)
            return
        self._dispatch(event, step)

    def _dispatch_safely(self, event: Event, step: str | None) -> None:
        try:
            self._dispatch(event, step)
        except Exception as err:  # in the loop's thread: end the run with the error
            runner = self._runner
            if runner is not None:
                runner.fail(err)

    def _dispatch(self, event: Event, step: str | None = None) -> None:
        runner = self._runner
        live = runner is not None and not runner.finished
        if live:
            assert runner is not None
            runner.note_produced(event)  # for run_step() and checkpoints: what a step produced
        if step is None and isinstance(event, StopEvent):
            if not live:
                raise WorkflowRuntimeError("a StopEvent was sent, but no run is live to stop")
            assert runner is not None
            runner.stop_with(event)
            return
        if step is None and self._answer_waiter(event):
            return
        targets = self._targets(event, step)
        if not targets:
            if isinstance(event, InputRequiredEvent):
                self.write_event_to_stream(event)  # a question for the reader of the stream
                return
            takes = {name: [t.__name__ for t in s.accepts] for name, s in self._workflow.steps.items()}
            extra = ""
            if isinstance(event, HumanResponseEvent):
                extra = " and no step is waiting for an answer"
                if event.waiter_id is not None:
                    extra = f" and no step waits for an answer to question {event.waiter_id!r}"
            raise WorkflowRuntimeError(
                f"no step of {type(self._workflow).__name__} takes {type(event).__name__}{extra}; "
                f"the steps take: {takes}"
            )
        for name in targets:
            self._pending.append(Item(name, event))
        if live:
            assert runner is not None
            runner.wake()

    def _targets(self, event: Event, step: str | None) -> list[str]:
        steps = self._workflow.steps
        if step is not None:
            spec = steps.get(step)
            if spec is None:
                raise ValueError(f"there is no step {step!r}; steps: {list(steps)}")
            if not spec.takes(event):
                raise ValueError(
                    f"step {step!r} takes {[t.__name__ for t in spec.accepts]}, "
                    f"not {type(event).__name__}"
                )
            return [step]
        return [name for name, spec in steps.items() if spec.takes(event)]

    def _answer_waiter(self, event: Event) -> bool:
        for key, waiter in list(self._waiters.items()):
            if not isinstance(event, waiter.event_type):
                continue
            wanted = getattr(event, "waiter_id", None)
            if wanted is not None and wanted != key:
                continue
            differ = [k for k, v in waiter.requirements.items() if event.get(k, _MISSING) != v]
            if differ and wanted == key:  # an answer to this question, about something else
                told = "; ".join(
                    f"{k}: the answer says {_short(event.get(k, None))}, the question now asks "
                    f"about {_short(waiter.requirements[k])}"
                    for k in differ
                )
                raise WorkflowRuntimeError(
                    f"this {type(event).__name__} does not answer question {key!r} as it stands "
                    f"now ({told}); the run was resumed or went back since it was asked. Answer "
                    "the question pending now (handler.pending_questions)"
                )
            if differ:
                continue
            del self._waiters[key]
            self._answers[key] = (waiter.exec_id, event)
            if waiter.future is not None and not waiter.future.done():
                waiter.future.set_result(event)
            runner = self._runner
            if runner is not None and not runner.finished:
                if waiter.waiter_event is not None and waiter.announced is not runner:
                    waiter.announced = runner  # answered before the resumed run re-asked
                    runner.emit(waiter.waiter_event)
                runner.emit(event)  # the answer shows in the stream next to its question
            return True
        return False

    def write_event_to_stream(self, event: Event) -> None:
        """Hand ``event`` to whoever reads ``handler.stream_events()`` or subscribed to the run."""
        if not isinstance(event, Event):
            raise TypeError(f"write_event_to_stream() takes an Event, got {type(event).__name__}")
        runner = self._runner
        if runner is None:
            raise RuntimeError("write_event_to_stream() needs a run: this context was never run")
        runner.emit(event)

    def collect_events(self, event: Event, expected: Sequence[type[Event]]) -> list[Event] | None:
        """Buffer ``event``; once events of all ``expected`` types are there, return them.

        Returns None until then (the step should then return None). The events come back in
        the order of ``expected``; several of one type in the order they arrived.
        """
        ex = self._execution("collect_events")
        done = self._consumed.get(ex.exec_id)
        if done is not None:  # this execution is re-run after an interruption
            return list(done)
        buffer = self._collected.setdefault(ex.step, [])
        if not any(eid == ex.exec_id for eid, _ in buffer):
            buffer.append((ex.exec_id, event))
        used: list[int] = []
        for wanted in expected:
            index = next(
                (i for i, (_, ev) in enumerate(buffer) if i not in used and isinstance(ev, wanted)),
                None,
            )
            if index is None:
                return None
            used.append(index)
        events = [buffer[i][1] for i in used]
        self._collected[ex.step] = [entry for i, entry in enumerate(buffer) if i not in used]
        self._consumed[ex.exec_id] = events
        return list(events)

    async def wait_for_event(
        self,
        event_type: type[E],
        waiter_event: Event | None = None,
        requirements: dict[str, Any] | None = None,
        timeout: float | None = None,
        waiter_id: str | None = None,
    ) -> E:
        """Pause this step until an event of ``event_type`` is sent (e.g. a person's answer).

        ``waiter_event`` (e.g. an ``InputRequiredEvent`` with the question) is written to the
        stream; its ``waiter_id`` is filled in. ``requirements`` are field values the answer must
        have. If the run is stopped and resumed from a checkpoint, the step runs again from its
        start and this call returns the answer as soon as it is there, so put the wait before
        side effects that must not repeat.
        """
        ex = self._execution("wait_for_event")
        key = waiter_id or f"{ex.step}#{ex.exec_id}.{ex.waits}"
        ex.waits += 1
        answered = self._answers.get(key)
        if answered is not None:
            return answered[1]  # type: ignore[return-value]
        if isinstance(waiter_event, InputRequiredEvent) and waiter_event.waiter_id is None:
            waiter_event = waiter_event.model_copy(update={"waiter_id": key})
        waiter = self._waiters.get(key)
        if waiter is None:
            waiter = Waiter(key, ex.exec_id, event_type, dict(requirements or {}), waiter_event)
            self._waiters[key] = waiter
        elif waiter_event is not None:
            waiter.waiter_event = waiter_event
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Event] = loop.create_future()
        waiter.future = future
        runner = self._runner
        if waiter.waiter_event is not None and waiter.announced is not runner:
            waiter.announced = runner
            self.write_event_to_stream(waiter.waiter_event)
        if runner is not None:
            runner.question_asked()
        try:
            if timeout is None:
                return await future  # type: ignore[return-value]
            return await asyncio.wait_for(future, timeout)  # type: ignore[return-value, arg-type]
        except asyncio.TimeoutError:
            self._waiters.pop(key, None)
            raise
        finally:
            if waiter.future is future:
                waiter.future = None

    async def run_tool_once(self, tool_call_id: str | None, run: Callable[[], Awaitable[ToolOutput]]) -> ToolOutput:
        """Run this step execution's tool call at most once: run again after an interruption
        (a resumed run), the execution gets the output the call gave the first time, or waits
        for a sync tool whose thread outlived the interruption, instead of calling it again."""
        ex = self._execution("run_tool_once")
        journal = self._ran.setdefault(ex.exec_id, {})
        return await run_call(
            "call", tool_call_id, run, journal=journal, where=(f"workflow {id(self)}", str(ex.exec_id))
        )

    def _execution(self, what: str) -> Execution:
        ex = _CURRENT.get()
        if ex is None or ex.ctx is not self:
            raise RuntimeError(f"{what}() can only be called inside a step of a run of this context")
        return ex

    # ----- bookkeeping used by the runtime ------------------------------------------------
    def _execution_done(self, exec_id: int) -> None:
        self._in_progress.pop(exec_id, None)
        self._consumed.pop(exec_id, None)
        self._ran.pop(exec_id, None)
        for key in [k for k, (eid, _) in self._answers.items() if eid == exec_id]:
            del self._answers[key]
        for key in [k for k, w in self._waiters.items() if w.exec_id == exec_id]:
            del self._waiters[key]

    def _requeue_interrupted(self) -> None:
        """Put interrupted step executions back at the head of the queue, oldest first."""
        interrupted = [self._in_progress[k] for k in sorted(self._in_progress)]
        self._in_progress.clear()
        self._pending.extendleft(reversed(interrupted))

    def _clear_run(self) -> None:
        self._pending.clear()
        self._in_progress.clear()
        self._collected.clear()
        self._consumed.clear()
        self._waiters.clear()
        self._answers.clear()
        self._ran.clear()

    # ----- checkpoints --------------------------------------------------------------------
    def to_dict(self, serializer: Any = None) -> dict[str, Any]:
        """Everything needed to resume, as JSON-safe data (``json.dumps`` takes it as is).

        A value that cannot be saved raises ``CheckpointError`` naming its key and type. Call it
        from the run's own thread (or when no run is live). ``serializer``: the reference's
        ``JsonSerializer()`` (the only format there is) or nothing.
        """
        check_serializer(serializer)
        interrupted = [self._in_progress[k] for k in sorted(self._in_progress)]
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "workflow": event_type_name(type(self._workflow)),
            "state": {k: encode_value(v, f"state[{k!r}]") for k, v in self._state.items()},
            "pending": [
                {"step": it.step, "event": encode_event(it.event, f"pending[{i}].event")}
                for i, it in enumerate(self._pending)
            ],
            "interrupted": [
                {"exec_id": it.exec_id, "step": it.step, "event": encode_event(it.event, f"interrupted[{i}].event")}
                for i, it in enumerate(interrupted)
            ],
            "collected": {
                step: [
                    {"exec_id": eid, "event": encode_event(ev, f"collected[{step!r}][{i}]")}
                    for i, (eid, ev) in enumerate(entries)
                ]
                for step, entries in self._collected.items()
                if entries
            },
            "consumed": {
                str(eid): [encode_event(ev, f"consumed[{eid}][{i}]") for i, ev in enumerate(evs)]
                for eid, evs in self._consumed.items()
            },
            "waiters": [
                {
                    "key": w.key,
                    "exec_id": w.exec_id,
                    "event_type": event_type_name(w.event_type),
                    "requirements": encode_value(w.requirements, f"waiters[{w.key!r}].requirements"),
                    "waiter_event": None
                    if w.waiter_event is None
                    else encode_event(w.waiter_event, f"waiters[{w.key!r}].waiter_event"),
                }
                for w in self._waiters.values()
            ],
            "answers": [
                {"key": key, "exec_id": eid, "event": encode_event(ev, f"answers[{key!r}]")}
                for key, (eid, ev) in self._answers.items()
            ],
            "ran": {
                str(eid): {"outputs": encode_value(dict(j["outputs"]), f"ran[{eid}]")}
                for eid, j in self._ran.items()
                if j.get("outputs")
            },
            "next_exec": self._next_exec,
        }

    @classmethod
    def from_dict(cls, workflow: Workflow, data: dict[str, Any], serializer: Any = None) -> Context:
        """Load a context saved by ``to_dict`` for ``workflow`` (a workflow of the same class)."""
        check_serializer(serializer)
        workflow = _as_workflow(workflow)
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(
                f"not a saved workflow context: expected a dict with format={CHECKPOINT_FORMAT!r}"
            )
        if data.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint version {data.get('version')!r} is not supported (this nbagent reads "
                f"version {CHECKPOINT_VERSION})"
            )
        saved_for = data.get("workflow")
        if saved_for != event_type_name(type(workflow)):
            raise CheckpointError(
                f"this checkpoint was saved by a {saved_for!r} run and cannot resume a "
                f"{event_type_name(type(workflow))!r}"
            )
        ctx = cls(workflow)
        steps = workflow.steps

        def step_name(name: Any, where: str) -> str:
            if name not in steps:
                raise CheckpointError(f"{where}: the workflow has no step {name!r}; steps: {list(steps)}")
            return str(name)

        ctx._state = {k: decode_value(v, f"state[{k!r}]") for k, v in dict(data.get("state") or {}).items()}
        for i, it in enumerate(data.get("pending") or []):
            ctx._pending.append(
                Item(step_name(it["step"], f"pending[{i}]"), decode_event(it["event"], f"pending[{i}].event"))
            )
        for i, it in enumerate(data.get("interrupted") or []):
            eid = int(it["exec_id"])
            ctx._in_progress[eid] = Item(
                step_name(it["step"], f"interrupted[{i}]"),
                decode_event(it["event"], f"interrupted[{i}].event"),
                eid,
            )
        for step, entries in dict(data.get("collected") or {}).items():
            ctx._collected[step_name(step, f"collected[{step!r}]")] = [
                (int(e["exec_id"]), decode_event(e["event"], f"collected[{step!r}][{i}]"))
                for i, e in enumerate(entries)
            ]
        for eid, events in dict(data.get("consumed") or {}).items():
            ctx._consumed[int(eid)] = [decode_event(e, f"consumed[{eid}][{i}]") for i, e in enumerate(events)]
        from nbagent.workflow.serde import _find_class

        for w in data.get("waiters") or []:
            key = str(w["key"])
            event_type = _find_class(str(w["event_type"]), f"waiters[{key!r}].event_type")
            if not issubclass(event_type, Event):
                raise CheckpointError(f"waiters[{key!r}]: {w['event_type']!r} is not an Event class")
            ctx._waiters[key] = Waiter(
                key=key,
                exec_id=int(w["exec_id"]),
                event_type=event_type,
                requirements=dict(decode_value(w.get("requirements") or {}, f"waiters[{key!r}].requirements")),
                waiter_event=None
                if w.get("waiter_event") is None
                else decode_event(w["waiter_event"], f"waiters[{key!r}].waiter_event"),
            )
        for a in data.get("answers") or []:
            ctx._answers[str(a["key"])] = (int(a["exec_id"]), decode_event(a["event"], f"answers[{a['key']!r}]"))
        for eid, j in dict(data.get("ran") or {}).items():
            ctx._ran[int(eid)] = {"outputs": dict(decode_value(j.get("outputs") or {}, f"ran[{eid}]"))}
        ctx._next_exec = int(data.get("next_exec") or 1)
        return ctx
