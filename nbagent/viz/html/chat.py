"""Views of a conversation: messages and transcripts, a memory, a tool and one tool call,
an agent's answer (with its typed fields and the tool calls it came from)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent.mcp import tool_server
from nbagent.viz.dot import output_text
from nbagent.viz.escape import args_preview, html_text, preview, safe_str
from nbagent.viz.html.base import _ROLE_COLORS, _badge, _call, _card, _details, _kv, _line, _pre, _safely

if TYPE_CHECKING:
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.messages import ChatMessage, ToolOutput
    from nbagent.schema import AgentChatResponse
    from nbagent.tools import FunctionTool

__all__ = [
    "transcript_html",
    "message_html",
    "memory_html",
    "tool_output_html",
    "tool_html",
    "chat_response_html",
]


def _content_html(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return _pre(content) if content else ""
    parts = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(_pre(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") in ("image_url", "image"):
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            kind = "inline image" if safe_str(url).startswith("data:") else preview(url, 80)
            parts.append(_line(f"[image: {html_text(kind)}]", "nb-muted"))
        else:
            parts.append(_pre(preview(part, 500)))
    return "".join(parts)


def _message_html(m: ChatMessage) -> str:
    role = m.role.value if hasattr(m.role, "value") else safe_str(m.role)
    role_cls = role if role in _ROLE_COLORS else "tool"
    head = [_badge(role, f"nb-r-{role_cls}")]
    if m.name:
        head.append(f"<code>{html_text(m.name, 100)}</code>")
    if m.tool_call_id:
        head.append(f'<span class="nb-muted">reply to {html_text(m.tool_call_id, 60)}</span>')
    body = [_line(" ".join(head)), _content_html(m.content)]
    for call in m.tool_calls:
        text = _call(call.tool_name, call.tool_kwargs)
        body.append(_line(f'<span class="nb-muted">calls</span> <code>{html_text(text, 2000)}</code>'))
    return f'<div class="nb-msg nb-m-{role_cls}">{"".join(body)}</div>'


def _transcript_body(messages: Sequence[ChatMessage]) -> str:
    if not messages:
        return _line("no messages", "nb-muted")
    return "".join(_message_html(m) for m in messages)


def transcript_html(messages: Sequence[ChatMessage], *, recent: int | None = None) -> str:
    """A chat transcript: one block per message, role badge, text, tool calls. ``recent``:
    show only the last ``recent`` messages, the earlier ones folded (whole messages, never a
    box that cuts one in the middle)."""

    def build() -> str:
        msgs = list(messages)
        head = f'<div class="nb-head">Chat · {len(msgs)} message{"s" if len(msgs) != 1 else ""}</div>'
        if recent is not None and len(msgs) > recent:
            earlier, msgs = msgs[: len(msgs) - recent], msgs[len(msgs) - recent:]
            word = "message" if len(earlier) == 1 else "messages"
            head += _details(f"{len(earlier)} earlier {word}", _transcript_body(earlier))
        return _card("transcript", head + _transcript_body(msgs))

    return _safely("this transcript could not be drawn", build)


def message_html(message: ChatMessage) -> str:
    """One chat message, as the transcript draws it."""
    return transcript_html([message])


def memory_html(memory: ChatMemoryBuffer) -> str:
    """Every message a memory holds, oldest first."""
    return transcript_html(memory.get_all())


def _call_text(t: ToolOutput) -> str:
    return _call(t.tool_name, t.raw_input)


def _server_badge(t: ToolOutput) -> str:
    server = tool_server(t)
    return " " + _badge(f"MCP · {preview(server, 60)}", "nb-b-info") if server else ""


def _tool_call_block(t: ToolOutput, *, open_: bool = False) -> str:
    flag = _server_badge(t) + (" " + _badge("error", "nb-b-error") if t.is_error else "")
    summary = f"<code>{html_text(preview(_call_text(t), 200))}</code>{flag}"
    body = _pre(t.content)
    if t.is_error:
        body = f'<div class="nb-error">{body}</div>'
    return _details(summary, body, open_=open_)


def tool_output_html(out: ToolOutput) -> str:
    """One tool call: name, arguments, what it returned (or its error)."""

    def build() -> str:
        status = _badge("error", "nb-b-error") if out.is_error else _badge("ok", "nb-s-done")
        head = (
            f'<div class="nb-head">Tool output · <code>{html_text(out.tool_name, 100)}</code>'
            f"{_server_badge(out)} {status}</div>"
        )
        rows = [("arguments", f"<code>{html_text(args_preview(out.raw_input), 2000)}</code>")]
        if out.tool_call_id:
            rows.append(("call id", f"<code>{html_text(out.tool_call_id, 100)}</code>"))
        content = _pre(out.content)
        if out.is_error:
            content = f'<div class="nb-error">{content}</div>'
        return _card("tool-output", head + _kv(rows) + content)

    return _safely("this tool output could not be drawn", build)


def tool_html(tool: FunctionTool) -> str:
    """A tool as the model sees it: name, description, argument schema, return_direct."""

    def build() -> str:
        meta = tool.metadata
        flag = " " + _badge("return_direct", "nb-b-info") if meta.return_direct else ""
        head = f'<div class="nb-head">Tool · <code>{html_text(meta.name, 100)}</code>{flag}</div>'
        try:
            schema = json.dumps(meta.parameters(), indent=2, ensure_ascii=False, default=safe_str)
        except Exception as err:  # noqa: BLE001
            schema = f"(schema unavailable: {type(err).__name__}: {safe_str(err)})"
        rows = [("return_direct", html_text(meta.return_direct))]
        server = getattr(meta, "server", None)  # an MCP tool's server
        if server:
            rows.insert(0, ("MCP server", f"<code>{html_text(server, 200)}</code>"))
        body = (
            _line(html_text(meta.description, 4000))
            + _kv(rows)
            + _details("arguments (JSON schema)", _pre(schema), open_=True)
        )
        return _card("tool", head + body)

    return _safely("this tool could not be drawn", build)


def _typed_block(response: Any) -> str:
    """A typed answer (``structured_response``) as a table of its fields; '' when there is none."""
    obj = getattr(response, "structured_response", None)
    if obj is None:
        return ""
    try:
        data = obj.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - loaded runs hold the plain dict; anything else as text
        data = obj if isinstance(obj, dict) else {"value": safe_str(obj)}
    rows = []
    for name, value in data.items():
        try:
            shown = json.dumps(value, ensure_ascii=False, default=safe_str)
        except Exception:  # noqa: BLE001 - a model field may hold anything
            shown = safe_str(value)
        rows.append((safe_str(name), f"<code>{html_text(preview(shown, 400))}</code>"))
    title = f"typed answer · {html_text(type(obj).__name__)}"
    return _details(title, _kv(rows), open_=True)


def chat_response_html(response: AgentChatResponse) -> str:
    """An agent's answer and the tool outputs it came from."""

    def build() -> str:
        text = output_text(response)
        streaming = getattr(response, "is_done", True) is False
        flag = " " + _badge("streaming…", "nb-s-running") if streaming else ""
        sources = list(getattr(response, "sources", None) or [])
        head = f'<div class="nb-head">Response{flag}</div>'
        body = _pre(text) if text else _line("(empty)", "nb-muted")
        body += _typed_block(response)
        if sources:
            calls = "".join(_tool_call_block(s) for s in sources)
            body += _details(f"{len(sources)} source{'s' if len(sources) != 1 else ''}", calls)
        return _card("response", head + body)

    return _safely("this response could not be drawn", build)
