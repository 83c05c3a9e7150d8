"""The event dispatcher, the step context and running coroutines from sync code."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nbagent import _sync
from nbagent.events import (
    EventDispatcher,
    StepCompleted,
    StepContext,
    TaskCreated,
    TokenStreamed,
    _reset_current,
    _set_current,
    current_step,
    emit_token,
    record_llm_call,
)
from nbagent.messages import TokenUsage


def test_subscribe_filter_and_unsubscribe() -> None:
    d = EventDispatcher()
    assert not d.active
    got: list[object] = []
    only_created: list[object] = []
    stop = d.subscribe(got.append)
    d.subscribe(only_created.append, TaskCreated)
    d.emit(TaskCreated("t", input="x"))
    d.emit(StepCompleted("t", step_id="s", is_last=True, next_step_ids=(), latency_s=0.1))
    assert len(got) == 2 and len(only_created) == 1
    stop()
    d.emit(TaskCreated("t", input="y"))
    assert len(got) == 2 and len(only_created) == 2
    with pytest.raises(TypeError):
        d.subscribe("not callable")  # type: ignore[arg-type]


def test_step_context_collects_tokens_and_usage() -> None:
    d = EventDispatcher()
    tokens: list[str] = []
    d.subscribe(lambda e: tokens.append(e.token), TokenStreamed)  # type: ignore[attr-defined]
    emit_token("ignored")  # outside a step: nothing happens
    record_llm_call(TokenUsage(prompt_tokens=1), 0.1)
    ctx = StepContext("t", "s", d)
    token = _set_current(ctx)
    try:
        assert current_step() is ctx
        emit_token("a")
        record_llm_call(TokenUsage(prompt_tokens=3, completion_tokens=2), 0.5)
        record_llm_call(TokenUsage(prompt_tokens=1, completion_tokens=1), 0.25)
    finally:
        _reset_current(token)
    assert tokens == ["a"]
    assert ctx.usage == TokenUsage(prompt_tokens=4, completion_tokens=3) and ctx.usage.total_tokens == 7
    assert ctx.llm_calls == 2 and ctx.llm_latency_s == pytest.approx(0.75)
    assert current_step() is None


async def _double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def test_run_sync_without_and_inside_a_running_loop() -> None:
    assert _sync.run_sync(_double(2)) == 4
    assert _sync.run_sync(_double(3)) == 6  # the thread's loop is reused

    async def cell() -> tuple[int, str]:
        value = _sync.run_sync(_double(5))  # would deadlock or raise without the portal
        return value, threading.current_thread().name

    assert asyncio.run(cell())[0] == 10


def test_run_sync_propagates_exceptions_with_their_type() -> None:
    async def fail() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        _sync.run_sync(fail())

    async def cell() -> None:
        _sync.run_sync(fail())

    with pytest.raises(KeyError):
        asyncio.run(cell())


def test_iterate_sync_and_next_on_other_loops() -> None:
    async def agen():  # type: ignore[no-untyped-def]
        for i in range(3):
            await asyncio.sleep(0)
            yield i

    assert list(_sync.iterate_sync(agen())) == [0, 1, 2]

    async def cell() -> list[int]:
        return list(_sync.iterate_sync(agen()))

    assert asyncio.run(cell()) == [0, 1, 2]

    loop = _sync.sync_loop()
    gen = agen()
    first = _sync.next_on(loop, gen)

    async def rest() -> list[int]:
        return [await _sync.anext_on(loop, gen), await _sync.anext_on(loop, gen)]

    assert [first, *asyncio.run(rest())] == [0, 1, 2]


def test_a_listener_can_ignore_event_types_so_none_is_built_for_it() -> None:
    """``subscribe(fn, ignore=...)``: fn never hears those types, and ``wants`` says nobody
    would when no other listener hears them (the engine then builds none)."""
    from nbagent.events import ModelCalled, StepStarted

    d = EventDispatcher()
    got: list[object] = []
    stop = d.subscribe(got.append, ignore=(StepStarted, TokenStreamed))
    assert d.wants(StepCompleted) and d.wants(TaskCreated)
    assert not d.wants(StepStarted) and not d.wants(TokenStreamed) and not d.wants(ModelCalled)
    d.emit(StepStarted("t", step_id="s", input=None))
    d.emit(TokenStreamed("t", step_id="s", token="x"))
    d.emit(TaskCreated("t", input="x"))
    assert [type(e) for e in got] == [TaskCreated]
    starts: list[object] = []
    d.subscribe(starts.append, StepStarted)  # another listener that names it: built again
    assert d.wants(StepStarted)
    d.emit(StepStarted("t", step_id="s", input=None))
    assert len(starts) == 1 and len(got) == 1
    d.subscribe(got.append, TaskCreated, ignore=TaskCreated)  # (types and ignore together: ignore wins)
    stop()
    assert d.wants(StepStarted) and not d.wants(TaskCreated)
    assert not d.wants(StepCompleted)


def test_a_model_calls_event_holds_the_list_the_call_sent_not_another_copy() -> None:
    """``ModelCalled.messages`` is the call's own list (``LLM.achat`` copies what it is given
    once, and sends that): a traced call costs no second copy of a long history."""
    from typing import Any

    from nbagent import AgentChatResponse, AgentRunner, ChatMessage, CustomSimpleAgentWorker, ScriptedLLM
    from nbagent.events import ModelCalled

    llm = ScriptedLLM(["hi"], keep_requests=True)

    class Asks(CustomSimpleAgentWorker):
        def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
            return {}

        def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> Any:
            history = [ChatMessage(role="user", content=f"m{i}") for i in range(5)]
            reply = self.llm.chat(history)
            history.append(reply.message)  # the caller's list changes: the event's does not
            return AgentChatResponse(response=reply.message.text), True

        def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
            pass

    runner = AgentRunner(Asks(tools=[], llm=llm))
    calls: list[Any] = []
    runner.events.subscribe(calls.append, ModelCalled)
    runner.run_step(runner.create_task("go"))
    [event] = calls
    assert [m.text for m in event.messages] == ["m0", "m1", "m2", "m3", "m4"]
    assert event.messages is llm.requests[0].messages  # the very list the model got


def test_the_lazy_event_names_are_exactly_the_event_classes() -> None:
    """``nbagent.events`` names the event classes without importing them (``_EVENT_TYPES``, so
    ``import nbagent`` stays light); that list and ``event_types.__all__`` must not drift."""
    import dataclasses

    from nbagent import event_types, events

    assert list(events._EVENT_TYPES) == list(event_types.__all__)
    defined = {n for n, v in vars(event_types).items() if isinstance(v, type) and issubclass(v, event_types.Event)}
    assert defined == set(event_types.__all__)
    assert all(dataclasses.is_dataclass(getattr(events, n)) for n in events._EVENT_TYPES)
