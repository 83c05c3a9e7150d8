"""The run loop and the handler a run returns.

One ``Runner`` per run. It starts a step for each queued event (at most ``num_workers`` at a
time per step) as an asyncio task, and handles each finished step in the order it finished:
the events it returned go to the steps that take them; a ``StopEvent`` ends the run; an
exception ends it with that very exception. Everything runs on the event loop ``run()`` was
called on, so for offline models the order of events is the same on every run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from nbagent.registry import show
from nbagent.workflow.checkpoint import call_checkpoint_callback, checkpoint_style
from nbagent.workflow.context import _CURRENT, Context, Execution, Item
from nbagent.workflow.errors import (
    WorkflowCancelledError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
)
from nbagent.workflow.events import Event, HumanResponseEvent, StopEvent

if TYPE_CHECKING:
    from nbagent.workflow.decorators import StepSpec
    from nbagent.workflow.workflow import Workflow

__all__ = ["Runner", "WorkflowHandler"]

log = logging.getLogger("nbagent.workflow")

_END = object()
Listener = Callable[[Event], Any]


class Runner:
    """Drives one run of a workflow over a context (internal; users hold the handler)."""

    def __init__(
        self,
        workflow: Workflow,
        ctx: Context,
        loop: asyncio.AbstractEventLoop,
        timeout: float | None,
        *,
        stepwise: bool = False,
        checkpoint_callback: Any = None,
    ) -> None:
        self.workflow = workflow
        self.ctx = ctx
        self.loop = loop
        self.timeout = timeout
        self.thread = threading.get_ident()
        self.notes: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.items: dict[int, Item] = {}
        self.running: Counter[str] = Counter()
        self.stream: asyncio.Queue[Any] = asyncio.Queue()
        self.listeners: list[Listener] = []
        self.future: asyncio.Future[Any] = loop.create_future()
        self.finished = False
        self.outcome = "running"
        self.question_futures: list[asyncio.Future[None]] = []
        self.main: asyncio.Task[None] | None = None
        self.resumed = False
        # step-wise runs and checkpoints (see nbagent.workflow.stepwise / checkpoint)
        self.stepwise = bool(stepwise)
        self.checkpoint_callback = checkpoint_callback
        self.checkpoint_style = "" if checkpoint_callback is None else checkpoint_style(checkpoint_callback)
        self._run_id: str | None = None
        self.produced: dict[int, list[Event]] | None = {} if (stepwise or checkpoint_callback is not None) else None
        self.reported: list[Event] = []  # what the last run_step() returned: sending it again is a no-op
        self.step_listeners: list[Callable[[list[Event]], Any]] = []
        self.stepping = False
        self.waiting_exec: int | None = None

    @property
    def run_id(self) -> str:
        """This run's id (made when first asked for, so seeded ids stay as they were)."""
        if self._run_id is None:
            from nbagent.ids import new_id

            self._run_id = new_id()
        return self._run_id

    def note_produced(self, event: Event) -> None:
        """Record ``event`` as produced by the step execution running now (if any)."""
        if self.produced is None:
            return
        ex = _CURRENT.get()
        if ex is not None and ex.ctx is self.ctx:
            self.produced.setdefault(ex.exec_id, []).append(event)

    def take_reported(self, event: Event) -> bool:
        """Whether ``event`` is one the last ``run_step()`` returned (it is then forgotten)."""
        for i, seen in enumerate(self.reported):
            if seen is event:
                del self.reported[i]
                return True
        return False

    # ----- threads ------------------------------------------------------------------------
    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    # ----- the loop -----------------------------------------------------------------------
    def start(self) -> None:
        if self.stepwise:  # nothing runs until handler.run_step()
            self._announce_waiters()
            return
        self.main = self.loop.create_task(self._main(), name="nbagent-workflow-run")
        self.main.add_done_callback(self._main_done)
        self.future.add_done_callback(self._future_done)

    def _main_done(self, task: asyncio.Task[None]) -> None:
        """The run loop ended: if it was cancelled or interrupted (asyncio.run shutting down,
        Ctrl-C) before the run ended, end the run as stopped, so its context is free to resume."""
        if not self.finished:
            why = "was interrupted" if task.cancelled() or task.exception() is None else (
                f"was interrupted ({type(task.exception()).__name__})"
            )
            self.fail(WorkflowCancelledError(
                f"the {type(self.workflow).__name__} run {why}; resume it with "
                "workflow.run(ctx=handler.ctx)"
            ))
        if not task.cancelled():
            task.exception()  # retrieved: reported through the run's result

    def _future_done(self, future: asyncio.Future[Any]) -> None:
        """Whoever awaited the run gave up on it (``asyncio.wait_for`` timed out, the awaiting
        task was cancelled): stop the run, so it does not go on unseen and its context can be
        resumed."""
        if future.cancelled() and not self.finished:
            self.request_cancel()

    def _announce_waiters(self) -> None:
        for waiter in list(self.ctx._waiters.values()):  # questions a resumed run still waits on
            if waiter.waiter_event is not None and waiter.announced is not self:
                waiter.announced = self
                self.emit(waiter.waiter_event)

    def wake(self) -> None:
        self.notes.put_nowait(("wake",))

    async def _main(self) -> None:
        deadline = None if self.timeout is None else self.loop.time() + self.timeout
        self._announce_waiters()
        try:
            while not self.finished:
                self._start_ready()
                if not self.tasks:
                    raise WorkflowRuntimeError(
                        f"the {type(self.workflow).__name__} run has nothing left to do, yet no step "
                        "returned a StopEvent (a step returned None and no event is waiting)"
                    )
                if deadline is None:
                    note = await self.notes.get()
                else:
                    remaining = deadline - self.loop.time()
                    try:
                        note = await asyncio.wait_for(self.notes.get(), max(remaining, 0.0))
                    except asyncio.TimeoutError:
                        running = sorted({it.step for it in self.items.values()})
                        self.fail(
                            WorkflowTimeoutError(
                                f"the {type(self.workflow).__name__} run did not finish within "
                                f"timeout={self.timeout} s (steps still running: {running}); "
                                "resume it with workflow.run(ctx=handler.ctx), or set a larger timeout"
                            )
                        )
                        break
                self._handle(note)
        except Exception as err:  # an event no step takes, a bad return value...
            self.fail(err)
        except BaseException:  # cancelled (asyncio.run ends, a timeout), interrupted, or the
            # loop was closed under it (GeneratorExit: nothing may be awaited any more)
            if self.loop.is_closed():
                self.finished, self.outcome = True, "cancelled"  # nothing can run: just end
            else:
                self.fail(WorkflowCancelledError(
                    f"the {type(self.workflow).__name__} run was interrupted; resume it with "
                    "workflow.run(ctx=handler.ctx)"
                ))
            raise
        await self._settle()

    def _start_ready(self) -> None:
        ctx = self.ctx
        waiting = []
        while ctx._pending:
            item = ctx._pending.popleft()
            spec = self.workflow.steps[item.step]
            if self.running[item.step] >= spec.num_workers:
                waiting.append(item)
                continue
            if item.exec_id is None:
                item.exec_id = ctx._next_exec
                ctx._next_exec += 1
            eid = item.exec_id
            ctx._in_progress[eid] = item
            self.items[eid] = item
            self.running[item.step] += 1
            task = self.loop.create_task(self._execute(spec, item), name=f"nbagent-step-{item.step}")
            task.add_done_callback(self._note_done(eid))
            self.tasks[eid] = task
        ctx._pending.extend(waiting)

    def _note_done(self, eid: Any) -> Callable[[asyncio.Task[None]], None]:
        """A done-callback that tells the run loop execution ``eid`` ended."""

        def done(_task: asyncio.Task[None]) -> None:
            self.notes.put_nowait(("done", eid))

        return done

    async def _execute(self, spec: StepSpec, item: Item) -> None:
        """Run one step and act on its outcome in the same breath, so a checkpoint taken at any
        moment sees the step either interrupted (it will run again) or fully handled."""
        assert item.exec_id is not None
        _CURRENT.set(Execution(self.ctx, item.step, item.exec_id))
        if self.workflow.verbose:  # the reference's words
            print(f"Running step {item.step}")
        try:
            result = await spec.invoke(self.workflow, self.ctx, item.event)
        except Exception as err:
            try:
                err.add_note(f"(raised in step {item.step!r} of {type(self.workflow).__name__})")
            except Exception:  # noqa: BLE001 - a note is a nicety
                pass
            self.fail(err)
            return
        if self.finished:
            return
        try:
            events = self._as_events(item.step, result)
            self.ctx._execution_done(item.exec_id)
            if self.workflow.verbose and not events:
                print(f"Step {item.step} produced no event")
            stop: StopEvent | None = None
            for event in events:
                if self.workflow.verbose:
                    print(f"Step {item.step} produced event {type(event).__name__}")
                if isinstance(event, StopEvent):
                    stop = event
                    self.note_produced(event)
                    break
                self.ctx._dispatch(event)
            if self.checkpoint_callback is not None and not self.finished:
                table = self.produced or {}
                produced = list(table.get(item.exec_id, []) if self.stepwise else table.pop(item.exec_id, []))
                await call_checkpoint_callback(
                    self.checkpoint_callback,
                    self.checkpoint_style,
                    run_id=self.run_id,
                    ctx=self.ctx,
                    step=item.step,
                    input_event=item.event,
                    output_events=produced,
                )
            if stop is not None:
                self.stop_with(stop)
        except Exception as err:  # an event no step takes, a bad return value, a checkpoint
            self.fail(err)

    def _handle(self, note: tuple[Any, ...]) -> None:
        kind = note[0]
        if kind == "cancel":
            self.fail(WorkflowCancelledError(
                f"the {type(self.workflow).__name__} run was stopped; resume it with "
                "workflow.run(ctx=handler.ctx)"
            ))
            return
        if kind != "done":
            return
        eid = note[1]
        task = self.tasks.pop(eid, None)
        item = self.items.pop(eid, None)
        if task is None or item is None:
            return
        self.running[item.step] -= 1
        if task.cancelled():
            self.fail(WorkflowCancelledError(f"step {item.step!r} was cancelled"))
        elif task.exception() is not None:  # KeyboardInterrupt and such: steps catch the rest
            self.fail(WorkflowCancelledError(
                f"step {item.step!r} was interrupted ({type(task.exception()).__name__}); resume "
                "the run with workflow.run(ctx=handler.ctx)"
            ))

    def _as_events(self, step: str, result: Any) -> list[Event]:
        if result is None:
            return []
        if isinstance(result, Event):
            return [result]
        if isinstance(result, (list, tuple)) and all(isinstance(e, Event) for e in result):
            return list(result)
        raise WorkflowRuntimeError(
            f"step {step!r} returned {type(result).__name__}: {result!r:.100}; a step returns "
            "an Event, a list of Events, or None"
        )

    # ----- the end ------------------------------------------------------------------------
    def stop_with(self, event: StopEvent) -> None:
        """End the run with this StopEvent (its ``result`` is the run's result)."""
        if self.finished:
            return
        self.finished = True
        self.outcome = "done"
        self._cancel_tasks()
        self.ctx._clear_run()
        self._push(event)
        if not self.future.done():
            self.future.set_result(event.result if type(event) is StopEvent else event)
        self._close()

    def fail(self, err: BaseException) -> None:
        """End the run with ``err``; the context keeps what is needed to resume."""
        if self.finished:
            return
        self.finished = True
        self.outcome = "cancelled" if isinstance(err, WorkflowCancelledError) else "failed"
        self._cancel_tasks()
        for waiter in self.ctx._waiters.values():
            waiter.future = None
        if not self.future.done():
            self.future.set_exception(err)
        else:
            err.__traceback__ = None  # nobody awaits it any more
        self._close()

    def _cancel_tasks(self) -> None:
        me = asyncio.current_task()
        for task in self.tasks.values():
            if task is not me:
                task.cancel()

    def request_cancel(self) -> None:
        if self.stepwise:  # no run loop to read the note: end the run here
            def cancel() -> None:
                self.fail(WorkflowCancelledError(
                    f"the {type(self.workflow).__name__} run was stopped; resume it with "
                    "workflow.run(ctx=handler.ctx)"
                ))

            if self.on_loop_thread():
                cancel()
            else:
                self.loop.call_soon_threadsafe(cancel)
            return
        if self.on_loop_thread():
            self.notes.put_nowait(("cancel",))
        else:
            self.loop.call_soon_threadsafe(self.notes.put_nowait, ("cancel",))

    def _close(self) -> None:
        self.stream.put_nowait(_END)
        self.notes.put_nowait(("wake",))  # the loop may be waiting: let it see the end
        self.question_asked()

    async def _settle(self) -> None:
        """Let cancelled steps unwind (bounded), so no task outlives its run."""
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        for task in self.tasks.values():
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: no "never retrieved" warning for cancelled siblings
        # interrupted steps of a failed run stay in ctx._in_progress, ready to resume

    # ----- the stream ---------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        if self.finished:
            return
        self._push(event)

    def _push(self, event: Event) -> None:
        self.stream.put_nowait(event)
        for fn in list(self.listeners):
            try:
                fn(event)
            except Exception:  # a broken view must not break the run
                log.exception("nbagent workflow listener %r failed on %s", fn, type(event).__name__)

    def question_asked(self) -> None:
        futures, self.question_futures = self.question_futures, []
        for fut in futures:
            if not fut.done():
                fut.set_result(None)


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
        from nbagent.workflow.stepwise import run_one_step

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
        from nbagent.workflow.stepwise import run_one_step

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
        return self._runner.future.done()

    def result(self) -> Any:
        """The result of a finished run (raises its exception; InvalidStateError while running)."""
        return self._runner.future.result()

    def exception(self) -> BaseException | None:
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
            if event is _END:
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
        """Questions steps are waiting on (``InputRequiredEvent``s), oldest first."""
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

    def input_box(self) -> Any:
        """A notebook widget (text box and button) that answers this run's questions."""
        return show(self, "input_box")

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
