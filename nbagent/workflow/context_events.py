"""What a context does with events: routing a sent event to the steps that take it, the
answers to the questions steps wait on (``wait_for_event``), the buffers of
``collect_events``, events written to the run's stream, and tool calls run at most once.
``Context`` is made of this and the saved form (``context_saved.py``)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from nbagent.calls import run_call
from nbagent.messages import ToolOutput
from nbagent.workflow.errors import WorkflowRuntimeError
from nbagent.workflow.events import Event, HumanResponseEvent, InputRequiredEvent, StopEvent
from nbagent.workflow.execution import _CURRENT, Execution, Item, Waiter

if TYPE_CHECKING:
    from nbagent.workflow.runtime import Runner
    from nbagent.workflow.workflow import Workflow

__all__ = ["ContextEvents"]

E = TypeVar("E", bound=Event)
_MISSING: Any = object()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:159] + "…"


class ContextEvents:
    """The event side of ``Context`` (its attributes are declared by ``Context.__init__``)."""

    _workflow: Workflow
    _runner: Runner | None
    _pending: deque[Item]
    _collected: dict[str, list[tuple[int, Event]]]
    _consumed: dict[int, list[Event]]
    _waiters: dict[str, Waiter]
    _answers: dict[str, tuple[int, Event]]
    _ran: dict[int, dict[str, Any]]

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
        for a sync tool whose thread outlived the interruption, instead of calling it again.

        Example:

        >>> from nbagent import FunctionTool
        >>> from nbagent.workflow import Context, StartEvent, StopEvent, Workflow, step
        >>> sent = []
        >>> def send_mail(to: str) -> str:
        ...     "Send a mail."
        ...     sent.append(to)
        ...     return f"sent to {to}"
        >>> mail = FunctionTool.from_defaults(send_mail)
        >>> class Mailer(Workflow):
        ...     @step
        ...     async def send(self, ctx: Context, ev: StartEvent) -> StopEvent:
        ...         # a resumed run gets the first output back instead of sending twice
        ...         out = await ctx.run_tool_once("mail-1", lambda: mail.acall(to=ev.get("to")))
        ...         return StopEvent(result=out.content)
        >>> Mailer().run_sync(to="ada"), sent
        ('sent to ada', ['ada'])
        """
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
