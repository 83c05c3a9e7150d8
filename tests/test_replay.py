"""ReplayLLM: record a model's replies to a JSON cassette once, replay them offline.

The "real" model is a ScriptedLLM, or OpenAILLM over HTTP against the local scripted server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbagent import (
    ChatMessage,
    FunctionTool,
    MessageRole,
    OpenAIAgent,
    ReActAgent,
    ReplayLLM,
    ScriptedLLM,
    tool_call,
)
from nbagent.events import TokenStreamed
from nbagent.llms.openai import OpenAILLM
from nbagent.llms.replay import CassetteError, ReplayMissError, request_key
from nbagent.tools import ToolMetadata

try:
    from tests.openai_server import serve
except ImportError:  # run from inside tests/
    from openai_server import serve  # type: ignore[no-redef]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role=MessageRole.USER, content=text)]


PARALLEL = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "mul", "arguments": {"a": 3, "b": 4}}]}


def record_session(path: Path) -> tuple[ScriptedLLM, list[str]]:
    """A two-turn chat with parallel tool calls, recorded from a scripted model."""
    inner = ScriptedLLM([PARALLEL, "3 and 12.", tool_call("add", a=5, b=5), "10."])
    agent = OpenAIAgent.from_tools([add, mul], llm=ReplayLLM(path, llm=inner, mode="record"))
    answers = [str(agent.chat("add 1+2, mul 3*4")), str(agent.chat("and 5+5?"))]
    return inner, answers


def test_record_then_replay_offline_gives_the_same_run(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    inner, answers = record_session(path)
    assert answers == ["3 and 12.", "10."] and inner.position == 4
    replay = ReplayLLM(path)  # no inner model at all
    assert replay.model == "scripted" and replay.recorded == 4 and replay.is_function_calling_model
    agent = OpenAIAgent.from_tools([add, mul], llm=replay)
    task = agent.create_task("add 1+2, mul 3*4")
    first = agent.run_step(task)
    assert [(t.tool_name, t.content, t.tool_call_id) for t in first.tool_outputs] == [
        ("add", "3", "call_1"),
        ("mul", "12", "call_2"),
    ]
    assert first.usage is not None and first.usage.total_tokens > 0  # recorded usage comes back
    agent.run_step(task)
    assert str(agent.finalize_response(task)) == "3 and 12."
    assert str(agent.chat("and 5+5?")) == "10."


def test_cassette_is_readable_json_with_a_request_summary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "c.json"  # missing folders are created
    record_session(path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert data["format"] == "nbagent-cassette" and data["version"] == 1 and data["model"] == "scripted"
    first = data["interactions"][0]
    assert first["request"]["last_user_message"] == "add 1+2, mul 3*4"
    assert first["request"]["tools"] == ["add", "mul"] and first["request"]["n_messages"] == 1
    calls = first["replies"][0]["message"]["tool_calls"]
    assert [c["name"] for c in calls] == ["add", "mul"] and calls[1]["arguments"] == {"a": 3, "b": 4}
    assert [e["request"]["last_message"] for e in data["interactions"]][-1] == "tool: 10"
    assert list(path.parent.iterdir()) == [path]  # the atomic write leaves no temp file
    assert path.stat().st_mode & 0o777 == 0o644  # shareable, not mkstemp's private 0600


def test_replay_never_calls_the_inner_model_or_the_network(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    record_session(path)
    far = OpenAILLM(model="scripted", base_url="https://api.example.invalid/v1", api_key="sk-x")
    agent = OpenAIAgent.from_tools([add, mul], llm=ReplayLLM(path, llm=far, mode="replay"))
    assert str(agent.chat("add 1+2, mul 3*4")) == "3 and 12."  # the network is blocked in tests


def test_a_miss_names_the_request_the_cassette_and_how_to_record(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    record_session(path)
    agent = OpenAIAgent.from_tools([add, mul], llm=ReplayLLM(path))
    with pytest.raises(ReplayMissError) as err:
        agent.chat("what is 7*6?")
    text = str(err.value)
    assert "'what is 7*6?'" in text and "1 message," in text and "['add', 'mul']" in text
    assert str(path) in text and "mode='auto'" in text and "mode='record'" in text
    # the first turn is replayed, then a question that was never asked: the closest recorded
    # request shares the first messages
    agent = OpenAIAgent.from_tools([add, mul], llm=ReplayLLM(path))
    agent.chat("add 1+2, mul 3*4")
    with pytest.raises(ReplayMissError, match=r"closest recorded request: #3 \(the first 5 messages are the same; message 6 differs"):
        agent.chat("and 6+6?")


def test_a_changed_tool_schema_is_a_miss(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    record_session(path)

    def add(a: int, b: int, c: int = 0) -> int:  # noqa: F811 - a new argument
        """Add two integers."""
        return a + b + c

    agent = OpenAIAgent.from_tools([add, mul], llm=ReplayLLM(path))
    with pytest.raises(ReplayMissError, match="tools, tool_choice or model differ"):
        agent.chat("add 1+2, mul 3*4")


def test_repeated_requests_replay_their_replies_in_order(tmp_path: Path) -> None:
    """Undo and run again: the same request twice, two different recorded replies."""
    path = tmp_path / "c.json"
    inner = ScriptedLLM(["first try", "second try"])
    agent = ReActAgent.from_tools([], llm=ReplayLLM(path, llm=inner, mode="record"))
    task = agent.create_task("hi")
    agent.run_step(task)
    agent.undo_step(task)
    agent.run_step(task)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert len(data["interactions"]) == 1 and len(data["interactions"][0]["replies"]) == 2

    replay = ReplayLLM(path)
    request = [ChatMessage(role=MessageRole.USER, content="hi")]
    key_messages = inner.requests[0].messages
    assert [replay.chat(key_messages).message.text for _ in range(3)] == ["first try", "second try", "second try"]
    replay.rewind()
    assert replay.chat(key_messages).message.text == "first try"
    with pytest.raises(ReplayMissError):
        replay.chat(request)  # without the ReAct system prompt: another request


def test_auto_mode_replays_what_is_recorded_and_records_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    first = ScriptedLLM(["one"])
    ReplayLLM(path, llm=first, mode="record").chat(user("a"))
    second = ScriptedLLM(["two", "three"])
    auto = ReplayLLM(path, llm=second, mode="auto")
    assert auto.chat(user("a")).message.text == "one" and second.position == 0  # replayed
    assert auto.chat(user("b")).message.text == "two" and second.position == 1  # recorded
    assert auto.chat(user("a")).message.text == "three"  # asked again: a new reply is recorded
    replay = ReplayLLM(path)
    assert [replay.chat(user(x)).message.text for x in "aab"] == ["one", "three", "two"]


def test_a_replaying_model_can_be_copied(tmp_path: Path) -> None:
    import copy
    import pickle

    path = tmp_path / "c.json"
    ReplayLLM(path, llm=ScriptedLLM(["one", "two"]), mode="record").chat(user("a"))
    original = ReplayLLM(path)
    for twin in (copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
        assert twin.chat(user("a")).message.text == "one" and twin.path == path


def test_record_mode_writes_the_cassette_anew(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    ReplayLLM(path, llm=ScriptedLLM(["old"]), mode="record").chat(user("a"))
    ReplayLLM(path, llm=ScriptedLLM(["new"]), mode="record").chat(user("b"))
    replay = ReplayLLM(path)
    assert replay.recorded == 1 and replay.chat(user("b")).message.text == "new"
    with pytest.raises(ReplayMissError):
        replay.chat(user("a"))


def test_a_failing_model_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    rec = ReplayLLM(path, llm=ScriptedLLM([RuntimeError("rate limited"), "ok"]), mode="record")
    with pytest.raises(RuntimeError, match="rate limited"):
        rec.chat(user("a"))
    assert not path.exists()
    assert rec.chat(user("a")).message.text == "ok"  # retried: now recorded once
    assert ReplayLLM(path).recorded == 1


def test_streaming_replays_the_text_in_token_chunks(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    inner = ScriptedLLM(["Thought: I can answer without using any more tools.\nAnswer: It is sunny in Paris today."])
    rec_agent = ReActAgent.from_tools([], llm=ReplayLLM(path, llm=inner, mode="record"))
    recorded = rec_agent.stream_chat("weather?")
    assert "".join(recorded.response_gen) == "It is sunny in Paris today."

    agent = ReActAgent.from_tools([], llm=ReplayLLM(path))
    tokens: list[str] = []
    agent.subscribe(lambda e: tokens.append(e.token), TokenStreamed)
    stream = agent.stream_chat("weather?")
    pieces = list(stream.response_gen)
    assert "".join(pieces) == "It is sunny in Paris today." and len(pieces) > 3
    assert "".join(tokens).endswith("It is sunny in Paris today.")
    # the same recording also answers a request that does not stream
    assert str(ReActAgent.from_tools([], llm=ReplayLLM(path)).chat("weather?")) == "It is sunny in Paris today."


def test_request_key_covers_what_the_model_sees() -> None:
    tools = [FunctionTool.from_defaults(add).metadata]
    base = request_key("m", user("hi"), tools, "auto")
    assert base == request_key("m", user("hi"), [FunctionTool.from_defaults(add).metadata], "auto")
    assert len(base) == 64
    renamed = ToolMetadata(name="plus", description="Add two integers.", fn_schema=tools[0].fn_schema)
    tool_reply = ChatMessage(role=MessageRole.TOOL, content="3", tool_call_id="call_1")
    other_reply = ChatMessage(role=MessageRole.TOOL, content="3", tool_call_id="call_2")
    different = {
        request_key("other", user("hi"), tools, "auto"),
        request_key("m", user("hi!"), tools, "auto"),
        request_key("m", [ChatMessage(role=MessageRole.SYSTEM, content="hi")], tools, "auto"),
        request_key("m", user("hi"), [], "auto"),
        request_key("m", user("hi"), [renamed], "auto"),
        request_key("m", user("hi"), tools, "none"),
        request_key("m", user("hi"), tools, None),
        request_key("m", [*user("hi"), tool_reply], tools, "auto"),
        request_key("m", [*user("hi"), other_reply], tools, "auto"),
    }
    assert base not in different and len(different) == 9


def test_bad_arguments_and_bad_cassettes_are_clear_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(CassetteError, match=r"nope\.json.*does not exist.*mode='record'"):
        ReplayLLM(missing)
    with pytest.raises(ValueError, match="mode must be one of"):
        ReplayLLM(missing, mode="rewind")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs llm="):
        ReplayLLM(missing, mode="record")
    not_json = tmp_path / "x.json"
    not_json.write_text("{oops", encoding="utf-8")
    with pytest.raises(CassetteError, match="cannot read cassette"):
        ReplayLLM(not_json)
    other = tmp_path / "y.json"
    other.write_text('{"interactions": []}', encoding="utf-8")
    with pytest.raises(CassetteError, match="is not an nbagent cassette"):
        ReplayLLM(other)
    ok = ReplayLLM(missing, llm=ScriptedLLM([]), mode="auto")  # a new cassette, made on first record
    assert ok.recorded == 0 and not missing.exists()


def test_function_calling_flag_is_kept_for_replay(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    inner = ScriptedLLM(["Thought: done.\nAnswer: ok"], function_calling=False)
    ReActAgent.from_tools([], llm=ReplayLLM(path, llm=inner, mode="record")).chat("x")
    assert ReplayLLM(path).is_function_calling_model is False
    with pytest.raises(ValueError, match="is_function_calling_model=False"):
        OpenAIAgent.from_tools([add], llm=ReplayLLM(path))


def test_record_and_replay_over_http_with_the_openai_client(tmp_path: Path) -> None:
    """Recorded once from an OpenAI-compatible server; replayed after the server is gone."""
    path = tmp_path / "http.json"
    script = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 40}, "id": "call_abc"},
                        {"name": "mul", "arguments": {"a": 6, "b": 7}, "id": "call_def"}]},
        "Both are 42.",
        "Streaming works over the wire.",
    ]

    def run(llm: ReplayLLM) -> tuple[list[str], str, str]:
        agent = OpenAIAgent.from_tools([add, mul], llm=llm)
        task = agent.create_task("2+40 and 6*7?")
        first = agent.run_step(task)
        agent.run_step(task)
        answer = str(agent.finalize_response(task))
        streamed = "".join(agent.stream_chat("say something").response_gen)
        return [f"{t.tool_call_id}:{t.content}" for t in first.tool_outputs], answer, streamed

    with serve(script, model="fake-model") as server:
        real = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", timeout=10)
        recorded = run(ReplayLLM(path, llm=real, mode="record"))
        assert len(server.requests) == 3
        real.close()
    assert recorded == (["call_abc:42", "call_def:42"], "Both are 42.", "Streaming works over the wire.")
    assert "sk-test" not in path.read_text(encoding="utf-8")  # the key is never recorded
    assert run(ReplayLLM(path)) == recorded
    # with the real model attached but the server gone: replay mode still sends nothing
    gone = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", timeout=2, max_retries=0)
    assert run(ReplayLLM(path, llm=gone)) == recorded
