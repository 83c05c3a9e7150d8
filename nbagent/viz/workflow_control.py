"""WorkflowControl: what the workflow panel does, with no widget in sight.

Start a step-wise run of a workflow, run one step of it, run it to the end (a question waits
for its answer), stop it, answer the question it asks; follow the run's events into a
``RunTrace`` whose DOT text (``run_to_dot``) is the run graph. A view passes
``on_change(kind)`` and redraws from this object when it is called: ``"state"`` after every
change (at once after an action or a step; throttled for events), nothing else.

Clicks never block the kernel: ``step()`` and ``run()`` schedule an asyncio task on the running
loop and return it (``await panel.step()`` in a cell gives the step's events). A step that fails
is shown in the status and kept in ``error``, never raised into the frontend; ``press(action)``
(what a button does) shows a call that does not fit the run's state as ``notice``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.text import html_text, preview
from nbagent.viz.live import Throttle

if TYPE_CHECKING:
    from nbagent.workflow.events import Event
    from nbagent.workflow.handler import WorkflowHandler
    from nbagent.workflow.trace import RunTrace

__all__ = ["WorkflowControl", "event_parts"]

log = logging.getLogger("nbagent.viz")


def event_parts(event: Event) -> tuple[str, str]:
    """An event as (its type's name, what it is about: its first telling field)."""
    about = ""
    for field in ("current_agent_name", "tool_name", "prefix", "response", "result"):
        value = getattr(event, field, None)
        if value not in (None, ""):
            about = f"{field}={preview(value, 60)}"
            break
    return type(event).__name__, about


class WorkflowControl:
    """Drives step-wise runs of ``workflow`` (see the module docstring). ``run_kwargs`` go to
    every ``workflow.run(...)`` it starts (``ctx``, ``max_iterations``, ``checkpoint_callback``...);
    ``dot_options`` to ``run_to_dot`` (``rankdir``, ``max_label``...)."""

    def __init__(
        self,
        workflow: Any,
        *,
        throttle_s: float = 0.1,
        on_change: Callable[[str], None] | None = None,
        dot_options: dict[str, Any] | None = None,
        **run_kwargs: Any,
    ) -> None:
        from nbagent.viz.workflow_dot import check_workflow_options
        from nbagent.workflow.trace import RunTrace

        self.dot_options = dict(dot_options or {})
        check_workflow_options(**self.dot_options)
        as_workflow = getattr(workflow, "_as_workflow", None)
        self.workflow = as_workflow() if callable(as_workflow) else workflow
        self.run_kwargs = dict(run_kwargs)
        self.on_change = on_change
        self.handler: WorkflowHandler | None = None
        self.trace: RunTrace = RunTrace.for_workflow(self.workflow)
        self.last_events: list[Event] = []
        self.error: BaseException | None = None
        self.notice = ""
        self.steps = 0
        self.running_task: asyncio.Task[Any] | None = None
        self._lock = threading.RLock()  # the trace: events may come from another thread
        self._unsubscribe: list[Callable[[], None]] = []
        self._throttle = Throttle(lambda: self._emit("state"), throttle_s)

    # ----- the twins of the buttons -------------------------------------------------------
    def start(self, user_msg: str | None = None, **kwargs: Any) -> WorkflowHandler:
        """Start a step-wise run (nothing runs until ``step()`` / ``run()``); returns its handler."""
        if self.handler is not None and not self.handler.done():
            raise RuntimeError("a run is going: finish it (Run to end) or stop it before starting another")
        args = {**self.run_kwargs, **kwargs}
        if user_msg:
            args["user_msg"] = user_msg
        handler = self.workflow.run(stepwise=True, **args)
        self.last_events, self.error, self.notice, self.steps = [], None, "", 0
        self._follow(handler)
        return handler

    def step(self) -> asyncio.Task[list[Event] | None]:
        """Run one step of the current run in the background; the task gives its events."""
        handler = self._live_handler()
        self._check_idle()
        return self._spawn(self._step_once(handler))

    def run(self) -> asyncio.Task[Any]:
        """Run the remaining steps in the background (a question waits for its answer)."""
        handler = self._live_handler()
        self._check_idle()
        return self._spawn(self._run_all(handler))

    def stop(self) -> None:
        """Stop the current run (it can be resumed with ``workflow.run(ctx=handler.ctx)``)."""
        self._live_handler().stop()
        self.refresh_now()

    def answer(self, text: str) -> None:
        """Answer the question the run waits on with ``text``."""
        handler = self._live_handler()
        if not isinstance(text, str) or not text.strip():
            raise ValueError("type an answer first")
        handler.respond(text)
        self.notice = f"answered: {text}"
        self.refresh_now()

    async def wait(self) -> Any:
        """Wait for the step or run the panel is doing now."""
        if self.running_task is not None:
            return await self.running_task
        return None

    def press(self, action: Callable[[], Any]) -> None:
        """What a button does: run its twin; a call that does not fit is shown, not raised."""
        try:
            self.notice = ""
            action()
        except Exception as err:  # noqa: BLE001 - a click that does not fit is shown
            self.notice = f"{err}"
            self.refresh_now()

    def close(self) -> None:
        """Stop following the run (it goes on; nothing is redrawn)."""
        self._stop_following()
        self._throttle.cancel()
        self.on_change = None

    # ----- what the views show ------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.running_task is not None and not self.running_task.done()

    @property
    def live(self) -> bool:
        """Whether a run is going (started, not ended)."""
        return self.handler is not None and not self.handler.done()

    def status_text(self) -> str:
        h = self.handler
        if h is None:
            return "No run yet: type a message and click Start."
        state = "running a step" if self.busy and h.status != "waiting" else h.status
        # the run's one count: workflow steps (what Step runs); the graph draws the agent
        # steps among them (model calls), which its title counts
        text = f"Run {state}; {counted(self.steps, 'workflow step')} taken"
        agent_steps = len(self.trace.turns)
        if agent_steps:
            text += f", {agent_steps} of them {'an agent step' if agent_steps == 1 else 'agent steps'}"
        return text + "."

    def problem_text(self) -> str:
        """The last step's error and the last press that could not be done."""
        parts = []
        if self.error is not None:
            parts.append(f"{type(self.error).__name__}: {self.error}")
        if self.notice:
            parts.append(self.notice)
        return " ".join(parts)

    def question_text(self) -> str:
        """The question the run waits on ("" when none, or when the run has ended)."""
        h = self.handler
        if h is None:
            return ""
        questions = h.pending_questions
        if not questions or h.done():  # a stopped run takes no answers: the box must not look live
            return ""
        return str(getattr(questions[0], "prefix", "") or type(questions[0]).__name__)

    def buttons(self) -> dict[str, bool]:
        """Which buttons may be pressed now."""
        live, busy, asked = self.live, self.busy, bool(self.question_text())
        return {"start": not live, "step": live and not busy, "run": live and not busy,
                "stop": live, "send": asked}

    def dot(self) -> str:
        """The run graph's DOT text now."""
        from nbagent.viz.workflow_dot import run_to_dot

        with self._lock:
            try:
                return run_to_dot(self.trace, **self.dot_options)
            except Exception as err:  # noqa: BLE001 - an odd trace is shown, not raised into the run
                log.exception("nbagent: the workflow panel could not build the run graph")
                text = html_text(f"{type(err).__name__}: {err}", 200)
                return f'digraph run {{ error [shape="box", label=<{text}>]; }}\n'

    def run_html(self) -> str:
        """The run as a static card (inline SVG, or the step list without Graphviz)."""
        from nbagent.viz.workflow_html import run_html

        with self._lock:
            return run_html(self.trace, self.dot())

    # ----- following the run --------------------------------------------------------------
    def _follow(self, handler: WorkflowHandler) -> None:
        from nbagent.workflow.trace import RunTrace

        self._stop_following()
        trace = RunTrace.for_workflow(self.workflow)
        trace.paused = handler.stepwise and handler.status == "paused"
        if handler.resumed:
            state = handler.ctx._state
            agent, text = state.get("current_agent_name"), state.get("user_msg_str")
            trace.resume(agent if isinstance(agent, str) else None, text if isinstance(text, str) else None)
        with self._lock:
            self.trace = trace
        self.handler = handler
        self._unsubscribe = [handler.subscribe(self._on_event), handler.on_step(self._on_step)]
        handler.add_done_callback(self._on_done)
        self.refresh_now()

    def _stop_following(self) -> None:
        for stop in self._unsubscribe:
            stop()
        self._unsubscribe = []

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self.trace.add(event)
        self._throttle.request()

    def _on_step(self, _events: list[Event]) -> None:
        """After each step: mark a run that waits for the next one, and draw at once."""
        handler = self.handler
        with self._lock:
            self.trace.paused = handler is not None and handler.status == "paused"
        self.refresh_now()

    def _on_done(self, handler: WorkflowHandler) -> None:
        if handler is not self.handler:
            return
        from nbagent.workflow.errors import WorkflowCancelledError

        err = handler.exception()
        if err is not None:
            with self._lock:
                self.trace.fail(err, cancelled=isinstance(err, WorkflowCancelledError))
        self.refresh_now()  # the end is always drawn at once

    # ----- running ------------------------------------------------------------------------
    def _live_handler(self) -> WorkflowHandler:
        if self.handler is None:
            raise RuntimeError("no run yet: type a message and click Start (panel.start('...'))")
        if self.handler.done():
            raise RuntimeError(f"the run has ended ({self.handler.status}); start another")
        return self.handler

    def _check_idle(self) -> None:
        if self.busy:
            raise RuntimeError("the panel is already running a step; wait for it or click Stop")

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            raise RuntimeError(
                "the workflow panel runs steps on the notebook's event loop; none is running here "
                "(call it from a notebook cell or async code)"
            ) from None
        task = loop.create_task(coro)
        self.running_task = task
        task.add_done_callback(lambda _t: self.refresh_now())  # buttons back on once it is over
        self.refresh_now()
        return task

    async def _step_once(self, handler: WorkflowHandler) -> list[Event] | None:
        from nbagent.workflow.stepwise import run_one_step

        try:
            events = await run_one_step(handler._runner)
        except Exception as err:  # shown, not raised into the frontend
            self._failed(err)
            return None
        self._stepped(events)
        return events

    async def _run_all(self, handler: WorkflowHandler) -> Any:
        from nbagent.workflow.stepwise import run_one_step

        try:
            while not handler.done():
                self._stepped(await run_one_step(handler._runner, through_questions=True))
            return handler.result()
        except Exception as err:  # noqa: BLE001
            self._failed(err)
            return None

    def _stepped(self, events: list[Event] | None) -> None:
        if events is not None:
            self.steps += 1
            self.last_events = list(events)
        self.notice = ""
        self.refresh_now()

    def _failed(self, err: BaseException) -> None:
        self.error = err
        self.refresh_now()

    def _emit(self, kind: str) -> None:
        callback = self.on_change
        if callback is not None:
            callback(kind)

    def refresh_now(self) -> None:
        """Tell the views to redraw now."""
        self._throttle.cancel()
        self._emit("state")

    def flush(self) -> None:
        """Run a pending redraw now."""
        self._throttle.flush()
