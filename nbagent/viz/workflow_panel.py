"""WorkflowPanel: drive a workflow run one step at a time from the notebook, and watch it.

A message box and **Start** (a step-wise run), **Step** (one ``handler.run_step()``), **Run to
end** (steps until the run is over, waiting for answers) and **Stop**; the question a step asks
with a box to answer it; the events the last step produced; the live run graph, redrawn after
every step. Every button has a Python twin (``panel.start("...")``, ``panel.step()``,
``panel.run()``, ``panel.stop()``, ``panel.answer("yes")``), so it is scriptable and testable
without a browser.

Clicks never block the kernel: ``step()`` and ``run()`` schedule an asyncio task on the running
loop and return it (``await panel.step()`` in a cell gives the step's events). A step that fails
is shown in the status line and kept in ``panel.error``, never raised into the frontend.
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.viz.escape import html_text, preview
from nbagent.viz.live import widget_bundle

if TYPE_CHECKING:
    from nbagent.workflow.events import Event
    from nbagent.workflow.handler import WorkflowHandler

__all__ = ["WorkflowPanel"]

log = logging.getLogger("nbagent.viz")

_CSS = """
.nbagent-wfpanel{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:6px;padding:6px 8px;box-sizing:border-box;max-width:100%}
.nbagent-wfpanel .nbagent-status-line{padding:3px 6px;border-radius:4px;
 background:var(--jp-layout-color2,#f6f8fa);overflow-wrap:anywhere}
.nbagent-wfpanel .nbagent-err{color:var(--jp-error-color1,#b91c1c);font-weight:600}
.nbagent-wfpanel .nbagent-q{font-weight:600;overflow-wrap:anywhere}
.nbagent-wfpanel ol{margin:2px 0 2px 1.4em;padding:0}
"""


def _event_line(event: Event) -> str:
    """One line for an event: its type and what it is about."""
    name = type(event).__name__
    about = ""
    for field in ("current_agent_name", "tool_name", "prefix", "response", "result"):
        value = getattr(event, field, None)
        if value not in (None, ""):
            about = f"{field}={preview(value, 60)}"
            break
    return f"<b>{html.escape(name)}</b> {html_text(about, 80)}".rstrip()


class WorkflowPanel:
    """A control panel for step-wise runs of ``workflow`` (see the module docstring).

    ``run_kwargs`` go to every ``workflow.run(...)`` the panel starts (``ctx``, ``max_iterations``,
    ``checkpoint_callback``...). ``view`` is the ``WorkflowLiveView``; ``handler`` the current run.
    """

    def __init__(self, workflow: Any, *, throttle_s: float = 0.1, renderer: str = "auto", **run_kwargs: Any) -> None:
        import ipywidgets as W

        from nbagent.viz.workflow_live import WorkflowLiveView

        self.workflow = workflow._as_workflow() if callable(getattr(workflow, "_as_workflow", None)) else workflow
        self.run_kwargs = dict(run_kwargs)
        self.view = WorkflowLiveView(self.workflow, throttle_s=throttle_s, renderer=renderer)
        self.handler: WorkflowHandler | None = None
        self.last_events: list[Event] = []
        self.error: BaseException | None = None
        self.notice = ""
        self.steps = 0
        self.running_task: asyncio.Task[Any] | None = None

        def button(text: str, icon: str, style: str = "") -> Any:
            return W.Button(description=text, icon=icon, button_style=style, layout=W.Layout(width="auto"))

        self.message = W.Text(value="", placeholder="Your message to the agents", layout=W.Layout(width="55%"))
        self.start_button = button("Start", "play", "primary")
        self.step_button = button("Step", "step-forward")
        self.run_button = button("Run to end", "fast-forward")
        self.stop_button = button("Stop", "stop", "danger")
        self.answer_text = W.Text(value="", placeholder="Your answer", layout=W.Layout(width="55%"))
        self.send_button = button("Send", "paper-plane", "primary")
        self.status = W.HTML(value="")
        self.question = W.HTML(value="")
        self.events_html = W.HTML(value="")
        self.start_button.on_click(lambda _b: self._click(lambda: self.start(self.message.value)))
        self.step_button.on_click(lambda _b: self._click(self.step))
        self.run_button.on_click(lambda _b: self._click(self.run))
        self.stop_button.on_click(lambda _b: self._click(self.stop))
        self.send_button.on_click(lambda _b: self._click(lambda: self.answer(self.answer_text.value)))
        self.widget = W.VBox([
            W.HTML(value=f"<style>{_CSS}</style>"),
            W.HBox([self.message, self.start_button]),
            W.HBox([self.step_button, self.run_button, self.stop_button]),
            self.status,
            self.question,
            W.HBox([self.answer_text, self.send_button]),
            self.events_html,
            self.view.widget,
        ])
        self.widget.add_class("nbagent-wfpanel")
        self._sync()

    # ----- the twins of the buttons -------------------------------------------------------
    def start(self, user_msg: str | None = None, **kwargs: Any) -> WorkflowHandler:
        """Start a step-wise run (nothing runs until ``step()`` / ``run()``); returns its handler."""
        if self.handler is not None and not self.handler.done():
            raise RuntimeError("a run is going: finish it (Run to end) or stop it before starting another")
        args = {**self.run_kwargs, **kwargs}
        if user_msg:
            args["user_msg"] = user_msg
        handler = self.view.run(stepwise=True, **args)
        self.handler = handler
        self.last_events, self.error, self.notice, self.steps = [], None, "", 0
        handler.subscribe(self._on_event)
        handler.add_done_callback(lambda _h: self._sync())
        self.message.value = ""
        self._sync()
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
        """Stop the current run (it can be resumed with ``workflow.run(ctx=panel.handler.ctx)``)."""
        handler = self._live_handler()
        handler.stop()
        self._sync()

    def answer(self, text: str) -> None:
        """Answer the question the run waits on with ``text``."""
        handler = self._live_handler()
        if not isinstance(text, str) or not text.strip():
            raise ValueError("type an answer first")
        handler.respond(text)
        self.answer_text.value = ""
        self.notice = f"answered: {text}"
        self._sync()

    async def wait(self) -> Any:
        """Wait for the step or run the panel is doing now."""
        if self.running_task is not None:
            return await self.running_task
        return None

    # ----- internals ----------------------------------------------------------------------
    def _live_handler(self) -> WorkflowHandler:
        if self.handler is None:
            raise RuntimeError("no run yet: type a message and click Start (panel.start('...'))")
        if self.handler.done():
            raise RuntimeError(f"the run has ended ({self.handler.status}); start another")
        return self.handler

    def _check_idle(self) -> None:
        if self.running_task is not None and not self.running_task.done():
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
        task.add_done_callback(lambda _t: self._sync())  # buttons back on once it is over
        self._sync()
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
        self._sync()

    def _failed(self, err: BaseException) -> None:
        self.error = err
        self._sync()

    def _on_event(self, event: Event) -> None:
        from nbagent.workflow.events import HumanResponseEvent, InputRequiredEvent

        if isinstance(event, (InputRequiredEvent, HumanResponseEvent)):
            self._sync()

    def _click(self, action: Any) -> None:
        try:
            self.notice = ""
            action()
        except Exception as err:  # noqa: BLE001 - a click that does not fit is shown
            self.notice = f"{err}"
            self._sync()

    def status_text(self) -> str:
        h = self.handler
        if h is None:
            return "No run yet: type a message and click Start."
        busy = self.running_task is not None and not self.running_task.done()
        state = "running a step" if busy and h.status != "waiting" else h.status
        # the run's one count: workflow steps (what Step runs); the graph draws the agent
        # steps among them (model calls), which its title counts
        text = f"Run {state}; {counted(self.steps, 'workflow step')} taken"
        agent_steps = len(self.view.trace.turns)
        if agent_steps:
            text += f", {agent_steps} of them {'an agent step' if agent_steps == 1 else 'agent steps'}"
        return text + "."

    def _question_text(self) -> str:
        h = self.handler
        if h is None:
            return ""
        questions = h.pending_questions
        if not questions or h.done():  # a stopped run takes no answers: the box must not look live
            return ""
        return str(getattr(questions[0], "prefix", "") or type(questions[0]).__name__)

    def _sync(self) -> None:
        status = html_text(self.status_text(), 300)
        if self.error is not None:
            status += f' <span class="nbagent-err">{html_text(f"{type(self.error).__name__}: {self.error}", 500)}</span>'
        if self.notice:
            status += f' <span class="nbagent-err">{html_text(self.notice, 300)}</span>'
        self.status.value = f'<div class="nbagent-status-line">{status}</div>'
        asked = self._question_text()
        self.question.value = f'<div class="nbagent-q">Question: {html_text(asked, 2000)}</div>' if asked else ""
        self.answer_text.disabled = self.send_button.disabled = not asked
        live = self.handler is not None and not self.handler.done()
        busy = self.running_task is not None and not self.running_task.done()
        self.step_button.disabled = self.run_button.disabled = not live or busy
        self.stop_button.disabled = not live
        self.start_button.disabled = live
        items = "".join(f"<li>{_event_line(e)}</li>" for e in self.last_events)
        self.events_html.value = f"<div>Last step produced:<ol>{items}</ol></div>" if items else ""

    def static_html(self) -> str:
        """The panel as static HTML: status, question, the last step's events, the run graph."""
        parts = [f"<style>{_CSS}</style>", self.status.value, self.question.value, self.events_html.value, self.view.html()]
        return f'<div class="nbagent-wfpanel">{"".join(parts)}</div>'

    def __repr__(self) -> str:
        return f"WorkflowPanel({type(self.workflow).__name__}: {self.status_text()})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        return widget_bundle(self.widget, repr(self), lambda: {"text/html": self.static_html()})

    def close(self) -> None:
        self.view.close()
        self.widget.close()
