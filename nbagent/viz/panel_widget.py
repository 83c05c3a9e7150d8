"""PanelWidget: the control panel as one anywidget, for every notebook front end.

One ``anywidget.AnyWidget`` (so still an ipywidgets widget) whose ES module ships in the
package (``static/panel.js``, built from ``js/``; Graphviz compiled to WebAssembly is inside,
nothing comes from a CDN). It runs wherever anywidgets run: JupyterLab, Notebook 7, VS Code,
Colab, JupyterLite and marimo (``mo.ui.anywidget(PanelWidget(runner, task))``).

PROTOTYPE: the buttons drive today's ``AgentPanel`` Python twins (``step``, ``undo``...)
through a subclass that reports each refresh; once the panel is split into a controller with
no widgets, this class binds to the controller instead and ``AgentPanel`` goes.

The protocol (version ``protocol``): state flows down as small traitlets that only Python
writes; what the person does flows up as custom messages ``{"cmd": name, ...}``.

Traitlets (Python -> browser):
    ``dot``          DOT text of the shown task (node names ``s0``.., ``u0``.., ``c0``..)
    ``nodes``        ``[{"name", "step", "number", "status", "head", "text"}]`` per drawn step node
    ``selected``     the inspected step's id ("" for none)
    ``status``       ``{"state", "colour", "task", "parts", "error", "answer", "notice", "notice_error"}``
    ``buttons``      ``{"new", "step", "run", "stop", "undo", "retry", "skip", "abandon",
                     "release", "task_picker"}``: which are enabled
    ``tasks``/``task``  the task picker's ``[{"id", "label"}]`` and the shown task's id
    ``tokens``       the tail of what the running (or last) step streamed; ``tokens_note`` says which
    ``inspector``    the selected step (``panel_data.inspector_data``), ``{}`` for none
    ``approvals``    ``[{"call", "step", "tool", "args", "label"}]``: calls waiting for a decision
    ``transcript``   ``{"earlier", "total", "messages": [{"role", "name", "text", "calls"}]}``
    ``inject_text``  the text the next step will get as its input (restored after a failure)

Commands (browser -> Python, ``model.send({"cmd": ...})``): ``new_task {text}``,
``select_task {task}``, ``step``/``run``/``retry {input}``, ``stop {cancel}``, ``undo``,
``skip``, ``abandon``, ``release {step}``, ``inspect {step}``, ``goto {step}``,
``fork {step, input}``, ``edit_input {step, input}``, ``approve {call}``,
``edit {call, arguments}`` (a JSON object as text), ``reject {call, reason}``. A command that
cannot be done is shown in the status line (``status.notice``), never raised.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from nbagent.viz import panel_data
from nbagent.viz.panel import AgentPanel

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task, TaskStep, TaskStepOutput

__all__ = ["PanelWidget", "PROTOCOL", "COMMANDS", "STATIC"]

STATIC = Path(__file__).parent / "static"
PROTOCOL = 1


class _ReportingPanel(AgentPanel):
    """Today's panel, telling its widget when it has redrawn (the controller's
    ``on_change`` callback, until the controller exists)."""

    _report: Callable[[str], None] | None = None

    def _refresh(self) -> None:
        super()._refresh()
        if self._report is not None:
            self._report("state")

    def _draw_tokens(self) -> None:
        super()._draw_tokens()
        if self._report is not None:
            self._report("tokens")


def _str(content: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = content.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError(f"command {content.get('cmd')!r} needs {key!r} as a string, got {value!r}")
    return value


class PanelWidget(anywidget.AnyWidget):  # type: ignore[misc]
    """The control panel of ``runner`` as one anywidget (see the module docstring).

    ``panel`` is the Python side doing the work; this widget's methods are its twins, so a
    notebook can drive it from code as a click would.
    """

    _esm = STATIC / "panel.js"
    _css = STATIC / "panel.css"

    protocol = traitlets.Int(PROTOCOL).tag(sync=True)
    dot = traitlets.Unicode("").tag(sync=True)
    nodes = traitlets.List(traitlets.Dict()).tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    buttons = traitlets.Dict().tag(sync=True)
    tasks = traitlets.List(traitlets.Dict()).tag(sync=True)
    task = traitlets.Unicode("").tag(sync=True)
    tokens = traitlets.Unicode("").tag(sync=True)
    tokens_note = traitlets.Unicode("").tag(sync=True)
    inspector = traitlets.Dict().tag(sync=True)
    approvals = traitlets.List(traitlets.Dict()).tag(sync=True)
    transcript = traitlets.Dict().tag(sync=True)
    inject_text = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        runner: AgentRunner,
        task: TaskRef | None = None,
        *,
        throttle_s: float = 0.1,
        auto_finalize: bool = True,
        **graph_options: Any,
    ) -> None:
        super().__init__()
        self._sync_lock = threading.RLock()
        self.panel = _ReportingPanel(runner, task, throttle_s=throttle_s, auto_finalize=auto_finalize,
                                     **graph_options)
        self.panel._report = self._on_report
        # the live graph redraws on its own throttle: follow its DOT text
        self.panel.graph.widget.observe(lambda change: self._sync_dot(), names=["dot_source"])
        self.panel.inject_box.observe(lambda change: self._set("inject_text", change["new"] or ""), names="value")
        self.on_msg(self._on_command)
        self._sync_all()

    # ----- Python twins ------------------------------------------------------------------
    @property
    def runner(self) -> AgentRunner:
        return self.panel.runner

    @property
    def task_id(self) -> str | None:
        return self.panel.task_id

    def select(self, task: TaskRef | None) -> None:
        self.panel.select(task)

    def new_task(self, text: str) -> Task:
        return self.panel.new_task(text)

    def inject(self, text: str | None) -> None:
        self.panel.inject(text)

    def step(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        return self.panel.step()

    def run(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        return self.panel.run()

    def retry(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        return self.panel.retry()

    def stop(self, cancel: bool = False) -> None:
        self.panel.stop(cancel)

    def undo(self) -> TaskStep:
        return self.panel.undo()

    def skip(self) -> TaskStepOutput:
        return self.panel.skip()

    def abandon(self) -> None:
        self.panel.abandon()

    def release(self, step_id: str | None = None) -> list[TaskStep]:
        return self.panel.release(step_id)

    def approve(self, call_id: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.panel.approve(call_id, arguments)

    def edit(self, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.panel.edit(call_id, arguments)

    def reject(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        return self.panel.reject(call_id, reason)

    def inspect(self, step_id: str | None) -> None:
        self.panel.inspect(step_id)

    def goto(self, step_id: str) -> TaskStep | None:
        """Undo back to just after ``step_id`` completed (``runner.goto_step``); the
        inspector's "Undo back to here"."""
        return self.panel.controller.goto(step_id)

    def fork(self, step_id: str, input: str | None = None) -> TaskStep:
        """Go back to just before ``step_id`` and queue a new step in its place, with
        ``input`` or the old one's (``runner.fork``); the old branch stays drawn."""
        return self.panel.controller.fork(step_id, input)

    def edit_input(self, step_id: str, text: str) -> TaskStep:
        """Change a queued step's input before it runs (``runner.edit_step``)."""
        return self.panel.controller.edit_input(step_id, text)

    async def wait(self) -> TaskStepOutput | BaseException | None:
        return await self.panel.wait()

    def close(self) -> None:
        """Stop listening to the runner and close the widget (and the panel's own)."""
        self.panel._report = None
        self.panel.close()
        super().close()

    # ----- commands from the browser -----------------------------------------------------
    def _on_command(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """Run a button's twin; a command that cannot be done is shown, never raised."""
        self.panel._click(lambda: self._dispatch(content))

    def _dispatch(self, content: Any) -> Any:
        if not isinstance(content, dict) or not isinstance(content.get("cmd"), str):
            raise ValueError(f"a panel command is a dict with a 'cmd' string, got {content!r}")
        cmd = content["cmd"]
        handler = COMMANDS.get(cmd)
        if handler is None:
            raise ValueError(f"unknown panel command {cmd!r}; allowed: {sorted(COMMANDS)}")
        return handler(self, content)

    def _run_with_input(self, twin: Callable[[], Any], content: dict[str, Any]) -> Any:
        text = _str(content, "input", required=False)
        if text is not None:
            self.panel.inject(text)
        return twin()

    # ----- state to the browser ----------------------------------------------------------
    def _on_report(self, what: str) -> None:
        if what == "tokens":
            self._sync_tokens()
        else:
            self._sync_all()

    def _set(self, name: str, value: Any) -> None:
        if getattr(self, name) != value:
            setattr(self, name, value)

    def _sync_dot(self) -> None:
        with self._sync_lock:
            self._set("dot", self.panel.graph.source)

    def _sync_tokens(self) -> None:
        with self._sync_lock, self.hold_sync():
            self._set("tokens", self.panel.streamed_text[-6000:])
            self._set("tokens_note", self.panel.controller.tokens_note())

    def _sync_all(self) -> None:
        """Every traitlet from the panel's state, sent as one message."""
        panel = self.panel
        with self._sync_lock, self.hold_sync():
            state = panel.state
            busy = panel.busy
            selected = panel.step_picker.value or ""
            self._set("dot", panel.graph.source)
            self._set("nodes", panel_data.node_data(state))
            self._set("task", panel.task_id or "")
            self._set("tasks", panel_data.task_options(panel.runner))
            self._set("buttons", panel_data.button_flags(state, busy))
            self._set("status", panel_data.status_data(state, busy=busy, notice=panel._notice,
                                                       notice_is_error=panel.controller.notice_is_error))
            self._set("selected", selected)
            self._set("inspector", panel_data.inspector_data(state, selected or None, busy=busy,
                                                             runner=panel.runner))
            self._set("approvals", panel_data.approval_data(panel.runner, state))
            self._set("transcript", panel_data.transcript_data(panel.transcript_messages()))
            self._set("inject_text", panel.inject_box.value or "")
            self._set("tokens", panel.streamed_text[-6000:])
            self._set("tokens_note", panel.controller.tokens_note())

    # ----- display -----------------------------------------------------------------------
    def __repr__(self) -> str:
        return repr(self.panel).replace("AgentPanel(", "PanelWidget(", 1)

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> Any:
        """The widget view, plus a static picture (HTML with the graph as inline SVG) and
        text for nbconvert, nbval and GitHub, which show no widgets."""
        self.panel.graph.flush()
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        try:
            bundle["text/html"] = self.panel.static_html()
        except Exception as err:  # noqa: BLE001 - the widget view still shows
            from nbagent.viz.html import error_html

            bundle["text/html"] = error_html("the panel could not be drawn", err)
        data = super()._repr_mimebundle_(include=include, exclude=exclude)
        if isinstance(data, tuple):  # (data, metadata)
            data = data[0]
        view = (data or {}).get("application/vnd.jupyter.widget-view+json")
        if view is not None:
            bundle["application/vnd.jupyter.widget-view+json"] = view
        return bundle


def _approve_edited(w: PanelWidget, c: dict[str, Any]) -> Any:
    from nbagent.viz.approval_panel import parse_arguments

    return w.edit(_str(c, "call"), parse_arguments(_str(c, "arguments")))  # type: ignore[arg-type]


def _optional_step(c: dict[str, Any]) -> str | None:
    return _str(c, "step", required=False) or None


#: command name -> what it does (each one a Python twin; see the module docstring).
COMMANDS: dict[str, Callable[[PanelWidget, dict[str, Any]], Any]] = {
    "new_task": lambda w, c: w.new_task(_str(c, "text")),  # type: ignore[arg-type]
    "select_task": lambda w, c: w.select(_str(c, "task", required=False) or None),
    "step": lambda w, c: w._run_with_input(w.step, c),
    "run": lambda w, c: w._run_with_input(w.run, c),
    "retry": lambda w, c: w._run_with_input(w.retry, c),
    "stop": lambda w, c: w.stop(bool(c.get("cancel", False))),
    "undo": lambda w, c: w.undo(),
    "skip": lambda w, c: w.skip(),
    "abandon": lambda w, c: w.abandon(),
    "release": lambda w, c: w.release(_optional_step(c)),
    "inspect": lambda w, c: w.inspect(_optional_step(c)),
    "goto": lambda w, c: w.goto(_str(c, "step")),  # type: ignore[arg-type]
    "fork": lambda w, c: w.fork(_str(c, "step"), _str(c, "input", required=False)),  # type: ignore[arg-type]
    "edit_input": lambda w, c: w.edit_input(_str(c, "step"), _str(c, "input")),  # type: ignore[arg-type]
    "approve": lambda w, c: w.approve(_str(c, "call")),  # type: ignore[arg-type]
    "edit": _approve_edited,
    "reject": lambda w, c: w.reject(_str(c, "call"), _str(c, "reason", required=False) or None),  # type: ignore[arg-type]
}
