"""One call's scheduler for a parallel engine: starts the task's ready steps as asyncio tasks,
up to the bound, and each step's successors as soon as their previous steps are done.

``Drive`` does the bookkeeping in completion callbacks (no polling, no O(n) wait per
completion); ``_nothing_ready`` says why no step can run, naming the steps and what they
wait for.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

from nbagent.engine.approvals import check_decided
from nbagent.engine.errors import TaskStateError
from nbagent.engine.state import TaskState, TaskStatus
from nbagent.schema import TaskStep, TaskStepOutput

if TYPE_CHECKING:
    from nbagent.engine.core import Mode
    from nbagent.engine.parallel import ParallelStepEngine

__all__ = ["Drive", "clock", "check_approvals", "nothing_ready"]

clock = itertools.count(1)  # orders step starts and ends across all tasks (only order matters)


def check_approvals(state: TaskState) -> None:
    """Raise ``AwaitingApprovalError`` if a queued step waits for decisions on tool calls."""
    for s in state.step_queue:
        check_decided(state, s)


def nothing_ready(state: TaskState) -> str:
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


class Drive:
    """One call's scheduler: starts ready steps as tasks, up to the bound, as slots free up.

    Completion callbacks do the bookkeeping (no polling, no O(n) wait per completion): a
    finished step's successors count down their unfinished previous steps and start at zero.
    """

    def __init__(
        self,
        runner: ParallelStepEngine,
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
        self.tag = f"nbagent-step-{next(clock)}"  # names this call's step tasks

    async def run(self, input: str | None, kwargs: dict[str, Any]) -> list[TaskStepOutput]:
        state = self.state
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.finished: asyncio.Future[None] = loop.create_future()
        first = [s for s in state.step_queue if state.is_step_ready(s)]
        if not first:
            check_approvals(state)
            raise TaskStateError(nothing_ready(state))
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
            check_approvals(state)
            raise TaskStateError(nothing_ready(state))
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
                coro = self.runner._astep(self.state.task_id, step, input, self.mode, **kwargs)
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
        candidates: list[tuple[TaskStep, bool]] = [(s, True) for s in linked.values()]
        returned = output.next_steps
        if returned:  # (a branch usually returns none: its join is linked already)
            candidates.extend([(s, False) for s in returned if s.step_id not in linked])
        claimed, running, undone, waiting = self.claimed, state.running, state.undone_ids, self.waiting
        for nxt, counted in candidates:
            sid = nxt.step_id
            if sid in claimed or sid in done or sid in running or sid in undone:
                continue
            left = waiting.get(sid)
            if left is None or not counted:
                left = 0
                for p in nxt.prev_steps:  # (a loop: a fan-out's every branch counts its one parent)
                    if p not in done:
                        left += 1
            else:
                left -= 1
            if left <= 0 and not state.is_step_ready(nxt):  # links changed meanwhile: recount
                left = sum(1 for p in nxt.prev_steps if p not in done)
                if left <= 0:  # its tool calls await approval: it waits for a decision
                    continue
            if left > 0:
                waiting[sid] = left
                continue
            waiting.pop(sid, None)
            claimed.add(sid)
            self.ready.append((nxt, None, self.later_kwargs))

    def _rescan(self) -> None:
        state = self.state
        for s in state.step_queue:
            if s.step_id not in self.claimed and state.is_step_ready(s):
                self.claimed.add(s.step_id)
                self.ready.append((s, None, self.later_kwargs))
        if self.ready:
            self._launch()
