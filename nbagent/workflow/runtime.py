"""The run loop: one ``Runner`` per run (users hold its handler, ``handler.py``).

The runner starts a step for each queued event (at most ``num_workers`` at a
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent.events import EventDispatcher, ModelCalled, StepContext, _reset_current, _set_current
from nbagent.workflow.checkpoint import call_checkpoint_callback, checkpoint_style
from nbagent.workflow.execution import _CURRENT, Execution, Item
from nbagent.workflow.errors import (
    WorkflowCancelledError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
)
from nbagent.workflow.events import Event, StopEvent

if TYPE_CHECKING:
    from nbagent.workflow.context import Context
    from nbagent.workflow.decorators import StepSpec
    from nbagent.workflow.workflow import Workflow

__all__ = ["Runner", "END"]

log = logging.getLogger("nbagent.workflow")

END = object()  # what the event stream yields last: the run is over
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
        #: the model calls of its steps, for whoever listens (tracing): ``handler.events``
        self.events = EventDispatcher()
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
        token = None
        if self.events.wants(ModelCalled):  # its model calls report to the run (each step is its own task)
            token = _set_current(StepContext("", item.step, self.events))
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
        finally:
            if token is not None:  # the step's code ended: what listeners opened for it closes
                _reset_current(token)
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
        self.stream.put_nowait(END)
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
