"""MCP tools against real servers this project did not write.

``mcp-server-time`` and ``mcp-server-git`` (PyPI) over stdio, and a server built with the SDK's
MCPServer (FastMCP's name in mcp 2) in ``tests/mcp_test_server.py``, over streamable HTTP on
127.0.0.1 and over stdio. Scripted models choose the calls, so every run is the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    BasicMCPClient,
    FunctionCallingAgentWorker,
    FunctionLLM,
    MCPServerError,
    McpTool,
    McpToolSpec,
    MultimodalReActAgentWorker,
    ReActAgentWorker,
    ScriptedLLM,
    ToolSelection,
    tool_call,
)
from nbagent.tools import acall_tool

HERE = Path(__file__).resolve().parent
TEST_SERVER = str(HERE / "mcp_test_server.py")
PY = sys.executable


def children(pid: int | None = None) -> set[int]:
    """Live child processes of ``pid`` (default: this one), from /proc."""
    pid = os.getpid() if pid is None else pid
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: set[int], within: float = 5.0) -> set[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.05)
    return {p for p in pids if alive(p)}


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in pairs], "content": None}


# ----- servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def time_client() -> Iterator[BasicMCPClient]:
    client = BasicMCPClient(PY, ["-m", "mcp_server_time", "--local-timezone", "UTC"], timeout=20)
    yield client
    client.close()


@pytest.fixture(scope="module")
def time_tools(time_client: BasicMCPClient) -> dict[str, McpTool]:
    return {t.name: t for t in McpToolSpec(time_client).to_tool_list()}


class HttpServer:
    """tests/mcp_test_server.py over streamable HTTP on 127.0.0.1, killable and restartable."""

    def __init__(self, transport: str = "http") -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.transport = transport
        self.url = f"http://127.0.0.1:{self.port}/{'mcp' if transport == 'http' else 'sse'}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [PY, TEST_SERVER, self.transport, str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the test MCP server did not come up")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    yield server
    server.kill()


@pytest.fixture
def http_client(http_server: HttpServer) -> Iterator[BasicMCPClient]:
    if http_server.proc is None:
        http_server.start()
    client = BasicMCPClient(http_server.url, timeout=5)
    yield client
    client.close()


def tools_of(client: BasicMCPClient, **kw: Any) -> dict[str, McpTool]:
    return {t.name: t for t in McpToolSpec(client, **kw).to_tool_list()}


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.org"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "notes.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "Add the notes"], check=True, env=env)
    (repo / "notes.txt").write_text("hello\nworld\n")  # an unstaged change for git_diff_unstaged
    return repo


# ----- listing -------------------------------------------------------------------------------


def test_time_server_tools_carry_the_servers_schema(time_tools: dict[str, McpTool]) -> None:
    assert set(time_tools) == {"get_current_time", "convert_time"}
    convert = time_tools["convert_time"]
    params = convert.metadata.parameters()
    assert params["required"] == ["source_timezone", "time", "target_timezone"]
    assert params["properties"]["time"]["type"] == "string"
    assert "24-hour" in params["properties"]["time"]["description"]
    assert convert.metadata.description == "Convert time between timezones"
    assert convert.metadata.output_schema is not None  # the server declares structured output
    openai = convert.metadata.to_openai_tool()
    assert openai["function"]["name"] == "convert_time" and openai["function"]["parameters"] == params
    assert convert.server == "mcp_server_time"
    assert repr(convert) == "McpTool(name='convert_time', server='mcp_server_time')"


def test_allowed_tools_filters_and_names_what_is_missing(time_client: BasicMCPClient) -> None:
    tools = McpToolSpec(time_client, allowed_tools=["convert_time"]).to_tool_list()
    assert [t.name for t in tools] == ["convert_time"]
    with pytest.raises(ValueError, match=r"\['nope'\].*convert_time.*get_current_time"):
        McpToolSpec(time_client, allowed_tools=["convert_time", "nope"]).to_tool_list()


def test_async_listing_and_resources(http_client: BasicMCPClient) -> None:
    async def main() -> list[McpTool]:
        return await McpToolSpec(http_client, include_resources=True).to_tool_list_async()

    tools = {t.name: t for t in asyncio.run(main())}
    assert {"add", "slow", "red_pixel", "fail", "read_readme"} <= set(tools)
    assert tools["add"].metadata.parameters()["required"] == ["a", "b"]
    assert tools["add"].metadata.parameters()["properties"]["a"]["description"] == "the first term"
    out = tools["read_readme"].call()
    assert out.content == "MCP resources are read like this." and not out.is_error


def test_one_call_helpers_and_headers_reach_an_http_server(http_server: HttpServer) -> None:
    from nbagent.mcp import aget_tools_from_mcp_url, get_tools_from_mcp_url

    if http_server.proc is None:
        http_server.start()
    client = BasicMCPClient(http_server.url, headers={"X-Nbagent-Test": "hello"}, timeout=5)
    try:
        [header] = get_tools_from_mcp_url(http_server.url, client=client, allowed_tools=["header"])
        assert header.call(name="X-Nbagent-Test").content == "hello"
    finally:
        client.close()
    tools = asyncio.run(aget_tools_from_mcp_url(http_server.url, allowed_tools=["add"]))
    try:
        assert [t.name for t in tools] == ["add"] and tools[0].call(a=1, b=2).raw_output.structured["total"] == 3
    finally:
        tools[0].mcp_client.close()


def test_the_older_sse_transport() -> None:
    server = HttpServer("sse")
    server.start()
    client = BasicMCPClient(server.url, headers={"X-Nbagent-Test": "sse"}, timeout=5)
    try:
        assert client.transport == "sse"
        tools = tools_of(client, allowed_tools=["add", "header"])
        assert tools["add"].call(a=20, b=22).raw_output.structured == {"total": 42, "terms": [20, 22]}
        assert tools["header"].call(name="X-Nbagent-Test").content == "sse"
    finally:
        client.close()
        server.kill()


# ----- calling through the workers -----------------------------------------------------------


def test_function_calling_worker_uses_the_time_server(time_tools: dict[str, McpTool]) -> None:
    llm = ScriptedLLM([
        tool_call("convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"),
        "It is 21:00 in Tokyo.",
    ])
    runner = AgentRunner(FunctionCallingAgentWorker(list(time_tools.values()), llm))
    response = runner.chat("12:00 UTC in Tokyo?")
    assert str(response) == "It is 21:00 in Tokyo."
    [out] = response.sources
    assert not out.is_error and out.raw_output.server == "mcp_server_time"
    target = out.raw_output.structured["target"]
    assert target["timezone"] == "Asia/Tokyo" and target["datetime"].endswith("T21:00:00+09:00")
    assert out.raw_output.structured["time_difference"] == "+9.0h"
    # the model was offered the server's schema and read the server's text
    offered = {t.name: t for t in llm.requests[0].tools}
    assert offered["convert_time"].parameters()["required"] == ["source_timezone", "time", "target_timezone"]
    tool_msg = llm.requests[1].messages[-1]
    assert tool_msg.role.value == "tool" and json.loads(tool_msg.text)["target"]["timezone"] == "Asia/Tokyo"


def test_react_worker_uses_the_git_server(git_repo: Path) -> None:
    client = BasicMCPClient(PY, ["-m", "mcp_server_git", "--repository", str(git_repo)], timeout=20)
    try:
        tools = McpToolSpec(client, allowed_tools=["git_log", "git_diff_unstaged", "git_status"]).to_tool_list()
        args = json.dumps({"repo_path": str(git_repo)})
        llm = ScriptedLLM([
            f"Thought: look at the history.\nAction: git_log\nAction Input: {args}",
            f"Thought: and the working tree.\nAction: git_diff_unstaged\nAction Input: {args}",
            "Thought: done.\nAnswer: one commit, 'Add the notes'; 'world' is not committed yet.",
        ])
        runner = AgentRunner(ReActAgentWorker(tools, llm))
        response = runner.chat("What happened in the repo?")
        log, diff = response.sources
        assert "Add the notes" in log.content and log.raw_output.server == "mcp_server_git"
        assert "+world" in diff.content
        # the ReAct prompt describes the tools with the server's schema
        system = llm.requests[0].messages[0].text
        assert "git_log" in system and '"repo_path"' in system
        assert "Add the notes" in llm.requests[1].prompt  # the observation reached the model
    finally:
        client.close()


def test_workflow_function_agent_over_http(http_client: BasicMCPClient) -> None:
    from nbagent.workflow import AgentWorkflow, FunctionAgent

    tools = McpToolSpec(http_client, allowed_tools=["add", "fail"]).to_tool_list()
    llm = ScriptedLLM([calls(("add", {"a": 2, "b": 40}), ("fail", {"reason": "no"})), "2 + 40 = 42"])
    workflow = AgentWorkflow([FunctionAgent(name="calc", description="adds", llm=llm, tools=tools)])

    async def main() -> Any:
        return await workflow.run(user_msg="2 + 40?")

    result = asyncio.run(main())
    assert "42" in str(result)
    replies = [m for m in llm.requests[1].messages if m.role.value == "tool"]
    assert json.loads(replies[0].text) == {"total": 42, "terms": [2, 40]}
    assert replies[1].text.startswith("Error") and "refused: no" in replies[1].text


def test_parallel_calls_overlap_on_one_session(http_client: BasicMCPClient) -> None:
    tools = list(tools_of(http_client).values())
    started = http_client.sessions_started
    reply = calls(*[("slow", {"seconds": 0.6}) for _ in range(4)], ("add", {"a": 1, "b": 2}))
    runner = AgentRunner(FunctionCallingAgentWorker(tools, ScriptedLLM([reply, "done"])))
    t0 = time.perf_counter()
    response = runner.chat("wait four times")
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.8, f"four 0.6 s calls took {elapsed:.2f} s: not concurrent"
    assert [s.content for s in response.sources][:4] == ["waited 0.6 s"] * 4
    assert json.loads(response.sources[4].content)["total"] == 3
    assert http_client.sessions_started == started  # one session served them all


# ----- arguments, results, errors ------------------------------------------------------------


def test_arguments_are_checked_before_anything_is_sent(http_server: HttpServer) -> None:
    client = BasicMCPClient(http_server.url, timeout=5)
    tools = tools_of(client)
    client.close()
    out = tools["add"].call(a="two", b=3)
    assert out.is_error and "a: 'two' is not of type 'integer'" in out.content
    assert '"a": {' in out.content  # the expected schema is shown to the model
    out = tools["add"].call(a=1)
    assert out.is_error and "'b' is a required property" in out.content
    from nbagent.tools import RAW_ARGUMENTS_KEY

    raw = ToolSelection(tool_id="c1", tool_name="add", tool_kwargs={RAW_ARGUMENTS_KEY: '{"a": 1, "b":'})
    out = asyncio.run(acall_tool(tools, raw))  # the model's arguments were not JSON
    assert out.is_error and "not valid JSON" in out.content and '"a"' in out.content
    assert not client.is_connected  # nothing was sent: no session was opened for the bad calls
    assert tools["add"].call(a=1, b=1).raw_output.structured == {"total": 2, "terms": [1, 1]}
    client.close()


def test_error_results_and_error_replies_reach_the_model(http_client: BasicMCPClient) -> None:
    tools = tools_of(http_client)
    out = tools["fail"].call(reason="not today")
    assert out.is_error and "refused: not today" in out.content and out.raw_output.is_error
    ghost = McpTool(http_client, tools["add"].metadata.model_copy(update={"name": "ghost", "mcp_name": "ghost"}))
    out = asyncio.run(acall_tool({"ghost": ghost}, ToolSelection(tool_id="1", tool_name="ghost", tool_kwargs={"a": 1, "b": 1})))
    assert out.is_error and "ghost" in out.content and out.tool_call_id == "1"


def test_an_image_result_reaches_the_multimodal_model(http_client: BasicMCPClient) -> None:
    tools = tools_of(http_client, allowed_tools=["red_pixel"])
    seen: list[Any] = []

    def model(messages: list[Any], tools: Any) -> str:
        seen.append(messages)
        if len(seen) == 1:
            return "Thought: draw.\nAction: red_pixel\nAction Input: {}"
        return "Thought: I see it.\nAnswer: a red pixel"

    png = HERE / "pixel.png"
    worker = MultimodalReActAgentWorker(list(tools.values()), FunctionLLM(model))
    runner = AgentRunner(worker)
    task = runner.create_task("what is it?", extra_state={"image_docs": []})
    runner.run_step(task)
    out = runner.get_completed_steps(task)[-1].tool_outputs[0]
    assert out.raw_output.images[0].mime_type == "image/png" and "[image 1: image/png" in out.content
    runner.run_step(task)
    observation = seen[1][-1]
    parts = observation.content
    assert isinstance(parts, list) and parts[0]["type"] == "text" and "Observation" in parts[0]["text"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    del png


def test_a_call_needing_approval_waits_and_an_edit_is_checked_against_the_servers_schema(
    http_client: BasicMCPClient,
) -> None:
    tools = McpToolSpec(http_client, allowed_tools=["add", "slow"], requires_approval=["add"]).to_tool_list()
    assert [(t.name, t.requires_approval) for t in tools] == [("add", True), ("slow", False)]
    llm = ScriptedLLM([tool_call("add", a=1, b=2), "done"])
    runner = AgentRunner(FunctionCallingAgentWorker(tools, llm))
    task = runner.create_task("add")
    out = runner.run_step(task)
    assert out.tool_outputs == ()  # nothing was sent to the server
    (pending,) = runner.pending_approvals(task)
    with pytest.raises(ValueError, match=r"invalid arguments for tool 'add': a: 'x' is not of type 'integer'"):
        runner.approve(task, pending.call_id, {"a": "x", "b": 2})
    runner.approve(task, pending.call_id, {"a": 5, "b": 6}, by="ana")
    out = runner.run_step(task)
    assert out.tool_outputs[0].raw_output.structured == {"total": 11, "terms": [5, 6]}
    with pytest.raises(ValueError, match=r"requires_approval names \['nope'\]"):
        McpToolSpec(http_client, requires_approval=["nope"]).to_tool_list()
    with pytest.raises(TypeError, match="requires_approval"):
        McpToolSpec(http_client, requires_approval="add")  # type: ignore[arg-type]


def test_cancelling_a_call_cancels_the_request_and_keeps_the_session(http_client: BasicMCPClient) -> None:
    slow = tools_of(http_client, allowed_tools=["slow"])["slow"]
    started = http_client.sessions_started

    async def impatient() -> float:
        t0 = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow.acall(seconds=5), 0.3)  # what Stop or an interrupt does
        return time.perf_counter() - t0

    assert asyncio.run(impatient()) < 1.5
    assert slow.call(seconds=0.1).content == "waited 0.1 s"
    assert http_client.sessions_started == started


# ----- failures: a server that dies or stalls ------------------------------------------------


def test_a_server_killed_mid_task_fails_the_step_and_a_retry_works(http_server: HttpServer) -> None:
    if http_server.proc is None:
        http_server.start()
    client = BasicMCPClient(http_server.url, timeout=10)
    try:
        tools = list(tools_of(client, allowed_tools=["add", "slow"]).values())
        llm = ScriptedLLM([
            tool_call("add", a=1, b=2),
            tool_call("slow", seconds=3),  # the server is killed during this call
            tool_call("slow", seconds=0.1),  # the same step, retried once the server is back
            "done",
        ])
        runner = AgentRunner(FunctionCallingAgentWorker(tools, llm))
        task = runner.create_task("go")
        runner.run_step(task)
        state = runner.state_of(task)
        done_before = len(state.completed_steps) if hasattr(state, "completed_steps") else None
        killer = subprocess.Popen([PY, "-c", f"import time,os,signal; time.sleep(0.5); os.kill({http_server.proc.pid}, signal.SIGKILL)"])
        t0 = time.perf_counter()
        with pytest.raises(MCPServerError, match="connection to the server was lost") as err:
            runner.run_step(task)
        assert time.perf_counter() - t0 < 3, "the death was noticed only at the timeout"
        killer.wait()
        assert "calling tool 'slow'" in str(err.value)
        state = runner.state_of(task)
        assert len(state.step_queue) == 1 and state.failures[-1].error_type == "MCPServerError"
        if done_before is not None:
            assert len(state.completed_steps) == done_before
        http_server.proc.wait()
        http_server.proc = None
        http_server.start()
        runner.run_step(task)  # the retry: a new session to the restarted server
        assert runner.get_completed_steps(task)[-1].tool_outputs[0].content == "waited 0.1 s"
        assert str(runner.run_step(task).output) == "done"
        assert client.sessions_started == 2
    finally:
        client.close()


def test_a_dead_stdio_server_is_restarted_by_the_next_call() -> None:
    others = children()
    client = BasicMCPClient(PY, [TEST_SERVER], timeout=10)
    try:
        tools = tools_of(client, allowed_tools=["pid", "add"])
        first = int(tools["pid"].call().content)
        assert first in children()
        os.kill(first, signal.SIGKILL)
        with pytest.raises(MCPServerError, match="connection to the server was lost"):
            tools["add"].call(a=1, b=1)
        second = int(tools["pid"].call().content)
        assert second != first and client.sessions_started == 2
    finally:
        client.close()
    assert wait_gone(children() - others, 1.0) == set()


def test_a_slow_call_past_the_timeout_fails_the_step_and_keeps_the_session(http_server: HttpServer) -> None:
    if http_server.proc is None:
        http_server.start()
    client = BasicMCPClient(http_server.url, timeout=1)
    try:
        tools = list(tools_of(client, allowed_tools=["slow"]).values())
        llm = ScriptedLLM([tool_call("slow", seconds=4), tool_call("slow", seconds=0.1), "done"])
        runner = AgentRunner(FunctionCallingAgentWorker(tools, llm))
        task = runner.create_task("go")
        t0 = time.perf_counter()
        with pytest.raises(MCPServerError, match=r"no answer within timeout=1 s"):
            runner.run_step(task)
        assert time.perf_counter() - t0 < 3
        assert len(runner.state_of(task).step_queue) == 1
        runner.run_step(task)  # retried: the model now asks for a short wait
        assert runner.get_completed_steps(task)[-1].tool_outputs[0].content == "waited 0.1 s"
        assert client.sessions_started == 1  # the server still answered: the session was kept
    finally:
        client.close()


def test_a_hung_stdio_server_is_replaced() -> None:
    client = BasicMCPClient(PY, [TEST_SERVER], timeout=1, startup_timeout=30)
    try:
        tools = tools_of(client, allowed_tools=["pid"])
        first = int(tools["pid"].call().content)
        os.kill(first, signal.SIGSTOP)  # hung: it answers nothing, not even a listing
        t0 = time.perf_counter()
        with pytest.raises(MCPServerError, match="stopped answering"):
            tools["pid"].call()
        assert time.perf_counter() - t0 < 3.5  # the call timed out, the probe too; no waiting for the kill
        second = int(tools["pid"].call().content)  # a new server, while the hung one is shut down
        assert second != first
    finally:
        client.close()
    assert not alive(first) and not alive(second)  # close() waited for the SDK to kill the hung one


def test_clear_errors_for_servers_that_cannot_start() -> None:
    with pytest.raises(MCPServerError, match=r"could not start.*no-such-mcp-server"):
        BasicMCPClient("no-such-mcp-server-command", timeout=5).list_tools_sync()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MCPServerError, match=rf"could not start.*127.0.0.1:{port}"):
        BasicMCPClient(f"http://127.0.0.1:{port}/mcp", timeout=5).list_tools_sync()
    # a command that is not an MCP server: it says so on stderr, and the error shows it
    noisy = BasicMCPClient(PY, ["-c", "import sys; print('not a server', file=sys.stderr); sys.exit(3)"], timeout=5)
    with pytest.raises(MCPServerError, match=r"(?s)could not start.*not a server"):
        noisy.list_tools_sync()


def test_bad_arguments_to_the_client_and_the_spec() -> None:
    with pytest.raises(ValueError, match="command_or_url"):
        BasicMCPClient("")
    with pytest.raises(ValueError, match="args are for a command"):
        BasicMCPClient("http://127.0.0.1:1/mcp", ["x"])
    with pytest.raises(TypeError, match="list of strings"):
        BasicMCPClient("uvx", "mcp-server-time")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be"):
        BasicMCPClient("uvx", timeout=0)
    with pytest.raises(TypeError, match="BasicMCPClient"):
        McpToolSpec("uvx")  # type: ignore[arg-type]


# ----- sessions: any caller, any loop, no orphans --------------------------------------------


def test_one_session_for_sync_async_and_running_loop_callers(time_client: BasicMCPClient, time_tools: dict[str, McpTool]) -> None:
    convert = time_tools["convert_time"]
    args = {"source_timezone": "UTC", "time": "06:30", "target_timezone": "Asia/Kolkata"}
    assert convert.call(**args).raw_output.structured["target"]["datetime"].endswith("T12:00:00+05:30")
    before = time_client.sessions_started  # the call above opened a session if none was open

    async def from_a_loop() -> list[str]:
        inside = convert.call(**args).content  # sync call inside a running loop (Jupyter's case)
        awaited = await convert.acall(**args)
        return [inside, awaited.content]

    first = asyncio.run(from_a_loop())
    second = asyncio.run(from_a_loop())  # another event loop
    assert len({*first, *second}) == 1
    assert time_client.sessions_started == before


def time_servers() -> set[int]:
    """Our child processes running mcp-server-time."""
    found = set()
    for pid in children():
        try:
            if b"mcp_server_time" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            pass
    return found


def test_no_process_left_after_close_or_runner_reset(time_client: BasicMCPClient, time_tools: dict[str, McpTool]) -> None:
    runner = AgentRunner(FunctionCallingAgentWorker(list(time_tools.values()), ScriptedLLM([
        tool_call("convert_time", source_timezone="UTC", time="00:00", target_timezone="UTC"), "ok",
    ] * 2)))
    runner.chat("go")
    server = time_servers()
    assert len(server) == 1 and time_client.is_connected
    started = time_client.sessions_started
    runner.reset()
    assert not time_client.is_connected and wait_gone(server, 1.0) == set()
    runner.chat("again")  # the session reopens lazily
    assert time_client.sessions_started == started + 1
    server = time_servers()
    assert len(server) == 1
    time_client.close()
    assert wait_gone(server, 1.0) == set() and time_servers() == set()


def test_no_process_left_when_the_kernel_restarts() -> None:
    """A Jupyter kernel (a subprocess) restarted with a session open: its interpreter exits and
    the client closes at exit. The server lingers after its stdin closes (as a badly behaved
    one would), so only that close, which ends in a kill, can stop it in time."""
    from jupyter_client import KernelManager

    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from test_mcp import children
        from nbagent import BasicMCPClient
        client = BasicMCPClient(sys.executable, [{TEST_SERVER!r}, "--linger"], timeout=20)
        client.list_tools_sync()  # the server runs now; nothing closes it
        print(*children())
    """)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        printed: list[str] = []
        reply = kc.execute_interactive(
            code, timeout=60,
            output_hook=lambda m: printed.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None,
        )
        kc.stop_channels()
        assert reply["content"]["status"] == "ok", printed
        pids = {int(p) for p in "".join(printed).split()}
        assert len(pids) == 1 and all(alive(p) for p in pids)
        km.restart_kernel(now=False)  # what the Restart button does
        assert wait_gone(pids, 5.0) == set()
    finally:
        km.shutdown_kernel(now=True)


