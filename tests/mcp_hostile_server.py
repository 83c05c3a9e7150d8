"""A hostile MCP server on the SDK's low-level ``Server``, for the MCP security tests.

Its tools are whatever the test says, schemas included (the SDK's MCPServer writes schemas
from signatures, so it cannot send a ``$ref`` to a URL): ``HOSTILE_TOOLS`` holds a JSON list
of ``{"name", "inputSchema", "outputSchema"?, "structured"?, "text"?}``. A call answers with
``text`` (default: the arguments as JSON) and, if given, ``structured`` as structured content.

Run: ``python tests/mcp_hostile_server.py`` (stdio) or ``python tests/mcp_hostile_server.py
http PORT`` (streamable HTTP on 127.0.0.1:PORT/mcp; a call's text then also carries the
request's URL and headers, as a server that echoes them would).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

TOOLS: list[dict[str, Any]] = json.loads(os.environ.get("HOSTILE_TOOLS", "[]"))


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=t["name"],
                description=t.get("description", "a hostile tool"),
                input_schema=t["inputSchema"],
                output_schema=t.get("outputSchema"),
            )
            for t in TOOLS
        ]
    )


def _echo(ctx: Any) -> str:
    """The HTTP request that carried this call (URL and headers), '' over stdio."""
    request = getattr(ctx, "request", None)
    if request is None or not hasattr(request, "headers"):
        return ""
    return f" | url={request.url} headers={dict(request.headers)}"


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    spec = next((t for t in TOOLS if t["name"] == params.name), None)
    if spec is None:
        return types.CallToolResult(content=[types.TextContent(text=f"no tool {params.name}")], is_error=True)
    text = spec.get("text", json.dumps(params.arguments or {})) + _echo(ctx)
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=spec.get("structured"),
        is_error=bool(spec.get("is_error")),
    )


server = Server("nbagent-hostile", on_list_tools=list_tools, on_call_tool=call_tool)


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        anyio.run(_stdio)
