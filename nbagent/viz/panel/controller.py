"""PanelController: what the control panel does, with no widget in sight.

The Python twin of every button (``step()`` does what a click on Run step does), the run
loop behind Run step / Retry / Run to end, Stop and cancel, the runner's events, the tokens
of the running step, and the transcript. A view (the panel's widget, a test) passes an
``on_change(kind)`` callback and redraws from the controller's state when it is called:

- ``"state"``: anything the views show changed, the step graph (``dot()``) and the tokens
  included (at once after an action; throttled for the runner's events);
- ``"tokens"``: only the tokens changed: the running step streamed (``streamed_text``,
  ``tokens_note()``);
- ``"inject"``: the controller changed ``inject_text`` (used by a step, or put back after a
  failure so that Retry gets it).

Runs never block the notebook: when an event loop is running (inside Jupyter), ``step()``,
``retry()`` and ``run()`` schedule an asyncio task on it and return that task at once
(``await controller.wait()`` gives its result); the loop awaits the runner step by step and
checks the stop flag in between, so the kernel keeps answering clicks. With no loop running
(plain Python, tests) they run to the end and return the result.

Errors: a step that raises is shown (notice, red node, inspector) and *returned* by the twin,
never raised (``error`` keeps it). A call that does not fit the state (nothing to undo, task
finalized, a run already going) raises ``TaskStateError`` from the twin; ``press(action)``,
what a button does, shows the same message as the notice instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent.engine.errors import TaskStateError
from nbagent.engine.state import TaskStatus
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
from nbagent.schema import StreamingAgentChatResponse, TaskStepOutput
from nbagent.viz.live import Throttle

if TYPE_CHECKING:
    from nbagent.engine.errors import TaskRef
    from nbagent.engine.state import TaskState
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task, TaskStep

__all__ = ["PanelController", "MAX_TOKEN_CHARS"]

log = logging.getLogger("nbagent.viz")

MAX_TOKEN_CHARS = 6000  # the token view keeps the tail of a long stream
_ENDED = (TaskStatus.FINALIZED, TaskStatus.ABANDONED)

RunResult = TaskStepOutput | BaseException | None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: a throttled redraw waits at least this many times as long as the last one took, so the views
#: of a long task (whose redraw costs grow with its steps) take at most about a tenth of a run
REDRAW_SPACING = 10.0


def _paced(fn: Callable[[], None], interval_s: float) -> Throttle:
    """A ``Throttle`` of ``fn`` at ``interval_s`` that spaces its calls further apart when a call
    takes long (``REDRAW_SPACING``); what a person does is still drawn at once (``refresh_now``).
    ``interval_s=0`` asks for every change drawn at once: kept as it is."""
    if interval_s <= 0:
        return Throttle(fn, interval_s)

    def call() -> None:
        started = time.perf_counter()
        try:
            fn()
        finally:
            throttle.interval_s = max(interval_s, (time.perf_counter() - started) * REDRAW_SPACING)

    throttle = Throttle(call, interval_s)
    return throttle


def latest_step(state: TaskState) -> str | None:
    """The step the inspector follows: the running one, else the failed one, else the last
    completed one, else the next queued one."""
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


class PanelController:
    """Drives ``runner`` for a panel (see the module docstring). ``task``: the task shown
    first (default: the newest). ``auto_finalize``: finalize a task as soon as its last step
    is done (its messages then join the runner's memory, as ``runner.chat`` does).
    ``throttle_s`` bounds how often ``on_change("state")`` is called for events. Other
    keyword arguments go to the step graph (``task_to_dot``'s ``rankdir``, ``max_label``...)."""

    def __init__(
        self,
        runner: AgentRunner,
        task: TaskRef | None = None,
        *,
        throttle_s: float = 0.1,
        auto_finalize: bool = True,
        on_change: Callable[[str], None] | None = None,
        **graph_options: Any,
    ) -> None:
        from nbagent.viz.panel.graph import ShownGraph

        self.graph = ShownGraph(**graph_options)  # refuses an unknown option before anything else
        self.runner = runner
        self.auto_finalize = auto_finalize
        self.on_change = on_change
        self.error: BaseException | None = None
        self.last_output: TaskStepOutput | None = None
        self.running_task: asyncio.Task[Any] | None = None
        self.notice = ""  # the last click that could not be done, or what a run did
        self.notice_is_error = False
        self.inject_text = ""  # the next step's input ('' keeps its own)
        self._task_id: str | None = None
        if task is not None:
            self._task_id = runner.state_of(task).task_id
        elif runner.tasks:
            self._task_id = next(reversed(runner.tasks))
        self._busy = False
        self._stop_requested = False
        self._cancel_requested = False
        self._picked: str | None = None  # the step the person picked to inspect
        self._follow_latest = True
        self._tokens: list[str] = []
        self._token_chars = 0
        self._token_step: str | None = None
        self.lock = threading.RLock()  # held while the token buffer changes or a view reads it all
        self._refresh_throttle = _paced(lambda: self._emit("state"), throttle_s)
        self._token_throttle = _paced(lambda: self._emit("tokens"), min(throttle_s, 0.05))
        self._unsubscribe: Callable[[], None] | None = runner.subscribe(self._on_event)

    # ----- what is shown -----------------------------------------------------------------
    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def state(self) -> TaskState | None:
        """The shown task's state (None when no task is shown)."""
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

    @property
    def throttle_s(self) -> float:
        return self._refresh_throttle.interval_s

    def inspected_step(self) -> str | None:
        """The step the inspector shows: the one picked (``inspect``), else the latest."""
        state = self.state
        if state is None:
            return None
        if not self._follow_latest and self._picked in state.steps:
            return self._picked
        return latest_step(state)

    # ----- Python twins of the buttons ---------------------------------------------------
    def select(self, task_id: TaskRef | None) -> None:
        """Show another task (a Task or its id; None shows none)."""
        state = None if task_id is None else self.runner.state_of(task_id)
        if self.busy and (state is None or state.task_id != self._task_id):
            raise TaskStateError("a run is going on in this panel; press Stop before switching task")
        self._task_id = None if state is None else state.task_id
        self._follow_latest = True
        self._reset_tokens()  # not the previous task's stream
        self._set_notice("")
        self.refresh_now()

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
        self._set_inject(text or "")

    def step(self) -> RunResult | asyncio.Task[Any]:
        """Run the next step (streaming). See the module docstring for what it returns."""
        self._check_can_step()
        return self._launch(1)

    def retry(self) -> RunResult | asyncio.Task[Any]:
        """Run the step whose last attempt failed again (with the injected input, if any)."""
        state = self._require_state()
        if state.status != TaskStatus.FAILED:
            raise TaskStateError(
                f"nothing to retry: task {state.task_id!r} is {state.status.value}; "
                "Retry is for a task whose last step failed"
            )
        self._check_can_step()
        return self._launch(1)

    def run(self) -> RunResult | asyncio.Task[Any]:
        """Run steps until the task is done, a step fails or ``stop()`` is called."""
        self._check_can_step()
        return self._launch(None)

    def stop(self, cancel: bool = False) -> None:
        """Stop a run after the step now running; ``cancel=True`` also cancels that step
        (the runner rolls it back and records it as failed, so Retry can run it again)."""
        if not self.busy:
            self._set_notice("nothing is running")
            self.refresh_now()
            return
        self._stop_requested = True
        if cancel and self.running_task is not None and not self.running_task.done():
            self._cancel_requested = True
            self.running_task.cancel()
        self._set_notice("stopping after the running step…" if not cancel else "cancelling…")
        self.refresh_now()

    def undo(self) -> TaskStep:
        """Take back the last completed step (it is queued again; its branch stays greyed)."""
        state = self._idle_state("Undo")
        step = self.runner.undo_step(state.task_id)
        self.error = None
        self._reset_tokens(step.step_id)  # what it streamed was taken back with it
        self._after_action()
        return step

    def skip(self) -> TaskStepOutput:
        """Mark the failed step done without running it, and go on (``runner.skip_step``)."""
        state = self._idle_state("Skip")
        out = self.runner.skip_step(state.task_id)
        self.error = None
        self._reset_tokens(out.task_step.step_id)
        self._after_action()
        return out

    def approve(self, call_id: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the Approve button does: approve a waiting tool call (edited ``arguments``
        optional); the next Run step runs it. Decided ``by="panel"``."""
        decision = self.runner.approve(self._require_state().task_id, call_id, arguments, by="panel")
        self._after_action()
        return decision

    def edit(self, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the Edit button does: approve the call with the arguments typed in its row."""
        return self.approve(call_id, arguments)

    def reject(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """What the Reject button does: the call does not run; the model gets ``reason``."""
        decision = self.runner.reject(self._require_state().task_id, call_id, reason, by="panel")
        self._after_action()
        return decision

    def abandon(self) -> None:
        """End the task without keeping what it did (the runner's memory is untouched)."""
        state = self._idle_state("Abandon")
        self.runner.abandon_task(state.task_id)
        self._after_action()

    def release(self, step_id: str | None = None) -> list[TaskStep]:
        """Let a held step run (``step_id``, or the inspected step if it is held, or every
        held step of the task); the Release button does this."""
        state = self._require_state()
        if step_id is None:
            picked = self.inspected_step()
            held = {s.step_id for s in state.held_steps()}
            step_id = picked if picked in held else None
        steps = self.runner.release_step(state.task_id, step_id)
        self._after_action()
        return steps

    def inspect(self, step_id: str | None) -> None:
        """Show one step in the inspector (None: follow the latest step)."""
        state = self._require_state()
        if step_id is not None and step_id not in state.steps:
            raise ValueError(f"step {step_id!r} is not a step of task {state.task_id!r}; steps: {list(state.steps)}")
        self._picked = step_id
        self._follow_latest = step_id is None
        self.refresh_now()

    def goto(self, step_id: str) -> TaskStep | None:
        """Undo back to just after ``step_id`` completed (``runner.goto_step``): the
        inspector's "Undo back to here". Returns the step queued next."""
        state = self._idle_state("Undo back to here")
        nxt = self.runner.goto_step(state.task_id, step_id)
        self.error = None
        self._reset_tokens()
        self._after_action(inspect=step_id)
        return nxt

    def fork(self, step_id: str, input: str | None = None) -> TaskStep:
        """Go back to just before ``step_id`` and queue a new step in its place, with
        ``input`` or the old one's (``runner.fork``); the old branch stays drawn."""
        state = self._idle_state("Fork")
        step = self.runner.fork(state.task_id, step_id, input=input or None)
        self.error = None
        self._reset_tokens()
        self._after_action(inspect=step.step_id)
        return step

    def edit_input(self, step_id: str, text: str) -> TaskStep:
        """Change a queued step's input before it runs (``runner.edit_step``)."""
        if not isinstance(text, str):
            raise TypeError(f"a step's input must be a str, got {type(text).__name__}")
        state = self._idle_state("Edit input")
        step = self.runner.edit_step(state.task_id, step_id, input=text)
        self._after_action(inspect=step_id)
        return step

    async def wait(self) -> RunResult:
        """Wait for the background run, if any; returns what it returned."""
        task = self.running_task
        if task is None:
            return None
        try:
            return await asyncio.shield(task) if not task.done() else task.result()
        except asyncio.CancelledError:
            return None

    def close(self) -> None:
        """Stop listening to the runner (a running step goes on; nothing is redrawn)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._refresh_throttle.cancel()
        self._token_throttle.cancel()
        self.on_change = None

    def press(self, action: Callable[[], Any]) -> None:
        """What a button does: run its twin; an error becomes the notice, never raised."""
        try:
            action()
        except Exception as err:  # noqa: BLE001 - a click never raises into the kernel
            log.debug("nbagent panel action failed", exc_info=True)
            self._set_notice(f"{type(err).__name__}: {err}", error=True)
            self.refresh_now()

    # ----- telling the views -------------------------------------------------------------
    def _emit(self, kind: str) -> None:
        callback = self.on_change
        if callback is not None:
            callback(kind)

    def refresh_now(self) -> None:
        """Tell the views to redraw now (a pending throttled redraw is dropped: this is it)."""
        self._refresh_throttle.cancel()
        self._emit("state")

    def request_refresh(self) -> None:
        """Ask for a redraw (at once, or at the end of the throttle interval)."""
        self._refresh_throttle.request()

    def flush(self) -> None:
        """Run a pending redraw (and a pending token redraw) now."""
        self._token_throttle.flush()
        self._refresh_throttle.flush()

    def _set_notice(self, text: str, error: bool = False) -> None:
        self.notice = text
        self.notice_is_error = error

    def _set_inject(self, text: str) -> None:
        if text != self.inject_text:
            self.inject_text = text
            self._emit("inject")

    def _after_action(self, inspect: str | None = None) -> None:
        self._set_notice("")
        if inspect is not None:
            self._picked = inspect
            self._follow_latest = False
        self.refresh_now()

    # ----- running -----------------------------------------------------------------------
    def _require_state(self) -> TaskState:
        state = self.state
        if state is None:
            known = ", ".join(repr(k) for k in self.runner.tasks) or "none"
            raise TaskStateError(f"no task selected; create one with new_task(text) (tasks: {known})")
        return state

    def _idle_state(self, what: str) -> TaskState:
        state = self._require_state()
        if self.busy:
            raise TaskStateError(f"a run is going on in this panel; press Stop before {what}")
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

    def _launch(self, max_steps: int | None) -> RunResult | asyncio.Task[Any]:
        loop = _running_loop()
        self._stop_requested = False
        self._cancel_requested = False
        self._busy = True
        self._set_notice("")
        self.refresh_now()
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
            self.refresh_now()

    async def _run_steps(self, max_steps: int | None) -> RunResult:
        """The one loop behind Run step, Retry and Run to end."""
        self._busy = True
        task_id = self._task_id
        result: RunResult = None
        done = 0
        try:
            while task_id is not None and (max_steps is None or done < max_steps):
                if self._stop_requested:
                    self._set_notice(f"stopped after {done} step{'s' if done != 1 else ''}")
                    break
                state = self.runner.tasks.get(task_id)
                if state is None or state.status in (*_ENDED, TaskStatus.COMPLETED):
                    break
                injected = self.inject_text or None
                if injected is not None:
                    self._set_inject("")
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
                        self._set_inject(injected)
                    if not self._cancel_requested:
                        raise
                    self._set_notice("cancelled: the running step was rolled back; Retry runs it again")
                    result = None
                    break
                except Exception as err:  # shown in the panel; never lost, never raised from a click
                    if injected is not None:  # keep the steering text for Retry
                        self._set_inject(injected)
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
            self._token_throttle.cancel()  # the redraw below shows them, and how the step ended
            self.refresh_now()
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
            self._refresh_throttle.request()
            return
        if isinstance(event, (TaskDeleted, RunnerReset)):
            if self._task_id is not None and self._task_id not in self.runner.tasks:
                self._task_id = None
            self._refresh_throttle.request()
            return
        if event.task_id != self._task_id:
            self._refresh_throttle.request()  # the picker shows every task's status
            return
        # the redraw this asks for also tells the token view which step streams and how it ended
        if isinstance(event, StepStarted):
            self._reset_tokens(event.step_id)
        elif isinstance(event, StepCompleted) and event.is_last:
            self._redraw_when_streamed(event.step_id)
        self._refresh_throttle.request()

    def _redraw_when_streamed(self, step_id: str) -> None:
        """A streamed answer's text grows after its step is done: redraw once more when its
        stream ends (whoever reads it), so the last drawing shows the whole answer."""
        state = self.state
        out = None if state is None else state.outputs.get(step_id)
        stream = None if out is None else out.output
        if isinstance(stream, StreamingAgentChatResponse) and not stream.is_done:
            stream.add_done_callback(lambda _text: self._refresh_throttle.request())

    def dot(self) -> str:
        """The DOT text of the shown task's step graph now (see ``ShownGraph``)."""
        return self.graph.dot(self.state)

    # ----- the running step's tokens -----------------------------------------------------
    def _reset_tokens(self, step_id: str | None = None) -> None:
        with self.lock:
            self._tokens = []
            self._token_chars = 0
            self._token_step = step_id

    def _add_token(self, token: str) -> None:
        with self.lock:
            self._tokens.append(token)
            self._token_chars += len(token)
            if self._token_chars > 2 * MAX_TOKEN_CHARS:
                text = "".join(self._tokens)[-MAX_TOKEN_CHARS:]
                self._tokens = [text]
                self._token_chars = len(text)
        self._token_throttle.request()

    @property
    def streamed_text(self) -> str:
        """The tokens streamed so far by the running (or last) step of the shown task."""
        with self.lock:
            return "".join(self._tokens)

    @property
    def token_step(self) -> str | None:
        """The step whose tokens ``streamed_text`` holds."""
        return self._token_step

    def tokens_note(self) -> str:
        """Which step streamed and how it is doing: ``step #2 · streaming…``."""
        step = self._token_step
        state = self.state
        if step is None or state is None or step not in state.steps:
            return "no step has streamed yet"
        from nbagent.viz.dot import step_heads

        number, _, words = step_heads(state).get(step, "#? ?").partition(" ")
        return f"step {number} · {'streaming…' if step in state.running else words}"

    # ----- the conversation --------------------------------------------------------------
    def transcript_messages(self) -> list[ChatMessage]:
        """The conversation as the panel shows it: the runner's memory, then the shown
        task's new messages (until it is finalized), then its answer if no message holds it."""
        messages = list(self.runner.chat_history)
        state = self.state
        if state is None:
            return messages
        if not state.finalized:
            messages.extend(state.task.scratch_memory.get_all())
        answer = _answer_text(state)
        if answer is not None:
            last = next((m for m in reversed(messages) if m.role == MessageRole.ASSISTANT), None)
            if last is None or last.text.strip() != answer.strip():
                messages.append(ChatMessage(role=MessageRole.ASSISTANT, content=answer))
        return messages


def _answer_text(state: TaskState) -> str | None:
    from nbagent.text import output_text

    if state.final_response is not None:
        return output_text(state.final_response)
    if state.completed_steps and state.completed_steps[-1].is_last:
        return output_text(state.completed_steps[-1].output)
    return None
