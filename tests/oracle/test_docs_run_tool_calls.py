"""A workflow run's result lists the run's tool calls (issue 23, item 4): the docs print
``response.tool_calls`` after ``await agent.run(...)``; on LlamaIndex 0.12.52 that is every
``ToolCallResult`` of the run, in order (a run that ends on a return-direct tool lists the
calls as ``ToolSelection``s instead). Each scenario runs on llama-index-core 0.12.52 and on
nbagent; models are scripted.

No ``from __future__ import annotations`` (a tool's annotations must be real types).
"""

import asyncio
from typing import Any

from tests.oracle.docs_api import docs_both
from tests.oracle.ref import tool_call
from tests.oracle.test_docs_agent_workflow_basic import WEATHER_RUN, _agent
from tests.oracle.test_docs_react_return_direct import REACT_SCRIPT, add, multiply


def _calls(response: Any) -> list[tuple[Any, ...]]:
    out = []
    for c in response.tool_calls:
        output = getattr(c, "tool_output", None)
        out.append(
            (type(c).__name__, c.tool_name, c.tool_kwargs)
            + ((output.content, output.raw_output, output.is_error, c.return_direct) if output is not None else ())
        )
    return out


def test_item4_the_result_lists_the_runs_tool_calls() -> None:
    """``print(response.tool_calls)``: the run's ToolCallResults, in order."""
    seen = []
    for api in docs_both():
        agent, _ = _agent(api, WEATHER_RUN)

        async def go(agent: Any = agent) -> list[Any]:
            return _calls(await agent.run(user_msg="What is the weather in San Francisco?"))

        seen.append(asyncio.run(go()))
    text = "Results for weather in San Francisco: sunny, 13 C, light wind."
    assert seen[0] == [("ToolCallResult", "search_web", {"query": "weather in San Francisco"}, text, text, False, False)]
    assert seen[1] == seen[0]


def test_item4_print_response_tool_calls_after_a_react_run() -> None:
    seen = []
    for api in docs_both():
        agent = api.ReActAgent(tools=[multiply, add], llm=api.llm(REACT_SCRIPT, function_calling=False))

        async def go(agent: Any = agent) -> list[Any]:
            return [c[1:6] for c in _calls(await agent.run("What is 20+(2*4)?"))]

        seen.append(asyncio.run(go()))
    assert seen[0] == [("multiply", {"a": 2, "b": 4}, "8", 8, False), ("add", {"a": 20, "b": 8}, "28", 28, False)]
    assert seen[1] == seen[0]


def test_item4_two_calls_in_one_reply_then_a_second_run_on_the_same_context() -> None:
    """Both calls of one reply, in call order; a second run on the same context lists only its
    own calls."""
    script = [
        {"tool_calls": [{"name": "multiply", "arguments": {"a": 2, "b": 4}}, {"name": "add", "arguments": {"a": 1, "b": 1}}]},
        "8 and 2.",
        tool_call("add", a=3, b=4),
        "7.",
    ]
    seen = []
    for api in docs_both():
        agent = api.FunctionAgent(tools=[multiply, add], llm=api.llm(script))

        async def go(agent: Any = agent, api: Any = api) -> list[Any]:
            ctx = api.Context(agent)
            first = await agent.run("2*4 and 1+1?", ctx=ctx)
            second = await agent.run("3+4?", ctx=ctx)
            return [[c[:4] for c in _calls(first)], [c[:4] for c in _calls(second)]]

        seen.append(asyncio.run(go()))
    assert seen[0] == [
        [("ToolCallResult", "multiply", {"a": 2, "b": 4}, "8"), ("ToolCallResult", "add", {"a": 1, "b": 1}, "2")],
        [("ToolCallResult", "add", {"a": 3, "b": 4}, "7")],
    ]
    assert seen[1] == seen[0]


def test_item4_a_run_ended_by_a_return_direct_tool_lists_its_calls_as_selections() -> None:
    def lookup(code: str) -> str:
        """Look up a booking by its code."""
        return f"Booking {code}: confirmed."

    seen = []
    for api in docs_both():
        tools = [api.FunctionTool.from_defaults(fn=multiply), api.FunctionTool.from_defaults(fn=lookup, return_direct=True)]
        llm = api.llm([tool_call("multiply", a=2, b=3), tool_call("lookup", code="B7")])
        agent = api.FunctionAgent(tools=tools, llm=llm)

        async def go(agent: Any = agent) -> tuple[str, list[Any]]:
            response = await agent.run("Find booking B7")
            return str(response), _calls(response)

        seen.append(asyncio.run(go()))
    assert seen[0] == (
        "Booking B7: confirmed.",
        [("ToolSelection", "multiply", {"a": 2, "b": 3}), ("ToolSelection", "lookup", {"code": "B7"})],
    )
    assert seen[1] == seen[0]
