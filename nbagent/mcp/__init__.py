"""Tools from any Model Context Protocol server, on the official ``mcp`` SDK.

``BasicMCPClient`` reaches one server: a command started over stdio, or a URL over
streamable HTTP. ``McpToolSpec(client).to_tool_list()`` turns the server's tools into
``McpTool`` objects, which are ``FunctionTool`` s: every worker, runner and workflow agent
takes them as they are, with the server's own JSON schema.

Why a thread per client: the SDK's session is an async context manager bound to the task
that entered it. Here it lives in one task on an event loop of its own, in a daemon thread
owned by the client (never by a worker or a runner). Sync callers, async callers on any
loop and Jupyter's running loop all hand their requests to that loop, so one session serves
them all, and closing it (``close()``, ``runner.reset()``, interpreter exit) always runs the
SDK's own shutdown, which stops the server process.

Failures: a server's error result, or an error it answers with, reaches the model as a tool
error it can correct. A server that cannot be started, dies or does not answer within
``timeout`` raises ``MCPServerError``: the step fails and stays queued; the next call starts
a fresh session, so retrying once the server is back works.

The ``mcp`` package is imported only when a session starts: ``import nbagent`` stays light,
and a saved run holding MCP results loads without it.
"""

from nbagent.mcp.client import BasicMCPClient, MCPServerError, close_tool_sessions
from nbagent.mcp.results import McpImage, McpToolResult, to_tool_result, tool_server
from nbagent.mcp.tools import (
    McpTool,
    McpToolMetadata,
    McpToolSpec,
    aget_tools_from_mcp_url,
    get_tools_from_mcp_url,
)

__all__ = [
    "BasicMCPClient",
    "McpToolSpec",
    "McpTool",
    "McpToolMetadata",
    "McpToolResult",
    "McpImage",
    "MCPServerError",
    "close_tool_sessions",
    "to_tool_result",
    "tool_server",
    "get_tools_from_mcp_url",
    "aget_tools_from_mcp_url",
]
