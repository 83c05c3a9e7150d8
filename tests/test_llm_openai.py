"""OpenAILLM over real HTTP, against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from nbagent.llms import NetworkBlockedError, block_network
from nbagent.llms.openai import OpenAILLM
from nbagent.messages import ChatMessage, MessageRole, ToolSelection
from nbagent.tools import FunctionTool

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # tests/ is not a package
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]

SECRET = "sk-test-SECRET123"


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first number
        b: second number
    """
    return a + b


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


ADD = FunctionTool.from_defaults(add)
WEATHER = FunctionTool.from_defaults(weather)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as s:
        yield s


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("NBAGENT_BLOCK_NETWORK", raising=False)


_made: list[OpenAILLM] = []


@pytest.fixture(autouse=True)
def _close_models() -> Iterator[None]:
    """Close the models a test made, so no keep-alive socket outlives it."""
    yield
    while _made:
        _made.pop().close()


def llm_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAILLM:
    kwargs.setdefault("api_key", SECRET)
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 10.0)
    llm = OpenAILLM(model="fake-model", base_url=server.base_url, **kwargs)
    _made.append(llm)
    return llm


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role=MessageRole.USER, content=text)]


# -- plain chat ------------------------------------------------------------------------------


def test_chat_text_usage_and_latency(server: FakeOpenAIServer) -> None:
    server.add({"content": "Hello there", "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
    response = llm_for(server).chat(user("hi"))
    assert response.message.role == MessageRole.ASSISTANT
    assert response.message.text == "Hello there"
    assert response.tool_calls == []
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 3)
    assert response.model == "fake-model"
    assert response.latency_s > 0
    sent = server.requests[0]
    assert sent["model"] == "fake-model"
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in sent and "tool_choice" not in sent


def test_api_key_sent_as_bearer_header(server: FakeOpenAIServer) -> None:
    server.add("ok")
    llm_for(server).chat(user("hi"))
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_temperature_and_additional_kwargs_sent(server: FakeOpenAIServer) -> None:
    server.add("ok", "ok")
    llm = llm_for(server, temperature=0.25, additional_kwargs={"max_tokens": 7, "seed": 1})
    llm.chat(user("hi"))
    llm.chat(user("hi"), max_tokens=3)  # a per-call kwarg wins over additional_kwargs
    first, second = server.requests
    assert (first["temperature"], first["max_tokens"], first["seed"]) == (0.25, 7, 1)
    assert second["max_tokens"] == 3


def test_message_conversion(server: FakeOpenAIServer) -> None:
    server.add("done")
    image_parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    history = [
        ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
        ChatMessage(role=MessageRole.USER, content=image_parts),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content=None,
            tool_calls=[ToolSelection(tool_id="call_9", tool_name="add", tool_kwargs={"a": 1, "b": 2})],
        ),
        ChatMessage(role=MessageRole.TOOL, content="3", tool_call_id="call_9", name="add"),
    ]
    llm_for(server).chat(history, tools=[ADD])
    sent = server.requests[0]["messages"]
    assert sent[0] == {"role": "system", "content": "be brief"}
    assert sent[1] == {"role": "user", "content": image_parts}
    assert sent[2]["role"] == "assistant"
    assert sent[2]["tool_calls"] == [
        {"id": "call_9", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 1, "b": 2})}}
    ]
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_9", "content": "3"}


# -- tools -----------------------------------------------------------------------------------


def test_tools_sent_in_openai_format(server: FakeOpenAIServer) -> None:
    server.add("no tool needed")
    llm_for(server).chat(user("add 1 and 2"), tools=[ADD, WEATHER])
    tools = server.requests[0]["tools"]
    assert [t["type"] for t in tools] == ["function", "function"]
    assert [t["function"]["name"] for t in tools] == ["add", "weather"]
    assert tools[0]["function"]["description"] == "Add two numbers."
    params = tools[0]["function"]["parameters"]
    assert params["type"] == "object"
    assert set(params["properties"]) == {"a", "b"}
    assert params["properties"]["a"]["type"] == "integer"
    assert sorted(params["required"]) == ["a", "b"]


