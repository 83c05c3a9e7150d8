"""ctx.store on nbagent alone (the reference's behaviour is compared in
tests/oracle/test_docs_context_store.py): edits one at a time, reads inside an edit, the same
keys as ctx.get/ctx.set across a saved context, and the errors."""

import asyncio
from typing import Any

import pytest

from nbagent.workflow import Context, ContextStore, StartEvent, StopEvent, StoreState, Workflow, step


class Noop(Workflow):
    @step
    async def go(self, ev: StartEvent) -> StopEvent:
        return StopEvent(result="ok")


def test_two_edits_never_interleave_and_a_read_inside_one_does_not_wait() -> None:
    ctx = Context(Noop())
    order: list[str] = []

    async def edit(name: str) -> None:
        async with ctx.store.edit_state() as state:
            order.append(f"{name} in")
            state["n"] = state.get("n", 0) + 1
            assert await ctx.store.get("n") == state["n"]  # no deadlock on its own lock
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    async def both() -> None:
        await asyncio.gather(edit("a"), edit("b"))

    asyncio.run(both())
    assert order == ["a in", "a out", "b in", "b out"]
    asyncio.run(both())  # a context outlives its event loop: the lock follows the running one
    assert asyncio.run(ctx.get("n")) == 4


def test_the_store_and_get_set_share_keys_also_in_a_restored_context() -> None:
    workflow = Noop()
    ctx = Context(workflow)

    async def fill() -> None:
        await ctx.store.set("state.name", "Ada")
        await ctx.set("other", 1)

    asyncio.run(fill())
    restored = Context.from_dict(workflow, ctx.to_dict())

    async def read() -> tuple[Any, Any, Any]:
        await restored.store.set("state.age", 36)
        return await restored.get("state"), await restored.store.get("other"), sorted(restored.keys())

    assert asyncio.run(read()) == ({"name": "Ada", "age": 36}, 1, ["other", "state"])


def test_the_whole_state_as_a_dict_or_attributes() -> None:
    ctx = Context(Noop())

    async def go() -> tuple[Any, Any, Any]:
        await ctx.store.set_state({"a": 1})
        async with ctx.store.edit_state() as state:
            state.b = 2
            seen = (state.a, dict(state))
        copy = await ctx.store.get_state()
        copy["c"] = 3  # a copy: the store is unchanged
        return seen, sorted(ctx.keys()), isinstance(await ctx.store.get(""), StoreState)

    assert asyncio.run(go()) == ((1, {"a": 1, "b": 2}), ["a", "b"], True)
    assert isinstance(ctx.store, ContextStore) and ctx.store is ctx.store


def test_errors_name_what_was_wrong() -> None:
    ctx = Context(Noop())

    async def go() -> None:
        await ctx.store.set("a", 1)
        with pytest.raises(ValueError, match=r"Path 'a\.b' not found in state; keys set so far: \['a'\]"):
            await ctx.store.get("a.b")
        with pytest.raises(ValueError, match="Path cannot be empty"):
            await ctx.store.set("", 1)
        with pytest.raises(TypeError, match="a store path is a str"):
            await ctx.store.get(3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="Path length exceeds 1000 segments"):
            await ctx.store.get(".".join(["x"] * 1001))
        with pytest.raises(TypeError, match="set_state takes a mapping of keys to values, got list"):
            await ctx.store.set_state([1])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="context keys are str, got int"):
            await ctx.store.set_state({1: "x"})  # type: ignore[dict-item]
        async with ctx.store.edit_state() as state:
            with pytest.raises(AttributeError, match="the context's state has no key 'zzz'; keys: \\['a'\\]"):
                state.zzz

    asyncio.run(go())
