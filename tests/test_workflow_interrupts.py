"""Workflows after an interrupt: the Context is never stuck "running", stop() always stops,
run(ctx=ctx) resumes, and a model call that failed does not spend an agent iteration."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from nbagent import FunctionLLM
from nbagent.workflow import (
    AgentWorkflow,
    Context,
    Event,
    FunctionAgent,
    StartEvent,
    StopEvent,
    Workflow,
    WorkflowCancelledError,
    step,
)


class Half(Event):
    n: int


class Slow(Workflow):
    """start -> middle -> end; ``middle`` waits on ``gate`` (or raises what ``trip`` holds)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate: asyncio.Event | None = None
        self.trip: list[BaseException] = []
        self.middles = 0

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Half:
        await ctx.set("seen", ["start"])
        return Half(n=1)

    @step
    async def middle(self, ctx: Context, ev: Half) -> StopEvent:
        self.middles += 1
        if self.trip:
            raise self.trip.pop()
        if self.gate is not None:
            await self.gate.wait()
        seen = await ctx.get("seen")
        return StopEvent(result=[*seen, "middle"])


def _loop_run(coro: Any) -> Any:
    """Run ``coro`` on a fresh loop, the way a script or ipykernel does (no SIGINT handler)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.mark.parametrize("loop_goes_on", [False, True])
def test_ctrl_c_in_a_step_leaves_the_context_free_to_resume(loop_goes_on: bool) -> None:
    """A script: the loop is closed after Ctrl-C. A notebook: the kernel's loop goes on.

    What asyncio reports about tasks is recorded (not left to the log at some later garbage
    collection): with the loop going on, nothing of the run is left pending or unretrieved;
    a loop closed right after the interrupt without cancelling its tasks first (``asyncio.run``
    and ``run_sync`` cancel them) leaves every task it held pending, the caller's own as much as
    the run loop, and the step's KeyboardInterrupt unread: asyncio's report on any such loop,
    the same for two plain tasks, not a leak of the run."""
    wf = Slow()
    wf.trip.append(KeyboardInterrupt())
    holder: dict[str, Any] = {}
    reports: list[dict[str, Any]] = []

    async def first() -> None:
        handler = wf.run()
        holder["ctx"] = handler.ctx
        holder["handler"] = handler
        await handler

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, report: reports.append(report))
    caller = loop.create_task(first(), name="caller")
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(caller)
    if loop_goes_on:
        loop.run_until_complete(asyncio.sleep(0.05))  # the next cell
        assert holder["handler"].status == "cancelled"
        assert isinstance(caller.exception(), WorkflowCancelledError)  # what the awaiting cell gets
        assert asyncio.all_tasks(loop) == set()
    loop.close()
    ctx = holder["ctx"]
    assert not ctx.is_running and ctx.has_pending_work

    async def resume() -> Any:
        return await wf.run(ctx=ctx)

    assert _loop_run(resume()) == ["start", "middle"]  # the interrupted step ran again
    assert wf.middles == 2
    del caller, holder  # the context now holds the resumed run, not the interrupted one
    gc.collect()
    reported = sorted((r["message"], r["task" if "task" in r else "future"].get_name()) for r in reports)
    if loop_goes_on:
        assert reported == []
    else:
        assert reported == [  # the caller's own task too: every task the closed loop left
            ("Task exception was never retrieved", "nbagent-step-middle"),
            ("Task was destroyed but it is pending!", "caller"),
            ("Task was destroyed but it is pending!", "nbagent-workflow-run"),
        ]


def test_a_cancelled_asyncio_run_leaves_the_context_free_to_resume() -> None:
    wf = Slow()
    holder: dict[str, Any] = {}

    async def first() -> None:
        wf.gate = asyncio.Event()  # never set: the run is still going when asyncio.run ends
        handler = wf.run()
        holder["ctx"] = handler.ctx
        await asyncio.sleep(0.05)  # main returns: asyncio.run cancels the run's tasks

    asyncio.run(first())
    ctx: Context = holder["ctx"]
    assert not ctx.is_running and ctx.has_pending_work

    async def resume() -> Any:
        wf.gate = None
        return await wf.run(ctx=ctx)

    assert asyncio.run(resume()) == ["start", "middle"]


def test_a_timeout_around_the_handler_stops_the_run_and_it_resumes() -> None:
    wf = Slow()

    async def main() -> Any:
        wf.gate = asyncio.Event()
        handler = wf.run()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(handler, 0.05)
        for _ in range(50):  # the run stops at once (a few loop turns)
            if not handler.ctx.is_running:
                break
            await asyncio.sleep(0.01)
        assert not handler.ctx.is_running and handler.status == "cancelled"
        handler.stop()  # stopping a stopped run is fine
        wf.gate.set()
        return await wf.run(ctx=handler.ctx)

    assert asyncio.run(main()) == ["start", "middle"]


def test_stop_stops_even_when_the_run_loop_is_gone() -> None:
    wf = Slow()

    async def main() -> None:
        wf.gate = asyncio.Event()
        handler = wf.run()
        await asyncio.sleep(0.02)
        main_task = handler._runner.main
        assert main_task is not None
        main_task.cancel()  # the loop task dies (as under an interrupt)
        await asyncio.sleep(0.02)
        handler.stop()
        with pytest.raises(WorkflowCancelledError):
            await handler
        assert not handler.ctx.is_running

    asyncio.run(main())


def test_a_failed_model_call_does_not_spend_an_iteration() -> None:
    calls: list[int] = []

    def reply(messages: Any, tools: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the model server went away")
        return "the answer"

    agent = FunctionAgent(name="solo", description="answers", llm=FunctionLLM(reply))
    wf = AgentWorkflow([agent], root_agent="solo")

    async def main() -> Any:
        handler = wf.run(user_msg="hi", max_iterations=1)
        with pytest.raises(ConnectionError):
            await handler
        assert await handler.ctx.get("num_iterations", default=0) == 0  # nothing was spent
        return await wf.run(ctx=handler.ctx)  # one iteration is enough for the retry

    result = asyncio.run(main())
    assert "the answer" in str(result)