def test_tool_calls_parsed_including_parallel(server: FakeOpenAIServer) -> None:
    server.add(
        {
            "content": None,
            "tool_calls": [
                {"id": "call_a", "name": "add", "arguments": {"a": 1, "b": 2}},
                {"id": "call_b", "name": "weather", "arguments": {"city": "Oslo"}},
            ],
        }
    )
    response = llm_for(server).chat(user("two things"), tools=[ADD, WEATHER])
    calls = response.tool_calls
    assert [(c.tool_id, c.tool_name, c.tool_kwargs) for c in calls] == [
        ("call_a", "add", {"a": 1, "b": 2}),
        ("call_b", "weather", {"city": "Oslo"}),
    ]
    assert response.message.text == ""


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("add", {"type": "function", "function": {"name": "add"}}),
        ({"type": "function", "function": {"name": "weather"}}, {"type": "function", "function": {"name": "weather"}}),
    ],
)
def test_tool_choice_mapping(server: FakeOpenAIServer, choice: Any, expected: Any) -> None:
    server.add("ok")
    llm_for(server).chat(user("hi"), tools=[ADD, WEATHER], tool_choice=choice)
    assert server.requests[0]["tool_choice"] == expected


def test_tool_choice_not_sent_without_tools(server: FakeOpenAIServer) -> None:
    server.add("ok")
    llm_for(server).chat(user("hi"), tool_choice="required")
    assert "tool_choice" not in server.requests[0]
    assert "tools" not in server.requests[0]


