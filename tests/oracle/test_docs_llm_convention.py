"""LlamaIndex's LLM calling convention on nbagent's models (issue 23, item 2): ``await
llm.astream_chat(...)`` gives the stream (nbagent's ``async for`` on it works as before), and
the function-calling interface custom workflows are written against (``astream_chat_with_tools``,
``achat_with_tools``, ``get_tool_calls_from_response``), as the AgentWorkflow reference page's
own agent code uses it. Each scenario runs on llama-index-core 0.12.52 and on nbagent with the
same scripted replies.
"""

import asyncio
from typing import Any

import pytest

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call


def test_item2_an_awaited_astream_chat_streams_the_reply() -> None:
    """The calling convention alone, outside any workflow: ``await llm.astream_chat(messages)``
    gives an async generator of chunks whose deltas add up to the reply."""
    seen = []
    for api in docs_both():
        llm = api.llm(["Hello there, friend."])

        async def go(llm: Any = llm, api: DocsApi = api) -> list[Any]:
            gen = await llm.astream_chat([api.ChatMessage(role="user", content="hi")])
            return [chunk.delta async for chunk in gen]

        seen.append(asyncio.run(go()))
    assert seen[0] == ["Hello ", "there, ", "friend."]
    assert seen[1] == seen[0]


def get_weather(city: str) -> str:
    """Get the weather in a city."""
    return f"Sunny in {city}."


def test_item2_a_custom_step_calls_tools_through_the_function_calling_interface() -> None:
    """A hand-written agent step: stream with tools, read the calls from the last chunk, run
    them, then ask again with the tool's answer in the history."""
    seen = []
    for api in docs_both():
        llm = api.llm([tool_call("get_weather", city="Paris"), "It is sunny in Paris."])
        tool = api.FunctionTool.from_defaults(fn=get_weather)
        ChatMessage = api.ChatMessage

        async def go(llm: Any = llm, tool: Any = tool, ChatMessage: Any = ChatMessage) -> dict[str, Any]:
            history = [ChatMessage(role="user", content="Weather in Paris?")]
            response = await llm.astream_chat_with_tools([tool], chat_history=history)
            last = None
            async for last in response:
                pass
            calls = llm.get_tool_calls_from_response(last, error_on_no_tool_call=False)
            outputs = [str(tool.call(**c.tool_kwargs)) for c in calls]
            history.append(last.message)
            for c, out in zip(calls, outputs):
                history.append(ChatMessage(role="tool", content=out, additional_kwargs={"tool_call_id": c.tool_id}))
            answer = await llm.achat_with_tools([tool], chat_history=history)
            no_calls = llm.get_tool_calls_from_response(answer, error_on_no_tool_call=False)
            with pytest.raises(ValueError) as err:
                llm.get_tool_calls_from_response(answer)
            return {
                "calls": [(c.tool_name, c.tool_kwargs) for c in calls],
                "outputs": outputs,
                "answer": answer.message.content,
                "no_calls": no_calls,
                "error": str(err.value),
            }

        result = asyncio.run(go())
        result["read"] = [roles_contents(r) for r in api.requests(llm)]
        result["tools_offered"] = [names for _m, names, _c in llm.requests] if api.is_reference else [
            [t.name for t in r.tools] for r in llm.requests
        ]
        seen.append(result)
    assert seen[0]["calls"] == [("get_weather", {"city": "Paris"})]
    assert seen[0]["outputs"] == ["Sunny in Paris."]
    assert seen[0]["answer"] == "It is sunny in Paris."
    assert seen[0]["error"] == "Expected at least one tool call, but got 0 tool calls."
    assert seen[0]["tools_offered"] == [["get_weather"], ["get_weather"]]
    assert seen[1] == seen[0]


def test_item2_chat_with_tools_from_sync_code_with_a_user_message() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm([tool_call("get_weather", city="Oslo")])
        tool = api.FunctionTool.from_defaults(fn=get_weather)
        response = llm.chat_with_tools([tool], user_msg="Weather in Oslo?")
        calls = llm.get_tool_calls_from_response(response)
        seen.append(([(c.tool_name, c.tool_kwargs) for c in calls], roles_contents(api.requests(llm)[0])))
    assert seen[0] == ([("get_weather", {"city": "Oslo"})], [("user", "Weather in Oslo?")])
    assert seen[1] == seen[0]
