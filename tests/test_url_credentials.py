"""Credentials in server URLs never leave the servers they are for.

An MCP server URL ``http://user:PW@host/mcp?token=...`` and an OpenAI-compatible
``base_url=http://user:pw@host/v1?token=...``, against real servers on 127.0.0.1 that echo
what they get (headers, URL) and against a port where nothing listens. After the failures a
person would meet, the run is saved to .json and to a .db store and the report is built; no
byte of any of them, nor any repr, HTML view, error, failure record or log line, holds a
secret. The OpenAI client never sends URL user info (no ``Authorization: Basic``), only the key.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from nbagent import (
    AgentRunner,
    BasicMCPClient,
    ChatMessage,
    FunctionCallingAgent,
    MCPServerError,
    McpTool,
    McpToolSpec,
    MessageRole,
    OpenAILLM,
    ScriptedLLM,
    tool_call,
    write_report,
)

try:
    from tests.hostile_http import Request, hostile
except ImportError:  # tests/ is not a package
    from hostile_http import Request, hostile  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
HOSTILE_MCP = str(HERE / "mcp_hostile_server.py")
PY = sys.executable

MCP_PW, MCP_TOKEN, HEADER_KEY = "mcpPW-4471", "mcpTOK-88213", "hdrKEY-5521"
LLM_PW, LLM_TOKEN, API_KEY = "llmPW-9032", "llmTOK-23117", "sk-llm-APIKEY-77124-abcd"
SECRETS = [
    MCP_PW, MCP_TOKEN, HEADER_KEY, LLM_PW, LLM_TOKEN, API_KEY,
    base64.b64encode(f"bob:{MCP_PW}".encode()).decode(),
    base64.b64encode(f"alice:{LLM_PW}".encode()).decode(),
]


def leaks(text: str | bytes) -> list[str]:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return [s for s in SECRETS if s.encode() in data]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def echo_mcp() -> Iterator[int]:
    """The hostile MCP server over streamable HTTP; its one tool echoes the request's URL and headers."""
    port = _free_port()
    tools = [{"name": "echo", "inputSchema": {"type": "object", "properties": {"say": {"type": "string"}}}}]
    env = {"HOSTILE_TOOLS": json.dumps(tools), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([PY, HOSTILE_MCP, "http", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_url_credentials_stay_out_of_views_errors_records_run_files_and_the_report(
    echo_mcp: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # an MCP server with user info, a token and a key header in its URL: the tool echoes them
    client = BasicMCPClient(
        f"http://bob:{MCP_PW}@127.0.0.1:{echo_mcp}/mcp?token={MCP_TOKEN}",
        headers={"X-Api-Key": HEADER_KEY}, timeout=20,
    )
    down = BasicMCPClient(f"http://bob:{MCP_PW}@127.0.0.1:{_free_port()}/mcp?token={MCP_TOKEN}", timeout=5)
    try:
        for c in (client, down):
            assert not leaks(repr(c)) and not leaks(c._repr_html_())
        assert repr(down).startswith("BasicMCPClient('127.0.0.1:") and "http://***@127.0.0.1:" in repr(down)
        assert "?token=***" in repr(down)
        echo = McpToolSpec(client).to_tool_list()[0]
        seen = echo.call(say="hi")
        assert not seen.is_error and "'x-api-key': '***'" in seen.content  # the server did get it...
        assert "authorization': 'Basic ***'" in seen.content and "token=***" in seen.content
        assert not leaks(seen.content) and not leaks(json.dumps(seen.raw_output.model_dump()))  # ...the run does not
        with pytest.raises(MCPServerError) as refused:
            down.list_tools_sync()
        assert "could not start a session (http://***@127.0.0.1:" in str(refused.value)
        err: BaseException | None = refused.value
        while err is not None:  # the failure record keeps the whole chain as text
            assert not leaks(str(err)), err
            err = err.__cause__ or err.__context__

        # a run: the model calls the echo tool, then a tool whose server is down (the step fails)
        dead = McpTool(down, echo.metadata.model_copy(update={"name": "dead_echo"}))
        llm = ScriptedLLM([tool_call("echo", say="x"), tool_call("dead_echo", say="y")])
        agent = FunctionCallingAgent.from_tools([echo, dead], llm=llm)
        task = agent.create_task("echo please")
        agent.run_step(task)
        with pytest.raises(MCPServerError):
            agent.run_step(task)

        # an OpenAI-compatible server that echoes headers and URL in its errors
        def echo_back(conn: socket.socket, request: Request) -> None:
            body = json.dumps({"error": {"message": f"rejected {request.path} with headers {request.headers}"}}).encode()
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

        with hostile(echo_back) as server:
            url = server.base_url.replace("http://", f"http://alice:{LLM_PW}@") + f"?token={LLM_TOKEN}"
            model = OpenAILLM(model="m", base_url=url, api_key=API_KEY, max_retries=0, timeout=5)
            assert not leaks(repr(model)) and not leaks(model._repr_html_())
            model_agent = FunctionCallingAgent.from_tools([], llm=model)
            model_task = model_agent.create_task("hi")
            with pytest.raises(openai.BadRequestError) as bad:
                model_agent.run_step(model_task)
            with pytest.raises(openai.BadRequestError):
                list(model.stream_chat([ChatMessage(role=MessageRole.USER, content="x")]))
            model.close()
        sent = server.requests[0]
        assert "authorization" in sent.headers and not sent.headers["authorization"].startswith("Basic")
        assert sent.headers["authorization"] == f"Bearer {API_KEY}"  # the key, never URL credentials
        assert f"token={LLM_TOKEN}" in sent.path  # the query does go: a gateway may need it
        assert not leaks(str(bad.value)) and "Bearer sk-…abcd" in str(bad.value)
        failure = model_agent.state_of(model_task).failures[-1]
        assert not leaks(failure.message + failure.traceback)

        # everything saved and reported
        runs = []
        for runner in (agent, model_agent):
            for suffix in ("json", "db"):
                runs.append(runner.save(tmp_path / f"{len(runs)}.{suffix}"))
        for path in list(runs):
            runs.append(write_report(path, path=tmp_path / f"{path.name}.html"))
        runs.append(write_report(agent, path=tmp_path / "live.html"))
        for state in (agent.state_of(task), model_agent.state_of(model_task)):
            for f in state.failures:
                assert not leaks(f.message + f.traceback), f.message
        on_disk = sorted(tmp_path.iterdir())
        assert len(on_disk) >= 9
        for path in on_disk:
            assert not leaks(path.read_bytes()), path.name
        # the report shows the failures, in words without the secrets
        report = (tmp_path / "live.html").read_text()
        assert "MCPServerError" in report and "http://***@127.0.0.1:" in report
        assert AgentRunner.load(runs[1]).state_of(task.task_id).failures  # the .db store kept the record
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "127.0.0.1" in logged  # the HTTP stack did log its requests...
        assert not leaks(logged)  # ...with the secrets masked
    finally:
        client.close()
        down.close()
