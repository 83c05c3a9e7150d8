"""LlamaIndex's "Multi-Agent Report Generation using Agents as Tools" notebook, ported (issue 23,
item 10): an orchestrator FunctionAgent whose tools run three sub-agents and keep their work in
the orchestrator's state, the run printed from its events. Models are scripted; the web search
is a local function. Each scenario runs on llama-index-core 0.12.52 and on nbagent.

No ``from __future__ import annotations``: a tool's ``ctx: Context`` must be the class itself.
"""

import asyncio
import contextlib
import io
import re
from typing import Any

import pytest

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call

# 0.12.52 deprecates ctx.get / ctx.set (for ctx.store) and says so on every call: the
# reference's own warning, not a finding of these tests (ctx.store is issue 23, item 1)
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Context\.get\(\) is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(r"ignore:Context\.set\(key, value\) is deprecated:DeprecationWarning"),
]


async def search_web(query: str) -> str:
    """Useful for using the web to answer questions."""
    return f"{query}: ARPANET went live in 1969."


RESEARCH_SCRIPT = [tool_call("search_web", query="internet history"), "Notes: ARPANET went live in 1969."]
WRITE_SCRIPT = ["<report># The Internet\nIt began with ARPANET (1969).</report>"]
REVIEW_SCRIPT = ["Approved: the report is accurate."]


def build(api: DocsApi, orchestrator_script: list[Any]) -> tuple[Any, dict[str, Any]]:
    """The notebook's three sub-agents, its three agent-calling tools and the orchestrator."""
    llms = {
        "research": api.llm(RESEARCH_SCRIPT),
        "write": api.llm(WRITE_SCRIPT),
        "review": api.llm(REVIEW_SCRIPT),
        "orchestrator": api.llm(orchestrator_script),
    }
    research_agent = api.FunctionAgent(system_prompt="You are the ResearchAgent.", llm=llms["research"], tools=[search_web])
    write_agent = api.FunctionAgent(system_prompt="You are the WriteAgent. Answer in <report> tags.", llm=llms["write"], tools=[])
    review_agent = api.FunctionAgent(system_prompt="You are the ReviewAgent.", llm=llms["review"], tools=[])
    Context = api.Context

    async def call_research_agent(ctx: Context, prompt: str) -> str:  # type: ignore[valid-type]
        """Useful for recording research notes based on a specific prompt."""
        result = await research_agent.run(user_msg=f"Write some notes about the following: {prompt}")
        state = await ctx.get("state")
        state["research_notes"].append(str(result))
        await ctx.set("state", state)
        return str(result)

    async def call_write_agent(ctx: Context) -> str:  # type: ignore[valid-type]
        """Useful for writing a report based on the research notes or revising the report based on feedback."""
        state = await ctx.get("state")
        notes = state.get("research_notes", None)
        if not notes:
            return "No research notes to write from."
        user_msg = "Write a markdown report from the following notes, as <report>...</report>:\n\n"
        if state.get("review", None):
            user_msg += f"<feedback>{state['review']}</feedback>\n\n"
        user_msg += "<research_notes>" + "\n\n".join(notes) + "</research_notes>\n\n"
        result = await write_agent.run(user_msg=user_msg)
        report = re.search(r"<report>(.*)</report>", str(result), re.DOTALL).group(1)  # type: ignore[union-attr]
        state["report_content"] = str(report)
        await ctx.set("state", state)
        return str(report)

    async def call_review_agent(ctx: Context) -> str:  # type: ignore[valid-type]
        """Useful for reviewing the report and providing feedback."""
        state = await ctx.get("state")
        report = state.get("report_content", None)
        if not report:
            return "No report content to review."
        result = await review_agent.run(user_msg=f"Review the following report: {report}")
        state["review"] = result  # the notebook keeps the AgentOutput itself
        await ctx.set("state", state)
        return result  # ... and returns it as the tool's output

    orchestrator = api.FunctionAgent(
        system_prompt="You orchestrate the tools to research, write, and review a report.",
        llm=llms["orchestrator"],
        tools=[call_research_agent, call_write_agent, call_review_agent],
        initial_state={"research_notes": [], "report_content": None, "review": None},
    )
    return orchestrator, llms


async def run_orchestrator(api: DocsApi, orchestrator: Any, ctx: Any, user_msg: str) -> Any:
    """The notebook's loop: stream the text, say which tools are planned, called, and what they gave."""
    handler = orchestrator.run(user_msg=user_msg, ctx=ctx)
    async for event in handler.stream_events():
        if isinstance(event, api.AgentStream):
            if event.delta:
                print(event.delta, end="", flush=True)
        elif isinstance(event, api.AgentOutput):
            if event.tool_calls:
                print("🛠️  Planning to use tools:", [call.tool_name for call in event.tool_calls])
        elif isinstance(event, api.ToolCallResult):
            print(f"🔧 Tool Result ({event.tool_name}):")
            print(f"  Arguments: {event.tool_kwargs}")
            print(f"  Output: {event.tool_output}")
        elif isinstance(event, api.ToolCall):
            print(f"🔨 Calling Tool: {event.tool_name}")
            print(f"  With arguments: {event.tool_kwargs}")
    return await handler


def test_the_orchestrator_researches_and_writes_through_its_sub_agents() -> None:
    script = [
        tool_call("call_research_agent", prompt="the history of the internet"),
        tool_call("call_write_agent"),
        "The report is ready to be accessed.",
    ]
    seen = []
    for api in docs_both():
        orchestrator, llms = build(api, script)

        async def go(orchestrator: Any = orchestrator, api: DocsApi = api) -> tuple[str, Any]:
            ctx = api.Context(orchestrator)
            result = await run_orchestrator(api, orchestrator, ctx, "Write me a report on the history of the internet.")
            return str(result), await ctx.get("state")

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            answer, state = asyncio.run(go())
        seen.append(
            {
                "printed": out.getvalue(),
                "answer": answer,
                "state": state,
                "writer_read": roles_contents(api.requests(llms["write"])[0]),
                "orchestrator_read": [roles_contents(r)[-1] for r in api.requests(llms["orchestrator"])],
            }
        )
    ref, nb = seen
    assert ref["answer"] == "The report is ready to be accessed."
    assert ref["state"] == {
        "research_notes": ["Notes: ARPANET went live in 1969."],
        "report_content": "# The Internet\nIt began with ARPANET (1969).",
        "review": None,
    }
    assert "  Output: # The Internet\nIt began with ARPANET (1969).\n" in ref["printed"]
    assert nb == ref


def test_a_tool_that_needs_notes_says_so() -> None:
    """The write tool called before any research answers with its own sentence."""
    seen = []
    for api in docs_both():
        orchestrator, llms = build(api, [tool_call("call_write_agent"), "I need research first."])

        async def go(orchestrator: Any = orchestrator, api: DocsApi = api) -> str:
            ctx = api.Context(orchestrator)
            return str(await run_orchestrator(api, orchestrator, ctx, "Write the report."))

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            answer = asyncio.run(go())
        seen.append((answer, out.getvalue(), len(api.requests(llms["write"]))))
    assert seen[0][0] == "I need research first." and "  Output: No research notes to write from.\n" in seen[0][1]
    assert seen[0][2] == 0
    assert seen[1] == seen[0]
