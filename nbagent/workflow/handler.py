"""The handler a run returns: await it for the result, stream its events, answer its questions,
run it step by step, stop it, checkpoint it. It holds the run's ``Runner`` (``runtime.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from nbagent.events import EventDispatcher
from nbagent.registry import show
from nbagent.workflow.context import Context
from nbagent.workflow.errors import WorkflowCancelledError
from nbagent.workflow.events import Event, HumanResponseEvent
from nbagent.workflow.runtime import END, Listener, Runner
from nbagent.workflow.stepwise import run_one_step

if TYPE_CHECKING:
    from nbagent.viz.workflow_live import HumanInputBox

__all__ = ["WorkflowHandler"]


class WorkflowHandler:
    """A running (or finished) workflow run: await it for the result, stream its events.

    ``await handler`` returns the result or raises the step's own exception.
    ``handler.stream_events()`` yields what steps wrote to the stream, ending with the StopEvent.
    ``handler.ctx`` is the run's context (``handler.ctx.to_dict()`` is a checkpoint).
    """

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._stream_taken = False
        self.ctx: Context = runner.ctx

    # ----- result -------------------------------------------------------------------------
    def __await__(self) -> Any:
        runner = self._runner
        if runner.stepwise and not runner.finished and not runner.stepping:
            return self._run_remaining_steps().__await__()
        if runner.future.done():  # also from another loop than the run's
            return self._result_now().__await__()
        return runner.future.__await__()

    async def _result_now(self) -> Any:
        return self._runner.future.result()

    async def _run_remaining_steps(self) -> Any:
        """A step-wise run awaited: run its remaining steps (waiting for answers) to the end."""
        runner = self._runner
        while not runner.finished and not runner.stepping:
            await run_one_step(runner, through_questions=True)
        if runner.future.done():
            return runner.future.result()
        return await runner.future

    # ----- step-wise runs -------------------------------------------------------------------
    @property
    def stepwise(self) -> bool:
        """Whether this run advances only when ``run_step()`` is called."""
        return self._runner.stepwise

    @property
    def events(self) -> EventDispatcher:
        """The run's own events (``ModelCalled`` for each model call of its steps); what the
        steps write to the stream is ``subscribe``'s."""
        return self._runner.events

    @property
    def run_id(self) -> str:
        """This run's id (the checkpoints of the run carry it)."""
        return self._runner.run_id

    def is_done(self) -> bool:
        """Whether the run has ended (the reference's name for ``done()``)."""
        return self.done()

    async def run_step(self) -> list[Event] | None:
        """Run the next step of a step-wise run; the events it produced, or None once the run is over.

        See ``nbagent.workflow.stepwise``: the events are already delivered (sending them back
        with ``handler.ctx.send_event`` is a no-op); a step that asks a person returns with the
        question, and the next call finishes it once answered.
        """
        return await run_one_step(self._runner)

    def on_step(self, listener: Callable[[list[Event]], Any]) -> Callable[[], None]:
        """Call ``listener(events)`` after every ``run_step()``; returns a function that stops it."""
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        listeners = self._runner.step_listeners
        listeners.append(listener)

        def unsubscribe() -> None:
            if listener in listeners:
                listeners.remove(listener)

        return unsubscribe

    def done(self) -> bool:
        """Whether the run has ended (done, failed or cancelled)."""
        return self._runner.future.done()

    def result(self) -> Any:
        """The result of a finished run (raises its exception; InvalidStateError while running)."""
        return self._runner.future.result()

    def exception(self) -> BaseException | None:
        """The exception that ended a finished run, or None if it ended with a result
        (InvalidStateError while running)."""
        return self._runner.future.exception()

    @property
    def resumed(self) -> bool:
        """Whether this run resumed an unfinished one (from a checkpoint, a stop or a failure)."""
        return self._runner.resumed

    @property
    def status(self) -> str:
        """``running``, ``waiting`` (for an answer), ``paused`` (a step-wise run between steps),
        ``done``, ``failed`` or ``cancelled``."""
        r = self._runner
        if not r.finished:
            live = sum(1 for w in self.ctx._waiters.values() if w.future is not None and not w.future.done())
            if r.stepwise:
                return "waiting" if live else ("running" if r.stepping else "paused")
            return "waiting" if live and live >= len(r.tasks) and not self.ctx._pending else "running"
        return r.outcome

    def add_done_callback(self, fn: Callable[[WorkflowHandler], Any]) -> None:
        """Call ``fn(handler)`` once the run has ended (at once if it has)."""
        self._runner.future.add_done_callback(lambda _f: fn(self))

    # ----- events -------------------------------------------------------------------------
    async def stream_events(self) -> AsyncIterator[Event]:
        """The events steps write to the stream, in order, ending with the StopEvent.

        If the run fails, the iteration raises the run's exception after the last event.
        One reader per handler; use ``subscribe`` to watch from several places.
        """
        if self._stream_taken:
            raise RuntimeError(
                "stream_events() was already iterated for this run; use handler.subscribe(fn) "
                "to watch the events from several places"
            )
        self._stream_taken = True
        runner = self._runner
        while True:
            event = await runner.stream.get()
            if event is END:
                break
            yield event
        if runner.future.done() and not runner.future.cancelled():
            err = runner.future.exception()
            if err is not None:
                raise err

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every event written to the stream from now on.

        Returns a function that unsubscribes it. Listeners run in the run's thread; one that
        raises is logged and never breaks the run.
        """
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        self._runner.listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._runner.listeners:
                self._runner.listeners.remove(listener)

        return unsubscribe

    def send_event(self, event: Event, step: str | None = None) -> None:
        """Send an event into the run (thread-safe); see ``Context.send_event``."""
        self.ctx.send_event(event, step)

    # ----- people in the loop -------------------------------------------------------------
    @property
    def pending_questions(self) -> list[Event]:
        """The questions steps are waiting on (each an ``InputRequiredEvent``), oldest first."""
        return self.ctx.pending_questions

    async def wait_for_question(self) -> Event | None:
        """The oldest waiting question, as soon as there is one; None if the run ends first."""
        while True:
            questions = self.pending_questions
            if questions:
                return questions[0]
            if self._runner.finished:
                return None
            fut: asyncio.Future[None] = self._runner.loop.create_future()
            self._runner.question_futures.append(fut)
            await fut

    def respond(self, response: str, question: Event | None = None, **fields: Any) -> None:
        """Answer ``question`` (default: the oldest waiting one) with ``response``.

        The answer carries the question's ``waiter_id`` and the field values the waiting step
        requires; ``fields`` adds more. Thread-safe.
        """
        questions = self.pending_questions
        if question is None:
            if not questions:
                raise RuntimeError("no question is waiting for an answer in this run")
            question = questions[0]
        key = getattr(question, "waiter_id", None)
        waiter = self.ctx._waiters.get(key) if key is not None else None
        if waiter is None:
            waiting = [getattr(q, "waiter_id", None) for q in questions]
            raise RuntimeError(f"question {key!r} is not waiting for an answer; waiting: {waiting}")
        event_type = waiter.event_type
        if not issubclass(event_type, HumanResponseEvent):
            raise TypeError(
                f"the step waits for {event_type.__name__}, not a HumanResponseEvent; send it "
                "with handler.send_event(...)"
            )
        values = {**waiter.requirements, **fields}
        self.send_event(event_type(response=response, waiter_id=key, **values))

    def input_box(self) -> HumanInputBox:
        """A notebook widget (text box and button) that answers this run's questions."""
        return show(self, "input_box")  # type: ignore[no-any-return]

    # ----- stopping and saving ------------------------------------------------------------
    def stop(self) -> None:
        """Ask the run to stop (thread-safe); awaiting it then raises WorkflowCancelledError.

        Always stops: if the run loop is gone (its task cancelled or interrupted), the run
        is ended here."""
        runner = self._runner
        if runner.finished:
            return
        main = runner.main
        if main is not None and main.done():
            def end() -> None:
                runner.fail(WorkflowCancelledError(
                    f"the {type(runner.workflow).__name__} run was stopped; resume it with "
                    "workflow.run(ctx=handler.ctx)"
                ))

            if runner.on_loop_thread() or runner.loop.is_closed():
                end()
            else:
                runner.loop.call_soon_threadsafe(end)
            return
        runner.request_cancel()

    async def cancel_run(self) -> None:
        """Stop the run and wait until it has stopped. Its context can be resumed later."""
        self.stop()
        try:
            await asyncio.shield(self._runner.future)
        except WorkflowCancelledError:
            pass
        except Exception:  # noqa: BLE001 - it ended another way; nothing to cancel
            pass
        if self._runner.main is not None:
            await asyncio.wait([self._runner.main], timeout=5.0)
        elif self._runner.tasks:  # a step-wise run: let its cancelled step unwind
            await asyncio.wait(list(self._runner.tasks.values()), timeout=5.0)

    def checkpoint(self) -> dict[str, Any]:
        """``ctx.to_dict()``: a JSON-safe snapshot to resume from."""
        return self.ctx.to_dict()

    def __repr__(self) -> str:
        questions = len(self.pending_questions)
        extra = f", questions={questions}" if questions else ""
        return f"WorkflowHandler({type(self._runner.workflow).__name__}, {self.status}{extra})"
