"""AgentPanel: drive a runner from a notebook with buttons, and watch it work.

Task picker and new-task box; Run step, Run to end, Stop, Undo, Retry, Abandon; a box whose
text becomes the next step's input; the live step graph; a step inspector; the chat transcript;
the tokens of the running step as they stream; a status line. Every button has a Python twin
(``panel.step()`` does what a click on "Run step" does), so everything is scriptable and
testable without a browser.

Runs never block the notebook: when an event loop is running (inside Jupyter), ``step()``,
``retry()`` and ``run()`` schedule an asyncio task on it and return that task at once
(``await panel.run()`` in a cell waits for it and gives the result; so does
``await panel.wait()``); the loop awaits the runner step by step and checks the stop flag in
between, so the kernel keeps answering clicks. With no loop running (plain Python,
tests) they run to the end and return the result.

Errors: a step that raises is shown (status line, red node, inspector) and *returned* by the
twin, never raised (``panel.error`` keeps it). A call that does not fit the state (nothing to
undo, task finalized, a run already going) raises ``TaskStateError`` from the twin; the button
shows the same message in the status line instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from nbagent.events import (
    Event,
    RunnerReset,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskCreated,
    TaskDeleted,
    TokenStreamed,
)
from nbagent.messages import ChatMessage, MessageRole
from nbagent.engine.errors import TaskStateError
from nbagent.engine.state import StepStatus, TaskStatus
from nbagent.schema import StreamingAgentChatResponse, TaskStepOutput
from nbagent.viz.escape import html_text, preview, short_id
from nbagent.viz.live import DISABLED_BUTTON_CSS, LiveGraph, Throttle, widget_bundle

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner, TaskRef
    from nbagent.engine.state import TaskState
    from nbagent.schema import Task, TaskStep

__all__ = ["AgentPanel"]

log = logging.getLogger("nbagent.viz")

_MAX_TOKEN_CHARS = 6000  # the token view keeps the tail of a long stream
_ENDED = (TaskStatus.FINALIZED, TaskStatus.ABANDONED)

_PANEL_CSS = """
.nbagent-panel{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);background:var(--jp-layout-color1,transparent);
 border:1px solid var(--jp-border-color2,#d0d7de);border-radius:6px;padding:6px 8px;
 box-sizing:border-box;max-width:100%}
