"""TaskState: everything the runner knows about one task, and the per-step snapshots for undo.

The runner is the only writer. Steps are kept in a registry by id (``steps``); links live on
the steps themselves, and links cut by an undo are kept in ``undone_edges`` so the graph can
still draw the abandoned branch.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from nbagent.approval import is_awaiting
from nbagent.calls import scan_call_ids
from nbagent.snapshot import restore_dict, snapshot_dict

if TYPE_CHECKING:
    from nbagent.memory import MemorySnapshot
    from nbagent.schema import Task, TaskStep, TaskStepOutput

_NO_STATE: dict[str, Any] = {}  # shared by every snapshot of an empty state; never written

__all__ = ["TaskState", "TaskStatus", "StepStatus", "StepFailure", "StepSnapshot"]


class TaskStatus(str, Enum):
    """Where a task is in its life."""

    #: created, no step run yet
    PENDING = "pending"
    #: a step is running now
    RUNNING = "running"
    #: some steps done, more to run
    ACTIVE = "active"
    #: the last attempt raised; the step waits, queued, to be retried
    FAILED = "failed"
    #: the last step is done; ``finalize_response`` is next
    COMPLETED = "completed"
    #: ``finalize_response`` ran: the answer is given and the conversation's memory has it
    FINALIZED = "finalized"
    #: ``abandon_task`` ended it; the conversation's memory never got its messages
    ABANDONED = "abandoned"


class StepStatus(str, Enum):
    """Where a step is: in the queue (ready or blocked), running, done, failed or undone."""

    #: in the queue, ready to run
    QUEUED = "queued"
    #: queued, with tool calls a person has not approved or rejected yet
    AWAITING = "awaiting approval"
    #: queued with ``is_ready=False`` and nothing to wait for: runs once released
    HELD = "held"
    #: queued, waiting for the steps before it (``prev_steps``) to be done
    BLOCKED = "blocked"
    #: running now
    RUNNING = "running"
    #: run; its output is kept
    DONE = "done"
    #: its last attempt raised; still queued, with its state as before the attempt
    FAILED = "failed"
    #: run, then taken back with ``undo_step``; kept in the graph, drawn grey and dashed
    UNDONE = "undone"


_SCALARS = (int, float, str, bool, type(None))


def _same_items(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The two dicts hold the same keys, with the very same (or equal scalar) values."""
    if len(a) != len(b):
        return False
    for k, v in a.items():
        w = b.get(k, _same_items)
        if v is not w and not (type(v) is type(w) and type(v) in _SCALARS and v == w):
            return False
    return True


@dataclass(frozen=True, slots=True)
class StepFailure:
    """One failed attempt at a step."""

    #: the step that failed (it stays queued, so it can be retried)
    step_id: str
    #: the exception's class name (``"TimeoutError"``)
    error_type: str
    #: ``str()`` of the exception
    message: str
    #: the whole traceback, as text
    traceback: str
    #: when it failed (``time.time()``)
    at: float
    #: 1 for the step's first failed attempt, 2 for the next...
    attempt: int


@dataclass(slots=True)
class StepSnapshot:
    """What a step may change, taken just before it ran.

    Completed outputs are not in it: a step only adds its own output, and only on success.
    """

    step_id: str
    step_input: str | None
    queue: tuple[TaskStep, ...] | None  # None: the queue held just this step
    extra_state: dict[str, Any] | tuple[Any, ...]
    step_state: dict[str, Any] | tuple[Any, ...]
    scratch: MemorySnapshot


