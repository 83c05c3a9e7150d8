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