.nbagent-panel .nbagent-h{font-weight:600;font-size:var(--jp-ui-font-size1,13px);
 color:var(--jp-ui-font-color2,#57606a);margin:4px 0 2px 0}
.nbagent-panel .nbagent-status-line{font-size:var(--jp-ui-font-size1,13px);line-height:1.5;
 padding:3px 6px;border-radius:4px;background:var(--jp-layout-color2,#f6f8fa);
 color:var(--jp-ui-font-color1,#1f2328);overflow-wrap:anywhere}
.nbagent-panel .nbagent-err{color:var(--jp-error-color1,#b91c1c);font-weight:600}
.nbagent-panel .nbagent-note{color:var(--jp-ui-font-color2,#57606a)}
.nbagent-panel .nbagent-badge{display:inline-block;padding:0 7px;border-radius:9px;
 border:1px solid;font-weight:600;font-size:0.9em}
.nbagent-panel .nbagent-tail{display:flex;flex-direction:column-reverse;overflow:auto;
 font-size:var(--jp-code-font-size,12px);max-height:calc(7 * 1.4em + 8px);border-radius:4px;
 border:1px solid var(--jp-border-color2,#d0d7de);background:var(--jp-layout-color2,#f6f8fa)}
.nbagent-panel .nbagent-tokens pre{font-family:var(--jp-code-font-family,monospace);
 font-size:inherit;line-height:1.4;white-space:pre-wrap;word-break:break-word;margin:0;
 padding:4px 6px;min-height:2.8em;background:transparent;color:var(--jp-ui-font-color1,#1f2328);
 border:none}
.nbagent-panel .nbagent-graphbox{border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:4px;background:var(--jp-layout-color0,transparent)}
.nbagent-panel .nbagent-btn-step.jupyter-button:not([disabled]){background:#1565c0;color:#fff}
.nbagent-panel .nbagent-btn-run.jupyter-button:not([disabled]){background:#2e7d32;color:#fff}
.nbagent-panel .nbagent-btn-stop.jupyter-button:not([disabled]){background:#b45309;color:#fff}
.nbagent-panel .nbagent-btn-retry.jupyter-button:not([disabled]){background:#b91c1c;color:#fff}
""" + DISABLED_BUTTON_CSS.replace("SCOPE", ".nbagent-panel")
# the coloured buttons: Jupyter's own success/warning/danger colours carry white text at
# 2-4:1; these keep the same hues at >= 4.9:1 in light and dark themes. The Streaming box
# is 7 lines of 1.4em tall, so its edge falls between two lines, never through one.


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class AgentPanel:
    """A control panel for ``runner`` (see the module docstring); display it in a notebook.

    ``widget`` is the ipywidgets ``VBox``; ``graph`` the ``LiveGraph``. ``auto_finalize``:
    finalize a task as soon as its last step is done (its messages then join the runner's
    memory, as ``runner.chat`` does). ``throttle_s`` bounds how often views redraw.
    """

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
        self.auto_finalize = auto_finalize
        self.error: BaseException | None = None
        self.last_output: TaskStepOutput | None = None
        self.running_task: asyncio.Task[Any] | None = None
        self._notice = ""  # last message about a click that could not be done
        self._notice_is_error = False
        self._busy = False
        self._stop_requested = False
        self._cancel_requested = False
        self._syncing = False
        self._follow_latest = True
        self._tokens: list[str] = []
        self._token_chars = 0
        self._token_step: str | None = None
        self._lock = threading.RLock()

        self.graph = LiveGraph(runner, task, throttle_s=throttle_s, **graph_options)
        self._task_id = self.graph.task_id

        def button(text: str, icon: str, style: str, cls: str, tip: str) -> Any:
            b = W.Button(description=text, icon=icon, button_style=style, tooltip=tip,
                         layout=W.Layout(width="auto"))
            b.add_class(cls)
            return b

        self.task_picker = W.Dropdown(description="Task", options=[], value=None,
                                      layout=W.Layout(width="auto", min_width="16em", max_width="32em"))
        self.task_picker.add_class("nbagent-task-picker")
        self.new_task_box = W.Text(placeholder="New task: what should the agent do?",
                                   layout=W.Layout(flex="1 1 auto", width="auto", min_width="12em"))
        self.new_task_box.add_class("nbagent-new-task-text")
        self.new_task_button = button("New task", "plus", "", "nbagent-btn-new", "Create a task with this input")
        # the coloured buttons get their colour from _PANEL_CSS, only while enabled (a
        # button_style would keep it when disabled, so a disabled Stop would look live)
        self.step_button = button("Run step", "step-forward", "", "nbagent-btn-step", "Run the next step")
        self.run_button = button("Run to end", "fast-forward", "", "nbagent-btn-run",
                                 "Run steps until the task is done (in the background)")
        self.stop_button = button("Stop", "stop", "", "nbagent-btn-stop", "Stop after the running step")
        self.undo_button = button("Undo", "undo", "", "nbagent-btn-undo", "Take back the last step")
        self.retry_button = button("Retry", "repeat", "", "nbagent-btn-retry", "Run the failed step again")
        self.skip_button = button("Skip", "forward", "", "nbagent-btn-skip",
                                  "Mark the failed step done without running it, and go on")
        self.abandon_button = button("Abandon", "times", "", "nbagent-btn-abandon",
                                     "End the task without keeping what it did")
        self.release_button = button("Release", "unlock", "", "nbagent-btn-release",
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
        from nbagent.viz.approval_panel import ApprovalRows

        self.approvals = ApprovalRows(self)  # Approve / Edit / Reject per waiting tool call

        self.step_button.on_click(lambda _: self._click(self.step))
        self.run_button.on_click(lambda _: self._click(self.run))
        self.stop_button.on_click(lambda _: self._click(self.stop))
        self.undo_button.on_click(lambda _: self._click(self.undo))
        self.retry_button.on_click(lambda _: self._click(self.retry))
        self.skip_button.on_click(lambda _: self._click(self.skip))
        self.abandon_button.on_click(lambda _: self._click(self.abandon))
        self.release_button.on_click(lambda _: self._click(self.release))
        self.new_task_button.on_click(lambda _: self._click(self._new_task_from_box))
        self.task_picker.observe(self._on_pick_task, names="value")
        self.step_picker.observe(self._on_pick_step, names="value")

        def heading(text: str) -> Any:
            return W.HTML(f'<div class="nbagent-h">{html_text(text)}</div>')

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
                W.HTML(f"<style>{_PANEL_CSS}</style>", layout=W.Layout(height="0px", margin="0")),
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

        self._refresh_throttle = Throttle(self._refresh, throttle_s)
        self._token_throttle = Throttle(self._draw_tokens, min(throttle_s, 0.05))
        self._unsubscribe: Callable[[], None] | None = runner.subscribe(self._on_event)
        self._draw_tokens()
        self._refresh()

    TRANSCRIPT_RECENT = 8  # messages the transcript shows whole; the earlier ones are folded

    # ----- what is selected --------------------------------------------------------------
    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def state(self) -> TaskState | None:
        """The selected task's state (None when no task is selected)."""
        if self._task_id is None:
            return None
        return self.runner.tasks.get(self._task_id)

    @property
    def task(self) -> Task | None:
        state = self.state
        return None if state is None else state.task

    @property
    def busy(self) -> bool:
        """Whether a step or a run started by this panel is going on."""
        return self._busy

    # ----- Python twins of the buttons ---------------------------------------------------
    def select(self, task_id: TaskRef | None) -> None:
        """Show another task (a Task or its id; None shows none)."""
        state = None if task_id is None else self.runner.state_of(task_id)
        if self.busy and (state is None or state.task_id != self._task_id):
            raise TaskStateError("a run is going on in this panel; press Stop before switching task")
        self._task_id = None if state is None else state.task_id
        self._follow_latest = True
        self._reset_tokens()
        self._draw_tokens()  # not the previous task's stream
        self.graph.show(self._task_id)
        self._set_notice("")
        self._refresh_now()

    def new_task(self, text: str) -> Task:
        """Create a task for ``text`` and select it (nothing runs yet)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"a new task needs some input text, got {text!r}")
        if self.busy:
            raise TaskStateError("a run is going on in this panel; press Stop before creating a task")
        task = self.runner.create_task(text)
        self.select(task.task_id)
        return task

    def inject(self, text: str | None) -> None:
        """Make ``text`` the input of the next step that runs ('' or None: keep its own)."""
        if text is not None and not isinstance(text, str):
            raise TypeError(f"injected input must be a str or None, got {type(text).__name__}")
        self.inject_box.value = text or ""

    def step(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        """Run the next step (streaming). See the module docstring for what it returns."""
        self._check_can_step()
        return self._launch(1)

    def retry(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        """Run the step whose last attempt failed again (with the injected input, if any)."""
        state = self._require_state()
        if state.status != TaskStatus.FAILED:
            raise TaskStateError(
                f"nothing to retry: task {state.task_id!r} is {state.status.value}; "
                "Retry is for a task whose last step failed"
            )
        self._check_can_step()
        return self._launch(1)

    def run(self) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        """Run steps until the task is done, a step fails or ``stop()`` is called."""
        self._check_can_step()
        return self._launch(None)

    def stop(self, cancel: bool = False) -> None:
        """Stop a run after the step now running; ``cancel=True`` also cancels that step
        (the runner rolls it back and records it as failed, so Retry can run it again)."""
        if not self.busy:
            self._set_notice("nothing is running")
            self._refresh_now()
            return
        self._stop_requested = True
        if cancel and self.running_task is not None and not self.running_task.done():
            self._cancel_requested = True
            self.running_task.cancel()
        self._set_notice("stopping after the running step…" if not cancel else "cancelling…")
        self._refresh_now()

    def undo(self) -> TaskStep:
        """Take back the last completed step (it is queued again; its branch stays greyed)."""
        state = self._require_state()
        if self.busy:
            raise TaskStateError("a run is going on in this panel; press Stop before Undo")
        step = self.runner.undo_step(state.task_id)
        self.error = None
        self._set_notice("")
        self._reset_tokens(step.step_id)  # what it streamed was taken back with it
        self._after_action()
        self._draw_tokens()
        return step

    def skip(self) -> TaskStepOutput:
        """Mark the failed step done without running it, and go on (``runner.skip_step``)."""
        state = self._require_state()
        if self.busy:
            raise TaskStateError("a run is going on in this panel; press Stop before Skip")
        out = self.runner.skip_step(state.task_id)
        self.error = None
        self._set_notice("")
        self._reset_tokens(out.task_step.step_id)
        self._after_action()
        self._draw_tokens()
        return out

    def approve(self, call_id: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the Approve button does: approve a waiting tool call (edited ``arguments``
        optional); the next Run step runs it. Decided ``by="panel"``."""
        decision = self.runner.approve(self._require_state().task_id, call_id, arguments, by="panel")
        self._set_notice("")
        self._after_action()
        return decision

    def edit(self, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the Edit button does: approve the call with the arguments typed in its row."""
        return self.approve(call_id, arguments)

    def reject(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """What the Reject button does: the call does not run; the model gets ``reason``."""
        decision = self.runner.reject(self._require_state().task_id, call_id, reason, by="panel")
        self._set_notice("")
        self._after_action()
        return decision

    def abandon(self) -> None:
        """End the task without keeping what it did (the runner's memory is untouched)."""
        state = self._require_state()
        if self.busy:
            raise TaskStateError("a run is going on in this panel; press Stop before Abandon")
        self.runner.abandon_task(state.task_id)
        self._set_notice("")
        self._after_action()

    def release(self, step_id: str | None = None) -> list[TaskStep]:
        """Let a held step run (``step_id``, or the inspected step if it is held, or every
        held step of the task); the Release button does this."""
        state = self._require_state()
        if step_id is None:
            picked = self.step_picker.value
            held = {s.step_id for s in state.held_steps()}
            step_id = picked if picked in held else None
        steps = self.runner.release_step(state.task_id, step_id)
        self._set_notice("")
        self._after_action()
        return steps

    def inspect(self, step_id: str | None) -> None:
        """Show one step in the inspector (None: follow the latest step)."""
        state = self._require_state()
        if step_id is not None and step_id not in state.steps:
            raise ValueError(f"step {step_id!r} is not a step of task {state.task_id!r}; steps: {list(state.steps)}")
        self._follow_latest = step_id is None
        self._refresh_now(inspect=step_id)

    async def wait(self) -> TaskStepOutput | BaseException | None:
        """Wait for the background run, if any; returns what it returned."""
        task = self.running_task
        if task is None:
            return None
        try:
            return await asyncio.shield(task) if not task.done() else task.result()
        except asyncio.CancelledError:
            return None

    def close(self) -> None:
        """Stop listening to the runner and close every widget."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._refresh_throttle.cancel()
        self._token_throttle.cancel()
        self.graph.close()
        _close_tree(self.widget)

    # ----- running -----------------------------------------------------------------------
    def _require_state(self) -> TaskState:
        state = self.state
        if state is None:
            known = ", ".join(repr(k) for k in self.runner.tasks) or "none"
            raise TaskStateError(f"no task selected; create one with new_task(text) (tasks: {known})")
        return state

    def _check_can_step(self) -> TaskState:
        state = self._require_state()
        if self.busy:
            raise TaskStateError("a run is going on in this panel; press Stop or await panel.wait()")
        status = state.status
        if status in _ENDED:
            raise TaskStateError(f"task {state.task_id!r} is {status.value}; create a new task")
        if status == TaskStatus.COMPLETED:
            raise TaskStateError(f"task {state.task_id!r} is done: its last step has run")
        if status == TaskStatus.RUNNING:
            raise TaskStateError(f"task {state.task_id!r} is already running a step")
        if not any(state.is_step_ready(s) for s in state.step_queue):
            raise TaskStateError(f"task {state.task_id!r} has no step ready to run")
        return state

    def _launch(self, max_steps: int | None) -> TaskStepOutput | BaseException | asyncio.Task[Any] | None:
        loop = _running_loop()
        self._stop_requested = False
        self._cancel_requested = False
        self._busy = True
        self._set_notice("")
        self._refresh_now()
        if loop is None:
            from nbagent import _sync

            try:
                return _sync.run_sync(self._run_steps(max_steps))
            finally:
                self._busy = False
        task = loop.create_task(self._run_steps(max_steps))
        self.running_task = task
        task.add_done_callback(self._on_run_done)
        return task

    def _on_run_done(self, task: asyncio.Task[Any]) -> None:
        if self._busy:  # cancelled before it started: its finally block never ran
            self._busy = False
            self._refresh_now()

    async def _run_steps(self, max_steps: int | None) -> TaskStepOutput | BaseException | None:
        """The one loop behind Run step, Retry and Run to end."""
        self._busy = True
        task_id = self._task_id
        result: TaskStepOutput | BaseException | None = None
        done = 0
        try:
            while task_id is not None and (max_steps is None or done < max_steps):
                if self._stop_requested:
                    self._set_notice(f"stopped after {done} step{'s' if done != 1 else ''}")
                    break
                state = self.runner.tasks.get(task_id)
                if state is None or state.status in (*_ENDED, TaskStatus.COMPLETED):
                    break
                injected = self.inject_box.value or None
                if injected is not None:
                    self.inject_box.value = ""
                try:
                    # a worker that says it cannot stream (QueryPipelineAgentWorker) is stepped plainly
                    streams = getattr(self.runner.agent_worker, "supports_streaming", True)
                    step_fn = self.runner.astream_step if streams else self.runner.arun_step
                    out = await step_fn(task_id, input=injected)
                    reply = out.output
                    if isinstance(reply, StreamingAgentChatResponse) and not reply.is_done:
                        # the step ends with its reply (tokens show as they come): tool calls
                        # after its text make it a step like any other, not the answer
                        await reply.aget_response()
                except asyncio.CancelledError:
                    if injected is not None:
                        self.inject_box.value = injected
                    if not self._cancel_requested:
                        raise
                    self._set_notice("cancelled: the running step was rolled back; Retry runs it again")
                    result = None
                    break
                except Exception as err:  # shown in the panel; never lost, never raised from a click
                    if injected is not None:  # keep the steering text for Retry
                        self.inject_box.value = injected
                    self.error = err
                    result = err
                    break
                self.error = None
                self.last_output = out
                result = out
                done += 1
                if out.is_last:
                    await self._finish(task_id, out)
                    break
                await asyncio.sleep(0)  # let the kernel handle clicks (Stop) between steps
        finally:
            self._busy = False
            self._stop_requested = False
            self._cancel_requested = False
            self.graph.flush()
            self._token_throttle.flush()
            self._draw_tokens()  # the note says how the step ended, not "streaming…"
            self._refresh_now()
        return result

    async def _finish(self, task_id: str, out: TaskStepOutput) -> None:
        """Finalize a done task; read a streamed answer to its end (the runner reports its
        tokens as TokenStreamed events, so they show up live in the token view)."""
        if not self.auto_finalize:
            return
        try:
            response = self.runner.finalize_response(task_id, out)
            if isinstance(response, StreamingAgentChatResponse) and not response.is_done:
                await response.aget_response()
        except Exception as err:  # noqa: BLE001 - shown, not raised
            self.error = err
            self._set_notice(f"could not finalize: {type(err).__name__}: {err}", error=True)

    def _after_action(self) -> None:
        self.graph.flush()
        self._refresh_now()

    def _new_task_from_box(self) -> Task:
        task = self.new_task(self.new_task_box.value)
        self.new_task_box.value = ""
        return task

    def _click(self, action: Callable[[], Any]) -> None:
        """A button's handler: run the twin; show any error instead of raising it."""
        try:
            action()
        except Exception as err:  # noqa: BLE001 - a click never raises into the kernel
            log.debug("nbagent panel action failed", exc_info=True)
            self._set_notice(f"{type(err).__name__}: {err}", error=True)
            self._refresh_now()

    # ----- events ------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if isinstance(event, TokenStreamed):
            if event.task_id == self._task_id:
                if event.step_id != self._token_step:
                    self._reset_tokens(event.step_id)
                self._add_token(event.token)
            return
        if isinstance(event, TaskCreated):
            if self._task_id is None:
                self._task_id = event.task_id
                self.graph.show(event.task_id)
            self._refresh_throttle.request()
            return
        if isinstance(event, (TaskDeleted, RunnerReset)):
            if self._task_id is not None and self._task_id not in self.runner.tasks:
                self._task_id = None
                self.graph.show(None)
            self._refresh_throttle.request()
            return
        if event.task_id != self._task_id:
            self._refresh_throttle.request()  # the picker shows every task's status
            return
        if isinstance(event, StepStarted):
            self._reset_tokens(event.step_id)
            self._draw_tokens()
        elif isinstance(event, (StepCompleted, StepFailed)):
            self._token_throttle.flush()
            self._draw_tokens()  # "streaming…" becomes how the step ended
        self._refresh_throttle.request()

    def _reset_tokens(self, step_id: str | None = None) -> None:
        with self._lock:
            self._tokens = []
            self._token_chars = 0
            self._token_step = step_id

    def _add_token(self, token: str) -> None:
        with self._lock:
            self._tokens.append(token)
            self._token_chars += len(token)
            if self._token_chars > 2 * _MAX_TOKEN_CHARS:
                text = "".join(self._tokens)[-_MAX_TOKEN_CHARS:]
                self._tokens = [text]
                self._token_chars = len(text)
        self._token_throttle.request()

    @property
    def streamed_text(self) -> str:
        """The tokens streamed so far by the running (or last) step of the selected task."""
        with self._lock:
            return "".join(self._tokens)

    def _draw_tokens(self) -> None:
        with self._lock:
            text = "".join(self._tokens)[-_MAX_TOKEN_CHARS:]
            step = self._token_step
        state = self.state
        if step is not None and state is not None and step in state.steps:
            from nbagent.viz.dot import step_heads

            number, _, words = step_heads(state).get(step, "#? ?").partition(" ")
            note = f"step {number} · {'streaming…' if step in state.running else words}"
        else:
            note = "no step has streamed yet"
        body = html_text(text) if text else ""
        self.tokens_view.value = (
            f'<div class="nbagent-note">{html_text(note)}</div>'
            f'<div class="nbagent-tail"><pre>{body}</pre></div>'
        )

    def _on_pick_task(self, change: dict[str, Any]) -> None:
        if self._syncing or change["new"] == self._task_id:
            return
        self._click(lambda: self.select(change["new"]))

    def _on_pick_step(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        options = [v for _, v in self.step_picker.options]
        self._follow_latest = bool(options) and change["new"] == options[-1]
        self._refresh_now(inspect=change["new"])

    # ----- drawing -----------------------------------------------------------------------
    def _set_notice(self, text: str, error: bool = False) -> None:
        self._notice = text
        self._notice_is_error = error

    def _refresh_now(self, inspect: str | None = None) -> None:
        self._refresh_throttle.cancel()
        self._refresh(inspect)

    def _refresh(self, inspect: str | None = None) -> None:
        """Bring every control in line with the runner's state, in one batch per widget."""
        with self._lock:
            state = self.state
            widgets = [
                self.task_picker, self.step_picker, self.status_line, self.inspector,
                self.transcript, self.step_button, self.run_button, self.stop_button,
                self.undo_button, self.retry_button, self.skip_button, self.abandon_button,
                self.new_task_button,
                self.new_task_box, self.release_button,
            ]
            with ExitStack() as stack:
                for w in widgets:
                    stack.enter_context(w.hold_sync())
                self._sync_task_picker()
                self._sync_buttons(state)
                self.status_line.value = self._status_html(state)
                self.approvals.sync(state)
                self._sync_inspector(state, inspect)
                self.transcript.value = self._transcript_html(state)

    def _sync_task_picker(self) -> None:
        options = []
        for sid, st in list(self.runner.tasks.items()):
            options.append((f"{short_id(sid)} · {st.status.value} · {preview(st.task.input, 40)}", sid))
        value = self._task_id if self._task_id in self.runner.tasks else None
        if list(self.task_picker.options) != options or self.task_picker.value != value:
            self._syncing = True
            try:
                self.task_picker.options = options
                self.task_picker.value = value
            finally:
                self._syncing = False

    def _sync_buttons(self, state: TaskState | None) -> None:
        busy = self.busy
        status = state.status if state is not None else None
        can_step = (
            state is not None and not busy
            and status not in (*_ENDED, TaskStatus.COMPLETED, TaskStatus.RUNNING)
            and any(state.is_step_ready(s) for s in state.step_queue)
        )
        self.step_button.disabled = not can_step
        self.run_button.disabled = not can_step
        self.stop_button.disabled = not busy
        self.retry_button.disabled = not (can_step and status == TaskStatus.FAILED)
        self.skip_button.disabled = not (not busy and state is not None and status == TaskStatus.FAILED)
        self.undo_button.disabled = not (
            state is not None and not busy and status not in (*_ENDED, TaskStatus.RUNNING)
            and bool(state.history)
        )
        self.abandon_button.disabled = not (
            state is not None and not busy and status not in (*_ENDED, TaskStatus.RUNNING)
        )
        self.new_task_button.disabled = busy
        self.new_task_box.disabled = busy
        self.task_picker.disabled = busy
        self.release_button.disabled = not (
            state is not None and status not in _ENDED and bool(state.held_steps())
        )

    def _status_html(self, state: TaskState | None) -> str:
        parts: list[str] = []
        if state is None:
            parts.append('<span class="nbagent-note">no task selected: type one above and press New task</span>')
        else:
            from nbagent.viz.dot import STATUS_COLORS, status_summary

            status = state.status
            colour = {
                TaskStatus.FAILED: StepStatus.FAILED, TaskStatus.RUNNING: StepStatus.RUNNING,
                TaskStatus.COMPLETED: StepStatus.DONE, TaskStatus.FINALIZED: StepStatus.DONE,
                TaskStatus.ABANDONED: StepStatus.UNDONE, TaskStatus.ACTIVE: StepStatus.RUNNING,
            }.get(status, StepStatus.QUEUED)
            fill, border, fg = STATUS_COLORS[colour]
            label = "running" if self.busy and status != TaskStatus.RUNNING and status not in _ENDED else status.value
            parts.append(
                f'<span class="nbagent-badge" style="background:{fill};border-color:{border};color:{fg}">'
                f"{html_text(label)}</span>"
            )
            counts = status_summary(state)
            # every step waiting in the queue, the failed one included (as get_upcoming_steps)
            queued = len(state.step_queue) - counts.get("held", 0)
            tokens = 0
            latency = 0.0
            for out in list(state.completed_steps):
                if out.usage is not None:
                    tokens += out.usage.total_tokens
                if isinstance(out.latency_s, (int, float)):
                    latency += out.latency_s
            parts.append(f"task <code>{html_text(short_id(state.task_id))}</code>")
            parts.append(f"{counts.get('done', 0)} done")
            parts.append(f"{queued} queued")
            if counts.get("held"):
                parts.append(f"{counts['held']} held")
            if counts.get("undone"):
                parts.append(f"{counts['undone']} undone")
            parts.append(f"{tokens} tokens")
            from nbagent.costs import task_cost_label

            money = task_cost_label(state)  # None unless prices are set (nbagent.costs)
            if money is not None:
                parts.append(html_text(money))
            parts.append(_seconds(latency))
            failed = state.failed_step_id()
            if failed is not None and state.failures:
                from nbagent.viz.dot import step_numbers

                f = state.failures[-1]
                index = step_numbers(state).get(failed, "?")
                if f.error_type == "ScriptExhaustedError":
                    hint = ("the scripted model has no replies left, so Retry would fail the same "
                            "way: Undo, Skip, or give the model more replies")
                else:
                    hint = "Retry runs it again; Skip goes on without it"
                parts.append(
                    f'<span class="nbagent-err">step #{index} failed: '
                    f"{html_text(f'{f.error_type}: {f.message}', 300)} ({hint})</span>"
                )
            if status == TaskStatus.FINALIZED and state.final_response is not None:
                from nbagent.text import output_text

                parts.append(f"answer: <b>{html_text(preview(output_text(state.final_response), 120))}</b>")
        if self._notice:
            cls = "nbagent-err" if self._notice_is_error else "nbagent-note"
            parts.append(f'<span class="{cls}">{html_text(self._notice, 400)}</span>')
        return '<div class="nbagent-status-line">' + " · ".join(parts) + "</div>"

    def _sync_inspector(self, state: TaskState | None, inspect: str | None) -> None:
        if state is None:
            options: list[tuple[str, str]] = []
        else:
            from nbagent.viz.dot import step_heads

            heads = step_heads(state)  # the graph's numbers and words: "#4 done · answer"
            options = [
                (f"{heads.get(sid, '#?')} · {preview(step.input, 40) if step.input else '(no input)'}", sid)
                for sid, step in list(state.steps.items())
            ]
        ids = [v for _, v in options]
        current = self.step_picker.value
        value: str | None
        if inspect is not None and inspect in ids:
            value = inspect
        elif self._follow_latest or current not in ids:
            value = self._latest_step(state) if state is not None else None
        else:
            value = current
        if list(self.step_picker.options) != options or self.step_picker.value != value:
            self._syncing = True
            try:
                self.step_picker.options = options
                self.step_picker.value = value
            finally:
                self._syncing = False
        self.inspector.value = self._inspector_html(state, value)

    @staticmethod
    def _latest_step(state: TaskState) -> str | None:
        if state.running:
            return sorted(state.running)[0]
        failed = state.failed_step_id()
        if failed is not None:
            return failed
        if state.completed_steps:
            return state.completed_steps[-1].task_step.step_id
        if state.step_queue:
            return state.step_queue[0].step_id
        return next(iter(state.steps), None)

    def _inspector_html(self, state: TaskState | None, step_id: str | None) -> str:
        if state is None or step_id is None or step_id not in state.steps:
            return '<div class="nbagent-note">no step to inspect</div>'
        from nbagent.viz.html import step_html, step_output_html

        from nbagent.viz.dot import step_heads

        step = state.steps[step_id]
        head = step_heads(state).get(step_id, "#?")  # the graph's number and status for this step
        parts = [f'<div class="nbagent-note">step <b>{html_text(head)}</b></div>', step_html(step)]
        out = state.outputs.get(step_id)
        if out is not None:
            parts.append(step_output_html(out))
        failures = [f for f in list(state.failures) if f.step_id == step_id]
        if failures:
            f = failures[-1]
            parts.append(
                f'<div class="nbagent-err">attempt {f.attempt} failed: '
                f"{html_text(f'{f.error_type}: {f.message}', 500)}</div>"
                f"<details><summary>traceback</summary><pre>{html_text(f.traceback, 8000)}</pre></details>"
            )
        return "".join(parts)

    def transcript_messages(self) -> list[ChatMessage]:
        """The conversation as the panel shows it: the runner's memory, then the selected
        task's new messages (until it is finalized), then its answer if no message holds it."""
        messages = list(self.runner.chat_history)
        state = self.state
        if state is None:
            return messages
        if not state.finalized:
            messages.extend(state.task.scratch_memory.get_all())
        answer = self._answer_text(state)
        if answer is not None:
            last = next((m for m in reversed(messages) if m.role == MessageRole.ASSISTANT), None)
            if last is None or last.text.strip() != answer.strip():
                messages.append(ChatMessage(role=MessageRole.ASSISTANT, content=answer))
        return messages

    @staticmethod
    def _answer_text(state: TaskState) -> str | None:
        from nbagent.text import output_text

        if state.final_response is not None:
            return output_text(state.final_response)
        if state.completed_steps and state.completed_steps[-1].is_last:
            return output_text(state.completed_steps[-1].output)
        return None

    def _transcript_html(self, state: TaskState | None) -> str:
        from nbagent.viz.html import transcript_html

        return transcript_html(self.transcript_messages(), recent=self.TRANSCRIPT_RECENT)

    # ----- display -----------------------------------------------------------------------
    def static_html(self) -> str:
        """The panel as static HTML (status, graph, transcript) for frontends without widgets."""
        state = self.state
        parts = [f"<style>{_PANEL_CSS}</style>", '<div class="nbagent-panel">', self._status_html(state)]
        if state is not None:
            from nbagent.viz.graph import StepGraph

            try:
                parts.append(StepGraph(state, **self.graph.dot_kwargs).html())
            except Exception as err:  # noqa: BLE001
                from nbagent.viz.html import error_html

                parts.append(error_html("the step graph could not be drawn", err))
        parts.append(self._transcript_html(state))
        parts.append("</div>")
        return "".join(parts)

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


def _seconds(value: float) -> str:
    """A duration people can read: milliseconds below one second."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _close_tree(widget: Any) -> None:
    """Close a widget and its descendants (not ``Widget.close_all``: that closes every widget)."""
    for child in list(getattr(widget, "children", ()) or ()):
        _close_tree(child)
    widget.close()
