"""All or nothing: what lets a step, an undo or a fork be interrupted anywhere.

A ``KeyboardInterrupt`` (Ctrl-C in a script, "Interrupt kernel"), a cancelled task or any
other exception may land between any two lines of a call that changes a task. The rules that
make such a call leave the task exactly as it was:

- Before changing anything, a call records what it will change: a ``StepSnapshot`` for a
  step (its queue, input, extra state, step state, scratch memory), a ``CommitMark`` before
  the step's output is recorded, a ``Checkpoint`` of the whole task for undo, goto and fork.
- Everything from there to the call's last line sits in one ``try``; the ``except`` puts the
  recorded state back and re-raises. Only what the world saw stays: the tool calls the
  attempt ran (its journal, ``nbagent.calls``) go back on the step, and the retry reuses
  their outputs instead of running them again. Every restore is idempotent (it sets values, it does
  not apply deltas), so ``retry`` can run it again if another interrupt lands inside it.
- A task is busy while a caller holds its claim (``claim``): a token set with one atomic
  ``dict.setdefault``, so two threads (or the panel's background run and a cell) never both
  change it; the second gets ``TaskStateError`` ("busy"). No lock is held across Python
  lines: an interrupt can land on the exit of a ``with lock:`` or the first line of a
  ``finally`` and leave a lock held for good. A claim is released as the last thing inside
  the ``try``; the ``except`` takes it again (if nobody else has) before it rolls back, and
  releases it. Steps of one parallel run share their event loop's claim.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from nbagent.snapshot import AppendLog, restore_dict, snapshot_dict

if TYPE_CHECKING:
    import asyncio

    from nbagent.memory import MemorySnapshot
    from nbagent.engine.state import StepSnapshot, TaskState
    from nbagent.schema import TaskStep, TaskStepOutput

__all__ = ["Claim", "claim", "release", "retry", "StepAttempt", "CommitMark", "mark_commit", "undo_commit", "Checkpoint"]

_TAKEOVER = threading.Lock()  # only to take over a stale claim (never on the normal path)


class Claim:
    """Who is changing a task: a thread, and the asyncio task of the call (if any), or the
    event loop whose parallel run it is (shared by the steps of that run)."""

    __slots__ = ("thread", "task", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.thread = threading.current_thread()
        aio = sys.modules.get("asyncio")  # not imported yet: no task can be running
        try:
            self.task: asyncio.Task[Any] | None = None if aio is None else aio.current_task()
        except RuntimeError:
            self.task = None
        self.loop = loop

    def stale(self, state: TaskState) -> bool:
        """Left behind by a call that ended without releasing it (two interrupts in a row):
        no step is running and its owner is gone, or is the thread asking now."""
        if state.running:
            return False
        if not self.thread.is_alive() or (self.task is not None and self.task.done()):
            return True
        return self.thread is threading.current_thread() and self.loop is None and self.task is None

    def __repr__(self) -> str:
        return f"Claim(thread={self.thread.name!r})"


def claims(runner: Any) -> dict[str, Claim]:
    """Task id -> the claim holding it: the table every engine declares (``_claims``)."""
    return runner._claims  # type: ignore[no-any-return]


def claim(runner: Any, state: TaskState, token: Claim) -> bool:
    """Take the task for ``token`` (atomic); False if another caller holds it."""
    table: dict[str, Claim] = runner._claims  # (claims(runner), without the call: every step asks)
    owner = table.setdefault(state.task_id, token)
    if owner is token:
        return True
    if owner.stale(state):
        with _TAKEOVER:
            if table.get(state.task_id) is owner:
                table[state.task_id] = token
                return True
    return False


def release(runner: Any, state: TaskState, token: Claim) -> None:
    """Let the task go, if ``token`` holds it (a parallel run's: once no step runs)."""
    table: dict[str, Claim] = runner._claims
    if table.get(state.task_id) is token and not (token.loop is not None and state.running):
        table.pop(state.task_id, None)


def retry(fn: Callable[..., Any], *args: Any) -> None:
    """Run an idempotent restore to its end, again if an interrupt lands inside it."""
    import asyncio  # here, not at import: ``import nbagent`` does not load asyncio

    while True:
        try:
            fn(*args)
            return
        except (KeyboardInterrupt, asyncio.CancelledError):
            continue


@dataclass(slots=True)
class CommitMark:
    """What recording a step's output will change, taken just before (see ``undo_commit``)."""

    n_completed: int
    # per next step: the step, and whether it was registered, undone, linked both ways, queued
    next: tuple[tuple[Any, bool, bool, bool, bool, bool], ...]


class StepAttempt:
    """One call's progress through a step, for rolling back exactly what it did."""

    __slots__ = ("claim", "step", "journal", "issued", "snap", "output", "mark", "ctx_token")

    def __init__(self) -> None:
        self.claim: Claim | None = None  # set: this call may hold the task's claim
        self.step: TaskStep | None = None
        # the step's tool-call journal, taken off it for this attempt (nbagent.calls): what
        # no rollback takes back goes back on the step when the attempt fails
        self.journal: dict[str, Any] | None = None
        self.issued: list[str] = []  # the call ids the attempt issued (freed again if it fails)
        self.snap: StepSnapshot | None = None  # set: the step may have been taken
        self.output: TaskStepOutput | None = None
        self.mark: CommitMark | None = None  # set: the output may have been (partly) recorded
        self.ctx_token: Any = None


def mark_commit(state: TaskState, step: TaskStep, output: TaskStepOutput) -> CommitMark:
    if not output.next_steps:  # (a branch that ends without next steps: nothing to look up)
        return CommitMark(len(state.completed_steps), ())
    sid = step.step_id
    steps, queue, undone = state.steps, state.step_queue, state.undone_ids
    linked = step.next_steps
    return CommitMark(
        len(state.completed_steps),
        tuple(
            [
                (
                    nxt,
                    (registered := nxt.step_id in steps),
                    nxt.step_id in undone,
                    nxt.step_id in linked,
                    sid in nxt.prev_steps,
                    # only a registered step can be queued (a step is registered, then queued): a
                    # new one is not looked for in the queue, which a fan-out fills with hundreds
                    registered and any(s is nxt for s in queue),
                )
                for nxt in output.next_steps
            ]
        ),
    )


def committed_on_top(state: TaskState, output: TaskStepOutput, mark: CommitMark) -> bool:
    """Whether nothing but this step's output was recorded since ``mark`` (no other call
    completed a step or undid this one meanwhile): only then may the commit be taken back."""
    done = state.completed_steps
    if len(done) == mark.n_completed:
        return True  # not recorded (yet): the rest of the commit is undone by its snapshot
    return len(done) == mark.n_completed + 1 and any(o is output for o in done)


def undo_commit(state: TaskState, step: TaskStep, output: TaskStepOutput, snap: Any, mark: CommitMark) -> None:
    """Take back whatever part of ``TaskState.complete`` (or a runner's ``_commit``) ran.

    Idempotent: each change is undone only if it is still there.
    """
    sid = step.step_id
    if state.outputs.get(sid) is output:
        del state.outputs[sid]
    done = state.completed_steps
    for i in range(len(done) - 1, -1, -1):
        if done[i] is output:
            del done[i]
            break
    history = state.history
    for i in range(len(history) - 1, -1, -1):
        if history[i] is snap:
            del history[i]
            break
    added = set()
    for nxt, registered, undone, linked, back, queued in mark.next:
        nid = nxt.step_id
        if not linked:
            step.next_steps.pop(nid, None)
        if not back:
            nxt.prev_steps.pop(sid, None)
        if not registered and state.steps.get(nid) is nxt:
            del state.steps[nid]
        if undone:
            state.undone_ids.add(nid)
        if not queued:
            added.add(id(nxt))
    if added and any(id(s) in added for s in state.step_queue):
        state.step_queue = type(state.step_queue)(s for s in state.step_queue if id(s) not in added)


# ----- whole-task checkpoints (undo, goto, fork) -------------------------------------------------


@dataclass(slots=True)
class _StepLinks:
    """A step's links to its neighbours, as a checkpoint keeps them."""

    step: Any
    input: str | None
    next_obj: dict[str, Any]
    next_items: tuple[tuple[str, Any], ...]
    prev_obj: dict[str, Any]
    prev_items: tuple[tuple[str, Any], ...]


class Checkpoint:
    """Everything undo, goto and fork may change in a task, to put it all back.

    O(steps) to take: these are a person's actions, not the hot path. ``touched`` are the
    steps whose own ``step_state`` may be restored (the steps being undone).
    """

    def __init__(self, state: TaskState, touched: list[TaskStep]) -> None:
        self.state = state
        self.queue = tuple(state.step_queue)
        self.queue_obj = state.step_queue
        self.completed = tuple(state.completed_steps)
        self.completed_obj = state.completed_steps
        self.outputs = tuple(state.outputs.items())
        self.history = tuple(state.history)
        self.undone_outputs = len(state.undone_outputs)
        self.undone_edges = len(state.undone_edges)
        self.undone_ids = frozenset(state.undone_ids)
        self.steps = tuple(state.steps.items())
        self.links = [
            _StepLinks(s, s.input, s.next_steps, tuple(s.next_steps.items()), s.prev_steps, tuple(s.prev_steps.items()))
            for s in state.steps.values()
        ]
        self.output_next = [(o, o.next_steps, tuple(o.next_steps)) for o in state.outputs.values()]
        memo: dict[int, Any] = {}
        extra = state.task.extra_state
        self.extra = snapshot_dict(extra, memo)
        seen = {id(extra)}
        self.step_states: list[tuple[dict[str, Any], Any]] = []
        for s in touched:
            d = s.step_state
            if id(d) not in seen:
                seen.add(id(d))
                self.step_states.append((d, snapshot_dict(d, memo)))
        # an AppendLog's snapshot is its length: undo truncates it, so keep its items
        self.logs = [
            (v, tuple(v))
            for d in (extra, *(d for d, _ in self.step_states))
            for v in d.values()
            if isinstance(v, AppendLog)
        ]
        self.scratch: MemorySnapshot = state.task.scratch_memory.snapshot()

    def restore(self) -> None:
        """Put the task back as it was when the checkpoint was taken (idempotent)."""
        state = self.state
        for link in self.links:
            s = link.step
            s.input = link.input
            s._set_links(next_steps=link.next_obj)
            if tuple(link.next_obj.items()) != link.next_items:
                link.next_obj.clear()
                link.next_obj.update(link.next_items)
            s._set_links(prev_steps=link.prev_obj)
            if tuple(link.prev_obj.items()) != link.prev_items:
                link.prev_obj.clear()
                link.prev_obj.update(link.prev_items)
        for out, obj, items in self.output_next:
            out._set_next_steps(obj)
            if tuple(obj) != items:
                obj[:] = items
        if tuple(state.steps.items()) != self.steps:
            state.steps.clear()
            state.steps.update(self.steps)
        if tuple(state.outputs.items()) != self.outputs:
            state.outputs.clear()
            state.outputs.update(self.outputs)
        self.completed_obj[:] = self.completed
        state.completed_steps = self.completed_obj
        state.history[:] = self.history
        del state.undone_outputs[self.undone_outputs :]
        del state.undone_edges[self.undone_edges :]
        if state.undone_ids != self.undone_ids:
            state.undone_ids.intersection_update(self.undone_ids)
            state.undone_ids.update(self.undone_ids)
        memo: dict[int, Any] = {}
        restore_dict(state.task.extra_state, self.extra, memo)
        for d, snap in self.step_states:
            restore_dict(d, snap, memo)
        for log, items in self.logs:
            if len(log) != len(items) or any(a is not b for a, b in zip(log, items)):
                log.restore(0)  # as an undo cuts it: views of it keep what they showed
                list.extend(log, items)
        state.task.scratch_memory.restore(self.scratch)
        self.queue_obj.clear()
        self.queue_obj.extend(self.queue)
        state.step_queue = self.queue_obj
