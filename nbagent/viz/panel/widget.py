"""AgentPanel: drive a runner from a notebook with buttons, and watch it work.

One ``anywidget.AnyWidget`` (so still an ipywidgets widget) whose ES module ships in the
package (``static/panel.js``, built from ``js/``, Graphviz compiled to WebAssembly inside:
nothing comes from a CDN). It runs wherever anywidgets run: JupyterLab, Notebook 7, VS Code,
Colab, JupyterLite and marimo (``mo.ui.anywidget(agent.panel(task))``).

The task picker and a new-task box; New task, Run step, Run to end, Stop, Undo, Retry, Skip,
Abandon, Release; a box whose text becomes the next step's input; the approval rows; the live
step graph, whose nodes can be clicked (or reached with Tab and the arrow keys) to inspect a
step, undo back to it, fork from it, edit its input or decide its waiting tool calls; the
tokens of the running step as they stream; the transcript; a status line.

The work is done by a ``PanelController`` (``panel.controller``), which this class only binds:
every button has a Python twin here (``panel.step()`` does what a click on Run step does),
state flows to the browser as small traitlets built by ``nbagent.viz.panel.data``, and a press
comes back as a message ``{"cmd": ...}`` (``nbagent.viz.panel.commands``). The protocol
(version ``PROTOCOL``):

Traitlets (Python -> browser):
    ``dot``          DOT text of the shown task (node names ``s0``.., ``u0``.., ``c0``..)
    ``nodes``        ``[{"name", "step", "number", "status", "head", "text"}]`` per drawn step node
                     (a run of steps drawn as one node: its last step, and a ``label``)
    ``selected``     the inspected step's id ("" for none)
    ``status``       ``{"state", "colour", "task", "parts", "error", "answer", "notice", "notice_error"}``
    ``buttons``      ``{"new", "step", "run", "stop", "undo", "retry", "skip", "abandon",
                     "release", "task_picker"}``: which are enabled
    ``tasks``/``task``  the task picker's ``[{"id", "label"}]`` and the shown task's id
    ``tokens``       the tail of what the running (or last) step streamed; ``tokens_note`` says which
    ``inspector``    the selected step (``data.inspector_data``), ``{}`` for none
    ``approvals``    ``[{"call", "step", "tool", "args", "label"}]``: calls waiting for a decision
    ``transcript``   ``{"earlier", "total", "messages": [{"role", "name", "text", "calls"}]}``
    ``inject_text``  the text the next step will get as its input (restored after a failure)

Commands (browser -> Python, ``model.send({"cmd": ...})``): ``new_task {text}``,
``select_task {task}``, ``step``/``run``/``retry {input}``, ``stop {cancel}``, ``undo``,
``skip``, ``abandon``, ``release {step}``, ``inspect {step}``, ``goto {step}``,
``fork {step, input}``, ``edit_input {step, input}``, ``approve {call}``,
``edit {call, arguments}`` (a JSON object as text), ``reject {call, reason}``. A command that
cannot be done is shown in the status line (``status.notice``), never raised;
``panel.press("step")`` does from Python what such a message does.

Where no widget front end runs (nbconvert, nbval, GitHub, the docs site) the output shows the
static picture: the status line, the step graph as an inline SVG and the transcript.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from nbagent.viz.panel import data
from nbagent.viz.panel.commands import run_command
from nbagent.viz.panel.controller import MAX_TOKEN_CHARS, PanelController, RunResult

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.engine.state import TaskState
    from nbagent.messages import ChatMessage
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task, TaskStep, TaskStepOutput

__all__ = ["AgentPanel", "PROTOCOL", "STATIC"]

STATIC = Path(__file__).resolve().parent.parent / "static"
PROTOCOL = 1


class AgentPanel(anywidget.AnyWidget):  # type: ignore[misc]
    """A control panel for ``runner`` (see the module docstring); display it in a notebook.

    ``task``: the task shown first (default: the newest). ``auto_finalize``: finalize a task
    as soon as its last step is done (its messages then join the runner's memory, as
    ``runner.chat`` does). ``throttle_s`` bounds how often the views redraw while the runner
    works. Other keyword arguments go to the step graph (``rankdir``, ``max_label``...).
    """

    _esm = STATIC / "panel.js"
    _css = STATIC / "panel.css"

    # The synced state (the protocol in the module docstring): read it in tests and scripts
    # (``panel.status["state"]``); the panel sets it, the browser only draws it.
    #: which panel the shared ES module draws ("agent" here)
    kind = traitlets.Unicode("agent").tag(sync=True)
    #: the version of this protocol, so a stale front end can tell it is stale
    protocol = traitlets.Int(PROTOCOL).tag(sync=True)
    #: the DOT text of the shown task's step graph
    dot = traitlets.Unicode("").tag(sync=True)
    #: one dict per drawn step node (its step id, number, status, text), for clicks and keys
    nodes = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: the inspected step's id ("" for none)
    selected = traitlets.Unicode("").tag(sync=True)
    #: the status line's parts: state, colour, counts, error, answer, the last refused press
    status = traitlets.Dict().tag(sync=True)
    #: which buttons are enabled, by name ("step", "run", "undo", "retry", ...)
    buttons = traitlets.Dict().tag(sync=True)
    #: the task picker's choices, ``{"id", "label"}`` each
    tasks = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: the shown task's id ("" for none)
    task = traitlets.Unicode("").tag(sync=True)
    #: the tail of what the running (or last) step streamed
    tokens = traitlets.Unicode("").tag(sync=True)
    #: which step ``tokens`` belong to, and whether it is still streaming
    tokens_note = traitlets.Unicode("").tag(sync=True)
    #: the inspected step's details ({} for none)
    inspector = traitlets.Dict().tag(sync=True)
    #: the tool calls waiting for a decision, one dict each (call id, step, tool, arguments)
    approvals = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: the conversation shown: its newest messages and how many came before
    transcript = traitlets.Dict().tag(sync=True)
    #: the text the next step gets as its input (kept after a failure, to retry with)
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
        controller = PanelController(runner, task, throttle_s=throttle_s, auto_finalize=auto_finalize,
                                     **graph_options)  # checks the task and the options first
        super().__init__()
        self._sync_lock = threading.RLock()
        self.controller = controller
        self.on_msg(self._on_message)
        controller.on_change = self._on_change
        self._sync_all()

    # ----- what the controller knows -----------------------------------------------------
    @property
    def runner(self) -> AgentRunner:
        """The runner the panel drives: its buttons call this runner's methods."""
        return self.controller.runner

    @property
    def task_id(self) -> str | None:
        """The shown task's id (None when no task is shown)."""
        return self.controller.task_id

    @property
    def state(self) -> TaskState | None:
        """The shown task's state (None when no task is shown)."""
        return self.controller.state

    @property
    def auto_finalize(self) -> bool:
        """Whether a task is finalized as soon as its last step is done."""
        return self.controller.auto_finalize

    @auto_finalize.setter
    def auto_finalize(self, value: bool) -> None:
        self.controller.auto_finalize = bool(value)

    @property
    def busy(self) -> bool:
        """Whether a run started by this panel is going on."""
        return self.controller.busy

    @property
    def error(self) -> BaseException | None:
        """What the last step raised (None after a success)."""
        return self.controller.error

    @property
    def last_output(self) -> TaskStepOutput | None:
        """The output of the last step this panel ran."""
        return self.controller.last_output

    @property
    def running_task(self) -> asyncio.Task[Any] | None:
        """The asyncio task of the background run, if one was started."""
        return self.controller.running_task

    @property
    def streamed_text(self) -> str:
        """All the running (or last) step streamed (``tokens`` holds its tail)."""
        return self.controller.streamed_text

    # ----- Python twins of the buttons (the controller's) --------------------------------
    def select(self, task: TaskRef | None) -> None:
        """Show another task (a Task or its id; None shows none)."""
        self.controller.select(task)

    def new_task(self, text: str) -> Task:
        """Create a task for ``text`` and show it (nothing runs yet)."""
        return self.controller.new_task(text)

    def inject(self, text: str | None) -> None:
        """Make ``text`` the input of the next step that runs ('' or None: keep its own)."""
        self.controller.inject(text)

    def step(self) -> RunResult | asyncio.Task[Any]:
        """Run the next step: its output, or the error it raised (shown, not raised); on a
        running event loop (a notebook), the asyncio task doing it, returned at once."""
        return self.controller.step()

    def retry(self) -> RunResult | asyncio.Task[Any]:
        """Run the step whose last attempt failed again (with the injected input, if any)."""
        return self.controller.retry()

    def run(self) -> RunResult | asyncio.Task[Any]:
        """Run steps until the task is done, a step fails or ``stop()`` is called."""
        return self.controller.run()

    def stop(self, cancel: bool = False) -> None:
        """Stop a run after the running step; ``cancel=True`` also cancels that step (it is
        rolled back and recorded as failed, so Retry runs it again)."""
        self.controller.stop(cancel)

    def undo(self) -> TaskStep:
        """Take back the last completed step (it is queued again; its branch stays greyed)."""
        return self.controller.undo()

    def skip(self) -> TaskStepOutput:
        """Mark the failed step done without running it, and go on."""
        return self.controller.skip()

    def abandon(self) -> None:
        """End the task without keeping what it did (the runner's memory is untouched)."""
        self.controller.abandon()

    def release(self, step_id: str | None = None) -> list[TaskStep]:
        """Let a held step run (the inspected one if it is held, else every held step)."""
        return self.controller.release(step_id)

    def approve(self, call_id: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Approve a waiting tool call (edited ``arguments`` optional); the next step runs it."""
        return self.controller.approve(call_id, arguments)

    def edit(self, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Approve a waiting tool call with these arguments."""
        return self.controller.edit(call_id, arguments)

    def reject(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """The call does not run; the model gets ``reason``."""
        return self.controller.reject(call_id, reason)

    def inspect(self, step_id: str | None) -> None:
        """Show one step in the inspector (None: follow the latest step); a click on its node."""
        self.controller.inspect(step_id)

    def goto(self, step_id: str) -> TaskStep | None:
        """Undo back to just after ``step_id`` (the inspector's "Undo back to here")."""
        return self.controller.goto(step_id)

    def fork(self, step_id: str, input: str | None = None) -> TaskStep:
        """Go back to just before ``step_id`` and queue a new step in its place (with
        ``input``, or the old one's); the old branch stays drawn."""
        return self.controller.fork(step_id, input)

    def edit_input(self, step_id: str, text: str) -> TaskStep:
        """Change a queued step's input before it runs."""
        return self.controller.edit_input(step_id, text)

    async def wait(self) -> RunResult:
        """Wait for the background run, if any; returns what it returned."""
        return await self.controller.wait()

    def status_text(self) -> str:
        """The status line as plain text: the task's status, counts, tokens, time, a failure,
        the answer, the last press that could not be done."""
        return data.status_text(self.status)

    def transcript_messages(self) -> list[ChatMessage]:
        """The conversation as the panel shows it (see ``PanelController``)."""
        return self.controller.transcript_messages()

    def press(self, cmd: str, **args: Any) -> None:
        """Do what a press in the browser does (``cmd`` as in the module docstring): the twin
        runs, and whatever stops it is shown in the status line, not raised."""
        self._on_message(self, {"cmd": cmd, **args}, [])

    def close(self) -> None:
        """Stop listening to the runner and close the widget."""
        controller = self.__dict__.get("controller")  # absent when __init__ refused its arguments
        if controller is not None:
            controller.close()
        super().close()

    # ----- the browser's messages --------------------------------------------------------
    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        c = self.controller
        c.press(lambda: run_command(c, content))

    # ----- state to the browser ----------------------------------------------------------
    def _on_change(self, kind: str) -> None:
        if kind == "tokens":
            self._sync_tokens()
        elif kind == "inject":
            self._set("inject_text", self.controller.inject_text)
        else:
            self._sync_all()

    def _set(self, name: str, value: Any) -> None:
        if getattr(self, name) != value:
            setattr(self, name, value)

    def _sync_tokens(self) -> None:
        c = self.controller
        with self._sync_lock, self.hold_sync():
            self._set("tokens", c.streamed_text[-MAX_TOKEN_CHARS:])
            self._set("tokens_note", c.tokens_note())

    def _sync_all(self) -> None:
        """Every traitlet from the controller's state, sent as one message."""
        c = self.controller
        with self._sync_lock, self.hold_sync():
            state = c.state
            busy = c.busy
            selected = c.inspected_step() or ""
            dot = c.dot()
            self._set("dot", dot)
            self._set("nodes", data.node_data(state, dot))
            self._set("task", c.task_id or "")
            self._set("tasks", data.task_options(c.runner))
            self._set("buttons", data.button_flags(state, busy))
            self._set("status", data.status_data(state, busy=busy, notice=c.notice,
                                                 notice_is_error=c.notice_is_error))
            self._set("selected", selected)
            self._set("inspector", data.inspector_data(state, selected or None, busy=busy, runner=c.runner))
            self._set("approvals", data.approval_data(c.runner, state))
            self._set("transcript", data.transcript_data(c.transcript_messages()))
            self._set("inject_text", c.inject_text)
            self._set("tokens", c.streamed_text[-MAX_TOKEN_CHARS:])
            self._set("tokens_note", c.tokens_note())

    # ----- display -----------------------------------------------------------------------
    def static_html(self) -> str:
        """The panel as static HTML (status, graph, transcript) for frontends without widgets."""
        from nbagent.viz.panel.status import static_html

        c = self.controller
        return static_html(c.state, c.transcript_messages(), busy=c.busy, notice=c.notice,
                           notice_is_error=c.notice_is_error, dot_options=c.graph.options)

    def __repr__(self) -> str:
        state = self.state
        if state is None:
            return f"AgentPanel(tasks={len(self.runner.tasks)}, selected=None)"
        return (
            f"AgentPanel(task={state.task_id!r}, status={state.status.value}, "
            f"steps_done={len(state.completed_steps)}, queued={len(state.step_queue)})"
        )

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> Any:
        """The widget view, plus a static picture (HTML with the graph as an inline SVG) and
        text for nbconvert, nbval and GitHub, which show no widgets. Never raises."""
        self.controller.flush()
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        try:
            bundle["text/html"] = self.static_html()
        except Exception as err:  # noqa: BLE001 - the widget view still shows
            from nbagent.viz.html import error_html

            bundle["text/html"] = error_html("the panel could not be drawn", err)
        view = super()._repr_mimebundle_(include=include, exclude=exclude)
        if isinstance(view, tuple):  # (data, metadata)
            view = view[0]
        widget_view = (view or {}).get("application/vnd.jupyter.widget-view+json")
        if widget_view is not None:
            bundle["application/vnd.jupyter.widget-view+json"] = widget_view
        return bundle
