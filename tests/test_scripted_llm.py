"""ScriptedLLM and FunctionLLM: offline models with tool calls, streaming and usage."""

from __future__ import annotations

import asyncio

import pytest

from nbagent import ChatMessage, FunctionLLM, FunctionTool, MessageRole, ScriptedLLM, ScriptExhaustedError, block_network, tool_call
from nbagent.llms import network_blocked

Q = [ChatMessage(role=MessageRole.USER, content="question")]


def test_replies_in_order_with_tool_calls_and_requests_recorded() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    llm = ScriptedLLM(["plain", tool_call("add", a=1, b=2), {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}, {"name": "add", "arguments": {"a": 2, "b": 2}}]}])
    assert str(llm.chat(Q)) == "plain"
    r = llm.chat(Q, tools=[FunctionTool.from_defaults(add)], tool_choice="required")
    assert [(c.tool_name, c.tool_kwargs, c.tool_id) for c in r.tool_calls] == [("add", {"a": 1, "b": 2}, "call_1")]
    assert [c.tool_id for c in llm.chat(Q).tool_calls] == ["call_2", "call_3"]
    assert llm.requests[1].tool_choice == "required" and [t.name for t in llm.requests[1].tools] == ["add"]
    with pytest.raises(ScriptExhaustedError, match="all 3 scripted replies were used"):
        llm.chat(Q)


def test_usage_is_counted_and_deterministic() -> None:
    a = ScriptedLLM(["the answer is 42"]).chat(Q)
    b = ScriptedLLM(["the answer is 42"]).chat(Q)
    assert a.usage == b.usage and a.usage is not None
    assert a.usage.completion_tokens == 5 and a.usage.prompt_tokens > 0  # the answ er is 42
    assert a.latency_s >= 0


def test_streaming_splits_tokens_and_ends_with_usage() -> None:
    llm = ScriptedLLM(["one two three"])
    chunks = list(llm.stream_chat(Q))
    assert [c.delta for c in chunks] == ["one ", "two ", "three"]
    assert chunks[-1].message.content == "one two three" and chunks[-1].usage is not None

    async def main() -> list[str]:
        llm.reset()
        return [c.delta async for c in llm.astream_chat(Q) if c.delta]

    assert asyncio.run(main()) == ["one ", "two ", "three"]


def test_exceptions_in_script_and_repeat_last_and_bad_reply() -> None:
    llm = ScriptedLLM([RuntimeError("rate limited"), "ok"], repeat_last=True)
    with pytest.raises(RuntimeError, match="rate limited"):
        llm.chat(Q)
    assert str(llm.chat(Q)) == str(llm.chat(Q)) == "ok"
    with pytest.raises(TypeError, match="scripted reply must be"):
        ScriptedLLM([3.14]).chat(Q)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list of replies"):
        ScriptedLLM("oops")  # type: ignore[arg-type]


def test_function_llm() -> None:
    llm = FunctionLLM(lambda messages, tools: f"you said {messages[-1].text}")
    assert str(llm.chat(Q)) == "you said question"
    assert repr(llm) == "FunctionLLM(model='function')"


def test_network_switch() -> None:
    assert network_blocked()  # on in the test suite
    with block_network(False):
        assert not network_blocked()
    assert network_blocked()


def test_function_llm_played_by_an_async_def_is_awaited_everywhere() -> None:
    async def model(messages: list[ChatMessage], tools: list) -> object:
        await asyncio.sleep(0)  # real async work, e.g. asking another model
        if tools:
            return tool_call(tools[0].name, a=2, b=3)
        return f"echo: {messages[-1].text}"

    def add(a: int, b: int) -> int:
        return a + b

    llm = FunctionLLM(model)
    assert str(llm.chat(Q)) == "echo: question"  # sync, from plain code
    assert str(asyncio.run(llm.achat(Q))) == "echo: question"
    calls = llm.chat(Q, tools=[FunctionTool.from_defaults(add)]).tool_calls
    assert [(c.tool_name, c.tool_kwargs) for c in calls] == [("add", {"a": 2, "b": 3})]
    assert "".join(r.delta or "" for r in llm.stream_chat(Q)) == "echo: question"

    async def broken(messages: list[ChatMessage], tools: list) -> object:
        raise ConnectionError("the other model is down")

    with pytest.raises(ConnectionError, match="the other model is down"):
        FunctionLLM(broken).chat(Q)

    async def wrong(messages: list[ChatMessage], tools: list) -> object:
        return 42

    with pytest.raises(TypeError, match="what the FunctionLLM's function returns must be a str.*got int: 42"):
        FunctionLLM(wrong).chat(Q)


def test_a_script_can_hand_over_to_a_function_when_it_ends() -> None:
    seen: list[str] = []

    async def after(messages: list[ChatMessage], tools: list) -> str:
        seen.append(messages[-1].text)
        return f"free play {len(seen)}"

    llm = ScriptedLLM(["one", ConnectionError("down once")], then=after)
    assert str(llm.chat(Q)) == "one"
    with pytest.raises(ConnectionError):
        llm.chat(Q)
    assert [str(llm.chat(Q)) for _ in range(3)] == ["free play 1", "free play 2", "free play 3"]
    assert seen == ["question"] * 3 and llm.position == 5
    llm.reset()
    assert str(llm.chat(Q)) == "one"  # reset starts the script again
    with pytest.raises(TypeError, match="then= must be a function"):
        ScriptedLLM(["x"], then="not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        ScriptedLLM(["x"], then=after, repeat_last=True)


def test_a_react_script_plays_a_model_without_a_tools_api() -> None:
    """Issue 29: the card of a ReAct script said ``is_function_calling_model True``."""
    from nbagent import AgentRunner
    from nbagent.viz.html import llm_html
    from nbagent.workers.react import ReActAgentWorker

    react = ScriptedLLM(['Thought: I need to add.\nAction: add\nAction Input: {"a": 1}', "Answer: 2"])
    assert react.is_function_calling_model is False
    assert "is_function_calling_model</th><td><code>False" in llm_html(react)
    assert isinstance(AgentRunner.from_llm([], llm=react).agent_worker, ReActAgentWorker)
    # a script that calls tools, or plain text, plays a model with a tools API (as before)
    assert ScriptedLLM([tool_call("add", a=1), "Answer: 2"]).is_function_calling_model is True
    assert ScriptedLLM(["Hello there."]).is_function_calling_model is True
    # said explicitly, or set later, it is what it is told
    assert ScriptedLLM(["Answer: 2"], function_calling=True).is_function_calling_model is True
    assert ScriptedLLM(["hi"], function_calling=False).is_function_calling_model is False
    react.is_function_calling_model = True
    assert react.is_function_calling_model is True
