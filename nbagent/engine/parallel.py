"""The parallel step engine: runs a task's steps as a DAG, every ready step at once (bounded).

A step is ready when every step in its ``prev_steps`` is done; the runner computes that
itself. ``is_ready=False`` on a new step that still has unfinished previous steps just means
"wait for them"; on one with nothing to wait for it means *held*: the step stays queued,
drawn as held, until released (``step.is_ready = True`` or ``release_step``). A join that
several parents return is queued once and runs once, after all of them. Each step still
goes through the engine's ``_astep`` (snapshot, events, rollback), several of them gathered on
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

``ParallelStepEngine`` is that engine (one call's scheduler is ``engine.dag``);
``nbagent.runner.ParallelAgentRunner`` adds the ``AgentRunner`` conveniences on top of it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from nbagent import _sync
from nbagent.engine import txn
from nbagent.engine.approvals import check_decided
from nbagent.engine.core import ChatResponseType, Mode
from nbagent.engine.dag import Drive, check_approvals, clock, nothing_ready
from nbagent.engine.errors import TaskRef, TaskStateError
from nbagent.engine.state import _NO_STATE, StepSnapshot, TaskState
from nbagent.engine.step_engine import StepEngine
from nbagent.schema import TaskStep, TaskStepOutput
from nbagent.snapshot import restore_dict, snapshot_dict
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.engine.agent_state import AgentState
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.messages import ChatMessage

__all__ = ["ParallelStepEngine", "BranchSnapshot", "DEFAULT_MAX_CONCURRENCY"]

DEFAULT_MAX_CONCURRENCY = 16
_MODES: tuple[Mode, ...] = ("wait", "stream")


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


class ParallelStepEngine(StepEngine):
    """A step engine that schedules a task's steps as a DAG and runs ready steps together.

    ``max_concurrency`` bounds how many steps of one call run at the same time (None: no
    bound). Everything else (tasks, events, undo, steering, finalize) is the engine's.
    """

    # steps run side by side and what follows one depends on how it ended: each streamed
    # reply is read to its end inside its step
    defers_streamed_steps: ClassVar[bool] = False

    _max_concurrency: int | None  # the bound (``max_concurrency``)
    _loop_claims: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, txn.Claim]  # one per event loop
    _last_claim: tuple[weakref.ref[asyncio.AbstractEventLoop], txn.Claim] | None  # the last one asked for

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
        ``kwargs`` are the engine's others (``default_tool_choice``, ``verbose``, ...)."""
        self._init_parallel(max_concurrency)
        StepEngine.__init__(
            self,
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

    def _init_parallel(self, max_concurrency: int | None) -> None:
        """What a parallel engine has beyond a step engine (its facade calls this too)."""
        self.max_concurrency = max_concurrency
        self._loop_claims = weakref.WeakKeyDictionary()
        self._last_claim = None

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
            check_approvals(state)
            raise TaskStateError(nothing_ready(state))
        if not (queue and queue[0] is step) and _index_of(queue, step) < 0:  # (first: the usual case)
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
            snap = state.snapshot(step, BranchSnapshot)  # type: ignore[assignment]
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
        snap.started = next(clock)
        return snap

    def _take_step(self, state: TaskState, step: TaskStep, snap: StepSnapshot, input: str | None) -> None:
        state.running.add(step.step_id)
        if input is not None:
            step.input = input
        queue = state.step_queue
        if queue and queue[0] is step:  # the usual case: ready steps start in queue order
            queue.popleft()
        else:
            i = _index_of(queue, step)
            if i > 0:
                del queue[i]

    def _claim_token(self) -> txn.Claim:
        """Steps of one task run together on one event loop, sharing its claim; a call from
        another thread (another loop) finds the task busy until they are all done."""
        loop = asyncio.get_running_loop()
        last = self._last_claim  # (every step of a parallel run asks: the same loop's)
        if last is not None and last[0]() is loop:
            return last[1]
        tokens = self._loop_claims
        token = tokens.get(loop)
        if token is None:
            token = tokens.setdefault(loop, txn.Claim(loop))
        self._last_claim = (weakref.ref(loop), token)
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
            if not nxt.is_ready:  # (the usual new step is ready: nothing to settle)
                state.settle(nxt)
        if state.keep_history:
            if isinstance(snap, BranchSnapshot):
                snap.ended = next(clock)
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

        Example:

        >>> import asyncio
        >>> from nbagent import FnAgentWorker, ParallelAgentRunner
        >>> def count(state):  # one step per call; done at 3
        ...     state["n"] = state.get("n", 0) + 1
        ...     state["__output__"] = f"step {state['n']}"
        ...     return state, state["n"] == 3
        >>> agent = ParallelAgentRunner(FnAgentWorker(count), max_concurrency=4)
        >>> done = asyncio.run(agent.arun_steps_in_queue(agent.create_task("count")))
        >>> [str(output.output) for output in done]  # the one ready step; the next is queued
        ['step 1']
        """
        state = self.state_of(task_id)
        self._check_runnable(state)
        drive = Drive(self, state, _mode(mode), follow=False, later_kwargs=kwargs)
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

        Example:

        >>> import asyncio
        >>> from nbagent import FnAgentWorker, ParallelAgentRunner
        >>> def count(state):  # one step per call; done at 3
        ...     state["n"] = state.get("n", 0) + 1
        ...     state["__output__"] = f"step {state['n']}"
        ...     return state, state["n"] == 3
        >>> agent = ParallelAgentRunner(FnAgentWorker(count), max_concurrency=4)
        >>> print(asyncio.run(agent.arun_until_done(agent.create_task("count"))))
        step 3
        """
        state = self.state_of(task_id)
        self._check_runnable(state)
        later = dict(kwargs)
        if "tool_choice" in later:
            later["tool_choice"] = "auto"
        drive = Drive(self, state, _mode(mode), follow=True, later_kwargs=later)
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


