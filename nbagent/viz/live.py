"""LiveGraph: a task's step DAG that redraws itself while the runner works.

It listens to the runner's events and redraws (throttled: at most one redraw per
``throttle_s``, the last one never dropped). The browser draws the DOT text with Graphviz
compiled to WASM (``graphviz-anywidget``), so no ``dot`` program is needed for the live view;
without that package the view is an ``ipywidgets.HTML``: each redraw sends the DOT text, and
the picture is drawn with ``dot`` only once the redraws pause (``SVG_IDLE_S``). The text is
kept up to date in O(what changed) (``nbagent.viz.dot.live_text``). Where no
widget frontend runs (nbconvert, nbval, GitHub) the displayed output still shows the graph:
the mimebundle carries a static ``image/svg+xml`` / ``text/html`` next to the widget view.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nbagent.events import Event, RunnerReset, StepCompleted, StepStarted, TaskDeleted, TokenStreamed
from nbagent.viz.throttle import Later, Throttle, call_later

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner, TaskRef
    from nbagent.engine.state import TaskState

__all__ = ["LiveGraph", "Throttle", "EMPTY_DOT", "DISABLED_BUTTON_CSS", "live_view_available"]

log = logging.getLogger("nbagent.viz")

EMPTY_DOT = (
    "digraph task {\n"
    '  graph [bgcolor="transparent"];\n'
    '  empty [shape="box", style="rounded,dashed,filled", fillcolor="#f8fafc", color="#9ca3af", fontcolor="#4b5563", '
    'fontname="Helvetica", fontsize="10", label="no task yet: create one"];\n'
    "}\n"
)

# d3-graphviz updates the nodes it keeps in place, so a CSS transition on the shapes' paint
# fades a node from one status colour to the next (graphviz-anywidget turns d3's own
# transitions off). Scoped to this widget's root class.
# d3-graphviz keeps each node's and edge's SVG element from one drawing to the next (it joins
# them by name), so CSS can animate between states: a node changing status fades to its new
# colour, a new node or edge fades in. Off for people who ask their system for less motion.
_CSS = """
@keyframes nbagent-appear { from { opacity: 0; } to { opacity: 1; } }
.nbagent-livegraph g.node, .nbagent-livegraph g.edge {
  animation: nbagent-appear 0.4s ease-out;
}
.nbagent-livegraph g.node path, .nbagent-livegraph g.node polygon,
.nbagent-livegraph g.node ellipse {
  transition: fill 0.35s ease, stroke 0.35s ease;
}
.nbagent-livegraph svg { max-width: 100%; height: auto; }
@media (prefers-reduced-motion: reduce) {
  .nbagent-livegraph * { animation: none !important; transition: none !important; }
}
"""


# A disabled button looks off in either theme: no fill, a dashed outline, muted text (a
# faded colour would still read as a live Stop on a dark page). SCOPE is the widget's class.
DISABLED_BUTTON_CSS = """
SCOPE .jupyter-button[disabled]{background:transparent;color:var(--jp-ui-font-color2,#57606a);
 border:1px dashed var(--jp-border-color1,#8c959f);box-shadow:none;opacity:0.75}
"""


def live_view_available() -> bool:
    """Whether ``graphviz-anywidget`` (the in-browser renderer) can be imported."""
    try:
        import graphviz_anywidget  # noqa: F401
    except ImportError:
        return False
    return True


_VIEW_CLASS: Any = None


def _view_class() -> Any:
    """GraphvizAnyWidget with this module's CSS (made once; None when not installed)."""
    global _VIEW_CLASS
    if _VIEW_CLASS is None:
        try:
            from graphviz_anywidget import GraphvizAnyWidget
        except ImportError:
            _VIEW_CLASS = False
        else:

            class LiveGraphView(GraphvizAnyWidget):  # type: ignore[misc, valid-type]
                """The in-browser Graphviz view of a LiveGraph."""

                _css = GraphvizAnyWidget._css + _CSS

            _VIEW_CLASS = LiveGraphView
    return _VIEW_CLASS or None


def graph_widget(renderer: str, dot_source: str) -> tuple[Any, bool]:
    """The widget that draws DOT: graphviz-anywidget in the browser (WASM, no system
    Graphviz), or an HTML widget filled from the server. Returns it and whether it draws in
    the browser."""
    if renderer not in ("auto", "anywidget", "html"):
        raise ValueError(f"renderer must be 'auto', 'anywidget' or 'html', got {renderer!r}")
    cls = _view_class() if renderer != "html" else None
    if renderer == "anywidget" and cls is None:
        raise ImportError(
            "renderer='anywidget' needs the graphviz-anywidget package "
            "(pip install graphviz-anywidget); use renderer='auto' to fall back to HTML"
        )
    import ipywidgets as W

    widget: Any = cls(dot_source=dot_source, enable_zoom=False) if cls is not None else W.HTML(value="")
    widget.add_class("nbagent-livegraph")
    return widget, cls is not None


def _resolve_task_id(runner: AgentRunner, task: TaskRef | None) -> str | None:
    if task is None:
        return next(reversed(runner.tasks), None) if runner.tasks else None
    return runner.state_of(task).task_id


class LiveGraph:
    """The step DAG of one task of ``runner``, redrawn after every step.

    ``widget`` is the ipywidget to put in a layout; displaying the LiveGraph itself shows that
    widget, with a static fallback for frontends without widgets. ``show(task)`` switches
    task. ``source`` is the DOT text last sent to the view, ``redraws`` how many times it was
    sent. ``throttle_s`` bounds the redraw rate; ``flush()`` draws a pending change now.
    Other keyword arguments go to ``task_to_dot`` (``rankdir``, ``max_label``...).
    """

    def __init__(
        self,
        runner: AgentRunner,
        task: TaskRef | None = None,
        *,
        throttle_s: float = 0.1,
        renderer: str = "auto",
        **dot_kwargs: Any,
    ) -> None:
        from nbagent.viz.dot import check_options

        check_options(**dot_kwargs)
        self.runner = runner
        self.dot_kwargs = dict(dot_kwargs)
        self._task_id = _resolve_task_id(runner, task)
        self._source = ""
        self._live: Any = None  # the incremental DOT of the shown task (nbagent.viz.dot.live_text)
        self.redraws = 0
        # the HTML fallback shows the DOT text at each redraw; ``dot`` draws the picture only
        # once redraws pause for SVG_IDLE_S (one timer at a time), or on flush()/display
        self.svg_draws = 0
        self._svg_html = ""
        self._svg_due: float | None = None
        self._svg_timer: Later | None = None
        self._draw_lock = threading.RLock()
        self.widget, self.in_browser = graph_widget(renderer, EMPTY_DOT)
        self._throttle = Throttle(self._draw, throttle_s)
        # a step's start is drawn only when steps are slow (the last one took SLOW_STEP_S or
        # more: a model call), so that the graph shows what runs; a fast step is drawn once
        self._slow = True
        self._unsubscribe: Callable[[], None] | None = None
        self._listen_lock = threading.Lock()  # (re)subscribing and close, from any thread
        self._listen()
        self._draw()

    # ----- what is shown -----------------------------------------------------------------
    @property
    def task_id(self) -> str | None:
        """The task drawn (None: none yet); ``show(task)`` draws another."""
        return self._task_id

    @property
    def state(self) -> TaskState | None:
        """The shown task's state (None when no task is shown or it was deleted)."""
        if self._task_id is None:
            return None
        return self.runner.tasks.get(self._task_id)

    def show(self, task: TaskRef | None) -> None:
        """Show another task of the runner (None: nothing) and draw it at once."""
        self._task_id = None if task is None else self.runner.state_of(task).task_id
        self.redraw()

    def dot(self) -> str:
        """The DOT text of the shown task's current state (computed now, not throttled):
        ``task_to_dot``'s text, kept up to date in O(what changed) (``LiveDot``)."""
        live = self._live
        if live is not None and self._task_id is not None and self.runner.tasks.get(self._task_id) is live.state:
            return live.render()  # the shown task, as at the last redraw
        state = self.state
        if state is None:
            return EMPTY_DOT
        from nbagent.viz.dot.live_text import LiveDot

        live = self._live = LiveDot(state, **self.dot_kwargs)
        return live.render()

    @property
    def source(self) -> str:
        """The DOT text the view shows now."""
        return self._source

    @property
    def throttle_s(self) -> float:
        """The least time between two redraws, in seconds: a fast run redraws at most this
        often, so drawing never slows the steps (0: every change)."""
        return self._throttle.interval_s

    # ----- drawing -----------------------------------------------------------------------
    #: a step that took this long or more (a model call) has its start drawn too, so the
    #: graph shows what runs; a faster step is drawn once, when it ends
    SLOW_STEP_S = 0.25
    #: without the WASM view, ``dot`` draws the picture once redraws pause this long
    SVG_IDLE_S = 1.0

    def _listen(self) -> None:
        """(Re)subscribe to the runner: while its steps are fast their starts are not drawn,
        so the engine builds no ``StepStarted`` for this view; streamed tokens never are."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        ignore = (TokenStreamed,) if self._slow else (StepStarted, TokenStreamed)
        self._unsubscribe = self.runner.events.subscribe(self._on_event, ignore=ignore)

    def _set_slow(self, slow: bool) -> None:
        if slow is not self._slow:
            with self._listen_lock:
                self._slow = slow
                if self._unsubscribe is not None:  # (not after close)
                    self._listen()

    def _on_event(self, event: Event) -> None:
        kind = type(event)
        if kind is StepCompleted:  # the common events first (the same steps as below)
            if event.task_id == self._task_id:
                slow = event.latency_s >= self.SLOW_STEP_S
                if slow is not self._slow:
                    self._set_slow(slow)
                if event.is_last:
                    self._redraw_when_streamed(event.step_id)
                self._throttle.request()
            return
        if kind is StepStarted and not self._slow:
            return
        if isinstance(event, TokenStreamed):
            return
        if isinstance(event, RunnerReset) or event.task_id == self._task_id:
            if isinstance(event, StepStarted) and not self._slow:
                return
            if isinstance(event, StepCompleted):
                self._set_slow(event.latency_s >= self.SLOW_STEP_S)
            if isinstance(event, (TaskDeleted, RunnerReset)) and self.state is None:
                self._task_id = None
            self._throttle.request()

    def _redraw_when_streamed(self, step_id: str) -> None:
        """A streamed answer's text grows after its step is done: redraw once more when its
        stream ends (whoever reads it), so the last drawing shows the whole answer."""
        from nbagent.schema import StreamingAgentChatResponse

        state = self.state
        out = None if state is None else state.outputs.get(step_id)
        stream = None if out is None else out.output
        if isinstance(stream, StreamingAgentChatResponse) and not stream.is_done:
            stream.add_done_callback(lambda _text: self._throttle.request())

    def request_redraw(self) -> None:
        """Redraw now, or at the end of the throttle interval."""
        self._throttle.request()

    def flush(self) -> bool:
        """Draw a pending change now; returns whether there was one. (The HTML fallback
        also draws its picture now if one is due.)"""
        pending = self._throttle.flush()
        with self._draw_lock:
            if self._svg_due is not None:
                self._draw_svg()
        return pending

    def redraw(self) -> None:
        """Draw now, whatever the throttle says (and build the drawing afresh)."""
        self._throttle.cancel()
        self._live = None
        self._draw()

    def _draw(self) -> None:
        with self._draw_lock:
            try:
                source = self.dot()
            except Exception as err:  # an odd state is shown, not raised into the run
                log.exception("nbagent: LiveGraph could not build the DOT text")
                source = _error_dot(err)
            if source == self._source:
                return
            self._source = source
            self.redraws += 1
            if self.in_browser:
                self.widget.dot_source = source
            else:
                self.widget.value = self._svg_html + _dot_block(source)
                self._svg_due = time.monotonic() + self.SVG_IDLE_S
                if self._svg_timer is None:
                    self._start_svg_timer(self.SVG_IDLE_S)

    def _start_svg_timer(self, delay: float) -> None:
        self._svg_timer = call_later(delay, self._svg_fire)

    def _svg_fire(self) -> None:
        with self._draw_lock:
            self._svg_timer = None
            due = self._svg_due
            if due is None:
                return
            wait = due - time.monotonic()
            if wait > 0:  # redrawn since: wait for the pause
                self._start_svg_timer(wait)
                return
            try:
                self._draw_svg()
            except Exception:  # noqa: BLE001 - a timer thread must not die loudly
                log.exception("nbagent: LiveGraph could not draw its picture")

    def _draw_svg(self) -> None:
        """The HTML fallback's picture, drawn by ``dot`` (or the static HTML without it)."""
        self._svg_due = None
        if self._svg_timer is not None:
            self._svg_timer.cancel()
            self._svg_timer = None
        self._svg_html = self._static_html(self._source)
        self.svg_draws += 1
        self.widget.value = self._svg_html

    def _static_html(self, source: str) -> str:
        state = self.state
        if state is None:
            return '<div class="nbagent-graph-empty"><i>no task yet: create one</i></div>'
        from nbagent.viz.graph import StepGraph

        try:
            return StepGraph(state, **self.dot_kwargs).html()
        except Exception:  # noqa: BLE001 - fall back to the DOT text itself
            return f"<pre>{html.escape(source)}</pre>"

    # ----- display -----------------------------------------------------------------------
    def static_bundle(self) -> dict[str, Any]:
        """The graph for frontends without widgets: an SVG (``dot`` present) or HTML."""
        state = self.state
        if state is None:
            return {"text/html": '<div class="nbagent-graph-empty"><i>no task yet</i></div>'}
        from nbagent.viz.graph import StepGraph

        bundle = StepGraph(state, **self.dot_kwargs)._repr_mimebundle_()
        bundle.pop("text/plain", None)
        return bundle

    def __repr__(self) -> str:
        state = self.state
        if state is None:
            return "LiveGraph(task=None)"
        from nbagent.viz.dot import status_summary

        counts = ", ".join(f"{n} {s}" for s, n in status_summary(state).items() if n)
        return f"LiveGraph(task={state.task_id!r}, status={state.status.value}, {counts or 'no steps'})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        self.flush()
        return widget_bundle(self.widget, repr(self), self.static_bundle)

    def close(self) -> None:
        """Stop listening to the runner and close the widget."""
        with self._listen_lock:
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
        self._throttle.cancel()
        with self._draw_lock:
            self._svg_due = None
            if self._svg_timer is not None:
                self._svg_timer.cancel()
                self._svg_timer = None
        self.widget.close()


def widget_bundle(
    widget: Any, text: str, static: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """A widget's mimebundle plus a static rendering for frontends that cannot show widgets.

    A widget frontend picks the widget view (it ranks first); nbconvert without widget state,
    nbval and GitHub show the ``image/svg+xml`` / ``text/html`` instead. Never raises.
    """
    bundle: dict[str, Any] = {"text/plain": text}
    try:
        extra = static()
    except Exception as err:  # noqa: BLE001 - the widget still shows
        extra = {"text/html": f"<pre>{html.escape(f'{type(err).__name__}: {err}')}</pre>"}
    bundle.update({k: v for k, v in extra.items() if k != "text/plain"})
    data = widget._repr_mimebundle_()
    if isinstance(data, tuple):  # anywidget returns (data, metadata)
        data = data[0]
    view = (data or {}).get("application/vnd.jupyter.widget-view+json")
    if view is not None:
        bundle["application/vnd.jupyter.widget-view+json"] = view
    return bundle


def _dot_block(source: str) -> str:
    """The DOT text, escaped, as the HTML fallback shows it while a run goes on."""
    return (
        '<details class="nbagent-graph-dot"><summary><i>step graph (DOT); the picture is drawn '
        f"when the run pauses</i></summary><pre>{html.escape(source)}</pre></details>"
    )


def _error_dot(err: BaseException) -> str:
    from nbagent.viz.escape import html_text

    esc = html_text(f"{type(err).__name__}: {err}", 200)
    return (
        "digraph task {\n"
        f'  error [shape="box", style="filled", fillcolor="#fee2e2", color="#b91c1c", fontcolor="#991b1b", '
        f'label=<{esc}>];\n'
        "}\n"
    )