# ----- views ---------------------------------------------------------------------------------


def test_views_name_the_server(time_tools: dict[str, McpTool], time_client: BasicMCPClient) -> None:
    from nbagent.viz.dot import task_to_dot
    from nbagent.viz.html import step_output_html, timeline_html, tool_html
    from nbagent.viz.mcp_html import mcp_tools_html

    llm = ScriptedLLM([tool_call("convert_time", source_timezone="UTC", time="12:00", target_timezone="UTC"), "ok"])
    runner = AgentRunner(FunctionCallingAgentWorker(list(time_tools.values()), llm))
    task = runner.create_task("go")
    out = runner.run_step(task)
    card = step_output_html(out)
    assert "MCP · mcp_server_time" in card
    assert "call (mcp_server_time):" in timeline_html(runner.state_of(task))
    dot = task_to_dot(runner.state_of(task))
    assert "call (mcp_server_time):" in dot and "convert_time(" in dot
    tool_card = tool_html(time_tools["convert_time"])
    assert "MCP server" in tool_card and "source_timezone" in tool_card
    listing = mcp_tools_html("mcp_server_time", list(time_tools.values()))
    assert "2 tools" in listing and "convert_time(source_timezone: string, time: string, target_timezone: string)" in listing
    assert "structured output (JSON schema)" in listing
    from nbagent.viz.html import worker_html

    assert "convert_time (MCP: mcp_server_time)" in worker_html(runner.agent_worker)
    client_card = time_client._repr_html_()
    assert "connected" in client_card and "get_current_time(timezone: string)" in client_card


