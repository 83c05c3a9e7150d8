"""``ctx.store``, the context's state as LlamaIndex 0.12's workflow docs use it (issue 23, item
1): ``await ctx.store.get("state")`` / ``ctx.store.set``, ``async with ctx.store.edit_state()``,
dotted paths, ``get_state`` / ``set_state`` / ``clear``, and the same keys as ``ctx.get`` /
``ctx.set``. Each scenario runs on llama-index-core 0.12.52 and on nbagent.

No ``from __future__ import annotations``: a tool's ``ctx: Context`` must be the class itself.
"""

import asyncio
from typing import Any

import pytest

from tests.oracle.docs_api import DocsApi, docs_both
from tests.oracle.ref import tool_call

# 0.12.52 deprecates ctx.get / ctx.set (for ctx.store) and says so on every call: the
# reference's own warning (nbagent keeps both quiet)
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Context\.get\(\) is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(r"ignore:Context\.set\(key, value\) is deprecated:DeprecationWarning"),
]


def _set_name_with_store(api: DocsApi) -> Any:
    Context = api.Context

    async def set_name(ctx: Context, name: str) -> str:  # type: ignore[valid-type]
        state = await ctx.store.get("state")
        state["name"] = name
        await ctx.store.set("state", state)
        return f"Name set to {name}"

    return set_name


def test_item1_a_tool_keeps_state_with_ctx_store() -> None:
    """The 0.12 docs' form: ``await ctx.store.get("state")`` / ``ctx.store.set``."""
    seen = []
    for api in docs_both():
        llm = api.llm([tool_call("set_name", name="Logan"), "Your name has been set to Logan."])
        workflow = api.AgentWorkflow(
            agents=[api.FunctionAgent(tools=[_set_name_with_store(api)], llm=llm, system_prompt="You can set a name.")],
            initial_state={"name": "unset"},
        )

        async def go(workflow: Any = workflow, api: DocsApi = api) -> tuple[str, Any, list[Any], Any]:
            ctx = api.Context(workflow)
            handler = workflow.run(user_msg="My name is Logan", ctx=ctx)
            outputs = [(ev.tool_output.content, ev.tool_output.is_error) async for ev in handler.stream_events() if isinstance(ev, api.ToolCallResult)]
            response = await handler
            state = await ctx.store.get("state")
            return str(response), state["name"], outputs, (await ctx.get("state"))["name"]

        seen.append(asyncio.run(go()))
    assert seen[0] == ("Your name has been set to Logan.", "Logan", [("Name set to Logan", False)], "Logan")
    assert seen[1] == seen[0]


def test_item1_edit_state_in_a_tool() -> None:
    """``async with ctx.store.edit_state() as ctx_state``: the whole store, whose ``"state"``
    is the workflow's state; the edit is kept when the block ends."""
    seen = []
    for api in docs_both():
        Context = api.Context

        async def count(ctx: Context) -> str:  # type: ignore[valid-type]
            async with ctx.store.edit_state() as ctx_state:
                ctx_state["state"]["count"] += 1
                return f"count is {ctx_state['state']['count']}"

        llm = api.llm([tool_call("count"), tool_call("count"), "Counted twice."])
        workflow = api.AgentWorkflow(agents=[api.FunctionAgent(tools=[count], llm=llm)], initial_state={"count": 0})

        async def go(workflow: Any = workflow, api: DocsApi = api) -> tuple[str, Any, list[Any]]:
            ctx = api.Context(workflow)
            handler = workflow.run(user_msg="count twice", ctx=ctx)
            outputs = [ev.tool_output.content async for ev in handler.stream_events() if isinstance(ev, api.ToolCallResult)]
            response = await handler
            return str(response), (await ctx.store.get("state"))["count"], outputs

        seen.append(asyncio.run(go()))
    assert seen[0] == ("Counted twice.", 2, ["count is 1", "count is 2"])
    assert seen[1] == seen[0]


def _store_workflow(api: DocsApi) -> Any:
    """A Workflow subclass whose steps keep their state in ``ctx.store`` (dotted paths, an
    edit block, the whole state), as the custom-workflow docs write them."""
    Context, StartEvent, StopEvent, Event, step = api.Context, api.StartEvent, api.StopEvent, api.Event, api.step

    class Counted(Event):
        n: int

    class Steps(api.Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> Counted:  # type: ignore[valid-type]
            await ctx.store.set("user.profile.name", ev.name)
            await ctx.store.set("runs", [0, 0])
            await ctx.set("plain", "set with ctx.set")
            return Counted(n=2)

        @step
        async def finish(self, ctx: Context, ev: Counted) -> StopEvent:  # type: ignore[valid-type]
            async with ctx.store.edit_state() as state:
                state["runs"][1] = ev.n
            await ctx.store.set("runs.0", 7)
            name = await ctx.store.get("user.profile.name")
            missing = await ctx.store.get("user.profile.age", default="no age")
            try:
                await ctx.store.get("nothing.here")
                error = ""
            except ValueError as err:
                error = str(err)
            whole = await ctx.store.get_state()
            return StopEvent(
                result={
                    "name": name,
                    "missing": missing,
                    "error": error.split(";")[0],
                    "runs": await ctx.store.get("runs"),
                    "plain": await ctx.store.get("plain"),
                    "keys": sorted(whole.keys()) if hasattr(whole, "keys") else sorted(whole.model_dump()),
                }
            )

    return Steps(timeout=10)


def test_item1_a_custom_workflow_keeps_its_state_in_the_store() -> None:
    seen = []
    for api in docs_both():
        workflow = _store_workflow(api)

        async def go(workflow: Any = workflow) -> tuple[Any, Any, Any]:
            handler = workflow.run(name="Ada")
            result = await handler
            ctx = handler.ctx
            after = await ctx.store.get("user")
            await ctx.store.clear()
            return result, after, await ctx.store.get("user", default=None)

        seen.append(asyncio.run(go()))
    assert seen[0] == (
        {
            "name": "Ada",
            "missing": "no age",
            "error": "Path 'nothing.here' not found in state",
            "runs": [7, 2],
            "plain": "set with ctx.set",
            "keys": ["plain", "runs", "user"],
        },
        {"profile": {"name": "Ada"}},
        None,
    )
    assert seen[1] == seen[0]
