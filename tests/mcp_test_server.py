"""An MCP server built with the SDK's MCPServer (FastMCP's name in mcp 2), for the MCP tests.

Run: ``python tests/mcp_test_server.py [--linger]`` over stdio (``--linger``: stay alive
60 s after stdin closes, as a badly behaved server would), or ``python tests/mcp_test_server.py http|sse PORT``
(streamable HTTP on 127.0.0.1:PORT/mcp). Its tools cover what the time and git servers do not:
images, structured output, a tool that raises, a slow tool, its own process id, a resource.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time

from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

# a 1x1 red PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)

server = MCPServer("nbagent-test")


class Sum(BaseModel):
    total: int
    terms: list[int]


@server.tool()
def add(
    a: Annotated[int, Field(description="the first term")], b: Annotated[int, Field(description="the second term")]
) -> Sum:
    """Add two integers."""
    return Sum(total=a + b, terms=[a, b])


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then say how long (the server stays responsive meanwhile)."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


@server.tool()
def red_pixel() -> Image:
    """A tiny red image."""
    return Image(data=PNG, format="png")


@server.tool()
def fail(reason: str) -> str:
    """Always raises: the client must show the error to the model."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def pid() -> int:
    """The server's process id."""
    import os

    return os.getpid()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one HTTP request header ('' over stdio or when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.resource("note://readme", name="readme", description="a short note")
def readme() -> str:
    return "MCP resources are read like this."


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["sse"]:  # the older HTTP transport: GET /sse, POST /messages/
        server.settings.log_level = "WARNING"
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
        if "--linger" in sys.argv:  # a badly behaved server: it outlives its closed stdin
            time.sleep(60)
