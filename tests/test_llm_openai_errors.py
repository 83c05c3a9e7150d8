"""What a learner reads when the model server cannot be reached (real openai client, real sockets)."""

from __future__ import annotations

import socket
import threading

import openai
import pytest

from nbagent import ChatMessage, MessageRole, OpenAILLM

Q = [ChatMessage(role=MessageRole.USER, content="hi")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


def test_a_closed_local_port_names_the_url_and_the_likely_cause() -> None:
    port = _closed_port()
    llm = OpenAILLM(model="m", base_url=f"http://user:hunter2@127.0.0.1:{port}/v1?api-key=sk-in-url-123",
                    api_key="sk-supersecret-abcdef123456", max_retries=0, timeout=5)
    with pytest.raises(openai.APIConnectionError) as info:  # the openai type is kept
        llm.chat(Q)
    text = str(info.value)
    assert text.startswith(f"Connection error: could not reach the model server at http://***@127.0.0.1:{port}/v1?api-key=***")
    assert "ConnectError" in text and "ollama serve" in text and "/v1" in text
    for secret in ("hunter2", "sk-in-url-123", "sk-supersecret-abcdef123456"):
        assert secret not in text and secret not in repr(info.value)
    with pytest.raises(openai.APIConnectionError, match="could not reach the model server"):
        list(llm.stream_chat(Q))


def test_a_server_that_never_answers_is_a_timeout_naming_the_url() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accepts, reads nothing, answers nothing
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        llm = OpenAILLM(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError, match=rf"Request timed out: the model server at http://127.0.0.1:{port}/v1 did not answer within timeout=0.5 s, which bounds the whole call"):
            llm.chat(Q)
    finally:
        stop.set()
        t.join(2)
        for c in accepted:
            c.close()
        server.close()
