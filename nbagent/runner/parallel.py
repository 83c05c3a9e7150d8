"""ParallelAgentRunner: runs a task's steps as a DAG, every ready step at once (bounded).

A step is ready when every step in its ``prev_steps`` is done; the runner computes that
itself. ``is_ready=False`` on a new step that still has unfinished previous steps just means
"wait for them"; on one with nothing to wait for it means *held*: the step stays queued,
drawn as held, until released (``step.is_ready = True`` or ``release_step``). A join that
several parents return is queued once and runs once, after all of them. Each step still
goes through ``AgentRunner._astep`` (snapshot, events, rollback), several of them gathered on
one event loop; only three hooks differ, so that one branch never clobbers another:

- a step that started while no other step of its task was running takes a full snapshot (as
  in ``AgentRunner``); one that started beside others takes a light one: its own input and
  ``step_state``;
- a failing step is rolled back fully only if it ran alone and no other step finished
  meanwhile; otherwise its own input and state are put back and it returns to the queue,
  while the state it shares with its siblings (``extra_state``, scratch memory) keeps their
  work;
- ``undo_step`` takes back the most recently finished step the same way, and takes its next
  steps off the queue.

Workers meant for parallel branches keep each branch's result in the branch (its output, a
``step_state`` of its own) and combine them in a join step, as ``PlannerAgentWorker`` does.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent.engine import txn
from nbagent.runner.base import AgentRunner, ChatResponseType, Mode, TaskRef, TaskStateError
from nbagent.snapshot import restore_dict, snapshot_dict
from nbagent.engine.state import _NO_STATE, StepSnapshot, TaskState, TaskStatus
from nbagent.schema import TaskStep, TaskStepOutput
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nbagent.memory import ChatMemoryBuffer
    from nbagent.messages import ChatMessage
    from nbagent.engine.agent_state import AgentState

__all__ = ["ParallelAgentRunner", "BranchSnapshot", "DEFAULT_MAX_CONCURRENCY"]

DEFAULT_MAX_CONCURRENCY = 16
_MODES: tuple[Mode, ...] = ("wait", "stream")
_clock = itertools.count(1)  # orders step starts and ends across all tasks (only order matters)


@dataclass(slots=True)
class BranchSnapshot(StepSnapshot):
    """A step's snapshot in a parallel task, with what is needed to know whether restoring the
    shared state is safe: whether it started alone, and when it started and ended."""

    alone: bool = True  # no other step of the task was running when it started
    done_before: int = 0  # completed steps when it started
    started: int = 0
    ended: int = 0


def _mode(mode: Any) -> Mode:
    value = getattr(mode, "value", mode)  # the reference's ChatResponseMode enum works too
    if value not in _MODES:
        raise ValueError(f"mode must be one of {list(_MODES)}, got {mode!r}")
    return value  # type: ignore[no-any-return]


def _index_of(queue: deque[TaskStep], step: TaskStep) -> int:
    for i, s in enumerate(queue):
        if s is step:
            return i
    return -1


def _owns_state(state: TaskState, step: TaskStep) -> bool:
    """Whether ``step.step_state`` is its own (not shared with the task or another step)."""
    mine = step.step_state
    if mine is state.task.extra_state:
        return False
    return all(s is step or s.step_state is not mine for s in state.steps.values())


class ParallelAgentRunner(AgentRunner):
    """An ``AgentRunner`` that schedules a task's steps as a DAG and runs ready steps together.

    ``max_concurrency`` bounds how many steps of one call run at the same time (None: no
    bound). Everything else (tasks, events, undo, steering, finalize, the views) is the
    ``AgentRunner`` API.
    """

    # steps run side by side and what follows one depends on how it ended: each streamed
    # reply is read to its end inside its step
    defers_streamed_steps = False

    _max_concurrency: int | None  # the bound (``max_concurrency``)
    _loop_claims: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, txn.Claim]  # one per event loop

    def __init__(
        self,
        agent_worker: BaseAgentWorker,
        chat_history: Sequence[ChatMessage] | None = None,
        state: AgentState | None = None,
        memory: ChatMemoryBuffer | None = None,
        llm: Any = None,
        callback_manager: Any = None,
        init_task_state_kwargs: dict[str, Any] | None = None,
        delete_task_on_finish: bool = False,
        *,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        **kwargs: Any,
    ) -> None:
        """The reference's arguments in its order, plus ``max_concurrency`` (None: no bound);
        ``kwargs`` are ``AgentRunner``'s others (``default_tool_choice``, ``verbose``, ...)."""
        self.max_concurrency = max_concurrency
        self._loop_claims = weakref.WeakKeyDictionary()
        super().__init__(
            agent_worker,
            chat_history=chat_history,
            state=state,
            memory=memory,
            llm=llm,
            callback_manager=callback_manager,
            init_task_state_kwargs=init_task_state_kwargs,
            delete_task_on_finish=delete_task_on_finish,
            **kwargs,
        )

    @property
    def max_concurrency(self) -> int | None:
        """Steps of one call that may run at once (None: all the ready ones)."""
        return self._max_concurrency

    @max_concurrency.setter
    def max_concurrency(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"max_concurrency must be an int >= 1 or None (no bound), got {value!r}")
        self._max_concurrency = value

    # ----- the step hooks ----------------------------------------------------------------
    def _check_runnable(self, state: TaskState) -> None:
        if state.abandoned:
            raise TaskStateError(f"task {state.task_id!r} was abandoned; create a new task")
        if state.finalized:
            raise TaskStateError(f"task {state.task_id!r} is finalized; create a new task")

    def _pick_step(self, state: TaskState, step: TaskStep | None) -> TaskStep:
        queue = state.step_queue
        if step is None:
            for s in queue:
                if state.is_step_ready(s):
                    return s
            _check_approvals(state)
            raise TaskStateError(_nothing_ready(state))
        i = _index_of(queue, step)
        if i < 0:
            found = next((s for s in queue if s.step_id == step.step_id), None)
            if found is None:
                sid = step.step_id
                if sid in state.running:
                    raise TaskStateError(f"step {sid!r} of task {state.task_id!r} is already running")
                if sid in state.outputs:
                    raise TaskStateError(f"step {sid!r} of task {state.task_id!r} is already done")
                raise ValueError(
                    f"step {sid!r} is not queued in task {state.task_id!r}; "
                    f"queued: {[s.step_id for s in queue]}"
                )
            step = found
        if not state.is_step_ready(step):
            from nbagent.engine.approvals import check_decided

            check_decided(state, step)
            waits = [p for p in step.prev_steps if p not in state.outputs]
            raise TaskStateError(
                f"step {step.step_id!r} of task {state.task_id!r} is blocked: it waits for "
                f"step(s) {waits} to be done"
            )
        return step

    def _snapshot_step(self, state: TaskState, step: TaskStep) -> StepSnapshot:
        alone = not state.running
        if alone:  # full snapshot: it may be restored as a whole, as in AgentRunner
            base = state.snapshot(step)
            snap = BranchSnapshot(
                base.step_id, base.step_input, base.queue, base.extra_state, base.step_state,
                base.scratch,
            )
        else:  # beside other steps: only its own part can ever be restored
            own = step.step_state
            snap = BranchSnapshot(
                step.step_id,
                step.input,
                None,
                _NO_STATE,
                snapshot_dict(own) if own and own is not state.task.extra_state else _NO_STATE,
                state.task.scratch_memory.snapshot(),
                alone=False,
            )
        snap.done_before = len(state.completed_steps)
        snap.started = next(_clock)
        return snap

    def _take_step(self, state: TaskState, step: TaskStep, snap: StepSnapshot, input: str | None) -> None:
        state.running.add(step.step_id)
        if input is not None:
            step.input = input
        queue = state.step_queue
        i = _index_of(queue, step)
        if i == 0:
            queue.popleft()
        elif i > 0:
            del queue[i]

    def _claim_token(self) -> txn.Claim:
        """Steps of one task run together on one event loop, sharing its claim; a call from
        another thread (another loop) finds the task busy until they are all done."""
        loop = asyncio.get_running_loop()
        tokens = self._loop_claims
        token = tokens.get(loop)
        if token is None:
            token = tokens.setdefault(loop, txn.Claim(loop))
        return token  # type: ignore[no-any-return]

    def _roll_back(self, state: TaskState, step: TaskStep, snap: StepSnapshot) -> None:
        others = state.running - {step.step_id}
        whole = not isinstance(snap, BranchSnapshot) or (
            snap.alone and not others and len(state.completed_steps) == snap.done_before
        )
        if whole:  # it ran alone: exactly as AgentRunner
            state.restore(snap)
        else:
            self._restore_own(state, step, snap)
            if _index_of(state.step_queue, step) < 0:
                state.step_queue.appendleft(step)
        state.running.discard(step.step_id)

    def _restore_own(self, state: TaskState, step: TaskStep, snap: StepSnapshot) -> None:
        """Put back a step's input and, if no other step shares it, its ``step_state``."""
        step.input = snap.step_input
        if _owns_state(state, step) and (snap.step_state or step.step_state):
            restore_dict(step.step_state, snap.step_state)

    def _commit(
        self, state: TaskState, step: TaskStep, output: TaskStepOutput, snap: StepSnapshot
    ) -> None:
        fresh = []
        for nxt in output.next_steps:
            # a new step with dependencies of its own keeps them; others follow this step
            if not nxt.prev_steps:
                step.link_step(nxt)
            if state.is_known(nxt):  # a join another parent returned first: queued once
                if step.step_id not in nxt.prev_steps:
                    step.link_step(nxt)
                continue
            state.register(nxt)
            state.step_queue.append(nxt)
            fresh.append(nxt)
        done = state.completed_steps
        if done and done[-1].is_last and not output.is_last:
            done.insert(len(done) - 1, output)  # the answer stays last (views, finalize read it)
        else:
            done.append(output)
        state.outputs[step.step_id] = output
        for nxt in fresh:
            state.settle(nxt)
        if state.keep_history:
            if isinstance(snap, BranchSnapshot):
                snap.ended = next(_clock)
            state.history.append(snap)

    # ----- undo --------------------------------------------------------------------------
    def _undo_last(self, state: TaskState) -> TaskStep:
        """Take back the most recently finished step and queue it again.

        If it ran alone (no sibling overlapped it), everything goes back as in
        ``AgentRunner.undo_step``. Otherwise only its own part does: its input and state, its
        output, and its next steps (taken off the queue, greyed in the graph); what its
        siblings did stays.
        """
        snap = state.history[-1]
        whole = not isinstance(snap, BranchSnapshot) or (
            snap.alone
            and (
                len(state.history) < 2
                or not isinstance(state.history[-2], BranchSnapshot)
                or state.history[-2].ended < snap.started
            )
        )
        state.history.pop()
        step = state.steps[snap.step_id]
        output = state.outputs.pop(step.step_id)
        dropped = set()
        for nxt in output.next_steps:
            if state.returned_by_other(nxt, step.step_id):
                continue  # a join another done step returned: it stays, waiting for this one
            nid = nxt.step_id
            if step.next_steps.pop(nid, None) is not None:
                nxt.prev_steps.pop(step.step_id, None)
                state.undone_edges.append((step.step_id, nid))
            state.undone_ids.add(nid)
            dropped.add(nid)
        if whole:
            state.restore(snap)
        else:
            self._restore_own(state, step, snap)
            kept = [s for s in state.step_queue if s.step_id not in dropped]
            state.step_queue = deque([step, *kept])
        state.completed_steps = [o for o in state.completed_steps if o is not output]
        state.undone_outputs.append(output)
        return step

    # ----- running the DAG ---------------------------------------------------------------
    async def arun_steps_in_queue(
        self, task_id: TaskRef, mode: Any = "wait", input: str | None = None, **kwargs: Any
    ) -> list[TaskStepOutput]:
        """Run every step that is ready now, together (at most ``max_concurrency`` at a time).

        Returns their outputs in queue order. Steps they make ready are left for the next
        call. If some fail, the others' outputs are kept, the failed ones go back to the
        queue, and the first error is raised as it was. ``input`` is given to each step run.
        """
        state = self.state_of(task_id)
        self._check_runnable(state)
        drive = _Drive(self, state, _mode(mode), follow=False, later_kwargs=kwargs)
        return await drive.run(input, kwargs)

    def run_steps_in_queue(
        self, task_id: TaskRef, mode: Any = "wait", input: str | None = None, **kwargs: Any
    ) -> list[TaskStepOutput]:
        """Run every step that is ready now, together; see ``arun_steps_in_queue``."""
        return _sync.run_sync(self.arun_steps_in_queue(task_id, mode, input=input, **kwargs))

    async def arun_until_done(
        self, task_id: TaskRef, mode: Any = "wait", input: str | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the task's DAG until a step returns ``is_last=True``; return that output.

        Each step starts as soon as its previous steps are done. A failure stops new starts,
        lets the running steps finish (their results are kept) and is raised as it was; call
        again to retry. With no ready step and no final output it raises ``TaskStateError``.
        ``input`` and ``kwargs`` go to the steps ready at the start; later ones get ``kwargs``
        with ``tool_choice`` set back to ``"auto"``.
        """
        state = self.state_of(task_id)
        self._check_runnable(state)
        later = dict(kwargs)
        if "tool_choice" in later:
            later["tool_choice"] = "auto"
        drive = _Drive(self, state, _mode(mode), follow=True, later_kwargs=later)
        await drive.run(input, kwargs)
        assert drive.last is not None
        return drive.last

    def run_until_done(
        self, task_id: TaskRef, mode: Any = "wait", input: str | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the task's DAG to its last step; see ``arun_until_done``."""
        return _sync.run_sync(self.arun_until_done(task_id, mode, input=input, **kwargs))

    # ----- finishing ---------------------------------------------------------------------
    def finalize_response(
        self, task_id: TaskRef, step_output: TaskStepOutput | None = None
    ) -> ChatResponseType:
        state = self.state_of(task_id)
        if state.running and not state.finalized:
            raise TaskStateError(
                f"task {state.task_id!r} is still running step(s) {sorted(state.running)}; "
                "finalize after they end"
            )
        return super().finalize_response(task_id, step_output)

    async def _arun_to_end(
        self, task_id: str, mode: Mode, tool_choice: str | dict[str, Any]
    ) -> TaskStepOutput:
        """``chat`` runs the whole DAG, ready steps together."""
        return await self.arun_until_done(task_id, mode, tool_choice=tool_choice)


def _check_approvals(state: TaskState) -> None:
    """Raise ``AwaitingApprovalError`` if a queued step waits for decisions on tool calls."""
    from nbagent.engine.approvals import check_decided

    for s in state.step_queue:
        check_decided(state, s)


def _nothing_ready(state: TaskState) -> str:
    """Why no step of the task can run now, naming the steps and what they wait for."""
    tid = state.task_id
    if not state.step_queue:
        if state.running:
            return f"task {tid!r} has no queued step; step(s) {sorted(state.running)} are running"
        if state.status == TaskStatus.COMPLETED:
            return f"task {tid!r} has no queued step to run (its last step is done)"
        last = state.completed_steps[-1].task_step.step_id if state.completed_steps else None
        return (
            f"task {tid!r} has no queued step and no final output: step {last!r} returned "
            "is_last=False without next steps, so nothing is left to run"
        )
    held = [s.step_id for s in state.step_queue if not s.is_ready]
    if held and len(held) == len(state.step_queue) and not state.running:
        return (
            f"task {tid!r} has only held step(s) {held} (is_ready=False); release one with "
            f"runner.release_step(task_id, step_id) or set step.is_ready = True"
        )
    waits = {
        s.step_id: [p for p in s.prev_steps if p not in state.outputs]
        for s in state.step_queue
        if s.is_ready
    }
    running = sorted(state.running)
    why = f"step(s) {running} are still running" if running else (
        "no running step can unblock them: check for a cycle or a step that is not queued"
    )
    note = f"; held (release with runner.release_step): {held}" if held else ""
    return (
        f"task {tid!r} has queued steps but none is ready: {waits} wait for steps not done; "
        f"{why}{note}"
    )


class _Drive:
    """One call's scheduler: starts ready steps as tasks, up to the bound, as slots free up.

    Completion callbacks do the bookkeeping (no polling, no O(n) wait per completion): a
    finished step's successors count down their unfinished previous steps and start at zero.
    """

    def __init__(
        self,
        runner: ParallelAgentRunner,
        state: TaskState,
        mode: Mode,
        *,
        follow: bool,
        later_kwargs: dict[str, Any],
    ) -> None:
        self.runner = runner
        self.state = state
        self.mode = mode
        self.follow = follow
        self.later_kwargs = later_kwargs
        limit = runner.max_concurrency
        self.limit = limit if limit is not None else 1 << 62
        self.ready: deque[tuple[TaskStep, str | None, dict[str, Any]]] = deque()
        self.claimed: set[str] = set()
        self.waiting: dict[str, int] = {}
        self.in_flight: dict[asyncio.Task[TaskStepOutput], tuple[int, TaskStep]] = {}
        self.results: list[tuple[int, TaskStepOutput]] = []
        self.errors: list[BaseException] = []
        self.last: TaskStepOutput | None = None
        self.stopped = False
        self.launched = 0
        self.tag = f"nbagent-step-{next(_clock)}"  # names this call's step tasks

    async def run(self, input: str | None, kwargs: dict[str, Any]) -> list[TaskStepOutput]:
        state = self.state
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.finished: asyncio.Future[None] = loop.create_future()
        first = [s for s in state.step_queue if state.is_step_ready(s)]
        if not first:
            _check_approvals(state)
            raise TaskStateError(_nothing_ready(state))
        for s in first:
            self.claimed.add(s.step_id)
            self.ready.append((s, input, kwargs))
        try:
            self._launch()
            await self.finished
        except BaseException:  # cancelled or interrupted: no step of this call runs on
            self.stopped = True
            await self._settle(cancel=True)
            raise
        await self._settle(cancel=bool(self.errors))
        if self.errors:
            error = self.errors[0]
            if len(self.errors) > 1:
                others = "; ".join(f"{type(e).__name__}: {e}" for e in self.errors[1:])
                error.add_note(f"{len(self.errors) - 1} other step(s) failed too: {others}")
            raise error
        if self.follow and self.last is None:
            _check_approvals(state)
            raise TaskStateError(_nothing_ready(state))
        self.results.sort(key=lambda r: r[0])
        return [out for _, out in self.results]

    def _mine(self) -> list[asyncio.Task[Any]]:
        """This call's step tasks that have not ended: found by name, so that a task whose
        bookkeeping an interrupt cut short (created, not yet in ``in_flight``) is found too."""
        return [t for t in asyncio.all_tasks(self.loop) if t.get_name() == self.tag and not t.done()]

    async def _settle(self, cancel: bool) -> None:
        """Wait until no step started by this call is running (cancelled first if ``cancel``):
        the call never returns or raises while one of its branches still runs."""
        while True:
            pending = self._mine()
            if not pending:
                return
            if cancel:
                for t in pending:
                    t.cancel()
            try:
                await asyncio.wait(pending)  # each step rolls itself back
            except BaseException:
                cancel = True
                continue

    def _launch(self) -> None:
        in_flight = self.in_flight
        try:
            while self.ready and len(in_flight) < self.limit and not self._stopping():
                step, input, kwargs = self.ready.popleft()
                coro = self.runner._astep(self.state.task_id, step, input=input, mode=self.mode, **kwargs)
                try:
                    task = self.loop.create_task(coro, name=self.tag)
                except BaseException:
                    coro.close()
                    raise
                task.add_done_callback(self._on_done)
                in_flight[task] = (self.launched, step)
                self.launched += 1
            if not in_flight and self.follow and not self._stopping():
                self._rescan()  # steps made ready outside this call's view (another call, an edit)
        except BaseException as error:  # a callback must never leave the call waiting forever
            self.errors.append(error)
        if not in_flight and not self.finished.done():
            self.finished.set_result(None)

    def _stopping(self) -> bool:
        return self.stopped or bool(self.errors) or self.last is not None

    def _on_done(self, task: asyncio.Task[TaskStepOutput]) -> None:
        entry = self.in_flight.pop(task, None)
        if entry is None:  # its bookkeeping was cut short by an interrupt: the call stops
            self.stopped = True
            if not task.cancelled():
                task.exception()
            if not self.in_flight and not self.finished.done():
                self.finished.set_result(None)
            return
        index, step = entry
        self.claimed.discard(step.step_id)
        try:
            if task.cancelled():
                self.errors.append(asyncio.CancelledError(f"step {step.step_id!r} was cancelled"))
            else:
                error = task.exception()
                if error is not None:
                    self.errors.append(error)
                else:
                    output = task.result()
                    self.results.append((index, output))
                    if output.is_last:
                        if self.last is None:
                            self.last = output
                    elif self.follow:
                        self._successors(step, output)
        except BaseException as error:  # bookkeeping broke: stop and report it
            self.errors.append(error)
        self._launch()

    def _successors(self, step: TaskStep, output: TaskStepOutput) -> None:
        state = self.state
        done = state.outputs
        linked = step.next_steps
        candidates: list[tuple[TaskStep, bool]] = [(s, True) for s in list(linked.values())]
        candidates.extend((s, False) for s in output.next_steps if s.step_id not in linked)
        for nxt, counted in candidates:
            sid = nxt.step_id
            if sid in self.claimed or sid in done or sid in state.running or sid in state.undone_ids:
                continue
            left = self.waiting.get(sid)
            if left is None or not counted:
                left = sum(1 for p in nxt.prev_steps if p not in done)
            else:
                left -= 1
            if left <= 0 and not state.is_step_ready(nxt):  # links changed meanwhile: recount
                left = sum(1 for p in nxt.prev_steps if p not in done)
                if left <= 0:  # its tool calls await approval: it waits for a decision
                    continue
            if left > 0:
                self.waiting[sid] = left
                continue
            self.waiting.pop(sid, None)
            self.claimed.add(sid)
            self.ready.append((nxt, None, self.later_kwargs))

    def _rescan(self) -> None:
        state = self.state
        for s in state.step_queue:
            if s.step_id not in self.claimed and state.is_step_ready(s):
                self.claimed.add(s.step_id)
                self.ready.append((s, None, self.later_kwargs))
        if self.ready:
            self._launch()
