"""The workflow engine: steps chosen by event type, the stream, collect_events, workers,
timeouts, errors raised with their own type, validation, stopping and threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from nbagent.workflow import (
    Context,
    Event,
    StartEvent,
    StopEvent,
    Workflow,
    WorkflowCancelledError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
    WorkflowValidationError,
    step,
)


class Ping(Event):
    n: int


class Pong(Event):
    n: int


class Special(Ping):
    """A subclass is a different event: it does not go to the step that takes Ping."""


class PingPong(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Ping:
        await ctx.set("count", ev.get("count", 3))
        return Ping(n=0)

    @step
    async def ping(self, ctx: Context, ev: Ping) -> Pong:
        ctx.write_event_to_stream(ev)
        return Pong(n=ev.n + 1)

    @step
    async def pong(self, ctx: Context, ev: Pong) -> Ping | StopEvent:
        ctx.write_event_to_stream(ev)
        if ev.n >= await ctx.get("count"):
            return StopEvent(result=f"done at {ev.n}")
        return Ping(n=ev.n)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_events_go_to_the_step_that_takes_them_and_stream_in_order() -> None:
    async def main() -> tuple[list[str], Any]:
        handler = PingPong().run(count=2)
        seen = [f"{type(e).__name__}:{getattr(e, 'n', '')}" async for e in handler.stream_events()]
        return seen, await handler

    seen, result = run(main())
    assert seen == ["Ping:0", "Pong:1", "Ping:1", "Pong:2", "StopEvent:"]
    assert result == "done at 2"


def test_run_sync_and_start_kwargs_reach_the_start_event() -> None:
    assert PingPong().run_sync(count=1) == "done at 1"


def test_run_without_a_loop_says_how_to_run() -> None:
    with pytest.raises(RuntimeError, match="run_sync"):
        PingPong().run()


def test_a_step_exception_surfaces_with_its_own_type_and_names_the_step() -> None:
    class Boom(Exception):
        pass

    class Failing(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            raise Boom("no luck")

    async def main() -> None:
        await Failing().run()

    with pytest.raises(Boom, match="no luck") as info:
        run(main())
    assert any("start" in note for note in getattr(info.value, "__notes__", []))


def test_stream_raises_the_run_error_after_the_last_event() -> None:
    class Half(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> StopEvent:
            ctx.write_event_to_stream(Ping(n=1))
            raise KeyError("missing")

    async def main() -> list[Event]:
        seen: list[Event] = []
        with pytest.raises(KeyError):
            async for e in Half().run().stream_events():
                seen.append(e)
        return seen

    assert [type(e) for e in run(main())] == [Ping]


def test_subclass_events_are_routed_by_exact_type() -> None:
    class Router(Workflow):
        @step
        async def start(self, ev: StartEvent) -> Special:
            return Special(n=7)

        @step
        async def plain(self, ev: Ping) -> StopEvent:
            return StopEvent(result="plain")

        @step
        async def special(self, ev: Special) -> StopEvent:
            return StopEvent(result="special")

        @step
        async def never(self, ev: StartEvent) -> Ping:  # gives plain() a producer
            await asyncio.sleep(10)
            return Ping(n=0)

    assert Router().run_sync() == "special"


def test_collect_events_waits_for_all_then_returns_them_in_expected_order() -> None:
    class Fan(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> Ping | Pong:
            ctx.send_event(Pong(n=1))
            ctx.send_event(Ping(n=2))
            ctx.send_event(Pong(n=3))
            return None

        @step
        async def gather_pings(self, ctx: Context, ev: Ping) -> StopEvent | None:
            return None

        @step
        async def gather(self, ctx: Context, ev: Pong) -> StopEvent | None:
            got = ctx.collect_events(ev, [Pong, Pong])
            if got is None:
                await ctx.set("waited", True)
                return None
            return StopEvent(result=[e.n for e in got])

    async def main() -> tuple[Any, Any]:
        h = Fan().run()
        return await h, await h.ctx.get("waited")

    assert run(main()) == ([1, 3], True)


def test_num_workers_runs_events_of_one_step_at_the_same_time() -> None:
    active = {"now": 0, "peak": 0}

    class Parallel(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> Ping:
            for i in range(6):
                ctx.send_event(Ping(n=i))
            return None

        @step(num_workers=3)
        async def work(self, ev: Ping) -> Pong:
            active["now"] += 1
            active["peak"] = max(active["peak"], active["now"])
            await asyncio.sleep(0.01)
            active["now"] -= 1
            return Pong(n=ev.n)

        @step
        async def done(self, ctx: Context, ev: Pong) -> StopEvent | None:
            got = ctx.collect_events(ev, [Pong] * 6)
            return None if got is None else StopEvent(result=sorted(e.n for e in got))

    assert Parallel().run_sync() == [0, 1, 2, 3, 4, 5]
    assert active["peak"] == 3


def test_timeout_raises_and_the_context_can_resume() -> None:
    gate = {"slow": True}

    class Slow(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            if gate["slow"]:
                await asyncio.sleep(5)
            return StopEvent(result="finally")

    async def main() -> Any:
        wf = Slow(timeout=0.05)
        h = wf.run()
        with pytest.raises(WorkflowTimeoutError, match="timeout=0.05"):
            await h
        assert h.status == "failed" and h.ctx.has_pending_work
        gate["slow"] = False
        return await wf.run(ctx=h.ctx)

    assert run(main()) == "finally"


def test_stop_cancels_the_run_and_a_resume_reruns_the_interrupted_step() -> None:
    calls: list[int] = []

    class Waits(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            calls.append(1)
            if len(calls) == 1:
                await asyncio.sleep(5)
            return StopEvent(result=len(calls))

    async def main() -> Any:
        wf = Waits()
        h = wf.run()
        await asyncio.sleep(0.01)
        await h.cancel_run()
        with pytest.raises(WorkflowCancelledError):
            await h
        assert h.status == "cancelled"
        return await wf.run(ctx=h.ctx)

    assert run(main()) == 2


def test_an_event_no_step_takes_is_a_runtime_error_naming_it() -> None:
    class Stray(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> StopEvent:
            ctx.send_event(Special(n=1))
            await asyncio.sleep(1)
            return StopEvent()

    with pytest.raises(WorkflowRuntimeError, match="takes Special"):
        Stray().run_sync()


def test_a_run_that_ends_without_a_stop_event_says_so() -> None:
    class Quiet(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent | None:
            return None

    with pytest.raises(WorkflowRuntimeError, match="nothing left to do"):
        Quiet().run_sync()


def test_a_bad_return_value_is_a_runtime_error() -> None:
    class Odd(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            return "text"  # type: ignore[return-value]

    with pytest.raises(WorkflowRuntimeError, match="returned str"):
        Odd().run_sync()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("no_start", "no step takes a StartEvent"),
        ("no_stop", "no step returns a StopEvent"),
        ("unconsumed", "returns Pong, but no step takes it"),
        ("unproduced", "takes Pong, but no step returns it"),
        ("no_event_param", "no parameter is annotated"),
        ("no_return", "no return annotation"),
    ],
)
def test_validation_errors_name_the_step_and_the_problem(body: str, match: str) -> None:
    def make() -> type[Workflow]:
        if body == "no_start":
            class W(Workflow):
                @step
                async def a(self, ev: Ping) -> StopEvent:
                    return StopEvent()
        elif body == "no_stop":
            class W(Workflow):  # type: ignore[no-redef]
                @step
                async def a(self, ev: StartEvent) -> None:
                    return None
        elif body == "unconsumed":
            class W(Workflow):  # type: ignore[no-redef]
                @step
                async def a(self, ev: StartEvent) -> StopEvent | Pong:
                    return StopEvent()
        elif body == "unproduced":
            class W(Workflow):  # type: ignore[no-redef]
                @step
                async def a(self, ev: StartEvent) -> StopEvent:
                    return StopEvent()

                @step
                async def b(self, ev: Pong) -> StopEvent:
                    return StopEvent()
        elif body == "no_event_param":
            class W(Workflow):  # type: ignore[no-redef]
                @step
                async def a(self, ctx: Context) -> StopEvent:
                    return StopEvent()
        else:
            class W(Workflow):  # type: ignore[no-redef]
                @step
                async def a(self, ev: StartEvent):  # type: ignore[no-untyped-def]
                    return StopEvent()
        return W

    with pytest.raises(WorkflowValidationError, match=match):
        make()()


def test_step_decorator_rejects_sync_functions_and_bad_workers() -> None:
    with pytest.raises(TypeError, match="async def"):
        step(lambda self, ev: None)
    with pytest.raises(ValueError, match="num_workers"):
        step(num_workers=0)


def test_context_get_set_and_errors() -> None:
    async def main() -> None:
        ctx = Context(PingPong())
        await ctx.set("a", 1)
        assert await ctx.get("a") == 1
        assert await ctx.get("b", default=None) is None
        with pytest.raises(KeyError, match="'b'.*keys set so far: \\['a'\\]"):
            await ctx.get("b")
        with pytest.raises(TypeError):
            await ctx.set(1, 2)  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="inside a step"):
            ctx.collect_events(Ping(n=1), [Ping])

    run(main())


def test_a_context_is_reused_across_runs_and_not_shared_while_running() -> None:
    class Counter(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> StopEvent:
            n = await ctx.get("n", default=0) + 1
            await ctx.set("n", n)
            await asyncio.sleep(0.01)
            return StopEvent(result=n)

    async def main() -> list[int]:
        wf = Counter()
        ctx = Context(wf)
        first = await wf.run(ctx=ctx)
        h = wf.run(ctx=ctx)
        with pytest.raises(RuntimeError, match="in use"):
            wf.run(ctx=ctx)
        return [first, await h]

    assert run(main()) == [1, 2]


def test_send_event_from_another_thread_is_delivered() -> None:
    class Waits(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> Ping:
            return None  # the Ping comes from outside

        @step
        async def ping(self, ev: Ping) -> StopEvent:
            return StopEvent(result=ev.n)

        @step
        async def never(self, ev: StartEvent) -> Ping:
            await asyncio.sleep(5)
            return Ping(n=0)

    async def main() -> Any:
        h = Waits().run()
        await asyncio.sleep(0.01)
        t = threading.Thread(target=h.send_event, args=(Ping(n=42),))
        t.start()
        t.join()
        return await h

    assert run(main()) == 42


def test_subscribers_see_every_event_and_a_broken_one_does_not_break_the_run() -> None:
    async def main() -> list[str]:
        h = PingPong().run(count=1)
        got: list[str] = []
        h.subscribe(lambda e: got.append(type(e).__name__))
        h.subscribe(lambda e: 1 / 0)
        await h
        return got

    assert run(main()) == ["Ping", "Pong", "StopEvent"]


def test_stream_can_be_read_once() -> None:
    async def main() -> None:
        h = PingPong().run(count=1)
        [e async for e in h.stream_events()]
        with pytest.raises(RuntimeError, match="already"):
            [e async for e in h.stream_events()]

    run(main())


def test_event_get_reads_fields_and_extras() -> None:
    ev = StartEvent(user_msg="hi", n=3)
    assert ev.get("user_msg") == "hi" and ev.get("missing", 5) == 5
    assert Ping(n=1).get("n") == 1
