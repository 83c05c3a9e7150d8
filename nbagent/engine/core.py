"""The one step path: ``_astep`` is the only code that runs a step.

Every public method, sync or async, streaming or not, goes through it (sync ones via
``run_sync``, which also works inside a notebook's running event loop). A step is
snapshotted before it runs, so a failure rolls back cleanly and an undo can go back any
number of steps; the rules that make a step safe to interrupt anywhere are in
``nbagent.engine.txn``. ``ParallelStepEngine`` overrides the hooks around the step's state
changes (``_snapshot_step``, ``_take_step``, ``_roll_back``, ``_commit``, ``_claim_token``).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, ForwardRef, Literal, Union

from nbagent import _sync, calls
from nbagent._lazy import LazyModule
from nbagent.engine import approvals, streaming, txn
from nbagent.engine.errors import TaskRef, TaskStateError, busy_message
from nbagent.engine.state import StepSnapshot, TaskState, TaskStatus
from nbagent.engine.tasks import TaskHolder
from nbagent import events as ev
from nbagent.events import StepContext, _reset_current, _set_current

if TYPE_CHECKING:
    from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse, TaskStep, TaskStepOutput

__all__ = ["StepCore", "Mode", "ChatResponseType"]

Mode = Literal["wait", "stream"]
# the models by name, resolved in their module: ``import nbagent`` defines no model
ChatResponseType = Union[
    ForwardRef("AgentChatResponse", module="nbagent.schema"),
    ForwardRef("StreamingAgentChatResponse", module="nbagent.schema"),
]


@LazyModule
def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import schema as module

    return module


class StepCore(TaskHolder):
    """Tasks, plus the transactional step path and the reference's stepping methods."""

    # ----- the one step path -------------------------------------------------------------
    def _check_runnable(self, state: TaskState) -> None:
        if state.abandoned:
            raise TaskStateError(f"task {state.task_id!r} was abandoned; create a new task")
        if state.finalized:
            raise TaskStateError(f"task {state.task_id!r} is finalized; create a new task")
        if state.running:
            raise TaskStateError(busy_message(state))

    def _pick_step(self, state: TaskState, step: TaskStep | None) -> TaskStep:
        queue = state.step_queue
        if step is not None:
            if not any(s is step or s.step_id == step.step_id for s in queue):
                raise ValueError(
                    f"step {step.step_id!r} is not queued in task {state.task_id!r}; "
                    f"queued: {[s.step_id for s in queue]}"
                )
            picked = next(s for s in queue if s.step_id == step.step_id)
            approvals.check_decided(state, picked)
            return picked
        if not queue:
            done = "its last step is done" if state.status == TaskStatus.COMPLETED else (
                "no final output was produced"
            )
            raise TaskStateError(
                f"task {state.task_id!r} has no queued step to run ({done})"
            )
        for s in queue:
            if state.is_step_ready(s):
                return s
        for s in queue:
            approvals.check_decided(state, s)
        held = [s.step_id for s in queue if not s.is_ready]
        if held:
            raise TaskStateError(
                f"task {state.task_id!r} has no ready step: step(s) {held} are held "
                "(is_ready=False); release one with runner.release_step(task_id, step_id) "
                "or set step.is_ready = True"
            )
        raise TaskStateError(
            f"task {state.task_id!r} has queued steps but none is ready: "
            f"{[s.step_id for s in queue]} wait for steps that are not done"
        )

    # Hooks around a step's state changes; ParallelAgentRunner overrides them so that a
    # branch's rollback or undo never touches what its siblings did. The transaction rules
    # that make a step safe to interrupt anywhere are in ``nbagent.engine.txn``.
    def _snapshot_step(self, state: TaskState, step: TaskStep) -> StepSnapshot:
        """What ``step`` may change, taken before anything changes."""
        return state.snapshot(step)

    def _take_step(self, state: TaskState, step: TaskStep, snap: StepSnapshot, input: str | None) -> None:
        """Mark ``step`` running (the task is busy from here), set its new input, unqueue it."""
        state.running.add(step.step_id)
        if input is not None:
            step.input = input
        state.step_queue.remove(step)

    def _roll_back(self, state: TaskState, step: TaskStep, snap: StepSnapshot) -> None:
        """Undo what a failed step changed; it goes back to the queue (idempotent)."""
        state.restore(snap)
        state.running.discard(step.step_id)

    def _commit(
        self, state: TaskState, step: TaskStep, output: TaskStepOutput, snap: StepSnapshot
    ) -> None:
        """Record a finished step's output and queue its next steps."""
        state.complete(step, output, snap)

    def _undo_attempt(self, state: TaskState, att: txn.StepAttempt) -> None:
        """Take back all an interrupted or failed attempt did, whatever line it reached; the
        tool calls it ran stay recorded on the step (its journal), for the retry."""
        assert att.step is not None and att.snap is not None
        if att.output is not None and att.mark is not None:
            txn.undo_commit(state, att.step, att.output, att.snap, att.mark)
        self._roll_back(state, att.step, att.snap)
        calls.keep_journal(att.step, att.journal)
        calls.release_ids(att.step, state.task, att.issued, att.journal)

    def _abort_step(self, state: TaskState, att: txn.StepAttempt, error: BaseException) -> None:
        """The ``except`` of ``_astep``: roll the attempt back, record it as failed."""
        if att.ctx_token is not None:
            try:
                _reset_current(att.ctx_token)
            except (RuntimeError, ValueError):  # already reset, or another context's token
                pass
        step = att.step
        token = att.claim
        if token is None:
            return  # failed before claiming the task (or already rolled back): nothing to do
        if not txn.claim(self, state, token):
            return  # another caller holds it: our commit was complete before we let it go
        try:
            if att.snap is None or step is None:
                if step is not None:  # its journal was taken off it: put it back
                    txn.retry(calls.keep_journal, step, att.journal)
                return  # nothing changed yet (a bad step, a finalized task...)
            if att.output is not None and att.mark is not None:
                if not txn.committed_on_top(state, att.output, att.mark):
                    return  # its commit was complete and another call has built on it
            txn.retry(self._undo_attempt, state, att)
            state.streaming = None
            failure = state.record_failure(step, error)
        finally:
            txn.release(self, state, token)
            att.claim = None  # rolled back once: a second abort of this attempt does nothing
        self._emit(
            ev.StepFailed(
                state.task_id,
                step_id=step.step_id,
                error_type=failure.error_type,
                error=failure.message,
            )
        )

    def _claim_token(self) -> txn.Claim:
        """The claim a step call takes (ParallelAgentRunner: its event loop's, shared)."""
        return txn.Claim()

    #: whether ``stream_step`` returns while a step's reply still streams (the step then ends
    #: with its stream); ParallelAgentRunner reads each reply to its end inside the step
    defers_streamed_steps: ClassVar[bool] = True

    async def _astep(
        self,
        task_id: TaskRef,
        step: TaskStep | None = None,
        input: str | None = None,
        mode: Mode = "wait",
        **kwargs: Any,
    ) -> TaskStepOutput:
        state = self.state_of(task_id)
        if state.streaming is not None:  # a streamed step nobody read to its end ends first
            await streaming.aend_streamed_step(state)
        att = txn.StepAttempt()
        try:  # from here to the return, any exception puts the task back (see engine.txn)
            att.claim = self._claim_token()
            if not txn.claim(self, state, att.claim):
                att.claim = None
                raise TaskStateError(busy_message(state))
            self._check_runnable(state)
            picked = att.step = self._pick_step(state, step)
            task = state.task
            if not state.call_ids_known:  # a loaded task: the ids its run used stay used
                calls.note_call_ids(task, state.scan_call_ids())
                state.call_ids_known = True
            att.journal = calls.journal_of(picked)
            calls.detach_journal(picked)  # the snapshot must not hold it (an undo to it neither)
            att.snap = self._snapshot_step(state, picked)
            self._take_step(state, picked, att.snap, input)
            ctx = StepContext(task.task_id, picked.step_id, self.events, att.journal, att.issued)
            att.ctx_token = _set_current(ctx)
            if self.events.wants(ev.StepStarted):
                self.events.emit(ev.StepStarted(task.task_id, step_id=picked.step_id, input=picked.input))
            if self.verbose:
                print(f"> Running step {picked.step_id}. Step input: {picked.input}")
            start = time.perf_counter()
            if mode == "stream":
                output = await self.agent_worker.astream_step(picked, task, **kwargs)
            else:
                output = await self.agent_worker.arun_step(picked, task, **kwargs)
            if not isinstance(output, schema.TaskStepOutput):
                raise TypeError(
                    f"{type(self.agent_worker).__name__} returned {type(output).__name__}; "
                    "a step must return a TaskStepOutput"
                )
            _reset_current(att.ctx_token)
            att.ctx_token = None
            if _sync.interrupted():  # its caller gave up while a blocking call ran
                import asyncio

                raise asyncio.CancelledError("the call running this step was interrupted")
            if streaming.is_open(output):  # the reply is still streaming: the step ends with it
                streaming.stream_on(self, state, att, ctx, output, start)
                if mode != "stream" or not self.defers_streamed_steps:
                    await output.output.aget_response()  # read here: the step ends in this call
                return output
            self._end_step(state, att, ctx, output, time.perf_counter() - start)
            return output
        except BaseException as error:
            self._abort_step(state, att, error)
            raise

    def _end_step(
        self, state: TaskState, att: txn.StepAttempt, ctx: StepContext, output: TaskStepOutput, latency: float
    ) -> None:
        """Record a step that has ended: commit its output, queue what follows, tell listeners,
        let the task go. (The rest of ``_astep``'s transaction; ``_abort_step`` undoes it.)"""
        picked = att.step
        assert picked is not None and att.snap is not None and att.claim is not None
        # the input is kept because an undo may give the step new input
        if ctx.usage is not None:
            output._set_measured(latency_s=latency, input=picked.input, usage=ctx.usage)
        else:
            output._set_measured(latency_s=latency, input=picked.input)
        att.mark = txn.mark_commit(state, picked, output)
        att.output = output
        self._commit(state, picked, output, att.snap)
        state.running.discard(picked.step_id)
        state.streaming = None
        if self.events.wants(ev.StepCompleted):  # services (costs, store) hear it in the order they subscribed
            # (task_id, step_id, is_last, next_step_ids, latency_s) by position: keywords cost more
            done = (state.task_id, picked.step_id, output.is_last, tuple([s.step_id for s in output.next_steps]), latency)
            usage = output.usage
            self.events.emit(ev.StepCompleted(*done) if usage is None else ev.StepCompleted(*done, usage=usage))
        txn.release(self, state, att.claim)  # the last change: the task is free again

    # ----- stepping (reference API) ------------------------------------------------------
    async def arun_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the next step (or ``step``); ``input`` is a person's word for it (steering: on a
        task's first step the model gets it after the question)."""
        return await self._astep(task_id, step, input=input, mode="wait", **kwargs)

    def run_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the next step (or ``step``); ``input`` is a person's word for it (steering: on a
        task's first step the model gets it after the question)."""
        # a worker whose steps never await anything that suspends is stepped in place (no
        # event loop round trip); should it suspend after all, the step goes on on the loop
        eager = self.agent_worker.steps_synchronously
        return _sync.run_sync(self._astep(task_id, step, input=input, mode="wait", **kwargs), eager=eager)

    async def astream_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Like ``arun_step``, with the model's words streamed as they come (see ``stream_step``)."""
        return await self._astep(task_id, step, input=input, mode="stream", **kwargs)

    def stream_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Like ``run_step``, with the model's words streamed as they come.

        A reply that starts with text returns at once: ``output.output`` streams it, and the
        step runs on until the stream has been read to its end (``print_response_stream()``,
        ``str()``, ``finalize_response``; any later call on the task reads the rest first).
        Until then ``is_last`` says what the reply looks like so far (an answer); at its end
        the step is what the same reply makes of it with ``run_step``: tool calls after the
        text run (or wait for approval) and the step is not the last one.
        """
        return _sync.run_sync(self._astep(task_id, step, input=input, mode="stream", **kwargs))