def test_views_escape_what_the_server_sent(http_client: BasicMCPClient) -> None:
    from nbagent.viz.dot import task_to_dot
    from nbagent.viz.html import step_output_html
    from nbagent.viz.mcp_html import mcp_tools_html

    tools = tools_of(http_client, allowed_tools=["fail"])
    fail = tools["fail"]
    fail.metadata.server = '<b onmouseover="x">evil</b>'
    fail.metadata.description = "<script>alert(1)</script>"
    llm = ScriptedLLM([tool_call("fail", reason="<img src=x>"), "ok"])
    runner = AgentRunner(FunctionCallingAgentWorker([fail], llm))
    task = runner.create_task("go")
    out = runner.run_step(task)
    html = step_output_html(out) + mcp_tools_html(fail.server, [fail])
    assert "<b onmouseover" not in html and "<script>" not in html and "<img src=x>" not in html
    assert "&lt;b onmouseover" in html
    dot = task_to_dot(runner.state_of(task))
    assert "<b onmouseover" not in dot and "<img" not in dot


def test_a_run_with_mcp_results_saves_and_loads(time_tools: dict[str, McpTool], tmp_path: Path) -> None:
    llm = ScriptedLLM([tool_call("convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"), "ok"])
    runner = AgentRunner(FunctionCallingAgentWorker(list(time_tools.values()), llm))
    runner.chat("go")
    path = tmp_path / "run.json"
    runner.save(path)
    loaded = AgentRunner.load(path, FunctionCallingAgentWorker(list(time_tools.values()), ScriptedLLM([])))
    [task] = loaded.get_completed_tasks()
    result = loaded.get_completed_steps(task)[0].tool_outputs[0].raw_output
    assert type(result).__name__ == "McpToolResult" and result.server == "mcp_server_time"
    assert result.structured["target"]["timezone"] == "Asia/Tokyo"
