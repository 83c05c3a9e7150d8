"""Changes to a task besides running its steps: undo, skip, abandon, hold and release,
approve and reject tool calls.

Each one is all or nothing (``_transact``: the task's claim, a checkpoint any exception
restores), and emits an event.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from nbagent import _sync, calls
from nbagent._lazy import LazyModule
from nbagent.approval import withdraw_used
from nbagent.engine import approvals, holds, streaming, txn
from nbagent.engine.core import StepCore
from nbagent.engine.errors import TaskRef, TaskStateError, busy_message
from nbagent.engine.state import TaskState
from nbagent import events as ev

if TYPE_CHECKING:
    from nbagent.schema import TaskStep, TaskStepOutput

__all__ = ["StepEdits"]

_T = TypeVar("_T")


@LazyModule
def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import schema as module

    return module


class StepEdits(StepCore):
    """Undo, skip, abandon, held steps and tool-call approvals on top of the step path."""

    def undo_step(self, task_id: TaskRef, input: str | None = None) -> TaskStep:
        """Take back the last completed step and queue it again (with new ``input`` if given).

        Memory, extra state, queue and completed outputs go back to what they were before
        that step ran; the branch it produced stays in the graph, greyed.
        """
        state = self.state_of(task_id)

        def undo() -> TaskStep:
            step = self._take_back(state)
            if input is not None:
                step.input = input
            self._emit(ev.StepUndone(state.task_id, step_id=step.step_id))
            return step

        return self._transact(
            state,
            lambda: self._check_undo(state),
            lambda: [state.steps[state.history[-1].step_id]],
            undo,
        )

    def skip_step(self, task_id: TaskRef, step_id: str | None = None, *, reason: str = "skipped") -> TaskStepOutput:
        """Mark a queued step done without running it: by default the step that failed.

        The worker is not called. The step's output says it was skipped (``reason``), and the
        task moves on: steps linked after it (a plan's DAG) become ready, or, when nothing is
        linked after it, a fresh step with the same state is queued (what the next Run step
        runs; inject input to steer it). Undo takes a skip back like any step.
        """
        state = self.state_of(task_id)
        chosen: list[TaskStep] = []

        def check() -> None:
            self._check_runnable(state)
            sid = step_id if step_id is not None else state.failed_step_id()
            queued = [s.step_id for s in state.step_queue]
            if sid is None:
                raise TaskStateError(
                    f"nothing to skip in task {state.task_id!r}: no step has failed; "
                    f"pass step_id= one of the queued steps {queued}"
                )
            found = next((s for s in state.step_queue if s.step_id == sid), None)
            if found is None:
                raise ValueError(f"step {sid!r} is not queued in task {state.task_id!r}; queued: {queued}")
            chosen[:] = [found]

        def skip() -> TaskStepOutput:
            step = chosen[0]
            snap = self._snapshot_step(state, step)
            state.step_queue.remove(step)
            # the next step carries the state on, but not the skipped step's tool journal
            follow = [] if step.next_steps else [step.get_next_step(step_state=calls.without_journal(step.step_state))]
            output = schema.TaskStepOutput(
                output=schema.SkippedOutput(reason=reason), task_step=step, next_steps=follow, is_last=False
            )
            output._set_measured(latency_s=0.0, input=step.input)
            self._commit(state, step, output, snap)
            self._emit(ev.StepCompleted(state.task_id, step_id=step.step_id, is_last=False,
                                     next_step_ids=tuple(s.step_id for s in follow), latency_s=0.0))
            return output

        return self._transact(state, check, lambda: list(chosen), skip)

    def _transact(
        self,
        state: TaskState,
        check: Callable[[], Any],
        touched: Callable[[], list[TaskStep]],
        body: Callable[[], _T],
        after: str = "undo after it ends",
    ) -> _T:
        """Run ``body`` (undo, goto, fork) all or nothing: holding the task's claim, after
        ``check``, with a checkpoint of the task that any exception restores."""
        __tracebackhide__ = True  # IPython: the learner's call, then the message
        streaming.end_streamed_step(state)
        cp: txn.Checkpoint | None = None
        token: txn.Claim | None = None
        try:
            token = txn.Claim()
            if not txn.claim(self, state, token):
                token = None
                raise TaskStateError(f"{busy_message(state)}; {after}")
            check()
            cp = txn.Checkpoint(state, touched())
            result = body()
            txn.release(self, state, token)  # the last change
            return result
        except BaseException as error:
            if token is not None and txn.claim(self, state, token):  # ours (again): put it back
                try:
                    if cp is not None:
                        txn.retry(cp.restore)
                finally:
                    txn.release(self, state, token)
                if cp is not None:
                    self._emit(ev.StepEdited(state.task_id, step_id="", fields=("reverted",)))
            if isinstance(error, Exception) and _sync.raised_on_purpose(error):
                raise _sync.trim_traceback(error)  # "nothing to undo": shown from the caller's line
            raise

    def _check_undo(self, state: TaskState) -> None:
        if state.finalized or state.abandoned:
            raise TaskStateError(
                f"task {state.task_id!r} is {state.status.value}; only a task that is not "
                "finalized or abandoned can undo a step"
            )
        if state.running:
            raise TaskStateError(busy_message(state) + "; undo after it ends")
        if not state.history:
            why = "no step has completed" if not state.completed_steps else (
                "undo history is off (keep_history=False)"
            )
            raise TaskStateError(f"nothing to undo in task {state.task_id!r}: {why}")

    def _undo_last(self, state: TaskState) -> TaskStep:
        """Take back the last completed step (no checks, no event); return it."""
        _, snap = state.undo()
        return state.steps[snap.step_id]

    def _take_back(self, state: TaskState) -> TaskStep:
        """Undo the last completed step (``undo_step``, ``goto_step``, ``fork``): the approvals
        its calls ran with are used up, so running it again waits for a new decision."""
        step = self._undo_last(state)
        if withdraw_used(step, "the step that ran the call was undone; running it again needs a new decision"):
            self._emit(ev.StepEdited(state.task_id, step_id=step.step_id, fields=("approval",)))
        return step

    def abandon_task(self, task_id: TaskRef) -> None:
        """Give up on a task: nothing it did reaches the runner's memory."""
        state = self.state_of(task_id)
        if state.finalized:
            raise TaskStateError(f"task {state.task_id!r} is already finalized")
        streaming.end_streamed_step(state)
        if state.running:
            raise TaskStateError(f"task {state.task_id!r} is running a step; abandon after it ends")
        state.abandoned = True
        self._emit(ev.TaskAbandoned(state.task_id))

    # ----- held steps (is_ready=False; nbagent.engine.holds) --------------------------------
    def release_step(self, task_id: TaskRef, step_id: str | None = None) -> list[TaskStep]:
        """Let held steps run (``is_ready=True``): ``step_id``, or every held step of the
        task. Returns the steps released."""
        return holds.release_step(self, task_id, step_id)

    def hold_step(self, task_id: TaskRef, step_id: str) -> TaskStep:
        """Hold a queued step back (``is_ready=False``) until ``release_step``."""
        return holds.hold_step(self, task_id, step_id)

    # ----- approval of tool calls (nbagent.approval, nbagent.engine.approvals) -------------
    def pending_approvals(self, task_id: TaskRef) -> list[Any]:
        """The task's tool calls waiting for a decision (``call_id``, ``tool_name``, ``arguments``)."""
        return approvals.pending_approvals(self, task_id)

    def approve(
        self, task_id: TaskRef, call_id: str, arguments: dict[str, Any] | None = None, *, by: str = "user"
    ) -> dict[str, Any]:
        """Approve a waiting call, optionally with edited ``arguments``; returns the decision."""
        streaming.end_streamed_step(self.state_of(task_id))
        return approvals.approve(self, task_id, call_id, arguments, by=by)

    def reject(
        self, task_id: TaskRef, call_id: str, reason: str | None = None, *, by: str = "user"
    ) -> dict[str, Any]:
        """Reject a waiting call; the model gets ``reason`` as its result. Returns the decision."""
        streaming.end_streamed_step(self.state_of(task_id))
        return approvals.reject(self, task_id, call_id, reason, by=by)

