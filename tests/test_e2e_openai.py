"""End to end: the ReAct and function-calling agents through the real ``openai`` client, over
HTTP, against a scripted OpenAI-compatible server on 127.0.0.1.

Tool calls, server-sent-event streaming, a 500 then success, and a malformed reply.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbagent import AgentRunner, FunctionTool, OpenAIAgent, ReActAgent
from nbagent.llms.openai import OpenAILLM

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # run from inside tests/
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as s:
        yield s


def llm_for(server: FakeOpenAIServer, max_retries: int = 2) -> OpenAILLM:
    return OpenAILLM(
        model="fake-model", base_url=server.base_url, api_key="sk-test-SECRET", max_retries=max_retries, timeout=10
    )


def test_function_calling_agent_tool_call_then_answer(server: FakeOpenAIServer) -> None:
    server.add({"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 40}}]}, "The sum is 42.")
    agent = OpenAIAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm_for(server))
    task = agent.create_task("What is 2 + 40?")
    first = agent.run_step(task)
    assert not first.is_last and first.tool_outputs[0].content == "42"
    assert first.usage is not None and first.usage.total_tokens > 0  # recorded from the HTTP reply
    assert agent.run_step(task).is_last
    assert str(agent.finalize_response(task)) == "The sum is 42."
    second = server.requests[1]
    assert second["tools"][0]["function"]["name"] == "add"
    tool_msg = [m for m in second["messages"] if m["role"] == "tool"][0]
    assistant = [m for m in second["messages"] if m.get("tool_calls")][0]
    assert tool_msg["content"] == "42" and tool_msg["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert [m.content for m in agent.chat_history][0] == "What is 2 + 40?"


def test_function_calling_agent_streams_over_sse(server: FakeOpenAIServer) -> None:
    server.add({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, "One plus one is two, as computed.")
    agent = OpenAIAgent.from_tools([add], llm=llm_for(server))
    stream = agent.stream_chat("1+1?")
    tokens = list(stream.response_gen)
    assert len(tokens) > 3 and "".join(tokens) == "One plus one is two, as computed."
    assert all(r.get("stream") is True for r in server.requests)
    assert agent.chat_history[-1].content == "One plus one is two, as computed."


def test_react_agent_over_http_with_a_500_then_success(server: FakeOpenAIServer) -> None:
    server.add(
        {"status": 500},
        'Thought: add them.\nAction: add\nAction Input: {"a": 20, "b": 22}',
        "Thought: I can answer without using any more tools.\nAnswer: 42",
    )
    agent = ReActAgent.from_tools([add], llm=llm_for(server))
    assert str(agent.chat("What is 20 + 22?")) == "42"
    assert len(server.requests) == 3  # the 500 was retried by the client
    observation = server.requests[2]["messages"]
    assert any("42" in str(m.get("content")) for m in observation if m["role"] != "system")
    assert "tools" not in server.requests[1]  # ReAct describes tools in the prompt instead


def test_react_agent_streams_the_final_answer(server: FakeOpenAIServer) -> None:
    server.add("Thought: I can answer without using any more tools.\nAnswer: streamed over the wire for you")
    agent = ReActAgent.from_tools([add], llm=llm_for(server))
    stream = agent.stream_chat("hi")
    tokens = list(stream.response_gen)
    assert len(tokens) > 2
    assert "".join(tokens).strip() == "streamed over the wire for you"


def test_malformed_reply_fails_the_step_cleanly_and_retry_succeeds(server: FakeOpenAIServer) -> None:
    server.add({"malformed": True}, "Thought: I can answer without using any more tools.\nAnswer: recovered")
    agent = ReActAgent.from_tools([add], llm=llm_for(server, max_retries=0))
    task = agent.create_task("hi")
    with pytest.raises(ValueError, match="choices"):
        agent.run_step(task)
    state = agent.state_of(task)
    assert len(agent.get_upcoming_steps(task)) == 1 and state.failures[-1].error_type == "MalformedReplyError"
    assert agent.run_step(task).is_last
    assert str(agent.finalize_response(task)) == "recovered"


def test_function_calling_agent_as_runner_class(server: FakeOpenAIServer) -> None:
    server.add("plain answer")
    agent = OpenAIAgent.from_tools([add], llm=llm_for(server))
    assert isinstance(agent, AgentRunner)
    assert str(agent.chat("x")) == "plain answer"
    assert "SECRET" not in repr(agent.agent_worker.llm)
