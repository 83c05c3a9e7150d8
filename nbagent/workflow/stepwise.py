"""Step-wise runs: ``workflow.run(..., stepwise=True)`` and ``handler.run_step()``.

The run loop normally starts every queued step at once. A step-wise run has no loop: each
``run_step()`` starts the step at the head of the queue, waits until it is handled (its events
queued for the next steps, the checkpoint callback called) and returns the events it produced:
the events it returned and those it sent with ``ctx.send_event``. ``None`` means the run is over
(``await handler`` gives the result); a failed run raises its exception.

The reference's loop runs unchanged::

    handler = workflow.run(user_msg="...", stepwise=True)
    while produced_events := await handler.run_step():
        for ev in produced_events:
            handler.ctx.send_event(ev)
    result = await handler

Differences from the reference, on purpose: the events are already on their way when
``run_step()`` returns (sending one of them back is a no-op), so a loop that does not send them
works too and nothing is lost if it forgets one; ``await handler`` on an unfinished step-wise run
runs the remaining steps instead of waiting forever.

People in the loop: a step that asks a question (``ask_human``, ``ctx.wait_for_event``) makes
``run_step()`` return at once with the question (an ``InputRequiredEvent``). Answer it
(``handler.respond(...)``, the input box); the next ``run_step()`` finishes that step. Calling
``run_step()`` while the question is unanswered raises an error that says so, rather than
blocking a notebook cell that could never receive the answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from nbagent.workflow.errors import WorkflowRuntimeError
from nbagent.workflow.events import Event

if TYPE_CHECKING:
    from nbagent.workflow.runtime import Runner

__all__ = ["run_one_step", "unanswered_questions"]


def unanswered_questions(runner: Runner, exec_id: int) -> list[Event]:
    """The questions execution ``exec_id`` waits on that have no answer yet."""
    out: list[Event] = []
    for w in runner.ctx._waiters.values():
        if w.exec_id == exec_id and w.future is not None and not w.future.done():
            out.append(w.waiter_event if w.waiter_event is not None else Event())
    return out


def _start_next(runner: Runner) -> int:
    """Start the step at the head of the queue; its execution id."""
    ctx = runner.ctx
    if not ctx._pending:
        err = WorkflowRuntimeError(
            f"the {type(runner.workflow).__name__} run has nothing left to do, yet no step "
            "returned a StopEvent (a step returned None and no event is waiting)"
        )
        runner.fail(err)
        raise err
    item = ctx._pending.popleft()
    if item.exec_id is None:
        item.exec_id = ctx._next_exec
        ctx._next_exec += 1
    eid = item.exec_id
    ctx._in_progress[eid] = item
    runner.items[eid] = item
    runner.running[item.step] += 1
    spec = runner.workflow.steps[item.step]
    task = runner.loop.create_task(runner._execute(spec, item), name=f"nbagent-step-{item.step}")
    task.add_done_callback(runner._note_done(eid))
    runner.tasks[eid] = task
    return eid


def _raise_if_failed(runner: Runner) -> None:
    fut = runner.future
    if fut.done() and not fut.cancelled() and fut.exception() is not None:
        raise fut.exception()  # type: ignore[misc]


async def run_one_step(runner: Runner, *, through_questions: bool = False) -> list[Event] | None:
    """Run one step of a step-wise run (see the module docstring).

    ``through_questions``: wait for the answer to a question instead of returning it (used by
    ``await handler`` and the panel's Run, which run in the background).
    """
    if not runner.stepwise:
        raise RuntimeError(
            "run_step() needs a step-wise run: start it with workflow.run(..., stepwise=True)"
        )
    here = asyncio.get_running_loop()
    if here is not runner.loop:  # e.g. a widget callback on another of the kernel's loops
        if runner.loop.is_closed() or not runner.loop.is_running():
            raise RuntimeError(
                "this run belongs to an event loop that is no longer running; resume it on this "
                "loop with workflow.run(ctx=handler.ctx, stepwise=True)"
            )
        done = asyncio.run_coroutine_threadsafe(
            run_one_step(runner, through_questions=through_questions), runner.loop
        )
        return await asyncio.wrap_future(done)
    if runner.stepping:
        raise RuntimeError("run_step() is already running for this run; await it before calling it again")
    if runner.finished:
        _raise_if_failed(runner)
        return None
    runner.stepping = True
    try:
        eid = runner.waiting_exec
        if eid is not None and eid in runner.tasks:
            waiting = unanswered_questions(runner, eid)
            if waiting and not through_questions:
                asked = "; ".join(repr(getattr(q, "prefix", "") or type(q).__name__) for q in waiting)
                raise RuntimeError(
                    f"the run waits for an answer to {asked}: answer it first "
                    "(handler.respond('...') or handler.input_box()), then call run_step() again"
                )
        else:
            eid = _start_next(runner)
        task = runner.tasks[eid]
        while not task.done() and not runner.finished:
            if not through_questions and unanswered_questions(runner, eid):
                break
            asked: asyncio.Future[None] = runner.loop.create_future()
            runner.question_futures.append(asked)
            await asyncio.wait([task, asked], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            runner.waiting_exec = None
            runner._handle(("done", eid))
            while not runner.notes.empty():  # no run loop reads the notes of a step-wise run
                runner.notes.get_nowait()
            events = (runner.produced or {}).pop(eid, [])
        elif runner.finished:
            events = []
        else:
            runner.waiting_exec = eid
            events = unanswered_questions(runner, eid)
        if runner.finished and runner.outcome != "done":
            _raise_if_failed(runner)
    finally:
        runner.stepping = False
    runner.reported = list(events)
    for listener in list(runner.step_listeners):
        try:
            listener(list(events))
        except Exception:  # a broken view must not break the run
            import logging

            logging.getLogger("nbagent.workflow").exception("nbagent step listener %r failed", listener)
    return events
