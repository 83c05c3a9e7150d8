"""OpenAILLM against hostile OpenAI-compatible servers (raw sockets on 127.0.0.1, tests/hostile_http.py).

Each fault is injected on the wire: a stream closed cleanly before its end, a connection
dropped mid-body, a body trickling a byte at a time, keep-alive comments forever, lines that
are not JSON, a tool-call index that is not a number, an emoji whose UTF-16 halves come in
two chunks. The tests assert what is kept, what is refused and what the message says, at the
model and through the runners (the step stays queued, memory untouched, nothing stored).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from nbagent import AgentRunner, ChatMessage, FunctionCallingAgent, MessageRole, OpenAILLM, ReActAgent
from nbagent.llms import IncompleteReplyError, MalformedReplyError
from nbagent.schema import StreamingAgentChatResponse

try:
    from tests.hostile_http import CLOSE_HEAD, END, SSE_HEAD, HostileServer, Request, chunk, delta, event, finish, hostile, trickle
except ImportError:  # tests/ is not a package
    from hostile_http import CLOSE_HEAD, END, SSE_HEAD, HostileServer, Request, chunk, delta, event, finish, hostile, trickle  # type: ignore[no-redef]

Q = [ChatMessage(role=MessageRole.USER, content="What is the answer?")]
KEY = "sk-hostile-KEY-0123456789"
_made: list[OpenAILLM] = []


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield
    while _made:
        _made.pop().close()


def llm_for(server: HostileServer, **kwargs: Any) -> OpenAILLM:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 10.0)
    kwargs.setdefault("api_key", KEY)
    base_url = kwargs.pop("base_url", server.base_url)
    llm = OpenAILLM(model="hostile-model", base_url=base_url, **kwargs)
    _made.append(llm)
    return llm


def sse(*events: Any, end: bytes = END) -> Any:
    """A handler streaming these events as chunks of a chunked body, then ``end``."""

    def handler(conn: socket.socket, request: Request) -> None:
        conn.sendall(SSE_HEAD + b"".join(chunk(event(e)) for e in events) + end)

    return handler


def complete(text: str = "The answer is forty-two.") -> Any:
    """A well-behaved streamed reply (for the retry after a fault)."""
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    return sse(delta({"role": "assistant", "content": ""}), *(delta({"content": w}) for w in words), finish(), "[DONE]")


ROLE = delta({"role": "assistant", "content": ""})
TRUNCATED_TEXT = (ROLE, delta({"content": "The answer is "}), delta({"content": "forty-"}))
HALF_CALL = (
    ROLE,
    delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}]}),
    delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
)
HALF_THOUGHT = (ROLE, delta({"content": "Thought: I need to use a tool to"}), delta({"content": " add the"}))
HALF_ANSWER = (ROLE, delta({"content": "Thought: I can answer.\nAnswer: The answer is "}), delta({"content": "forty-"}))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- 4: a stream that stops before its end --------------------------------------------------------


@pytest.mark.parametrize("how", ["last-chunk", "connection-close"])
def test_a_stream_closed_cleanly_before_its_end_is_an_error(how: str) -> None:
    if how == "last-chunk":  # the chunked body ends properly: a clean end of the HTTP body
        handler = sse(*TRUNCATED_TEXT)
    else:  # no length, no chunks: the body ends where the server closes

        def handler(conn: socket.socket, request: Request) -> None:
            conn.sendall(CLOSE_HEAD + b"".join(event(e) for e in TRUNCATED_TEXT))

    with hostile(handler) as server:
        seen: list[str] = []
        with pytest.raises(IncompleteReplyError) as info:
            for part in llm_for(server).stream_chat(Q):
                seen.append(part.delta or "")
    assert "".join(seen) == "The answer is forty-"  # the tokens showed as they came...
    text = str(info.value)  # ...but the reply is refused as a whole
    assert text.startswith(f"the model server at {server.base_url} ended its streamed reply before the end")
    assert "no finish_reason and no 'data: [DONE]' after 3 chunk(s) (20 characters of text)" in text
    assert "partial reply was dropped" in text


def test_half_a_tool_call_is_an_error_not_a_call_with_raw_arguments() -> None:
    with hostile(sse(*HALF_CALL)) as server:
        with pytest.raises(IncompleteReplyError, match=r"tool call 'add' with 6 characters of arguments"):
            list(llm_for(server).stream_chat(Q))


def test_an_end_by_finish_reason_alone_or_by_done_alone_is_a_whole_reply() -> None:
    by_finish = sse(ROLE, delta({"content": "whole"}), finish())  # no [DONE]: some servers end so
    by_done = sse(ROLE, delta({"content": "whole"}), "[DONE]")  # no finish_reason: so do others
    with hostile(by_finish, by_done) as server:
        llm = llm_for(server)
        assert list(llm.stream_chat(Q))[-1].message.content == "whole"
        assert list(llm.stream_chat(Q))[-1].message.content == "whole"


def test_a_connection_lost_mid_stream_says_so() -> None:
    def dropped(conn: socket.socket, request: Request) -> None:  # no last chunk: the body breaks
        conn.sendall(SSE_HEAD + b"".join(chunk(event(e)) for e in TRUNCATED_TEXT))

    with hostile(dropped) as server:
        with pytest.raises(openai.APIConnectionError) as info:
            list(llm_for(server).stream_chat(Q))
    text = str(info.value)
    assert text.startswith(f"Connection lost: the model server at {server.base_url} closed the connection in the middle of its streamed reply, after 3 chunk(s)")
    assert "could not reach" not in text and "is it running" not in text.lower()


def test_a_non_streamed_reply_cut_short_says_so() -> None:
    body = b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is forty-'

    def cut_at_close(conn: socket.socket, request: Request) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body)

    def cut_short_of_length(conn: socket.socket, request: Request) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n" + body)

    with hostile(cut_at_close, cut_short_of_length) as server:
        llm = llm_for(server)
        with pytest.raises(IncompleteReplyError, match=r"ended its reply before the end: the JSON stops after 132 characters"):
            llm.chat(Q)
        with pytest.raises(openai.APIConnectionError, match=r"^Connection lost: .* closed the connection before its reply was complete \(RemoteProtocolError"):
            llm.chat(Q)


def _store_steps(path: Path) -> list[Any]:
    """The completed steps of every task in a run store, read back by a fresh runner."""
    loaded = AgentRunner.load(path)
    return [s for t in loaded.list_tasks() for s in loaded.get_completed_steps(t.task_id)]


@pytest.mark.parametrize("streamed", [False, True], ids=["run_step", "stream_step"])
@pytest.mark.parametrize("agent_kind", ["function_calling", "react"])
@pytest.mark.parametrize("fault", ["text", "tool_call", "thought", "answer"])
def test_a_reply_without_its_end_leaves_the_step_queued_and_nothing_stored(
    agent_kind: str, fault: str, streamed: bool, tmp_path: Path
) -> None:
    """Through the runners: the step fails and stays queued, memory and the store are untouched,
    and running it again against a server that answers properly completes it."""
    if streamed:
        events = {"text": TRUNCATED_TEXT, "tool_call": HALF_CALL, "thought": HALF_THOUGHT, "answer": HALF_ANSWER}[fault]
        bad = sse(*events)
    else:  # the same faults in an unstreamed reply: its JSON body cut short at the close
        message: dict[str, Any] = {"role": "assistant", "content": "The answer is forty-two"}
        if fault == "tool_call":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]}
        elif fault == "thought":
            message["content"] = "Thought: I need to use a tool to add the numbers."
        whole = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()

        def bad(conn: socket.socket, request: Request) -> None:
            cut = whole[: whole.index(b": 2}") if fault == "tool_call" else whole.index(b"to add") if fault == "thought" else whole.index(b"two")]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + cut)

    good_text = "Thought: I can answer without using any more tools.\nAnswer: 42" if agent_kind == "react" else "42"
    store = tmp_path / "run.db"
    with hostile(bad, complete(good_text) if streamed else _whole_reply(good_text)) as server:
        llm = llm_for(server)
        cls = ReActAgent if agent_kind == "react" else FunctionCallingAgent
        agent = cls.from_tools([add], llm=llm, autosave=store)
        task = agent.create_task("What is the answer?")
        step_id = agent.get_upcoming_steps(task)[0].step_id
        run = agent.stream_step if streamed else agent.run_step

        def run_and_read() -> Any:  # a streamed answer's step returns at its first token
            out = run(task)
            if isinstance(out.output, StreamingAgentChatResponse):
                str(out.output)  # read to its end
            return out

        with pytest.raises((IncompleteReplyError, openai.APIConnectionError)) as info:
            run_and_read()
        assert "before the end" in str(info.value) or "Connection lost" in str(info.value)
        # kept: the step, queued as it was; refused: any of the partial reply
        assert [s.step_id for s in agent.get_upcoming_steps(task)] == [step_id]
        assert agent.get_completed_steps(task) == []
        assert agent.memory.get_all() == [] and task.scratch_memory.get_all() == []
        state = agent.state_of(task)
        assert state.failures and state.failures[-1].error_type in ("IncompleteReplyError", "APIConnectionError")
        assert _store_steps(store) == []
        # the same step, run again against an answer with its end, completes
        out = run_and_read()
        assert out.is_last and "42" in str(agent.finalize_response(task))
        assert [s.task_step.step_id for s in agent.get_completed_steps(task)] == [step_id]
        assert len(_store_steps(store)) == 1
        texts = " ".join(str(m.content) for m in agent.memory.get_all())
        assert "forty" not in texts and "to add the" not in texts


def _whole_reply(text: str) -> Any:
    body = json.dumps({"id": "y", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()

    def handler(conn: socket.socket, request: Request) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)

    return handler


# -- 5: timeout= bounds the whole call -------------------------------------------------------------


def _timed(fn: Any) -> tuple[BaseException, float]:
    start = time.monotonic()
    try:
        fn()
    except BaseException as err:  # noqa: BLE001
        return err, time.monotonic() - start
    raise AssertionError("no error")


def test_a_body_trickling_a_byte_at_a_time_ends_at_the_deadline() -> None:
    long_event = chunk(event(delta({"content": "x" * 200})))

    def trickling_stream(conn: socket.socket, request: Request) -> None:
        conn.sendall(SSE_HEAD + chunk(event(ROLE)))
        trickle(conn, long_event, 0.3, server.stop)

    def trickling_body(conn: socket.socket, request: Request) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
        trickle(conn, b'{"id": "x", "choices": []' + b" " * 4000, 0.3, server.stop)

    with hostile(trickling_stream, trickling_body) as server:
        llm = llm_for(server, timeout=1)
        err, took = _timed(lambda: list(llm.stream_chat(Q)))
        assert isinstance(err, openai.APITimeoutError), err
        assert 0.9 <= took < 3.0, took
        assert str(err).startswith(f"Request timed out: the model server at {server.base_url} did not finish its streamed reply (1 chunk(s) had come) within timeout=1 s, which bounds the whole call")
        err, took = _timed(lambda: llm.chat(Q))
        assert isinstance(err, openai.APITimeoutError) and 0.9 <= took < 3.0, (err, took)
        assert "did not answer within timeout=1 s, which bounds the whole call" in str(err)


def test_keep_alive_comments_forever_end_at_the_deadline_through_a_runner() -> None:
    def keep_alive(conn: socket.socket, request: Request) -> None:
        conn.sendall(SSE_HEAD + chunk(event(ROLE)))
        while not server.stop.is_set():
            conn.sendall(chunk(b": keep-alive\n\n"))
            time.sleep(0.1)

    with hostile(keep_alive) as server:
        agent = ReActAgent.from_tools([add], llm=llm_for(server, timeout=1))
        task = agent.create_task("hi")
        err, took = _timed(lambda: agent.stream_step(task))
        assert isinstance(err, openai.APITimeoutError) and 0.9 <= took < 3.0, (err, took)
        assert len(agent.get_upcoming_steps(task)) == 1 and agent.get_completed_steps(task) == []


def test_retries_share_the_one_deadline() -> None:
    def refuse_slowly(conn: socket.socket, request: Request) -> None:  # a 503 after 0.4 s, retried
        time.sleep(0.4)
        body = b'{"error": {"message": "busy"}}'
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nretry-after-ms: 1\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    with hostile(refuse_slowly) as server:
        err, took = _timed(lambda: llm_for(server, timeout=1, max_retries=10).chat(Q))
        assert isinstance(err, openai.APITimeoutError) and 0.9 <= took < 2.0, (err, took)
        assert 2 <= len(server.requests) <= 4  # retried, but only while time was left


# -- 6: malformed streams name the server, the line and what was expected ---------------------------


SECRET_URL_PARTS = ("PW-s3cret", "TOK-s3cret", KEY)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([b"data: {\"id\": \"x\", choices: [}\n\n"], r"it is not JSON \(Expecting property name enclosed in double quotes\)"),
        ([event(delta({"tool_calls": [{"index": "first", "function": {"name": "add"}}]}))],
         r"a tool call's 'index' is 'first', expected a whole number >= 0"),
        ([event(delta({"content": 42}))], r"expected 'delta.content' to be a string, got a JSON number"),
        ([event([1, 2, 3])], r"expected a JSON object \(a chat.completion.chunk\), got a JSON array"),
        ([b'{"id": "x", "object": "chat.completion", "choices": []}\n'], r"expected server-sent events \('data: \{...\}' lines\)"),
        ([event({"choices": [], "usage": {"prompt_tokens": "many"}})], r"usage.prompt_tokens is 'many', expected a whole number"),
    ],
    ids=["not-json", "index-not-a-number", "content-not-text", "not-an-object", "not-sse", "usage-not-a-number"],
)
def test_a_malformed_stream_names_the_server_the_line_and_what_was_expected(lines: list[bytes], expected: str) -> None:
    def handler(conn: socket.socket, request: Request) -> None:
        conn.sendall(SSE_HEAD + chunk(event(ROLE)) + b"".join(chunk(line) for line in lines) + END)

    with hostile(handler) as server:
        url = server.base_url.replace("http://", "http://me:PW-s3cret@") + "?token=TOK-s3cret"
        with pytest.raises(MalformedReplyError, match=expected) as info:
            list(llm_for(server, base_url=url).stream_chat(Q))
    text = str(info.value)
    assert f"the model server at http://***@127.0.0.1:{server.port}/v1?token=*** sent a streamed reply" in text
    first = lines[0].decode().split("\n")[0]
    assert f"Line: {first[:200]!r}" in text
    assert not [s for s in SECRET_URL_PARTS if s in text]


def test_a_long_offending_line_is_cut_short_and_escaped() -> None:
    line = b"data: {\"content\": \"" + b"\x1b[31m<b>" * 100 + b"\n\n"
    with hostile(lambda conn, req: conn.sendall(SSE_HEAD + chunk(line) + END)) as server:
        with pytest.raises(MalformedReplyError) as info:
            list(llm_for(server).stream_chat(Q))
    text = str(info.value)
    assert "\x1b" not in text and "\\x1b[31m<b>" in text
    assert text.endswith(f"… ({len(line) - 2} characters)")
    assert len(text) < 600


def test_an_error_streamed_mid_reply_is_an_api_error_with_the_secrets_masked() -> None:
    error = {"error": {"message": f"upstream failed for key {KEY} at ?token=TOK-s3cret", "type": "server_error"}}
    with hostile(sse(ROLE, delta({"content": "par"}), error)) as server:
        url = server.base_url + "?token=TOK-s3cret"
        with pytest.raises(openai.APIError) as info:
            list(llm_for(server, base_url=url).stream_chat(Q))
    assert "upstream failed for key sk-…6789 at ?token=***" in str(info.value)
    assert not [s for s in SECRET_URL_PARTS if s in str(info.value) + repr(info.value.body)]


# -- 7 (second half): a character split into surrogate halves across chunks --------------------------


def test_surrogate_halves_in_separate_chunks_come_out_as_one_character() -> None:
    halves = [  # the JSON escapes \ud83d and \ude00, in two events, as some servers split an emoji
        b'data: {"choices": [{"index": 0, "delta": {"content": "I am \\ud83d"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "\\ude00 glad"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "say", "arguments": "{\\"s\\": \\"\\ud83c"}}]}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\\udf89\\"}"}}]}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": " \\ud83d"}, "finish_reason": "stop"}]}\n\n',
    ]
    with hostile(lambda conn, req: conn.sendall(SSE_HEAD + b"".join(chunk(h) for h in halves) + chunk(event("[DONE]")) + END)) as server:
        parts = list(llm_for(server).stream_chat(Q))
    deltas = [p.delta for p in parts]
    assert deltas[:2] == ["I am ", "\U0001f600 glad"]  # the high half waited for its low half
    final = parts[-1].message
    assert final.content == "I am \U0001f600 glad \ud83d"  # a lone half at the end is kept, as it is
    assert deltas[-1] == "\ud83d"  # and the last chunk carries it, so deltas add up to the text
    assert "".join(d or "" for d in deltas) == final.content
    assert final.tool_calls[0].tool_kwargs == {"s": "\U0001f389"}


def test_a_lone_half_at_the_end_is_kept_exactly_in_memory_run_files_and_the_store(tmp_path: Path) -> None:
    lines = [
        b'data: {"choices": [{"index": 0, "delta": {"content": "Cheers \\ud83c"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "\\udf7a and \\ud83d"}, "finish_reason": "stop"}]}\n\n',
    ]
    with hostile(lambda conn, req: conn.sendall(SSE_HEAD + b"".join(chunk(x) for x in lines) + END)) as server:
        agent = FunctionCallingAgent.from_tools([add], llm=llm_for(server), autosave=tmp_path / "run.db")
        response = agent.stream_chat("toast?")
        text = str(response)
    assert text == "Cheers \U0001f37a and \ud83d"
    assert agent.memory.get_all()[-1].content == text
    agent.save(tmp_path / "run.json")
    for path in (tmp_path / "run.json", tmp_path / "run.db"):
        loaded = AgentRunner.load(path)
        assert loaded.memory.get_all()[-1].content == text, path.name


def test_every_kind_of_line_end_and_a_crlf_split_across_chunks() -> None:
    def mixed(conn: socket.socket, request: Request) -> None:
        words = [json.dumps(delta({"content": w})).encode() for w in ("one ", "two ", "three")]
        body = [
            b"data: " + words[0] + b"\r",  # CRLF, split between two chunks
            b"\n\r\n: a comment\r\r",  # ...then a blank line; CR alone ends lines too
            b"data: " + words[1] + b"\r\r",
            b"event: message\nid: 7\nretry: 100\ndata: " + words[2] + b"\n\n",
            b"data: " + json.dumps(finish()).encode() + b"\r\n\r\ndata: [DONE]",  # no blank line at the very end
        ]
        conn.sendall(SSE_HEAD)
        for b in body:  # one read each: the client gets the CR and its LF apart
            conn.sendall(chunk(b))
            time.sleep(0.05)
        conn.sendall(END)

    with hostile(mixed) as server:
        parts = list(llm_for(server).stream_chat(Q))
    assert [p.delta for p in parts[:-1]] == ["one ", "two ", "three"]
    assert parts[-1].message.content == "one two three"
