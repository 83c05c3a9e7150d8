"""Step-wise workflow runs (``run(stepwise=True)``, ``handler.run_step()``) and checkpoints taken
after every step (``checkpoint_callback=``), for hand-written workflows and AgentWorkflow."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from nbagent import ScriptedLLM, tool_call
from nbagent.workflow import (
    AgentWorkflow,
    Context,
    Event,
    FunctionAgent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    WorkflowCancelledError,
    WorkflowRuntimeError,
    ask_human,
    step,
)
from nbagent.workflow.checkpoint import Checkpoint


class Count(Event):
    n: int


class Left(Event):
    value: int


class Right(Event):
    value: int


class Counter(Workflow):
    @step
    async def begin(self, ctx: Context, ev: StartEvent) -> Count:
        await ctx.set("seen", [])
        return Count(n=1)

    @step
    async def count(self, ctx: Context, ev: Count) -> Count | StopEvent:
        await ctx.set("seen", [*await ctx.get("seen"), ev.n])
        if ev.n >= int(ev_limit(ctx)):
            return StopEvent(result=ev.n)
        return Count(n=ev.n + 1)


def ev_limit(ctx: Context) -> int:
    return 3


class Fan(Workflow):
    """A step that returns nothing but sends two events (the reference's own stepwise test)."""

    @step
    async def split(self, ctx: Context, ev: StartEvent) -> Left | Right | None:
        ctx.send_event(Left(value=21))
        ctx.send_event(Right(value=23))
        return None

    @step
    async def left(self, ctx: Context, ev: Left) -> Right:
        return Right(value=ev.value * 2)

    @step
    async def right(self, ctx: Context, ev: Right) -> StopEvent | None:
        got = ctx.collect_events(ev, [Right, Right])
        if got is None:
            return None
        return StopEvent(result=sorted(e.value for e in got))  # type: ignore[attr-defined]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_reference_loop_runs_unchanged_one_step_per_call() -> None:
    async def go() -> tuple[list[list[str]], Any, list[int]]:
        w = Counter()
        handler = w.run(stepwise=True)
        steps: list[list[str]] = []
        # the reference's loop, as its docs write it
        while produced_events := await handler.run_step():
            steps.append([type(e).__name__ for e in produced_events])
            for ev in produced_events:
                handler.ctx.send_event(ev)
        result = await handler
        return steps, result, await handler.ctx.get("seen")

    steps, result, seen = run(go())
    assert steps == [["Count"], ["Count"], ["Count"], ["StopEvent"]]
    assert result == 3
    assert seen == [1, 2, 3]  # each Count handled once: sending them back delivered nothing twice


def test_nothing_runs_until_run_step_and_events_sent_in_a_step_are_reported() -> None:
    async def go() -> None:
        handler = Fan().run(stepwise=True)
        await asyncio.sleep(0.05)
        assert handler.status == "paused"
        assert [it.step for it in handler.ctx._pending] == ["split"]  # not started
        first = await handler.run_step()
        assert [type(e).__name__ for e in first or []] == ["Left", "Right"]
        assert [it.step for it in handler.ctx._pending] == ["left", "right"]
        second = await handler.run_step()  # the head of the queue only
        assert [type(e).__name__ for e in second or []] == ["Right"]
        assert [it.step for it in handler.ctx._pending] == ["right", "right"]
        assert await handler.run_step() == []  # collecting: produced nothing yet
        last = await handler.run_step()
        assert isinstance(last[0], StopEvent) if last else False
        assert await handler.run_step() is None
        assert await handler == [23, 42]

    run(go())


def test_a_loop_that_does_not_send_the_events_back_still_finishes() -> None:
    async def go() -> Any:
        handler = Counter().run(stepwise=True)
        while await handler.run_step() is not None:
            pass
        return await handler

    assert run(go()) == 3


def test_awaiting_a_stepwise_handler_runs_the_remaining_steps() -> None:
    async def go() -> Any:
        handler = Counter().run(stepwise=True)
        await handler.run_step()
        assert handler.status == "paused"
        return await handler

    assert run(go()) == 3


def test_run_step_misuse_and_failures_are_clear() -> None:
    class Boom(Workflow):
        @step
        async def go(self, ev: StartEvent) -> StopEvent:
            raise KeyError("the step's own error")

    async def go() -> None:
        plain = Counter().run()
        with pytest.raises(RuntimeError, match="stepwise=True"):
            await plain.run_step()
        await plain

        handler = Boom().run(stepwise=True)
        with pytest.raises(KeyError, match="own error"):
            await handler.run_step()
        with pytest.raises(KeyError):  # a failed run keeps saying why
            await handler.run_step()
        assert handler.status == "failed"
        assert handler.ctx.has_pending_work  # the failed step can be resumed

        h2 = Counter().run(stepwise=True)
        first = asyncio.ensure_future(h2.run_step())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already running"):
            await h2.run_step()
        await first
        await h2

    run(go())


def test_a_step_that_asks_a_person_returns_the_question_and_the_next_call_finishes_it() -> None:
    class Ask(Workflow):
        @step
        async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
            answer = await ask_human(ctx, "Go on?")
            return StopEvent(result=f"answer: {answer}")

    async def go() -> None:
        handler = Ask().run(stepwise=True)
        produced = await handler.run_step()
        assert [type(e) for e in produced or []] == [InputRequiredEvent]
        assert produced and produced[0].prefix == "Go on?"
        assert handler.status == "waiting"
        with pytest.raises(RuntimeError, match="waits for an answer to 'Go on\\?'"):
            await handler.run_step()
        handler.ctx.send_event(produced[0])  # the reference's loop sends it back: a no-op
        handler.respond("yes")
        last = await handler.run_step()
        assert last and isinstance(last[0], StopEvent)
        assert await handler == "answer: yes"

    run(go())


def test_stopping_a_stepwise_run_waiting_for_a_person_keeps_it_resumable() -> None:
    class Ask(Workflow):
        @step
        async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
            return StopEvent(result=await ask_human(ctx, "Name?"))

    async def go() -> None:
        w = Ask()
        handler = w.run(stepwise=True)
        await handler.run_step()
        saved = json.loads(json.dumps(handler.ctx.to_dict()))
        await handler.cancel_run()
        assert handler.status == "cancelled"
        with pytest.raises(WorkflowCancelledError):
            await handler
        again = w.run(ctx=Context.from_dict(w, saved), stepwise=True)
        produced = await again.run_step()
        assert produced and produced[0].prefix == "Name?"
        again.respond("Ada")
        assert await again == "Ada"

    run(go())


def test_nothing_left_to_do_fails_the_stepwise_run() -> None:
    class Dead(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent | None:
            return None

    async def go() -> None:
        handler = Dead().run(stepwise=True)
        assert await handler.run_step() == []
        with pytest.raises(WorkflowRuntimeError, match="nothing left to do"):
            await handler.run_step()

    run(go())


# ----- checkpoints ---------------------------------------------------------------------------
def test_checkpoint_callback_after_every_step_and_each_checkpoint_resumes_the_run() -> None:
    async def go() -> None:
        checkpoints: list[Checkpoint] = []
        w = Counter()
        assert await w.run(checkpoint_callback=checkpoints.append) == 3
        assert [c.last_completed_step for c in checkpoints] == ["begin", "count", "count", "count"]
        assert [type(c.output_event).__name__ for c in checkpoints] == ["Count", "Count", "Count", "StopEvent"]
        assert len({c.run_id for c in checkpoints}) == 1
        # the second checkpoint, through JSON, into a fresh workflow object: the run goes on from there
        data = json.loads(json.dumps(checkpoints[1].to_dict()))
        fresh = Counter()
        handler = fresh.run_from(Checkpoint.from_dict(data))
        assert handler.resumed
        assert await handler == 3
        assert await handler.ctx.get("seen") == [1, 2, 3]  # 1 from before the checkpoint

    run(go())


def test_checkpoint_callback_in_the_reference_style_and_async() -> None:
    calls: list[dict[str, Any]] = []

    async def callback(run_id: str, ctx: Context, last_completed_step: str, input_ev: Event, output_ev: Event) -> None:
        await asyncio.sleep(0)
        calls.append(
            {"run_id": run_id, "ctx": ctx, "step": last_completed_step, "in": input_ev, "out": output_ev}
        )

    async def go() -> None:
        handler = Counter().run(stepwise=True, checkpoint_callback=callback)
        await handler.run_step()
        assert len(calls) == 1  # called after the step, before run_step returned
        assert calls[0]["ctx"] is handler.ctx and calls[0]["run_id"] == handler.run_id
        assert isinstance(calls[0]["in"], StartEvent) and isinstance(calls[0]["out"], Count)
        await handler
        assert [c["step"] for c in calls] == ["begin", "count", "count", "count"]

    run(go())


def test_a_callback_that_raises_ends_the_run_and_a_bad_one_is_refused() -> None:
    def broken(checkpoint: Checkpoint) -> None:
        raise OSError("disk full")

    async def go() -> None:
        with pytest.raises(OSError, match="disk full"):
            await Counter().run(checkpoint_callback=broken)
        with pytest.raises(TypeError, match="checkpoint_callback must be callable"):
            Counter().run(checkpoint_callback="save")

    run(go())


# ----- AgentWorkflow -------------------------------------------------------------------------
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def publish(ctx: Context, title: str) -> str:
    """Publish under a title, once the person agrees."""
    return f"{title}: {await ask_human(ctx, f'Publish {title}?')}"


def test_agent_workflow_stepwise_with_a_person_and_a_checkpoint_mid_run() -> None:
    def script() -> ScriptedLLM:
        return ScriptedLLM([
            tool_call("add", a=2, b=3),
            tool_call("publish", title="sum"),
            "The sum is 5 and it is published.",
        ])

    async def go() -> None:
        agent = FunctionAgent(name="calc", description="adds", tools=[add, publish], llm=script())
        wf = AgentWorkflow([agent])
        checkpoints: list[Checkpoint] = []
        handler = wf.run(user_msg="add 2 and 3", stepwise=True, checkpoint_callback=checkpoints.append)
        kinds: list[str] = []
        while True:
            produced = await handler.run_step()
            if produced is None:
                break
            kinds += [type(e).__name__ for e in produced]
            if produced and isinstance(produced[0], InputRequiredEvent):
                handler.respond("yes")
        result = await handler
        assert str(result) == "The sum is 5 and it is published."
        assert kinds[:5] == ["AgentInput", "AgentSetup", "AgentOutput", "ToolCall", "ToolCallResult"]
        assert "InputRequiredEvent" in kinds and kinds[-1] == "StopEvent"
        # resume from the checkpoint taken right after the first tool result, with a new model
        after_add = next(c for c in checkpoints if c.last_completed_step == "call_tool")
        agent.llm = ScriptedLLM([tool_call("publish", title="sum"), "Published again."])
        resumed = wf.run_from(after_add, stepwise=True)
        first = await resumed.run_step()
        assert [type(e).__name__ for e in first or []] == ["AgentInput"]
        memory = await resumed.ctx.get("memory")
        assert [m.role.value for m in memory.get_all()] == ["user"]  # the tool turn is still in flight
        question = await resumed.run_step()
        while question and not isinstance(question[0], InputRequiredEvent):
            question = await resumed.run_step()
        resumed.respond("no")
        assert str(await resumed) == "Published again."

    run(go())


def test_live_view_redraws_after_each_step() -> None:
    pytest.importorskip("ipywidgets")
    from nbagent.viz.workflow_live import WorkflowLiveView

    async def go() -> None:
        agent = FunctionAgent(
            name="calc", description="adds", tools=[add], llm=ScriptedLLM([tool_call("add", a=1, b=1), "2"])
        )
        view = WorkflowLiveView(AgentWorkflow([agent]), throttle_s=60.0, renderer="html")
        handler = view.run(user_msg="1+1?", stepwise=True)
        sources = [view.source]
        assert "run · paused" in view.source  # nothing has run yet
        while await handler.run_step() is not None:
            sources.append(view.source)  # drawn at once, whatever the throttle says
            if not handler.done():
                assert "run · paused" in view.source
        assert "calc" in sources[-1]
        changed = sum(1 for a, b in zip(sources, sources[1:]) if a != b)
        assert changed >= 4, changed
        assert view.trace.status == "done" and view.trace.answer == "2"
        assert "run · done" in view.source and "paused" not in view.source

    run(go())


def test_workflow_checkpointer_as_the_reference_uses_it() -> None:
    from nbagent.workflow import WorkflowCheckpointer

    async def go() -> None:
        w = Counter()
        w_ckptr = WorkflowCheckpointer(workflow=w)
        handler = w_ckptr.run()
        await handler
        kept = w_ckptr.checkpoints[handler.run_id]
        assert [c.last_completed_step for c in kept] == ["begin", "count", "count", "count"]
        ckpt = kept[0]
        handler = w_ckptr.run_from(checkpoint=ckpt)
        assert await handler == 3
        assert len(w_ckptr.checkpoints) == 2  # the resumed run is a run of its own
        assert [c.last_completed_step for c in w_ckptr.checkpoints[handler.run_id]] == ["count"] * 3
        assert len(w_ckptr.filter_checkpoints(last_completed_step="begin")) == 1
        assert len(w_ckptr.filter_checkpoints(output_event_type=StopEvent)) == 2
        w_ckptr.disable_checkpoint("count")
        h3 = w_ckptr.run()
        await h3
        assert [c.last_completed_step for c in w_ckptr.checkpoints[h3.run_id]] == ["begin"]
        with pytest.raises(ValueError, match="no step 'nope'"):
            w_ckptr.enable_checkpoint("nope")

    run(go())


def test_run_step_from_another_event_loop_than_the_runs() -> None:
    """A widget callback may run on another of the kernel's loops than the one the run started
    on (JupyterLab with ipykernel 7 does this): run_step() hands the step to the run's loop."""
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        async def start() -> Any:
            return Counter().run(stepwise=True)

        handler = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)

        async def go() -> tuple[list[str], Any]:
            kinds: list[str] = []
            first = await handler.run_step()
            kinds += [type(e).__name__ for e in first or []]
            return kinds, await handler  # the remaining steps, then the result, across loops

        kinds, result = asyncio.run(go())
        assert kinds == ["Count"] and result == 3
        assert handler._runner.loop is loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()

    async def stale() -> None:
        with pytest.raises(RuntimeError, match="no longer running"):
            await orphan.run_step()

    other = asyncio.new_event_loop()
    orphan = other.run_until_complete(start_on_this_loop())
    other.close()
    asyncio.run(stale())


async def start_on_this_loop() -> Any:
    return Counter().run(stepwise=True)
