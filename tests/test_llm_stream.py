"""Both calling conventions (nbagent/llms/stream.py): nbagent's models answer LlamaIndex's way
(``await llm.astream_chat``, the function-calling interface) against a real HTTP server on
127.0.0.1, and nbagent's agents run a model written LlamaIndex's way (an ``astream_chat``
coroutine that returns the generator). The reference's side is compared in
tests/oracle/test_docs_llm_convention.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from nbagent import ChatMessage, ChatResponse, FunctionCallingAgent, FunctionTool, MessageRole, ReActAgent, ScriptedLLM, tool_call
from nbagent.llms.openai import OpenAILLM
from nbagent.llms.stream import ChatStream, open_stream
from nbagent.workflow import FunctionAgent

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # run from tests/
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


WEATHER = FunctionTool.from_defaults(weather)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    monkeypatch.delenv("NBAGENT_BLOCK_NETWORK", raising=False)
    with serve() as s:
        yield s


def test_the_function_calling_interface_against_an_openai_compatible_server(server: FakeOpenAIServer) -> None:
    server.add(
        {"content": None, "tool_calls": [
            {"id": "call_a", "name": "weather", "arguments": {"city": "Oslo"}},
            {"id": "call_b", "name": "weather", "arguments": {"city": "Rome"}},
        ]},
        "Sunny in both.",
    )
    llm = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=10.0)
    try:
        async def go() -> tuple[Any, Any]:
            stream = await llm.astream_chat_with_tools([WEATHER], user_msg="Oslo?", tool_required=True)
            last = None
            async for last in stream:
                pass
            calls = llm.get_tool_calls_from_response(last)  # only the first: no parallel calls asked for
            history = [ChatMessage(role=MessageRole.USER, content="Oslo?"), last.message]
            # a tool reply written LlamaIndex's way: the call's id in additional_kwargs
            history.append(ChatMessage(role=MessageRole.TOOL, content="sunny", additional_kwargs={"tool_call_id": calls[0].tool_id}))
            answer = await llm.achat_with_tools([WEATHER], chat_history=history, allow_parallel_tool_calls=True)
            return calls, answer

        calls, answer = asyncio.run(go())
    finally:
        llm.close()
    assert [(c.tool_id, c.tool_kwargs) for c in calls] == [("call_a", {"city": "Oslo"})]
    assert str(answer) == "Sunny in both."
    first, second = server.requests
    assert first["tool_choice"] == "required" and first["stream"] is True
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}
    assert "tool_choice" not in second


class LlamaStyleLLM(ScriptedLLM):
    """A model whose astream_chat is written LlamaIndex's way: a coroutine returning a generator."""

    async def astream_chat(self, messages: Any, tools: Any = None, tool_choice: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        inner = ChatStream(self._stream_chat(messages, tools, tool_choice, **kwargs))

        async def gen() -> AsyncIterator[ChatResponse]:
            async for chunk in inner:
                yield chunk

        return gen()


def test_nbagents_agents_run_a_model_written_llamaindexs_way() -> None:
    fc = FunctionCallingAgent.from_tools([WEATHER], llm=LlamaStyleLLM([tool_call("weather", city="Oslo"), "Sunny."]))
    assert "".join(fc.stream_chat("Oslo?").response_gen) == "Sunny."
    react = ReActAgent.from_tools(
        [WEATHER],
        llm=LlamaStyleLLM(['Thought: look.\nAction: weather\nAction Input: {"city": "Oslo"}', "Thought: done.\nAnswer: Sunny."]),
    )
    assert "".join(react.stream_chat("Oslo?").response_gen) == "Sunny."
    agent = FunctionAgent(tools=[weather], llm=LlamaStyleLLM([tool_call("weather", city="Oslo"), "Sunny in Oslo."]))

    async def run() -> Any:
        return await agent.run("Oslo?")

    assert str(asyncio.run(run())) == "Sunny in Oslo."
    llm = LlamaStyleLLM(["one two"])
    assert [c.delta for c in llm.stream_chat([ChatMessage(content="hi")])] == ["one ", "two"]


def test_a_stream_is_awaitable_iterable_and_closable() -> None:
    llm = ScriptedLLM(["one two three"])

    async def go() -> tuple[Any, Any]:
        stream = llm.astream_chat([ChatMessage(content="hi")])
        assert (await stream) is stream and (await open_stream(stream)) is stream
        first = await stream.__anext__()
        await stream.aclose()  # stopped early: nothing more comes
        rest = [c async for c in stream]
        return first.delta, rest

    assert asyncio.run(go()) == ("one ", [])
    with pytest.raises(TypeError, match="must return an async iterator of ChatResponse chunks .* got int"):
        asyncio.run(open_stream(3))
