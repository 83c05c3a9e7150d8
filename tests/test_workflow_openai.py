"""AgentWorkflow through the real ``openai`` client, over HTTP, against a scripted
OpenAI-compatible server on 127.0.0.1: streamed handoffs and tool calls, ReAct over text,
a person answering mid-run, a retried 500, and a server error raised with its own type."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from nbagent.llms.openai import OpenAILLM
from nbagent.workflow import (
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    Context,
    FunctionAgent,
    InputRequiredEvent,
    ReActAgent,
    ToolCallResult,
    ask_human,
)

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # run from inside tests/
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]


def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


async def approve(ctx: Context, action: str) -> str:
    """Ask the person to approve an action."""
    return "the person said " + await ask_human(ctx, f"Approve {action}?")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as s:
        yield s


def llm_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAILLM:
    return OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", timeout=10, **kwargs)


def run(wf: AgentWorkflow, llms: list[OpenAILLM], **kwargs: Any) -> tuple[list[Any], Any]:
    async def main() -> tuple[list[Any], Any]:
        try:
            handler = wf.run(**kwargs)
            events = []
            async for ev in handler.stream_events():
                events.append(ev)
                if isinstance(ev, InputRequiredEvent):
                    handler.respond("yes")
            return events, await handler
        finally:
            for llm in llms:
                await llm.aclose()

    return asyncio.run(main())


def test_two_function_agents_hand_off_and_call_a_tool_over_http(server: FakeOpenAIServer) -> None:
    server.add(
        {"tool_calls": [{"name": "handoff", "arguments": {"to_agent": "weather", "reason": "weather question"}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"city": "Paris"}, "id": "call_w1"}]},
        "It is sunny in Paris today.",
    )
    a_llm, b_llm = llm_for(server), llm_for(server)
    triage = FunctionAgent(name="triage", description="Routes requests", llm=a_llm, can_handoff_to=["weather"],
                           system_prompt="Route the request.")
    weather = FunctionAgent(name="weather", description="Knows the weather", llm=b_llm, tools=[lookup])
    wf = AgentWorkflow([triage, weather], root_agent="triage")
    events, result = run(wf, [a_llm, b_llm], user_msg="Weather in Paris?")

    assert isinstance(result, AgentOutput)
    assert str(result) == "It is sunny in Paris today." and result.current_agent_name == "weather"
    # .raw is the server's own reply (the last streamed chunk, dumped), as on the reference
    assert isinstance(result.raw, dict) and result.raw["object"] == "chat.completion.chunk"
    chunks = [e.raw for e in events if isinstance(e, AgentStream) and e.current_agent_name == "weather"]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["id"] == result.raw["id"] and len({c["id"] for c in chunks}) == 2  # two model calls
    streamed = "".join(e.delta for e in events if isinstance(e, AgentStream) and e.current_agent_name == "weather")
    assert "It is sunny in Paris today." in streamed  # text arrived in several SSE chunks
    assert sum(1 for e in events if isinstance(e, AgentStream)) > 3
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert [r.tool_name for r in results] == ["handoff", "lookup"] and results[1].tool_output.content == "sunny in Paris"

    first, second, third = server.requests
    assert all(r["stream"] is True for r in server.requests)
    assert first["messages"][0] == {"role": "system", "content": "Route the request."}
    assert [t["function"]["name"] for t in first["tools"]] == ["handoff"]
    handoff_schema = first["tools"][0]["function"]
    assert set(handoff_schema["parameters"]["properties"]) == {"to_agent", "reason"}
    assert "- weather: Knows the weather" in handoff_schema["description"]
    assert sorted(t["function"]["name"] for t in second["tools"]) == ["handoff", "lookup"]
    roles = [m["role"] for m in third["messages"]]
    # no assistant message repeats the handoff's tool reply (the reference adds one only for
    # other return_direct tools; tests/oracle/test_oracle_workflow.py compares the two)
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]
    call = third["messages"][3]["tool_calls"][0]
    assert call["id"] == "call_w1" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    reply = third["messages"][4]
    assert (reply["tool_call_id"], reply["content"]) == ("call_w1", "sunny in Paris")


def test_react_agent_over_http_with_a_person_in_the_loop(server: FakeOpenAIServer) -> None:
    server.add(
        'Thought: I must ask first.\nAction: approve\nAction Input: {"action": "send the report"}',
        {"status": 500, "message": "overloaded"},  # retried by the openai client
        "Thought: Approved.\nAnswer: The report is on its way.",
    )
    llm = llm_for(server, max_retries=2)
    wf = AgentWorkflow([ReActAgent(name="clerk", description="Sends reports", llm=llm, tools=[approve])])
    events, result = run(wf, [llm], user_msg="Send the report")
    assert str(result) == "The report is on its way."
    kinds = [type(e).__name__ for e in events if not isinstance(e, AgentStream)]
    assert kinds.index("InputRequiredEvent") < kinds.index("HumanResponseEvent") < kinds.index("ToolCallResult")
    assert len(server.requests) == 3  # one call, then a 500 and its retry
    last = server.requests[-1]
    assert "tools" not in last  # ReAct describes the tools in the prompt instead
    assert "approve" in last["messages"][0]["content"]
    assert last["messages"][-1] == {"role": "user", "content": "Observation: the person said yes"}


def test_a_server_error_surfaces_with_the_client_error_type(server: FakeOpenAIServer) -> None:
    server.add({"status": 400, "message": "bad request: model not found"})
    llm = llm_for(server, max_retries=0)
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm)])
    with pytest.raises(openai.BadRequestError, match="model not found"):
        run(wf, [llm], user_msg="hi")
