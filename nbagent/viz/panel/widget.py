"""AgentPanel: drive a runner from a notebook with buttons, and watch it work.

Task picker and new-task box; Run step, Run to end, Stop, Undo, Retry, Skip, Abandon,
Release; a box whose text becomes the next step's input; the live step graph; a step
inspector; the chat transcript; the tokens of the running step as they stream; a status line.
Every button has a Python twin (``panel.step()`` does what a click on "Run step" does), so
everything is scriptable and testable without a browser.

The work is done by a ``PanelController`` (``panel.controller``: the twins, the run loop,
Stop, events, tokens; see ``nbagent.viz.panel.controller`` for what the twins return and
raise); this class only builds the widgets, binds each button to its twin and redraws them
from the controller's state (the HTML comes from ``nbagent.viz.panel.status``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from nbagent.viz.live import LiveGraph, widget_bundle
from nbagent.viz.panel import status as views
from nbagent.viz.panel.controller import MAX_TOKEN_CHARS, PanelController, RunResult, latest_step

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.engine.state import TaskState
    from nbagent.messages import ChatMessage
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task, TaskStep, TaskStepOutput

__all__ = ["AgentPanel"]


class AgentPanel:
    """A control panel for ``runner`` (see the module docstring); display it in a notebook.

    ``widget`` is the ipywidgets ``VBox``; ``graph`` the ``LiveGraph``. ``auto_finalize``:
    finalize a task as soon as its last step is done (its messages then join the runner's
    memory, as ``runner.chat`` does). ``throttle_s`` bounds how often views redraw.
    """

    TRANSCRIPT_RECENT = views.TRANSCRIPT_RECENT

    def __init__(
        self,
        runner: AgentRunner,
        task: TaskRef | None = None,
        *,
        throttle_s: float = 0.1,
        auto_finalize: bool = True,
        **graph_options: Any,
    ) -> None:
        import ipywidgets as W

        self.runner = runner
        self._syncing = False
        self.graph = LiveGraph(runner, task, throttle_s=throttle_s, **graph_options)
        self.controller = PanelController(runner, self.graph.task_id, throttle_s=throttle_s,
                                          auto_finalize=auto_finalize)

        def button(text: str, icon: str, cls: str, tip: str) -> Any:
            b = W.Button(description=text, icon=icon, button_style="", tooltip=tip,
                         layout=W.Layout(width="auto"))
            b.add_class(cls)
            return b

        self.task_picker = W.Dropdown(description="Task", options=[], value=None,
                                      layout=W.Layout(width="auto", min_width="16em", max_width="32em"))
        self.task_picker.add_class("nbagent-task-picker")
        self.new_task_box = W.Text(placeholder="New task: what should the agent do?",
                                   layout=W.Layout(flex="1 1 auto", width="auto", min_width="12em"))
        self.new_task_box.add_class("nbagent-new-task-text")
        self.new_task_button = button("New task", "plus", "nbagent-btn-new", "Create a task with this input")
        # the coloured buttons get their colour from PANEL_CSS, only while enabled (a
        # button_style would keep it when disabled, so a disabled Stop would look live)
        self.step_button = button("Run step", "step-forward", "nbagent-btn-step", "Run the next step")
        self.run_button = button("Run to end", "fast-forward", "nbagent-btn-run",
                                 "Run steps until the task is done (in the background)")
        self.stop_button = button("Stop", "stop", "nbagent-btn-stop", "Stop after the running step")
        self.undo_button = button("Undo", "undo", "nbagent-btn-undo", "Take back the last step")
        self.retry_button = button("Retry", "repeat", "nbagent-btn-retry", "Run the failed step again")
        self.skip_button = button("Skip", "forward", "nbagent-btn-skip",
                                  "Mark the failed step done without running it, and go on")
        self.abandon_button = button("Abandon", "times", "nbagent-btn-abandon",
                                     "End the task without keeping what it did")
        self.release_button = button("Release", "unlock", "nbagent-btn-release",
                                     "Let the held step(s) run (is_ready=True)")
        self.inject_box = W.Text(placeholder="Input for the next step (optional)",
                                 layout=W.Layout(flex="1 1 auto", width="auto", min_width="12em"))
        self.inject_box.add_class("nbagent-inject")
        self.status_line = W.HTML()
        self.status_line.add_class("nbagent-status")
        self.tokens_view = W.HTML()
        self.tokens_view.add_class("nbagent-tokens")
        self.step_picker = W.Dropdown(description="Step", options=[], value=None,
                                      layout=W.Layout(width="auto", max_width="100%"))
        self.step_picker.add_class("nbagent-step-picker")
        self.inspector = W.HTML()
        self.inspector.add_class("nbagent-inspector")
        self.transcript = W.HTML()
        self.transcript.add_class("nbagent-transcript")
        from nbagent.viz.panel.approvals import ApprovalRows

        self.approvals = ApprovalRows(self)  # Approve / Edit / Reject per waiting tool call

        c = self.controller
        self.step_button.on_click(lambda _: c.press(c.step))
        self.run_button.on_click(lambda _: c.press(c.run))
        self.stop_button.on_click(lambda _: c.press(c.stop))
        self.undo_button.on_click(lambda _: c.press(c.undo))
        self.retry_button.on_click(lambda _: c.press(c.retry))
        self.skip_button.on_click(lambda _: c.press(c.skip))
        self.abandon_button.on_click(lambda _: c.press(c.abandon))
        self.release_button.on_click(lambda _: c.press(c.release))
        self.new_task_button.on_click(lambda _: c.press(self._new_task_from_box))
        self.task_picker.observe(self._on_pick_task, names="value")
        self.step_picker.observe(self._on_pick_step, names="value")
        self.inject_box.observe(self._on_inject_typed, names="value")

        def heading(text: str) -> Any:
            return W.HTML(f'<div class="nbagent-h">{views.html_text(text)}</div>')

        # column-reverse pins a scrolled box to its end: the newest steps (and the answer) show
        graph_box = W.Box([self.graph.widget],
                          layout=W.Layout(flex="3 1 0%", min_width="320px", overflow="auto",
                                          max_height="640px", padding="4px",
                                          flex_flow="column-reverse"))
        graph_box.add_class("nbagent-graphbox")
        # the inspector and the transcript are not scroll boxes (a box's edge would cut a line
        # in two): the inspector shows one step, the transcript its last messages whole and
        # the earlier ones folded (TRANSCRIPT_RECENT)
        side = W.VBox(
            [heading("Streaming"), self.tokens_view,
             heading("Inspect step"), self.step_picker, self.inspector,
             heading("Transcript"), self.transcript],
            layout=W.Layout(flex="2 1 0%", min_width="280px", padding="0 0 0 8px"),
        )
        self.widget = W.VBox(
            [
                W.HTML(f"<style>{views.PANEL_CSS}</style>", layout=W.Layout(height="0px", margin="0")),
                W.HBox([self.task_picker, self.new_task_box, self.new_task_button],
                       layout=W.Layout(flex_flow="row wrap", align_items="center")),
                W.HBox([self.step_button, self.run_button, self.stop_button, self.undo_button,
                        self.retry_button, self.skip_button, self.abandon_button, self.release_button,
                        self.inject_box],
                       layout=W.Layout(flex_flow="row wrap", align_items="center")),
                self.status_line,
                self.approvals.widget,
                W.HBox([graph_box, side], layout=W.Layout(flex_flow="row wrap", align_items="flex-start")),
            ],
            layout=W.Layout(width="100%"),
        )
        self.widget.add_class("nbagent-panel")
        c.on_change = self._on_change
        self._draw_tokens()
        self._refresh()

    # ----- what the controller knows -----------------------------------------------------
    task_id = property(lambda self: self.controller.task_id)
    state = property(lambda self: self.controller.state, doc="The selected task's state (None when none is).")
    task = property(lambda self: self.controller.task)
    busy = property(lambda self: self.controller.busy, doc="Whether a run started by this panel is going on.")
    error = property(lambda self: self.controller.error, doc="What the last step raised (None after a success).")
    last_output = property(lambda self: self.controller.last_output)
    running_task = property(lambda self: self.controller.running_task)
    streamed_text = property(lambda self: self.controller.streamed_text,
                             doc="The tokens streamed so far by the running (or last) step.")
    _notice = property(lambda self: self.controller.notice)

    @property
    def auto_finalize(self) -> bool:
        return self.controller.auto_finalize

    @auto_finalize.setter
    def auto_finalize(self, value: bool) -> None:
        self.controller.auto_finalize = value

    # ----- Python twins of the buttons (the controller's) --------------------------------
    def select(self, task_id: TaskRef | None) -> None:
        """Show another task (a Task or its id; None shows none)."""
        self.controller.select(task_id)

    def new_task(self, text: str) -> Task:
        """Create a task for ``text`` and select it (nothing runs yet)."""
        return self.controller.new_task(text)

    def inject(self, text: str | None) -> None:
        """Make ``text`` the input of the next step that runs ('' or None: keep its own)."""
        self.controller.inject(text)

    def step(self) -> RunResult | asyncio.Task[Any]:
        """Run the next step: its output, or the error it raised (shown, not raised); on a
        running event loop, the asyncio task doing it."""
        return self.controller.step()

    def retry(self) -> RunResult | asyncio.Task[Any]:
        """Run the step whose last attempt failed again (with the injected input, if any)."""
        return self.controller.retry()

    def run(self) -> RunResult | asyncio.Task[Any]:
        """Run steps until the task is done, a step fails or ``stop()`` is called."""
        return self.controller.run()

    def stop(self, cancel: bool = False) -> None:
        """Stop a run after the running step; ``cancel=True`` also cancels that step."""
        self.controller.stop(cancel)

    def undo(self) -> TaskStep:
        """Take back the last completed step (it is queued again; its branch stays greyed)."""
        return self.controller.undo()

    def skip(self) -> TaskStepOutput:
        """Mark the failed step done without running it, and go on."""
        return self.controller.skip()

    def approve(self, call_id: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Approve a waiting tool call (edited ``arguments`` optional)."""
        return self.controller.approve(call_id, arguments)

    def edit(self, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Approve the call with these arguments."""
        return self.controller.edit(call_id, arguments)

    def reject(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """The call does not run; the model gets ``reason``."""
        return self.controller.reject(call_id, reason)

    def abandon(self) -> None:
        """End the task without keeping what it did (the runner's memory is untouched)."""
        self.controller.abandon()

    def release(self, step_id: str | None = None) -> list[TaskStep]:
        """Let a held step run (the inspected one if held, or every held step)."""
        return self.controller.release(step_id)

    def inspect(self, step_id: str | None) -> None:
        """Show one step in the inspector (None: follow the latest step)."""
        self.controller.inspect(step_id)

    async def wait(self) -> RunResult:
        """Wait for the background run, if any; returns what it returned."""
        return await self.controller.wait()

    def transcript_messages(self) -> list[ChatMessage]:
        """The conversation as the panel shows it (see ``PanelController``)."""
        return self.controller.transcript_messages()

    def close(self) -> None:
        """Stop listening to the runner and close every widget."""
        self.controller.close()
        self.graph.close()
        _close_tree(self.widget)

    def _click(self, action: Callable[[], Any]) -> None:
        self.controller.press(action)

    def _refresh_now(self) -> None:
        self.controller.refresh_now()

    # ----- the person's input ------------------------------------------------------------
    def _new_task_from_box(self) -> Task:
        task = self.new_task(self.new_task_box.value)
        self.new_task_box.value = ""
        return task

    def _on_inject_typed(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self.controller.inject_text = change["new"] or ""

    def _on_pick_task(self, change: dict[str, Any]) -> None:
        if self._syncing or change["new"] == self.controller.task_id:
            return
        c = self.controller
        c.press(lambda: c.select(change["new"]))

    def _on_pick_step(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        state = self.controller.state
        latest = None if state is None else latest_step(state)
        # picking the step the inspector follows anyway keeps it following
        self.controller.press(lambda: self.controller.inspect(None if change["new"] == latest else change["new"]))

    # ----- drawing -----------------------------------------------------------------------
    def _on_change(self, kind: str) -> None:
        if kind == "state":
            self._refresh()
        elif kind == "tokens":
            self._draw_tokens()
        elif kind == "task":
            self.graph.show(self.controller.task_id)
        elif kind == "settle":
            self.graph.flush()
        elif kind == "inject":
            self._syncing = True
            try:
                self.inject_box.value = self.controller.inject_text
            finally:
                self._syncing = False

    def _draw_tokens(self) -> None:
        c = self.controller
        self.tokens_view.value = views.tokens_html(c.tokens_note(), c.streamed_text[-MAX_TOKEN_CHARS:])

    def _refresh(self) -> None:
        """Bring every control in line with the controller's state, in one batch per widget."""
        c = self.controller
        with c.lock:
            state = c.state
            busy = c.busy
            widgets = [
                self.task_picker, self.step_picker, self.status_line, self.inspector,
                self.transcript, self.step_button, self.run_button, self.stop_button,
                self.undo_button, self.retry_button, self.skip_button, self.abandon_button,
                self.new_task_button, self.new_task_box, self.release_button,
            ]
            with ExitStack() as stack:
                for w in widgets:
                    stack.enter_context(w.hold_sync())
                inspected = c.inspected_step()
                self._sync_picker(self.task_picker, views.task_options(self.runner),
                                  c.task_id if c.task_id in self.runner.tasks else None)
                self._sync_buttons(state, busy)
                self.status_line.value = views.status_html(state, busy=busy, notice=c.notice,
                                                           notice_is_error=c.notice_is_error)
                self.approvals.sync(state)
                self._sync_picker(self.step_picker, views.step_options(state), inspected)
                self.inspector.value = views.inspector_html(state, inspected)
                self.transcript.value = views.transcript_html_for(c.transcript_messages())

    def _sync_picker(self, picker: Any, options: list[tuple[str, str]], value: str | None) -> None:
        if list(picker.options) != options or picker.value != value:
            self._syncing = True
            try:
                picker.options = options
                picker.value = value
            finally:
                self._syncing = False

    def _sync_buttons(self, state: TaskState | None, busy: bool) -> None:
        from nbagent.viz.panel_data import button_flags

        flags = button_flags(state, busy)
        for name, b in (("step", self.step_button), ("run", self.run_button), ("stop", self.stop_button),
                        ("retry", self.retry_button), ("skip", self.skip_button), ("undo", self.undo_button),
                        ("abandon", self.abandon_button), ("new", self.new_task_button),
                        ("release", self.release_button)):
            b.disabled = not flags[name]
        self.new_task_box.disabled = busy
        self.task_picker.disabled = busy

    # ----- display -----------------------------------------------------------------------
    def static_html(self) -> str:
        """The panel as static HTML (status, graph, transcript) for frontends without widgets."""
        c = self.controller
        return views.static_html(c.state, c.transcript_messages(), busy=c.busy, notice=c.notice,
                                 notice_is_error=c.notice_is_error, dot_options=self.graph.dot_kwargs)

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
    ) -> dict[str, Any]:
        self.graph.flush()
        return widget_bundle(self.widget, repr(self), lambda: {"text/html": self.static_html()})


def _close_tree(widget: Any) -> None:
    """Close a widget and its descendants (not ``Widget.close_all``: that closes every widget)."""
    for child in list(getattr(widget, "children", ()) or ()):
        _close_tree(child)
    widget.close()
