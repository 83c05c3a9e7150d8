"""HTML views of MCP servers and their tools: which server, which tools, what they take.

Pure functions of the objects (no request to the server): a client shows the tools it last
listed, a tool spec the tools it last built. Everything the server sent is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nbagent.viz.escape import html_text, safe_str
from nbagent.viz.html.base import _badge, _card, _details, _kv, _line, _pre, _safely

__all__ = ["mcp_tools_html", "mcp_client_html", "mcp_tool_spec_html"]


def _schema_text(schema: Any) -> str:
    try:
        return json.dumps(schema, indent=2, ensure_ascii=False, default=safe_str)
    except Exception as err:  # noqa: BLE001 - a view must not raise
        return f"(schema unavailable: {type(err).__name__}: {safe_str(err)})"


def _args_summary(schema: dict[str, Any]) -> str:
    """``a: integer, b?: string``: the arguments at a glance (``?`` = optional)."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = []
    for name, prop in props.items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        if isinstance(kind, list):
            kind = " | ".join(map(str, kind))
        parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    return ", ".join(parts) or "no arguments"


def _tool_row(tool: Any) -> str:
    """One tool: name, arguments at a glance, description, the full schemas folded."""
    meta = tool.metadata
    schema = meta.parameters()
    head = f"<code>{html_text(meta.name, 100)}({html_text(_args_summary(schema), 300)})</code>"
    if getattr(meta, "mcp_name", "") and meta.mcp_name != meta.name:
        head += f' <span class="nb-muted">on the server: <code>{html_text(meta.mcp_name, 100)}</code></span>'
    if getattr(tool, "resource_uri", None):
        head += " " + _badge("resource", "nb-b-info")
    body = _line(html_text(meta.description, 2000)) + _details("arguments (JSON schema)", _pre(_schema_text(schema)))
    output_schema = getattr(meta, "output_schema", None)
    if output_schema:
        body += _details("structured output (JSON schema)", _pre(_schema_text(output_schema)))
    return f'<div class="nb-msg nb-m-tool">{_line(head)}{body}</div>'


def mcp_tools_html(server: str, tools: Sequence[Any] | None) -> str:
    """A server's tools with their schemas (``tools``: McpTools; None = not listed yet)."""

    def build() -> str:
        count = "not listed yet" if tools is None else f"{len(tools)} tool{'s' if len(tools) != 1 else ''}"
        head = f'<div class="nb-head">MCP server · <code>{html_text(server, 200)}</code> · {count}</div>'
        if tools is None:
            return _card("tool", head + _line("call to_tool_list() to ask the server for its tools", "nb-muted"))
        return _card("tool", head + "".join(_tool_row(t) for t in tools))

    return _safely("these MCP tools could not be drawn", build)


def mcp_client_html(client: Any) -> str:
    """A client: where its server is, whether a session is open, the tools it last listed."""

    def build() -> str:
        status = _badge("connected", "nb-s-done") if client.is_connected else _badge("not connected", "nb-b-info")
        head = f'<div class="nb-head">MCP server · <code>{html_text(client.name, 200)}</code> {status}</div>'
        kind = {"sse": "SSE", "streamable-http": "streamable HTTP"}.get(client.transport, "stdio")
        rows = [
            ("server", f"<code>{html_text(client._where(short=True), 400)}</code> ({kind})"),
            ("timeout", html_text(f"{client.timeout:g} s")),
            ("sessions started", html_text(client.sessions_started)),
        ]
        listed = client._tools
        if listed is None:
            tools = _line("tools not listed yet", "nb-muted")
        else:
            items = []
            for t in listed:
                schema = dict(t.input_schema or {})
                text = f"{t.name}({_args_summary(schema)})"
                items.append(
                    _details(f"<code>{html_text(text, 300)}</code>",
                             _line(html_text(t.description or "", 2000)) + _pre(_schema_text(schema)))
                )
            tools = "".join(items) or _line("the server has no tools", "nb-muted")
        return _card("tool", head + _kv(rows) + tools)

    return _safely("this MCP client could not be drawn", build)


def mcp_tool_spec_html(spec: Any) -> str:
    """A ``McpToolSpec``: its server's tools (the ones it lets through)."""
    return mcp_tools_html(spec.client.name, spec.tools)