@dataclass
class TaskState:
    """A task and its queue, completed outputs, step registry, failures and undo history."""

    task: Task
    step_queue: deque[TaskStep] = field(default_factory=deque)
    completed_steps: list[TaskStepOutput] = field(default_factory=list)
    steps: dict[str, TaskStep] = field(default_factory=dict)
    outputs: dict[str, TaskStepOutput] = field(default_factory=dict)
    history: list[StepSnapshot] = field(default_factory=list)
    failures: list[StepFailure] = field(default_factory=list)
    undone_outputs: list[TaskStepOutput] = field(default_factory=list)
    undone_edges: list[tuple[str, str]] = field(default_factory=list)
    undone_ids: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    #: the output of a running step whose reply is still streaming to its caller (never saved):
    #: the step ends, commits or fails, when that stream ends (AgentRunner.stream_step)
    streaming: TaskStepOutput | None = None
    #: ``finalize_response`` ran
    finalized: bool = False
    #: ``abandon_task`` ended it
    abandoned: bool = False
    #: the answer ``finalize_response`` gave
    final_response: Any = None
    #: keep a snapshot per step (``history``), which undo and forks need
    keep_history: bool = True
    #: whether ``task._call_ids`` holds every call id of the run (False for a loaded task until
    #: its first step; see nbagent.calls)
    call_ids_known: bool = False
    #: finalizing adds the task's new messages to the runner's memory (the conversation);
    #: False for a task that must leave it alone (each task of a batch is an evaluation)
    adds_to_memory: bool = True

    @property
    def task_id(self) -> str:
        """The id of the task this state belongs to (``task.task_id``)."""
        return self.task.task_id

    @property
    def root_step(self) -> TaskStep | None:
        """The task's first step (the reference's ``DAGTaskState.root_step``)."""
        return next(iter(self.steps.values()), None)

    # ----- reading -----------------------------------------------------------------------
    @property
    def status(self) -> TaskStatus:
        """Where the task is, worked out from its steps rather than stored, so it can never
        disagree with them: abandoned, finalized, running, completed (last step done), failed
        (its last attempt failed), active (some steps done) or pending."""
        if self.abandoned:
            return TaskStatus.ABANDONED
        if self.finalized:
            return TaskStatus.FINALIZED
        if self.running:
            return TaskStatus.RUNNING
        if self.completed_steps and self.completed_steps[-1].is_last:
            return TaskStatus.COMPLETED
        if self.failed_step_id() is not None:
            return TaskStatus.FAILED
        return TaskStatus.ACTIVE if self.completed_steps else TaskStatus.PENDING

    def failed_step_id(self) -> str | None:
        """The step whose last attempt failed and that has not succeeded (or been undone) since."""
        if not self.failures:
            return None
        sid = self.failures[-1].step_id
        if sid in self.outputs or sid in self.running or sid in self.undone_ids:
            return None
        return sid

    def step_status(self, step_id: str) -> StepStatus:
        """Where one step is (running, done, undone, failed, awaiting approval, held, blocked
        on the steps before it, or queued): what the graph colours and the panel lists."""
        if step_id in self.running:
            return StepStatus.RUNNING
        if step_id in self.outputs:
            return StepStatus.DONE
        if step_id in self.undone_ids:
            return StepStatus.UNDONE
        if step_id == self.failed_step_id():
            return StepStatus.FAILED
        step = self.steps.get(step_id)
        if step is None:
            return StepStatus.QUEUED
        if is_awaiting(step):
            return StepStatus.AWAITING
        if not step.is_ready:
            return StepStatus.HELD
        outputs = self.outputs  # (``is_step_ready``, its other two checks made above)
        for pid in step.prev_steps:
            if pid not in outputs:
                return StepStatus.BLOCKED
        return StepStatus.QUEUED

    def is_step_ready(self, step: TaskStep) -> bool:
        """Ready when every step it depends on (``prev_steps``) is done, it is not held
        (``is_ready``) and none of its tool calls waits for approval."""
        if not step.is_ready:
            return False
        outputs = self.outputs
        for pid in step.prev_steps:
            if pid not in outputs:
                return False
        return not is_awaiting(step)

    def held_steps(self) -> list[TaskStep]:
        """Queued steps held back (``is_ready=False``) until someone releases them."""
        return [s for s in self.step_queue if not s.is_ready]

    def is_known(self, step: TaskStep) -> bool:
        """Whether the step is already part of the task (queued, running or done), e.g. a
        join that another of its previous steps returned first."""
        return step.step_id in self.steps and step.step_id not in self.undone_ids

    def settle(self, step: TaskStep) -> None:
        """A new step's ``is_ready=False`` means "wait for my previous steps" while some are
        unfinished (the runner does that itself, so the flag is set back); with none left
        to wait for it means *held*: it stays queued until released.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        if not step.is_ready and any(pid not in self.outputs for pid in step.prev_steps):
            step.is_ready = True

    def returned_by_other(self, nxt: TaskStep, step_id: str) -> bool:
        """Whether a done step other than ``step_id`` also returned ``nxt`` (a join).

        The step engine calls this; code that uses nbagent does not (so no example)."""
        for pid in nxt.prev_steps:
            out = self.outputs.get(pid)
            if pid != step_id and out is not None and any(s.step_id == nxt.step_id for s in out.next_steps):
                return True
        return False

    def scan_call_ids(self) -> set[str]:
        """Every tool-call id this task's run holds (see ``nbagent.calls``)."""
        steps = {id(s): s for s in (*self.steps.values(), *self.step_queue)}
        outputs = (*self.completed_steps, *self.outputs.values(), *self.undone_outputs)
        for out in outputs:
            steps.setdefault(id(out.task_step), out.task_step)
            for nxt in out.next_steps:
                steps.setdefault(id(nxt), nxt)
        return scan_call_ids(steps.values(), outputs)

    def register(self, step: TaskStep) -> None:
        """Make a step part of the task (by id), before it is queued; a step of another
        task is refused, so one task's run can never write into another's.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        if step.task_id != self.task.task_id:
            raise ValueError(
                f"step {step.step_id!r} belongs to task {step.task_id!r}, "
                f"not to task {self.task.task_id!r}"
            )
        self.steps[step.step_id] = step
        self.undone_ids.discard(step.step_id)

    # ----- snapshots ---------------------------------------------------------------------
    def snapshot(self, step: TaskStep, kind: type[StepSnapshot] | None = None) -> StepSnapshot:
        """Record what running ``step`` may change (its input, the queue, the task's extra
        state, the step's state, the scratch memory), so a failure or an undo can put it
        back (``restore``); values the last snapshot already holds are shared, not copied.
        ``kind``: a subclass of ``StepSnapshot`` to make (its other fields at their defaults)."""
        extra = self.task.extra_state
        memo: dict[int, Any] = {}  # values shared by the two dicts stay shared
        prev = self.history[-1].extra_state if self.history else None  # unchanged values share
        extra_snap = snapshot_dict(extra, memo, prev) if extra else _NO_STATE
        step_state = step.step_state
        if not step_state or step_state is extra:
            step_snap: Any = _NO_STATE
        elif extra and _same_items(step_state, extra):
            step_snap = extra_snap  # merged into extra_state (CustomSimpleAgentWorker): one serves both
        else:
            step_snap = snapshot_dict(step_state, memo)
        queue = self.step_queue
        return (kind or StepSnapshot)(  # its fields by position (step_id, step_input, queue, ...): keywords cost more
            step.step_id,
            step.input,
            None if len(queue) == 1 and queue[0] is step else tuple(queue),
            extra_snap,
            step_snap,
            self.task.scratch_memory.snapshot(),
        )

    def restore(self, snap: StepSnapshot) -> None:
        """Put back what the step may have changed.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        step = self.steps[snap.step_id]
        step.input = snap.step_input
        memo: dict[int, Any] = {}
        if snap.extra_state or self.task.extra_state:
            restore_dict(self.task.extra_state, snap.extra_state, memo)
        if snap.step_state:
            restore_dict(step.step_state, snap.step_state, memo)
        self.task.scratch_memory.restore(snap.scratch)
        self.step_queue = deque((step,) if snap.queue is None else snap.queue)

    def record_failure(self, step: TaskStep, error: BaseException) -> StepFailure:
        """Keep the failed attempt (error type, message, traceback, time, attempt number) on
        the task, so the graph, the panel and a saved run still show it after a retry.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        import traceback  # here: import nbagent does not load it

        attempt = 1 + sum(1 for f in self.failures if f.step_id == step.step_id)
        failure = StepFailure(
            step_id=step.step_id,
            error_type=type(error).__name__,
            message=str(error),
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
            at=time.time(),
            attempt=attempt,
        )
        self.failures.append(failure)
        return failure

    # ----- changes -----------------------------------------------------------------------
    def complete(self, step: TaskStep, output: TaskStepOutput, snap: StepSnapshot) -> None:
        """Record a finished step: link and queue its next steps, keep its output.

        A next step the task already has (a join another parent returned) is linked, not
        queued again.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        fresh = []
        for nxt in output.next_steps:
            if nxt.step_id not in step.next_steps and step.step_id not in nxt.prev_steps:
                step.link_step(nxt)
            if self.is_known(nxt):
                continue
            self.register(nxt)
            self.step_queue.append(nxt)
            fresh.append(nxt)
        self.completed_steps.append(output)
        self.outputs[step.step_id] = output
        for nxt in fresh:
            self.settle(nxt)
        if self.keep_history:
            self.history.append(snap)

    def undo(self) -> tuple[TaskStepOutput, StepSnapshot]:
        """Take back the last completed step; return its output and snapshot."""
        snap = self.history.pop()
        output = self.outputs.pop(snap.step_id)
        step = self.steps[snap.step_id]
        for nxt in output.next_steps:
            if self.returned_by_other(nxt, step.step_id):
                continue  # a join another done step returned: it stays, waiting for this one
            step.next_steps.pop(nxt.step_id, None)
            nxt.prev_steps.pop(step.step_id, None)
            self.undone_edges.append((step.step_id, nxt.step_id))
            self.undone_ids.add(nxt.step_id)
        self.restore(snap)
        if self.completed_steps and self.completed_steps[-1] is output:
            self.completed_steps.pop()
        else:  # another step finished after it (parallel runs)
            self.completed_steps = [o for o in self.completed_steps if o is not output]
        self.undone_outputs.append(output)
        return output, snap
