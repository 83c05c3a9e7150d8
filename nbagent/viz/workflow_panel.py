"""WorkflowPanel: drive a workflow run one step at a time from the notebook, and watch it.

A message box and **Start** (a step-wise run), **Step** (one ``handler.run_step()``), **Run to
end** (steps until the run is over, waiting for answers) and **Stop**; the question a step asks
with a box to answer it and **Send**; the events the last step produced, listed as they come;
the run graph, redrawn as the run's events arrive. Every button has a Python twin
(``panel.start("...")``, ``panel.step()``, ``panel.run()``, ``panel.stop()``,
``panel.answer("yes")``), so it is scriptable and testable without a browser.

One ``anywidget.AnyWidget`` sharing the agent panel's ES module (``static/panel.js``, which
draws this panel when ``kind`` is ``"workflow"``), bound to a ``WorkflowControl`` that does the
work (``panel.control``). Traitlets: ``dot`` (the run graph), ``status`` (``{"text", "error",
"notice"}``), ``question``, ``events`` (``[{"name", "about"}]``: what the last step produced),
``buttons`` (``start step run stop send``). Commands: ``start {text}``, ``step``, ``run``,
``stop``, ``answer {text}``; one that cannot be done is shown in the status, never raised.
Where no widget front end runs, the output shows the static picture (``static_html``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from nbagent.viz.panel.widget import STATIC
from nbagent.viz.workflow_control import WorkflowControl, event_parts

if TYPE_CHECKING:
    from nbagent.workflow.events import Event
    from nbagent.workflow.handler import WorkflowHandler

__all__ = ["WorkflowPanel", "COMMANDS"]

def _text_arg(content: dict[str, Any], key: str) -> str:
    value = content.get(key)
    if not isinstance(value, str):
        raise ValueError(f"command {content.get('cmd')!r} needs {key!r} as a string, got {value!r}")
    return value


#: command name -> what it does (each one a Python twin of the control).
COMMANDS: dict[str, Callable[[WorkflowControl, dict[str, Any]], Any]] = {
    "start": lambda c, m: c.start(_text_arg(m, "text")),
    "step": lambda c, m: c.step(),
    "run": lambda c, m: c.run(),
    "stop": lambda c, m: c.stop(),
    "answer": lambda c, m: c.answer(_text_arg(m, "text")),
}


class WorkflowPanel(anywidget.AnyWidget):  # type: ignore[misc]
    """A control panel for step-wise runs of ``workflow`` (see the module docstring).

    ``run_kwargs`` go to every ``workflow.run(...)`` the panel starts (``ctx``, ``max_iterations``,
    ``checkpoint_callback``...). ``control`` does the work; ``handler`` is the current run.
    """

    _esm = STATIC / "panel.js"
    _css = STATIC / "panel.css"

    kind = traitlets.Unicode("workflow").tag(sync=True)
    protocol = traitlets.Int(1).tag(sync=True)
    dot = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    question = traitlets.Unicode("").tag(sync=True)
    events = traitlets.List(traitlets.Dict()).tag(sync=True)
    buttons = traitlets.Dict().tag(sync=True)

    def __init__(self, workflow: Any, *, throttle_s: float = 0.1, **run_kwargs: Any) -> None:
        if "renderer" in run_kwargs:
            raise TypeError("the workflow panel has no renderer= any more: it draws its graph in the browser "
                            "(Graphviz compiled to WebAssembly, inside nbagent)")
        control = WorkflowControl(workflow, throttle_s=throttle_s, **run_kwargs)
        super().__init__()
        self._sync_lock = threading.RLock()
        self.control = control
        self.on_msg(self._on_message)
        control.on_change = lambda _kind: self._sync()
        self._sync()

    # ----- what the control knows ---------------------------------------------------------
    workflow = property(lambda self: self.control.workflow, doc="The workflow the panel runs.")
    handler = property(lambda self: self.control.handler, doc="The current run's handler (None before Start).")
    trace = property(lambda self: self.control.trace, doc="The current run's RunTrace (what the graph draws).")
    last_events = property(lambda self: self.control.last_events, doc="The events the last step produced.")
    error = property(lambda self: self.control.error, doc="What the last step raised, if it failed.")
    notice = property(lambda self: self.control.notice, doc="Why the last press could not be done.")
    steps = property(lambda self: self.control.steps, doc="Workflow steps taken in this run.")
    running_task = property(lambda self: self.control.running_task, doc="The background step or run.")

    # ----- the twins of the buttons -------------------------------------------------------
    def start(self, user_msg: str | None = None, **kwargs: Any) -> WorkflowHandler:
        """Start a step-wise run (nothing runs until ``step()`` / ``run()``); returns its handler."""
        return self.control.start(user_msg, **kwargs)

    def step(self) -> asyncio.Task[list[Event] | None]:
        """Run one step of the current run in the background; the task gives its events."""
        return self.control.step()

    def run(self) -> asyncio.Task[Any]:
        """Run the remaining steps in the background (a question waits for its answer)."""
        return self.control.run()

    def stop(self) -> None:
        """Stop the current run (it can be resumed with ``workflow.run(ctx=panel.handler.ctx)``)."""
        self.control.stop()

    def answer(self, text: str) -> None:
        """Answer the question the run waits on with ``text``."""
        self.control.answer(text)

    async def wait(self) -> Any:
        """Wait for the step or run the panel is doing now."""
        return await self.control.wait()

    def status_text(self) -> str:
        """How the run is doing, in a sentence."""
        return self.control.status_text()

    def press(self, cmd: str, **args: Any) -> None:
        """Do what a press in the browser does: the twin runs; what stops it is shown."""
        self._on_message(self, {"cmd": cmd, **args}, [])

    def close(self) -> None:
        """Stop following the run and close the widget."""
        control = self.__dict__.get("control")  # absent when __init__ refused its arguments
        if control is not None:
            control.close()
        super().close()

    # ----- the browser ---------------------------------------------------------------------
    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        def act() -> None:
            if not isinstance(content, dict) or content.get("cmd") not in COMMANDS:
                raise ValueError(f"unknown workflow panel command {content!r}; allowed: {sorted(COMMANDS)}")
            COMMANDS[content["cmd"]](self.control, content)

        self.control.press(act)

    def _set(self, name: str, value: Any) -> None:
        if getattr(self, name) != value:
            setattr(self, name, value)

    def _sync(self) -> None:
        c = self.control
        error = "" if c.error is None else f"{type(c.error).__name__}: {c.error}"
        with self._sync_lock, self.hold_sync():
            self._set("status", {"text": c.status_text(), "error": error, "notice": c.notice})
            self._set("question", c.question_text())
            self._set("events", [dict(zip(("name", "about"), event_parts(e))) for e in c.last_events])
            self._set("buttons", c.buttons())
            self._set("dot", c.dot())

    # ----- display ------------------------------------------------------------------------
    def static_html(self) -> str:
        """The panel as static HTML: status, question, the last step's events, the run graph."""
        from nbagent.viz.workflow_html import workflow_panel_html

        c = self.control
        problems = [f"{type(c.error).__name__}: {c.error}"] if c.error is not None else []
        if c.notice:
            problems.append(c.notice)
        return workflow_panel_html(c.status_text(), problems, c.question_text(),
                                   [event_parts(e) for e in c.last_events], c.run_html())

    def __repr__(self) -> str:
        return f"WorkflowPanel({type(self.workflow).__name__}: {self.status_text()})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> Any:
        """The widget view, plus the static picture and text for frontends without widgets."""
        self.control.flush()
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        try:
            bundle["text/html"] = self.static_html()
        except Exception as err:  # noqa: BLE001 - the widget view still shows
            from nbagent.viz.html import error_html

            bundle["text/html"] = error_html("the workflow panel could not be drawn", err)
        view = super()._repr_mimebundle_(include=include, exclude=exclude)
        if isinstance(view, tuple):
            view = view[0]
        widget_view = (view or {}).get("application/vnd.jupyter.widget-view+json")
        if widget_view is not None:
            bundle["application/vnd.jupyter.widget-view+json"] = widget_view
        return bundle