def test_invalid_tool_arguments_kept_raw(server: FakeOpenAIServer) -> None:
    server.add({"tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 1, "b": '}]})
    response = llm_for(server).chat(user("add"), tools=[ADD])
    call = response.tool_calls[0]
    assert call.tool_name == "add"
    assert call.tool_kwargs == {"__raw_arguments__": '{"a": 1, "b": '}
    # the tool layer turns it into an error observation, not a crash
    out = ADD.call(**call.tool_kwargs)
    assert out.is_error


# -- streaming -------------------------------------------------------------------------------


def test_stream_text_deltas(server: FakeOpenAIServer) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    server.add({"content": text, "usage": {"prompt_tokens": 9, "completion_tokens": 10}})
    chunks = list(llm_for(server).stream_chat(user("tell me")))
    deltas = [c.delta for c in chunks if c.delta]
    assert len(deltas) >= 5
    assert "".join(deltas) == text
    assert chunks[-1].message.text == text
    assert chunks[2].message.text == "".join(deltas[:3])  # message is the text so far
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (9, 10)
    assert chunks[-1].latency_s > 0
    sent = server.requests[0]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_stream_tool_call_deltas_reassembled(server: FakeOpenAIServer) -> None:
    server.add(
        {
            "content": "Let me check.",
            "tool_calls": [
                {"id": "call_x", "name": "add", "arguments": {"a": 12, "b": 30}},
                {"id": "call_y", "name": "weather", "arguments": {"city": "New York"}},
            ],
        }
    )
    chunks = list(llm_for(server).stream_chat(user("go"), tools=[ADD, WEATHER]))
    final = chunks[-1]
    assert [(c.tool_id, c.tool_name, c.tool_kwargs) for c in final.tool_calls] == [
        ("call_x", "add", {"a": 12, "b": 30}),
        ("call_y", "weather", {"city": "New York"}),
    ]
    assert final.message.text == "Let me check."
    assert all(not c.tool_calls for c in chunks[:-1])
    assert final.usage is not None


def test_astream_async(server: FakeOpenAIServer) -> None:
    server.add("one two three")
    llm = llm_for(server)

    async def main() -> list[str]:
        deltas = [c.delta async for c in llm.astream_chat(user("count")) if c.delta]
        await llm.aclose()
        return deltas

    assert asyncio.run(main()) == ["one ", "two ", "three"]


# -- errors ----------------------------------------------------------------------------------


def test_500_is_retried(server: FakeOpenAIServer) -> None:
    server.add({"status": 500, "message": "boom"}, "recovered")
    response = llm_for(server, max_retries=2).chat(user("hi"))
    assert response.message.text == "recovered"
    assert len(server.requests) == 2
    assert server.requests[0]["messages"] == server.requests[1]["messages"]


def test_500_without_retries_raises(server: FakeOpenAIServer) -> None:
    import openai

    server.add({"status": 500, "message": "boom"})
    with pytest.raises(openai.InternalServerError):
        llm_for(server, max_retries=0).chat(user("hi"))
    assert len(server.requests) == 1


def test_malformed_reply_clear_error(server: FakeOpenAIServer) -> None:
    server.add({"malformed": True})
    with pytest.raises(ValueError, match="choices"):
        llm_for(server).chat(user("hi"))


def test_non_json_reply_clear_error(server: FakeOpenAIServer) -> None:
    server.add({"raw": "<html>gateway says hi</html>", "content_type": "text/html"})
    with pytest.raises(ValueError, match="not a JSON chat completion"):
        llm_for(server).chat(user("hi"))


def test_malformed_stream_clear_error(server: FakeOpenAIServer) -> None:
    server.add({"malformed": True})
    with pytest.raises(ValueError, match="choices"):
        list(llm_for(server).stream_chat(user("hi")))


# -- the key stays secret ---------------------------------------------------------------------


def test_key_never_in_repr_or_errors(server: FakeOpenAIServer) -> None:
    llm = llm_for(server)
    assert "SECRET123" not in repr(llm)
    assert "SECRET123" not in str(llm)
    assert repr(llm) == f"OpenAILLM(model='fake-model', base_url='{server.base_url}')"
    assert llm.masked_key == "sk-…T123"
    assert "SECRET123" not in llm.masked_key
    assert OpenAILLM(base_url=server.base_url).masked_key == "(none)"

    # a server that echoes the key back in its error text
    server.add({"status": 401, "message": f"Incorrect API key provided: {SECRET}"})
    import openai

    with pytest.raises(openai.AuthenticationError) as info:  # the type is kept
        llm.chat(user("hi"))
    assert "Incorrect API key provided: sk-…T123" in str(info.value)
    assert "SECRET123" not in str(info.value)
    assert "SECRET123" not in repr(info.value)

    with block_network(True):
        blocked = OpenAILLM(api_key=SECRET)
        with pytest.raises(NetworkBlockedError) as info2:
            blocked.chat(user("hi"))
    assert "SECRET123" not in str(info2.value)


# -- configuration -----------------------------------------------------------------------------


def test_env_var_defaults(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-KEY9876")
    server.add("from env")
    llm = OpenAILLM(model="fake-model", max_retries=0)
    _made.append(llm)
    assert llm.base_url == server.base_url
    assert llm.chat(user("hi")).message.text == "from env"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env-KEY9876"


def test_local_server_needs_no_key(server: FakeOpenAIServer) -> None:
    server.add("no key needed")
    llm = OpenAILLM(model="fake-model", base_url=server.base_url, max_retries=0)
    _made.append(llm)
    assert llm.chat(user("hi")).message.text == "no key needed"
    auth = server.requests[0].headers["authorization"]
    assert auth.startswith("Bearer ") and len(auth) > len("Bearer ")


def test_missing_key_for_openai_is_clear_error() -> None:
    llm = OpenAILLM(max_retries=0)
    assert llm.base_url == "https://api.openai.com/v1"
    with block_network(False), pytest.raises(ValueError, match="OPENAI_API_KEY") as info:
        llm.chat(user("hi"))  # refused before any request is made
    assert "api_key=" in str(info.value) and "base_url=" in str(info.value)


def test_network_guard(server: FakeOpenAIServer) -> None:
    server.add("local ok")
    with block_network(True):
        remote = OpenAILLM(base_url="https://api.openai.com/v1", api_key=SECRET, max_retries=0)
        with pytest.raises(NetworkBlockedError) as info:
            remote.chat(user("hi"))
        message = str(info.value)
        assert "https://api.openai.com/v1" in message
        assert "block_network(False)" in message and "NBAGENT_BLOCK_NETWORK" in message
        with pytest.raises(NetworkBlockedError):
            list(remote.stream_chat(user("hi")))
        # loopback stays allowed
        assert llm_for(server).chat(user("hi")).message.text == "local ok"
    assert len(server.requests) == 1


def test_network_guard_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBAGENT_BLOCK_NETWORK", "1")
    remote = OpenAILLM(base_url="http://10.1.2.3:8000/v1", max_retries=0)
    with pytest.raises(NetworkBlockedError, match="10.1.2.3"):
        remote.chat(user("hi"))


# -- sync and async ----------------------------------------------------------------------------


def test_sync_chat_inside_running_loop(server: FakeOpenAIServer) -> None:
    server.add("from inside a loop", "second")
    llm = llm_for(server)

    async def notebook_cell() -> list[str]:
        first = llm.chat(user("hi")).message.text  # sync call while a loop is running
        second = llm.chat(user("again")).message.text
        return [first, second]

    assert asyncio.run(notebook_cell()) == ["from inside a loop", "second"]
    assert len(server.requests) == 2


def test_achat_async_and_concurrent(server: FakeOpenAIServer) -> None:
    server.add(lambda body: "echo: " + body["messages"][-1]["content"])
    server.add(lambda body: "echo: " + body["messages"][-1]["content"])
    llm = llm_for(server)

    async def main() -> list[str]:
        replies = await asyncio.gather(llm.achat(user("a")), llm.achat(user("b")))
        await llm.aclose()
        return sorted(r.message.text for r in replies)

    assert asyncio.run(main()) == ["echo: a", "echo: b"]


def test_one_client_per_event_loop(server: FakeOpenAIServer) -> None:
    server.add("1", "2", "3")
    llm = llm_for(server)
    llm.chat(user("x"))
    llm.chat(user("y"))  # same thread loop: the client is reused
    assert len(llm._clients) == 1

    async def main() -> str:
        text = (await llm.achat(user("z"))).message.text
        assert len(llm._clients) == 2
        await llm.aclose()
        assert len(llm._clients) == 1
        return text

    assert asyncio.run(main()) == "3"  # a new loop gets its own client and still works
    assert len(server.requests) == 3
    llm.close()
    assert len(llm._clients) == 0
    server.add("after close")
    assert llm.chat(user("w")).message.text == "after close"


def test_stream_abandoned_early_then_chat(server: FakeOpenAIServer) -> None:
    server.add("many words in this streamed reply", "next")
    llm = llm_for(server)
    for chunk in llm.stream_chat(user("s")):
        assert chunk.delta == "many "
        break
    assert llm.chat(user("p")).message.text == "next"


def test_sync_stream_then_sync_chat(server: FakeOpenAIServer) -> None:
    server.add("streamed words here", "plain")
    llm = llm_for(server)
    assert "".join(c.delta or "" for c in llm.stream_chat(user("s"))) == "streamed words here"
    assert llm.chat(user("p")).message.text == "plain"


def test_credentials_in_base_url_never_in_repr_errors_or_logs(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """user:pw@ and ?api-key= in base_url (proxies, Azure-style gateways) are as secret as
    the key: masked in repr, in every error (also ones the server echoes, and a refused
    connection) and in the log lines of the openai client and httpx."""
    import logging

    import openai

    port = server.base_url.split(":")[2].split("/")[0]
    url = f"http://alice:pw-S3CR3T@127.0.0.1:{port}/v1?api-key=QK-S3CR3T"
    llm = OpenAILLM(model="fake-model", base_url=url)
    secrets = ("pw-S3CR3T", "QK-S3CR3T", "alice:")

    def clean(text: str) -> None:
        assert not [s for s in secrets if s in text], text

    clean(repr(llm))
    assert llm.public_base_url == f"http://***@127.0.0.1:{port}/v1?api-key=***"
    caplog.set_level(logging.DEBUG)
    server.add("hello")
    assert llm.chat(user("hi")).message.text == "hello"
    sent = server.requests[-1]
    assert "api-key=QK-S3CR3T" in sent.path  # the query goes with every request
    assert sent.headers.get("authorization") == "Bearer not-needed"  # user info never does
    server.add({"status": 400, "message": f"bad request to {url} with api-key=QK-S3CR3T"})
    with pytest.raises(openai.BadRequestError) as bad:
        llm.chat(user("hi"))
    clean(str(bad.value))
    clean(repr(bad.value))
    server.add({"malformed": True})
    with pytest.raises(ValueError) as malformed:
        llm.chat(user("hi"))
    clean(str(malformed.value))
    refused = OpenAILLM(model="m", base_url="http://bob:pw-S3CR3T@127.0.0.1:9/v1?api-key=QK-S3CR3T", max_retries=0, timeout=2)
    with pytest.raises(openai.APIConnectionError) as conn:
        refused.chat(user("hi"))
    error: BaseException | None = conn.value
    while error is not None:
        clean(str(error))
        error = error.__cause__ or error.__context__
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request" in logged or "Request options" in logged  # the client did log
    clean(logged)
    with block_network(True):
        with pytest.raises(NetworkBlockedError) as blocked:
            OpenAILLM(base_url="https://u:pw-S3CR3T@example.com/v1?api-key=QK-S3CR3T").chat(user("hi"))
    clean(str(blocked.value))
