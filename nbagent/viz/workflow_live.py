"""Live views of workflow runs: the run graph redrawn as events stream, and a box to answer
a run's questions.

``WorkflowLiveView`` listens to a run's events (``handler.subscribe``), keeps a ``RunTrace``
and redraws ``run_to_dot(trace)`` (throttled, the last change never dropped). The browser draws
the DOT with Graphviz compiled to WASM (``graphviz-anywidget``, as ``LiveGraph`` does); without
it the widget is an ``ipywidgets.HTML`` holding the static card. Frontends without widgets
(nbconvert, nbval, GitHub) get a static SVG / HTML next to the widget view.

``HumanInputBox`` shows the question a run waits on, a text box and a Send button; Send (or
``box.answer(text)``, its Python twin) answers it and the run goes on.
"""

from __future__ import annotations

import copy
import html
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nbagent.viz.escape import html_text
from nbagent.viz.live import Throttle, graph_widget, widget_bundle

if TYPE_CHECKING:
    from nbagent.workflow.events import Event
    from nbagent.workflow.handler import WorkflowHandler
    from nbagent.workflow.trace import RunTrace

__all__ = ["WorkflowLiveView", "HumanInputBox"]

log = logging.getLogger("nbagent.viz")


class WorkflowLiveView:
    """The graph of an AgentWorkflow run, redrawn after every event.

    ``run(...)`` starts a run of ``workflow`` and watches it; ``watch(handler)`` watches a run
    started elsewhere. ``widget`` is the ipywidget; ``source`` the DOT text it shows;
    ``snapshot()`` a static, displayable copy of the current drawing. Keyword arguments go to
    ``run_to_dot`` (``rankdir``, ``max_label``, ``wrap``, ``max_turns``).
    """

    def __init__(
        self,
        workflow: Any = None,
        handler: WorkflowHandler | None = None,
        *,
        throttle_s: float = 0.1,
        renderer: str = "auto",
        **dot_kwargs: Any,
    ) -> None:
        from nbagent.viz.workflow_dot import check_workflow_options
        from nbagent.workflow.trace import RunTrace

        if renderer not in ("auto", "anywidget", "html"):
            raise ValueError(f"renderer must be 'auto', 'anywidget' or 'html', got {renderer!r}")
        check_workflow_options(**dot_kwargs)
        if workflow is None and handler is not None:
            workflow = handler.ctx.workflow
        self.workflow = workflow
        self.dot_kwargs = dict(dot_kwargs)
        self.trace: RunTrace = RunTrace.for_workflow(workflow)
        self.handler: WorkflowHandler | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._unsubscribe_steps: Callable[[], None] | None = None
        self._source = ""
        self.redraws = 0
        self._lock = threading.RLock()
        self.widget: Any
        self.widget, self.in_browser = graph_widget(renderer, "")
        self._throttle = Throttle(self._draw, throttle_s)
        self._draw()
        if handler is not None:
            self.watch(handler)

    # ----- following a run ----------------------------------------------------------------
    def run(self, *args: Any, **kwargs: Any) -> WorkflowHandler:
        """Start ``workflow.run(*args, **kwargs)`` and watch it; returns the handler."""
        if self.workflow is None:
            raise ValueError("this view has no workflow to run: WorkflowLiveView(workflow)")
        handler = self.workflow.run(*args, **kwargs)
        self.watch(handler)
        return handler

    def watch(self, handler: WorkflowHandler) -> None:
        """Follow ``handler``'s run from now on (the drawing starts afresh)."""
        from nbagent.workflow.trace import RunTrace

        self.stop_watching()
        if self.workflow is None:
            self.workflow = handler.ctx.workflow
        self.trace = RunTrace.for_workflow(self.workflow)
        self.trace.paused = handler.stepwise and handler.status == "paused"
        if handler.resumed:
            state = handler.ctx._state
            agent, text = state.get("current_agent_name"), state.get("user_msg_str")
            self.trace.resume(agent if isinstance(agent, str) else None, text if isinstance(text, str) else None)
        self.handler = handler
        self._unsubscribe = handler.subscribe(self._on_event)
        self._unsubscribe_steps = handler.on_step(self._on_step)  # step-wise runs
        handler.add_done_callback(self._on_done)
        self.redraw()

    def stop_watching(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._unsubscribe_steps is not None:
            self._unsubscribe_steps()
            self._unsubscribe_steps = None

    def _on_step(self, _events: list[Event]) -> None:
        """After each ``run_step()``: mark a run that waits for the next step, draw at once."""
        handler = self.handler
        with self._lock:
            self.trace.paused = handler is not None and handler.status == "paused"
        self.redraw()

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self.trace.add(event)
        self._throttle.request()

    def _on_done(self, handler: WorkflowHandler) -> None:
        if handler is not self.handler:
            return
        from nbagent.workflow.errors import WorkflowCancelledError

        err = handler.exception()
        if err is not None:
            with self._lock:
                self.trace.fail(err, cancelled=isinstance(err, WorkflowCancelledError))
        self.redraw()  # the end is always drawn at once

    # ----- drawing ------------------------------------------------------------------------
    def dot(self) -> str:
        """The DOT text of the run as it is now (computed now, not throttled)."""
        from nbagent.viz.workflow_dot import run_to_dot

        with self._lock:
            return run_to_dot(self.trace, **self.dot_kwargs)

    @property
    def source(self) -> str:
        """The DOT text the view shows now."""
        return self._source

    def flush(self) -> bool:
        """Draw a pending change now; returns whether there was one."""
        return self._throttle.flush()

    def redraw(self) -> None:
        """Draw now, whatever the throttle says."""
        self._throttle.cancel()
        self._draw()

    def _draw(self) -> None:
        try:
            source = self.dot()
        except Exception as err:  # an odd trace is shown, not raised into the run
            log.exception("nbagent: WorkflowLiveView could not build the DOT text")
            source = f'digraph run {{ error [shape="box", label=<{html_text(f"{type(err).__name__}: {err}", 200)}>]; }}\n'
        if source == self._source:
            return
        self._source = source
        self.redraws += 1
        if self.in_browser:
            self.widget.dot_source = source
        else:
            self.widget.value = self.html()

    def html(self) -> str:
        """The static card of the run (inline SVG, or the step list without Graphviz)."""
        from nbagent.viz.workflow_html import run_html

        with self._lock:
            return run_html(self.trace, self._source or None)

    def snapshot(self) -> Any:
        """A static, displayable copy of the drawing as it is now (for stored outputs)."""
        from nbagent.viz.workflow_html import DotDisplay, run_timeline_html

        with self._lock:
            frozen: RunTrace = copy.deepcopy(self.trace)
            source = self.dot()
        return DotDisplay(source, title="run", fallback=lambda: run_timeline_html(frozen))

    # ----- display ------------------------------------------------------------------------
    def static_bundle(self) -> dict[str, Any]:
        bundle = self.snapshot()._repr_mimebundle_()
        bundle.pop("text/plain", None)
        return bundle

    def __repr__(self) -> str:
        name = type(self.workflow).__name__ if self.workflow is not None else "no workflow"
        return f"WorkflowLiveView({name}, {self.trace!r})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        self.flush()
        return widget_bundle(self.widget, repr(self), self.static_bundle)

    def close(self) -> None:
        """Stop following the run and close the widget."""
        self.stop_watching()
        self._throttle.cancel()
        self.widget.close()


_BOX_CSS = """
.nbagent-hitl{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:6px;padding:6px 8px;box-sizing:border-box;max-width:100%}
.nbagent-hitl .nbagent-q{font-weight:600;margin:2px 0 4px 0;overflow-wrap:anywhere}
.nbagent-hitl .nbagent-note{color:var(--jp-ui-font-color2,#57606a)}
"""


def _outcome(handler: WorkflowHandler) -> str:
    """How an ended run ended, in a sentence: its result, or its error (a learner who just
    pressed Send sees where the answer led)."""
    from nbagent.viz.escape import preview

    try:
        err = handler.exception()
    except BaseException:  # noqa: BLE001 - cancelled: exception() raises
        return "It was stopped."
    if err is not None:
        return preview(f"It failed: {type(err).__name__}: {err}", 300)
    result = handler.result()
    who = getattr(result, "current_agent_name", None)
    text = preview(str(result), 300)
    return f"{who} answered: {text}" if who else f"Result: {text}"


class HumanInputBox:
    """Answer the questions of a run from the notebook: the question, a text box, Send.

    ``answer(text)`` does what typing ``text`` and clicking Send does. ``history`` lists the
    (question, answer) pairs given through this box.
    """

    def __init__(self, handler: WorkflowHandler, *, placeholder: str = "Your answer") -> None:
        import ipywidgets as W

        self.handler = handler
        self.history: list[tuple[str, str]] = []
        self.prompt = W.HTML(value="")
        self.text = W.Text(value="", placeholder=placeholder, layout=W.Layout(width="60%"))
        self.button = W.Button(description="Send", icon="paper-plane", button_style="primary")
        self.button.on_click(lambda _b: self._click())
        self.widget = W.VBox([W.HTML(value=f"<style>{_BOX_CSS}</style>"), self.prompt, W.HBox([self.text, self.button])])
        self.widget.add_class("nbagent-hitl")
        self.error: str | None = None
        self._unsubscribe = handler.subscribe(self._on_event)
        handler.add_done_callback(lambda _h: self._sync())
        self._sync()

    @property
    def question(self) -> Event | None:
        """The oldest question the run waits on, or None (an ended run waits on nothing)."""
        if self.handler.done():
            return None
        questions = self.handler.pending_questions
        return questions[0] if questions else None

    def answer(self, text: str) -> None:
        """Answer the waiting question with ``text`` (raises if none is waiting)."""
        question = self.question
        if question is None:
            raise RuntimeError("no question is waiting for an answer in this run")
        if not isinstance(text, str):
            raise TypeError(f"an answer is a str, got {type(text).__name__}")
        self.handler.respond(text, question)
        self.history.append((str(getattr(question, "prefix", "")), text))
        self.text.value = ""
        self._sync()

    def _click(self) -> None:
        try:
            self.error = None
            self.answer(self.text.value)
        except Exception as err:  # noqa: BLE001 - shown in the box, not raised into the frontend
            self.error = f"{type(err).__name__}: {err}"
            self._sync()

    def _on_event(self, event: Event) -> None:
        from nbagent.workflow.events import HumanResponseEvent, InputRequiredEvent

        if isinstance(event, (InputRequiredEvent, HumanResponseEvent)):
            self._sync()

    def status_text(self) -> str:
        question = self.question
        if question is not None:
            return f"Question: {getattr(question, 'prefix', '') or type(question).__name__}"
        if self.handler.done():
            unanswered = self.handler.pending_questions
            if unanswered:  # stopped or cancelled while asking: the box must not look live
                asked = getattr(unanswered[0], "prefix", "") or type(unanswered[0]).__name__
                return (f"The run was stopped before this question was answered ({asked}). "
                        "Resume it with workflow.run(ctx=handler.ctx) to answer it.")
            return f"The run has ended. {_outcome(self.handler)}"
        return "No question is waiting."

    def static_html(self) -> str:
        """The box as static HTML (the question, or what the run is doing)."""
        question = self.question
        text = self.status_text()
        cls = "nbagent-q" if question is not None else "nbagent-note"
        body = f'<div class="{cls}">{html_text(text, 2000)}</div>'
        if question is not None:
            body += '<div class="nbagent-note">Answer it with box.answer("...") or in the widget.</div>'
        if self.history:
            last_q, last_a = self.history[-1]
            body += f'<div class="nbagent-note">Last answer: {html_text(last_a, 500)} (to: {html_text(last_q, 200)})</div>'
        if self.error:
            body += f'<div class="nbagent-note">{html.escape(self.error)}</div>'
        return f'<div class="nbagent-hitl"><style>{_BOX_CSS}</style>{body}</div>'

    def _sync(self) -> None:
        question = self.question
        text = self.status_text()
        cls = "nbagent-q" if question is not None else "nbagent-note"
        extra = f'<div class="nbagent-note">{html.escape(self.error)}</div>' if self.error else ""
        self.prompt.value = f'<div class="{cls}">{html_text(text, 2000)}</div>{extra}'
        waiting = question is not None
        self.button.disabled = not waiting
        self.text.disabled = not waiting

    def __repr__(self) -> str:
        return f"HumanInputBox({self.status_text()!r})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        return widget_bundle(self.widget, repr(self), lambda: {"text/html": self.static_html()})

    def close(self) -> None:
        self._unsubscribe()
        self.widget.close()
