"""``OpenAILLM`` in real Pyodide (npm's ``pyodide`` under Node, nbagent from its wheel) against a
scripted OpenAI-compatible server on 127.0.0.1 that allows CORS, over the runtime's ``fetch``:
the only origin the runner lets through; everything else stays blocked. Chat, streaming, a
function-calling agent's steps, the sync ``chat`` (through JSPI, or the error that says to
await), and an error that does not show the key. See ``scenario_openai.py``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from openai_server import FakeOpenAIServer, serve  # noqa: E402
from pyodide_harness import JSPI_NODE_ARGS, REQUIRED, node_problem, run_scenario  # noqa: E402

pytestmark = pytest.mark.timeout(600)
KEY = "sk-test-browser-0123456789abcdef"
SCRIPT: list[Any] = [
    "Hello from the server.",
    "Streamed over fetch, word by word.",
    {"content": None, "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
    "2 + 3 is 5.",
]


def _run(node_args: tuple[str, ...], after: list[Any]) -> tuple[dict[str, Any], dict[str, Any], FakeOpenAIServer]:
    problem = node_problem()
    if problem:
        if REQUIRED:
            pytest.fail(f"{problem} (REQUIRE_PYODIDE=1)")
        pytest.skip(problem)
    with serve([*SCRIPT, *after], cors="*") as server:
        origin = server.base_url.rsplit("/v1", 1)[0]
        record = run_scenario(HERE / "scenario_openai.py", node_args=node_args, allow=(origin,),
                              params={"base_url": server.base_url})
    assert record["error"] is None, f"the scenario failed in Pyodide:\n{record['error']}\n" + "\n".join(record.get("logs", [])[-30:])
    return record, record["value"], server


ERROR_REPLY = {"status": 401, "message": "bad key", "headers": {"x-should-retry": "false"}}


@pytest.fixture(scope="module")
def with_jspi() -> Iterator[tuple[dict[str, Any], dict[str, Any], FakeOpenAIServer]]:
    # the sync chat goes through: a tool call and an answer, then the error
    yield _run(JSPI_NODE_ARGS, [{"content": None, "tool_calls": [{"name": "add", "arguments": {"a": 3, "b": 2}}]}, "5 again.", ERROR_REPLY])


@pytest.fixture(scope="module")
def without_jspi() -> Iterator[tuple[dict[str, Any], dict[str, Any], FakeOpenAIServer]]:
    # the sync chat's request is sent, then its wait rolled back: its reply is never read
    yield _run((), [{"content": None, "tool_calls": [{"name": "add", "arguments": {"a": 3, "b": 2}}]}, ERROR_REPLY])


@pytest.mark.parametrize("run", ["with_jspi", "without_jspi"])
def test_chat_stream_and_agent_steps_go_over_fetch_to_the_local_server(run: str, request: pytest.FixtureRequest) -> None:
    record, facts, server = request.getfixturevalue(run)
    assert facts["platform"] == "emscripten"
    assert facts["achat"] == {"text": "Hello from the server.", "tokens": facts["achat"]["tokens"]} and facts["achat"]["tokens"] > 0
    assert facts["stream"]["text"] == "Streamed over fetch, word by word." and facts["stream"]["chunks"] > 1
    assert facts["agent"] == {"tool": [["add", "5"]], "answer": "2 + 3 is 5.", "is_last": True}
    # every request went over fetch to this server, and nothing else was tried
    assert record["attempts"] == ["fetch https://pypi.org/simple/micropip/", "fetch https://pypi.org/simple/nbagent/"]
    posts = [a for a in record["allowed"] if a.startswith("POST ")]
    assert posts and all(a == f"POST {server.base_url}/chat/completions" for a in posts)
    assert len(posts) == len(server.requests)
    first = server.requests[0]
    assert first.headers["authorization"] == f"Bearer {KEY}"  # the key goes to the server it is for...
    assert first["model"] == "fake-model" and first["messages"][-1]["content"] == "Say hello."
    assert server.requests[1]["stream"] is True
    assert server.requests[2]["tools"][0]["function"]["name"] == "add"


@pytest.mark.parametrize("run", ["with_jspi", "without_jspi"])
def test_the_key_shows_nowhere(run: str, request: pytest.FixtureRequest) -> None:
    record, facts, _server = request.getfixturevalue(run)
    assert KEY not in facts["repr"] and "127.0.0.1" in facts["repr"]
    assert facts["error"]["type"] == "AuthenticationError"
    assert "bad key" in facts["error"]["text"] and KEY not in facts["error"]["text"]  # ...and nowhere else
    assert KEY not in "\n".join(record.get("logs", []))


def test_with_jspi_the_sync_chat_waits_for_fetch(with_jspi: tuple[dict[str, Any], dict[str, Any], FakeOpenAIServer]) -> None:
    _record, facts, server = with_jspi
    assert facts["jspi"] is True
    assert facts["sync_chat"] == {"ok": "5 again."}
    assert server.requests[4]["messages"][-1]["content"] == "And 3 + 2?"


def test_without_jspi_the_sync_chat_says_to_await(without_jspi: tuple[dict[str, Any], dict[str, Any], FakeOpenAIServer]) -> None:
    _record, facts, _server = without_jspi
    assert facts["jspi"] is False
    assert facts["sync_chat"]["error"] == "CannotWaitHere"
    assert "await agent.achat(...)" in facts["sync_chat"]["message"]
