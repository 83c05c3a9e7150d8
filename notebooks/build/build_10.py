"""Build notebooks/10_mcp_tools.ipynb: an agent uses the tools of a real MCP server.

The server is ``mcp-server-time`` from PyPI, started over stdio; a scripted model chooses the
calls. The server dates its answers with today's date: ``tests/nbval_sanitize.cfg`` hides the
date (and the weekday) and nothing else, and the calls are between time zones without daylight
saving time (UTC, Asia/Tokyo, Asia/Kolkata), so every other figure is the same on any day.

Run from the repo root: ``.venv/bin/python notebooks/build/build_10.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "10_mcp_tools"

CELLS = [
    md("""
# 10 · Tools from an MCP server

The **Model Context Protocol** (MCP) is how agents get real tools today: a *server* (a small
program, or a web service) lists its tools with their JSON schemas, and answers calls to them.
There are servers for files, git, databases, browsers, calendars...

nbagent speaks MCP through the official `mcp` Python SDK, with the names LlamaIndex uses:

- `BasicMCPClient(command, args)` starts a server over **stdio**; `BasicMCPClient("http://...")`
  reaches one over **streamable HTTP**;
- `McpToolSpec(client).to_tool_list()` turns the server's tools into ordinary nbagent tools,
  which every agent accepts.

Here the server is [`mcp-server-time`](https://pypi.org/project/mcp-server-time/), a real one
from PyPI (it is installed with `pip install "nbagent[mcp]"` in this environment). The model is
a `ScriptedLLM` that makes prepared calls; one marked cell switches to a real model.
"""),
    browser_cell(cannot="MCP servers, which run as child processes (a browser starts none)"),
    code("""
import sys

from nbagent import BasicMCPClient, McpToolSpec, OpenAIAgent, ScriptedLLM, seed_ids, tool_call

seed_ids(0)
"""),
    md("""
## Start the server

A stdio server is a command. Elsewhere you would write `BasicMCPClient("uvx", ["mcp-server-time"])`;
here the server is already installed in this Python, so we run it with `sys.executable -m`.
`--local-timezone UTC` makes the server's idea of "local" the same on every machine.

Nothing starts yet: the session opens at the first request and is then reused by every call.
It belongs to the client (not to an agent), runs on an event loop of its own, and works from
plain cells and from `await`.
"""),
    code("""
client = BasicMCPClient(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], timeout=20)
client
"""),
    md("""
## Its tools, with their schemas

`to_tool_list()` asks the server for its tools. Their names, descriptions and argument schemas
(required fields, types, descriptions) are the server's own: this is exactly what the model
will be told. The spec draws them:
"""),
    code("""
spec = McpToolSpec(client)
tools = spec.to_tool_list()
spec
"""),
    md("""
Each tool is an `McpTool`, a `FunctionTool` whose schema comes from the server. You can call
one yourself. The answer has **text** for the model and the server's **structured content**
(a JSON object) in `raw_output`:
"""),
    code("""
convert = tools[1]
out = convert.call(source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo")
print(convert)
print("target:", out.raw_output.structured["target"]["datetime"][11:])
print("difference:", out.raw_output.structured["time_difference"])
"""),
    md("""
The same call from async code: `await` it at the top level of a cell. It goes to the same
session (`sessions_started` is still 1), whichever event loop awaits it:
"""),
    code("""
out = await convert.acall(source_timezone="UTC", time="23:15", target_timezone="Asia/Kolkata")
print("target:", out.raw_output.structured["target"]["datetime"][11:])
print("sessions started:", client.sessions_started)
"""),
    md("""
Arguments are checked against the server's schema **before** anything is sent. A mistake
becomes an error the model reads (and can fix), not a crash:
"""),
    code("""
print(convert.call(source_timezone="UTC", time="12:00").content[:120], "...")
"""),
    md("""
## An agent with the server's tools

The model asks for **two conversions in one reply**; they run at the same time, on the same
session. Then it asks for a time zone that does not exist: the server answers with an error
result, which reaches the model as a tool error. Then it answers.
"""),
    code("""
llm = ScriptedLLM([
    {"tool_calls": [
        {"name": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30", "target_timezone": "Asia/Tokyo"}},
        {"name": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30", "target_timezone": "Asia/Kolkata"}},
    ]},
    tool_call("convert_time", source_timezone="UTC", time="09:30", target_timezone="Mars/Olympus_Mons"),
    "At 09:30 UTC it is 18:30 in Tokyo and 15:00 in Kolkata. Mars has no time zone the server knows.",
])
"""),
    *real_model_cells(
        note="With a real model, the same server's tools are offered; its calls may differ from the script's."
    ),
    code("""
agent = OpenAIAgent.from_tools(tools, llm=llm)
task = agent.create_task("It is 09:30 UTC. What time is it in Tokyo, in Kolkata, and on Mars?")
step = agent.run_step(task)
step
"""),
    md("""
The step card marks each call with the server that answered it (**MCP · mcp_server_time**).
The next step meets the server's error:
"""),
    code("""
step = agent.run_step(task)
for call in step.tool_outputs:
    print(call.is_error, call.content)
"""),
    code("""
step = agent.run_step(task)
print(agent.finalize_response(task))
"""),
    md("""
The graph names the server on each call, too:
"""),
    code("""
agent.graph(task)
"""),
    md("""
## When the server fails

A server that cannot be started, dies, or does not answer within `timeout` does not give the
model a strange observation: the step **fails** with an `MCPServerError` that says what
happened, the step stays queued, and calling `run_step` again starts a fresh session once the
server is back. (`tests/test_mcp.py` kills servers mid-task and stalls them to check this.)

## Closing

`agent.reset()` forgets the tasks and closes the sessions of the agent's MCP tools, which
stops a stdio server (the next call starts it again). `client.close()` does the same for one
client; `with BasicMCPClient(...) as client:` closes at the end of the block. Servers still
running when Python exits are stopped then.
"""),
    code("""
print("connected before reset:", client.is_connected)
agent.reset()
print("connected after reset: ", client.is_connected)
client.close()
"""),
    md("""
## Next

- Other servers work the same way: `BasicMCPClient("uvx", ["mcp-server-git", "--repository", "."])`,
  or a URL such as `BasicMCPClient("http://127.0.0.1:8000/mcp")` for a server over HTTP.
- `McpToolSpec(client, allowed_tools=["convert_time"])` offers only some tools;
  `include_resources=True` adds one tool per resource the server has.
- [03 · Function calling](03_function_calling.ipynb): parallel calls and streaming, in depth.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
