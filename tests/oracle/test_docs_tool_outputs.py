"""Tool results reach the model as the reference renders them (issue 23, item 3): a tool that
returns a dict, a list, a pydantic model or an agent's output gives the model ``str(value)`` on
LlamaIndex 0.12.52 (a dict's repr, the agent's answer text), and the value itself stays in
``ToolOutput.raw_output``. Each scenario runs on llama-index-core 0.12.52 and on nbagent.

No ``from __future__ import annotations``: a tool's annotations must be real types.
"""

import asyncio
import contextlib
import io
from typing import Any

import pytest
from pydantic import BaseModel

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call
from tests.oracle.test_docs_agents_as_tools import build, run_orchestrator

# 0.12.52 deprecates ctx.get / ctx.set (for ctx.store): the reference's own warning
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Context\.get\(\) is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(r"ignore:Context\.set\(key, value\) is deprecated:DeprecationWarning"),
]


def extract_web_data(prompt: str) -> dict:
    """Extract data from the current page (the browser tools answer with a dict)."""
    return {"title": "Exercise and stress", "authors": ["A. Author", "B. Author"], "year": 2023}


def test_item3_a_dict_from_a_tool_reaches_the_model_as_str_of_it() -> None:
    """The research assistant's extraction tool answers with a dict: the model reads
    ``str(value)`` on the reference, and the event keeps the dict as ``raw_output``."""
    script = [tool_call("extract_web_data", prompt="title"), "Exercise and stress (2023)."]
    seen = []
    for api in docs_both():
        llm = api.llm(script)
        workflow = api.AgentWorkflow.from_tools_or_functions([extract_web_data], llm=llm, system_prompt="Extract data.")

        async def go(workflow: Any = workflow, api: DocsApi = api) -> tuple[str, list[Any]]:
            handler = workflow.run(user_msg="Extract the metadata.")
            outputs = [
                (ev.tool_output.content, ev.tool_output.raw_output, str(ev.tool_output))
                async for ev in handler.stream_events()
                if isinstance(ev, api.ToolCallResult)
            ]
            return str(await handler), outputs

        seen.append((asyncio.run(go()), roles_contents(api.requests(llm)[1])[-1]))
    value = extract_web_data("title")
    assert seen[0] == (("Exercise and stress (2023).", [(str(value), value, str(value))]), ("tool", str(value)))
    assert seen[1] == seen[0]


def test_item3_the_review_tool_returns_an_agent_output_the_model_reads_as_text() -> None:
    script = [
        tool_call("call_research_agent", prompt="the history of the internet"),
        tool_call("call_write_agent"),
        tool_call("call_review_agent"),
        "The review is positive: the report is ready.",
    ]
    seen = []
    for api in docs_both():
        orchestrator, llms = build(api, script)

        async def go(orchestrator: Any = orchestrator, api: DocsApi = api) -> tuple[str, str]:
            ctx = api.Context(orchestrator)
            result = await run_orchestrator(api, orchestrator, ctx, "Write me a report on the history of the internet.")
            state = await ctx.get("state")
            return str(result), str(state["review"])

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            answer, review = asyncio.run(go())
        seen.append((answer, review, out.getvalue(), roles_contents(api.requests(llms["orchestrator"])[3])[-1]))
    ref, nb = seen
    assert ref[:2] == ("The review is positive: the report is ready.", "Approved: the report is accurate.")
    assert "  Output: Approved: the report is accurate.\n" in ref[2]
    assert ref[3] == ("tool", "Approved: the report is accurate.")
    assert nb == ref


class Booking(BaseModel):
    """A booking."""

    code: str
    seats: int


def find_booking(code: str) -> Booking:
    """Find a booking by its code."""
    return Booking(code=code, seats=2)


def list_rooms() -> list:
    """List the free rooms."""
    return ["Ada", "Grace"]


def test_item3_a_pydantic_model_and_a_list_in_a_step_wise_agent() -> None:
    """The step-wise function-calling agent: the model reads ``str(value)`` of a pydantic model
    (``code='B7' seats=2``) and of a list; the sources keep the values."""
    script = [{"tool_calls": [{"name": "find_booking", "arguments": {"code": "B7"}}, {"name": "list_rooms", "arguments": {}}]}, "Booked."]
    seen = []
    for api in docs_both():
        llm = api.llm(script)
        agent = api.FunctionCallingAgent.from_tools(
            [api.FunctionTool.from_defaults(fn=find_booking), api.FunctionTool.from_defaults(fn=list_rooms)], llm=llm
        )
        response = agent.chat("Book B7")
        sources = [(s.tool_name, s.content, s.raw_output) for s in response.sources]
        seen.append((str(response), sources, [c for r, c in roles_contents(api.requests(llm)[1]) if r == "tool"]))
    assert seen[0] == (
        "Booked.",
        [("find_booking", "code='B7' seats=2", Booking(code="B7", seats=2)), ("list_rooms", "['Ada', 'Grace']", ["Ada", "Grace"])],
        ["code='B7' seats=2", "['Ada', 'Grace']"],
    )
    assert seen[1] == seen[0]
