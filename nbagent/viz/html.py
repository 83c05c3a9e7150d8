"""HTML views of nbagent objects: pure functions returning self-contained HTML strings.

These are the bodies of the core objects' ``_repr_html_``. Each returns one card
``<div class="nbagent ...">`` with its own ``<style>`` (every rule scoped under ``.nbagent``,
colours from JupyterLab's CSS variables with light fallbacks, so dark themes stay readable), no
external assets and no JavaScript: details fold with ``<details>``. Every piece of text that came
from a user, a model or a tool is cleaned and HTML-escaped (quotes too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent._redact import redact_url
from nbagent.costs import cost_label, runner_cost_label, task_cost_label
from nbagent.mcp import tool_server
from nbagent.engine.state import StepStatus
from nbagent.viz.dot import (
    SKIPPED,
    SKIPPED_COLORS,
    STATUS_COLORS,
    is_skipped,
    node_names,
    output_text,
    status_summary,
    step_numbers,
    task_to_dot,
)
from nbagent.viz.escape import args_preview, html_text, preview, safe_str, short_id
from nbagent.viz.render import render_svg

if TYPE_CHECKING:
    from nbagent.branches import BranchComparison, BranchStep
    from nbagent.costs import TaskCost
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.messages import ChatMessage, ToolOutput
    from nbagent.runner.base import AgentRunner
    from nbagent.engine.state import TaskState
    from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
    from nbagent.tools import FunctionTool

__all__ = [
    "CSS",
    "transcript_html",
    "tool_output_html",
    "task_html",
    "step_html",
    "step_output_html",
    "chat_response_html",
    "tool_html",
    "llm_html",
    "worker_html",
    "runner_html",
    "timeline_html",
    "graph_html",
    "error_html",
    "message_html",
    "memory_html",
    "task_cost_html",
    "comparison_html",
]

_TEXT_LIMIT = 20_000  # characters of one message/output shown in full
_PREVIEW = 120  # characters of a one-line preview
_MAX_TIMELINE = 200  # steps listed in a timeline before the middle is elided
_MAX_TASK_ROWS = 50
_MAX_STATE_KEYS = 30

_TASK_STATUS_COLORS: dict[str, tuple[str, str, str]] = {
    "pending": STATUS_COLORS[StepStatus.QUEUED],
    "active": STATUS_COLORS[StepStatus.RUNNING],
    "running": STATUS_COLORS[StepStatus.RUNNING],
    "failed": STATUS_COLORS[StepStatus.FAILED],
    "completed": STATUS_COLORS[StepStatus.DONE],
    "finalized": STATUS_COLORS[StepStatus.DONE],
    "abandoned": STATUS_COLORS[StepStatus.UNDONE],
}
_ROLE_COLORS: dict[str, tuple[str, str, str]] = {
    "user": ("#dbeafe", "#1d4ed8", "#172554"),
    "assistant": ("#dcfce7", "#15803d", "#052e16"),
    "system": ("#ede9fe", "#6d28d9", "#2e1065"),
    "tool": ("#fef3c7", "#b45309", "#451a03"),
}
_EXTRA_BADGES: dict[str, tuple[str, str, str]] = {
    "answer": ("#e0e7ff", "#4338ca", "#1e1b4b"),
    "error": STATUS_COLORS[StepStatus.FAILED],
    "info": ("#f1f5f9", "#64748b", "#1e293b"),
}


def _css_name(name: str) -> str:
    """A status as a CSS class name ("awaiting approval" -> "awaiting-approval")."""
    return name.replace(" ", "-")


def _badge_rules() -> str:
    rules = []
    groups: list[tuple[str, dict[str, tuple[str, str, str]]]] = [
        ("s", {**{s.value: c for s, c in STATUS_COLORS.items()}, SKIPPED: SKIPPED_COLORS}),
        ("t", _TASK_STATUS_COLORS),
        ("r", _ROLE_COLORS),
        ("b", _EXTRA_BADGES),
    ]
    for prefix, colors in groups:
        for name, (fill, border, text) in colors.items():
            rules.append(
                f".nbagent .nb-{prefix}-{_css_name(name)}{{background:{fill};color:{text};border-color:{border}}}"
            )
    for name, (_, border, _) in [*((s.value, c) for s, c in STATUS_COLORS.items()), (SKIPPED, SKIPPED_COLORS)]:
        rules.append(f".nbagent ol.nb-timeline>li.nb-l-{_css_name(name)}{{border-left-color:{border}}}")
    for role, (_, border, _) in _ROLE_COLORS.items():
        rules.append(f".nbagent .nb-m-{role}{{border-left-color:{border}}}")
    return "\n".join(rules)


# A <pre> is at most 18 lines of 1.4em (content box): a long one scrolls, and its edge falls
# between two lines, never through one.
CSS = (
    """
.nbagent{--nb-fg:var(--jp-ui-font-color1,#1f2328);--nb-fg2:var(--jp-ui-font-color2,#57606a);
--nb-bg:var(--jp-layout-color1,#ffffff);--nb-bg2:var(--jp-layout-color2,#f6f8fa);
--nb-border:var(--jp-border-color2,#d0d7de);--nb-err:var(--jp-error-color1,#b91c1c);
font-family:var(--jp-ui-font-family,system-ui,-apple-system,"Segoe UI",sans-serif);
font-size:var(--jp-ui-font-size1,13px);line-height:1.45;color:var(--nb-fg);background:var(--nb-bg);
border:1px solid var(--nb-border);border-radius:6px;padding:6px 10px;margin:2px 0;
max-width:100%;box-sizing:border-box;overflow-wrap:anywhere}
.nbagent .nb-head{font-weight:600;margin-bottom:3px}
.nbagent .nb-muted{color:var(--nb-fg2)}
.nbagent .nb-error{color:var(--nb-err)}
.nbagent code,.nbagent pre{font-family:var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,monospace);
font-size:var(--jp-code-font-size,12px);color:var(--nb-fg)}
.nbagent pre{white-space:pre-wrap;word-break:break-word;background:var(--nb-bg2);
border:1px solid var(--nb-border);border-radius:4px;padding:4px 6px;margin:3px 0;overflow:auto;
line-height:1.4;max-height:calc(18 * 1.4em);box-sizing:content-box}
.nbagent code.nb-id{background:var(--nb-bg2);border:1px solid var(--nb-border);border-radius:3px;padding:0 3px}
.nbagent .nb-badge{display:inline-block;padding:0 7px;border:1px solid;border-radius:9px;
font-size:0.85em;font-weight:600;line-height:1.5;white-space:nowrap;vertical-align:baseline}
.nbagent details{margin:3px 0}
.nbagent summary{cursor:pointer}
.nbagent table{border-collapse:collapse;margin:3px 0;color:var(--nb-fg);background:transparent;font-size:inherit;line-height:inherit}
.nbagent th,.nbagent td{text-align:left;vertical-align:top;padding:2px 10px 2px 0;
border:none;border-bottom:1px solid var(--nb-border);background:transparent;color:var(--nb-fg)}
.nbagent th{font-weight:600;color:var(--nb-fg2);white-space:nowrap}
.nbagent .nb-graph{overflow:auto;max-height:48em;margin:4px 0}
.nbagent .nb-graph svg{max-width:none;height:auto}
.nbagent ol.nb-timeline{list-style:none;padding:0;margin:4px 0;max-height:40em;overflow:auto}
.nbagent ol.nb-timeline>li{border-left:3px solid var(--nb-border);padding:2px 8px;margin:3px 0}
.nbagent .nb-msg{border-left:3px solid var(--nb-border);padding:2px 8px;margin:4px 0}
.nbagent .nb-line{margin:1px 0}
"""
    + _badge_rules()
    + "\n"
)


# ----- small builders ------------------------------------------------------------------------


def _card(kind: str, body: str) -> str:
    return f'<div class="nbagent nb-{kind}"><style>{CSS}</style>{body}</div>'


def _badge(text: str, cls: str) -> str:
    return f'<span class="nb-badge {cls}">{html_text(text)}</span>'


def _status_badge(status: str) -> str:
    return _badge(status, f"nb-s-{_css_name(status)}")


def _task_badge(status: str) -> str:
    return _badge(status, f"nb-t-{status}")


def _id(value: Any) -> str:
    return f'<code class="nb-id">{html_text(short_id(value))}</code>'


def _pre(value: Any, limit: int | None = _TEXT_LIMIT) -> str:
    return f"<pre>{html_text(value, limit)}</pre>"


def _details(summary: str, body: str, *, open_: bool = False) -> str:
    flag = " open" if open_ else ""
    return f"<details{flag}><summary>{summary}</summary>{body}</details>"


def _kv(rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table; keys are our own words (escaped anyway), values are ready HTML."""
    body = "".join(f"<tr><th>{html_text(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="nb-kv">{body}</table>'


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


def approval_html(step: TaskStep) -> str:
    """The tool calls of a step that waits (or waited) for approval: each call's arguments
    and its decision (who, when, edited arguments, reason); '' for other steps."""
    from nbagent.approval import decisions_of

    calls = decisions_of(step)
    if not calls:
        return ""
    rows = []
    for c in calls:
        call = f"{safe_str(c.get('tool_name'))}({args_preview(c.get('arguments') or {})})"
        d = c.get("decision")
        if not c.get("needs_approval"):
            verdict = '<span class="nb-muted">runs with the others (no approval needed)</span>'
        elif d is None:
            verdict = '<span class="nb-error"><b>awaiting approval</b></span>'
        else:
            what = html_text(d.get("decision"))
            parts = [f"<b>{what}</b> by {html_text(d.get('by'))} at {html_text(d.get('at'))}"]
            if d.get("arguments") is not None:
                parts.append(f"as <code>{html_text(args_preview(d['arguments']))}</code>")
            if d.get("reason"):
                parts.append(f"reason: {html_text(preview(d['reason'], 500))}")
            verdict = " · ".join(parts)
        rows.append((safe_str(c.get("call_id")), f"<code>{html_text(call, 2000)}</code><br>{verdict}"))
    return _details(f"tool calls for approval · {len(calls)}", _kv(rows), open_=True)


def _line(html_body: str, cls: str = "") -> str:
    extra = f" {cls}" if cls else ""
    return f'<div class="nb-line{extra}">{html_body}</div>'


def _metrics(out: TaskStepOutput) -> str:
    parts = []
    if isinstance(out.latency_s, (int, float)):
        parts.append(f"{out.latency_s:.2f} s")
    if out.usage is not None:
        try:
            u = out.usage
            parts.append(
                f"{int(u.total_tokens)} tokens ({int(u.prompt_tokens)} prompt + "
                f"{int(u.completion_tokens)} completion)"
            )
        except Exception:  # noqa: BLE001
            pass
    money = cost_label(out)  # None unless prices are set (nbagent.costs)
    if money:
        parts.append(money)
    return " · ".join(parts)


def _call_text(t: ToolOutput) -> str:
    return f"{safe_str(t.tool_name)}({args_preview(t.raw_input)})"


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


def error_html(title: str, err: BaseException) -> str:
    """A card saying a view could not be drawn, and why (escaped)."""
    body = (
        f'<div class="nb-head nb-error">{html_text(title)}</div>'
        f"<pre>{html_text(f'{type(err).__name__}: {safe_str(err)}', 2000)}</pre>"
    )
    return _card("error", body)


def _safely(title: str, fn: Any, *args: Any) -> str:
    try:
        return str(fn(*args))
    except Exception as err:  # noqa: BLE001 - a repr must not raise
        return error_html(title, err)


# ----- messages and tools --------------------------------------------------------------------


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
        text = f"{safe_str(call.tool_name)}({args_preview(call.tool_kwargs)})"
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


# ----- steps ---------------------------------------------------------------------------------


def _ids_html(ids: Iterable[Any]) -> str:
    chips = [_id(i) for i in ids]
    return " ".join(chips) if chips else '<span class="nb-muted">none</span>'


def step_html(step: TaskStep) -> str:
    """A step before (or without) its output: ids, input, links, state keys."""

    def build() -> str:
        ready = "" if step.is_ready else " " + _badge("held", "nb-s-held")
        head = f'<div class="nb-head">Step {_id(step.step_id)}{ready}</div>'
        rows = [
            ("task", _id(step.task_id)),
            ("input", _pre(step.input) if step.input is not None else '<span class="nb-muted">none</span>'),
            ("next", _ids_html(step.next_steps)),
            ("prev", _ids_html(step.prev_steps)),
        ]
        body = _kv(rows) + approval_html(step)
        state = dict(step.step_state)
        if state:
            items = list(state.items())
            shown = items[:_MAX_STATE_KEYS]
            table = _kv((safe_str(k), f"<code>{html_text(preview(v, 200))}</code>") for k, v in shown)
            if len(items) > len(shown):
                table += _line(f"+{len(items) - len(shown)} more", "nb-muted")
            body += _details(f"step_state · {len(items)} key{'s' if len(items) != 1 else ''}", table)
        return _card("step", head + body)

    return _safely("this step could not be drawn", build)


def step_output_html(out: TaskStepOutput) -> str:
    """A step's result: output (or answer), thought, tool calls and observations, next steps."""

    def build() -> str:
        sid = out.task_step.step_id
        flag = " " + _badge("answer", "nb-b-answer") if out.is_last else ""
        head = f'<div class="nb-head">Step output {_id(sid)}{flag}</div>'
        text = output_text(out.output)
        body = [_pre(text) if text else _line("(no output)", "nb-muted")]
        body.append(_typed_block(out.output))
        if out.reasoning:
            body.append(_details("thought", _pre(out.reasoning)))
        tools = list(out.tool_outputs or [])
        if tools:
            errors = sum(1 for t in tools if t.is_error)
            summary = f"{len(tools)} tool call{'s' if len(tools) != 1 else ''}"
            if errors:
                summary += f' · <span class="nb-error">{errors} error{"s" if errors != 1 else ""}</span>'
            body.append(_details(summary, "".join(_tool_call_block(t) for t in tools), open_=True))
        rows = [
            ("input", html_text(preview(out.task_step.input, _PREVIEW)) if out.task_step.input is not None
             else '<span class="nb-muted">none</span>'),
            ("is_last", html_text(out.is_last)),
            ("next steps", _ids_html(s.step_id for s in out.next_steps)),
        ]
        metrics = _metrics(out)
        if metrics:
            rows.append(("usage", html_text(metrics)))
        body.append(_kv(rows))
        return _card("step-output", head + "".join(body))

    return _safely("this step output could not be drawn", build)


# ----- tasks and graphs ----------------------------------------------------------------------


def _timeline_item(state: TaskState, index: int, sid: str, undone_next: dict[str, list[str]],
                   limit: int) -> str:
    status = _status_of(state, sid)
    step = state.steps.get(sid)
    out = state.outputs.get(sid) if status == StepStatus.DONE else None
    shown = SKIPPED if is_skipped(out) else status.value  # a skipped step is done, but never ran
    head = [_status_badge(shown), f'<span class="nb-muted">#{index + 1}</span>', _id(sid)]
    if out is not None and out.is_last:
        head.append(_badge("answer", "nb-b-answer"))
    lines = [_line(" ".join(head))]
    if step is not None and step.input is not None:
        lines.append(_line(f'<span class="nb-muted">in:</span> {html_text(preview(step.input, limit))}'))
    if shown == SKIPPED:
        reason = out.output.reason  # type: ignore[union-attr]
        lines.append(_line(html_text(preview("not run" + (f": {reason}" if reason != SKIPPED else ""), limit)),
                           "nb-muted"))
    elif out is not None:
        if out.reasoning:
            lines.append(_line(f'<span class="nb-muted">thought:</span> {html_text(preview(out.reasoning, limit))}'))
        for t in out.tool_outputs or []:
            server = tool_server(t)
            label = f"call ({html_text(preview(server, 40))}):" if server else "call:"
            lines.append(_line(f'<span class="nb-muted">{label}</span> <code>{html_text(preview(_call_text(t), limit))}</code>'))
            cls = "nb-error" if t.is_error else ""
            label = "obs (error):" if t.is_error else "obs:"
            lines.append(_line(f'<span class="nb-muted">{label}</span> {html_text(preview(t.content, limit))}', cls))
        text = output_text(out.output)
        if out.is_last:
            lines.append(_line(f"<b>answer:</b> {html_text(preview(text, limit))}"))
        elif text:
            lines.append(_line(f'<span class="nb-muted">out:</span> {html_text(preview(text, limit))}'))
    failures = [f for f in state.failures if f.step_id == sid]
    if failures and status == StepStatus.FAILED:
        last = failures[-1]
        lines.append(_line(html_text(preview(f"error: {last.error_type}: {last.message}", limit)) +
                           (f" (attempt {last.attempt})" if last.attempt > 1 else ""), "nb-error"))
    elif failures:
        lines.append(_line(html_text(f"failed {len(failures)}× before ({failures[-1].error_type})"), "nb-muted"))
    meta = []
    if out is not None:
        metrics = _metrics(out)
        if metrics:
            meta.append(html_text(metrics))
    if step is not None and step.next_steps:
        meta.append("next: " + _ids_html(step.next_steps))
    if undone_next.get(sid):
        meta.append("undone next: " + _ids_html(undone_next[sid]))
    undone_runs = [o for o in state.undone_outputs if o.task_step.step_id == sid]
    if undone_runs:
        meta.append(html_text(f"{len(undone_runs)} undone run{'s' if len(undone_runs) != 1 else ''}"))
    if meta:
        lines.append(_line(" · ".join(meta), "nb-muted"))
    return f'<li class="nb-l-{_css_name(shown)}">{"".join(lines)}</li>'


def _status_of(state: TaskState, sid: str) -> StepStatus:
    try:
        return state.step_status(sid)
    except Exception:  # noqa: BLE001
        return StepStatus.QUEUED


def _timeline_body(state: TaskState, *, max_label: int = _PREVIEW, max_items: int = _MAX_TIMELINE) -> str:
    order = list(node_names(state))
    if not order:
        return _line("no steps", "nb-muted")
    undone_next: dict[str, list[str]] = {}
    for a, b in state.undone_edges:
        undone_next.setdefault(a, []).append(b)
    numbers = step_numbers(state)  # the numbers the graph shows (undo does not shift them)
    indexed = [(numbers[sid] - 1, sid) for sid in order]
    items: list[str] = []
    if len(indexed) > max_items:
        half = max_items // 2
        head, tail = indexed[:half], indexed[-half:]
        items += [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in head]
        hidden = len(indexed) - len(head) - len(tail)
        items.append(f'<li class="nb-muted">… {hidden} more step{"" if hidden == 1 else "s"} …</li>')
        items += [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in tail]
    else:
        items = [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in indexed]
    return f'<ol class="nb-timeline">{"".join(items)}</ol>'


def _summary_line(state: TaskState) -> str:
    counts = status_summary(state)
    parts = [f"{_status_badge(s)} {n}" for s, n in counts.items() if n]
    return " ".join(parts) if parts else '<span class="nb-muted">no steps</span>'


def timeline_html(state: TaskState, *, max_label: int = _PREVIEW, max_items: int = _MAX_TIMELINE) -> str:
    """The task's steps as a list (registry order) with statuses: the graph without Graphviz."""
    return _safely(
        "the timeline could not be drawn",
        lambda: _card("timeline", _timeline_body(state, max_label=max_label, max_items=max_items)),
    )


def graph_html(state: TaskState, *, svg: str | None, dot_source: str | None) -> str:
    """The step graph as a card: the inline SVG, or (no Graphviz) the timeline + DOT source."""
    try:
        status = state.status.value
    except Exception:  # noqa: BLE001
        status = "unknown"
    head = (
        f'<div class="nb-head">Step graph · task {_id(state.task.task_id)} {_task_badge(status)}</div>'
        + _line(_summary_line(state))
    )
    if svg is not None:
        body = f'<div class="nb-graph">{svg}</div>'
    else:
        body = _line("Graphviz (the <code>dot</code> program) is not available: steps as a list.", "nb-muted")
        body += _timeline_body(state)
        if dot_source is not None:
            body += _details("DOT source", _pre(dot_source, None))
    return _card("graph", head + body)


def _inline_graph(state: TaskState) -> str:
    source = task_to_dot(state)
    try:
        svg = render_svg(source)
    except Exception:  # noqa: BLE001 - fall back to the timeline
        svg = None
    if svg is not None:
        return f'<div class="nb-graph">{svg}</div>'
    return _timeline_body(state)


def task_html(task: Task) -> str:
    """A task: input, status, step counts, its graph (SVG, or a timeline without Graphviz)."""

    def build() -> str:
        runner = getattr(task, "_runner", None)
        state = None
        problem = ""
        if runner is not None:
            try:
                state = runner.state_of(task)
            except Exception as err:  # noqa: BLE001 - e.g. a deleted task
                problem = f"{type(err).__name__}: {safe_str(err)}"
        if state is not None:
            status = _task_badge(state.status.value)
        else:
            status = _badge("detached", "nb-b-info")
        head = f'<div class="nb-head">Task {_id(task.task_id)} {status}</div>'
        rows = [("input", _pre(task.input))]
        if task.extra_state.get("image_docs"):  # MultimodalReActAgentWorker's images
            from nbagent.workers.multimodal import images_html

            rows.append(("images", _safely("the images could not be drawn", images_html, task.extra_state["image_docs"])))
        if state is None:
            note = "not attached to a runner" if runner is None else f"unknown to its runner ({problem})"
            rows.append(("state", f'<span class="nb-muted">{html_text(note, 500)}</span>'))
            return _card("task", head + _kv(rows))
        rows.append(("steps", _summary_line(state)))
        if state.failures:
            last = state.failures[-1]
            rows.append((
                "failures",
                f'<span class="nb-error">{len(state.failures)} · last: '
                f"{html_text(preview(f'{last.error_type}: {last.message}', _PREVIEW))}</span>",
            ))
        final = state.final_response
        if final is None and state.completed_steps and state.completed_steps[-1].is_last:
            final = state.completed_steps[-1].output
        if final is not None:
            rows.append(("answer", _pre(output_text(final))))
        money = task_cost_label(state)  # None unless prices are set
        if money:
            rows.append(("cost", html_text(money)))
        graph = _safely("the step graph could not be drawn", _inline_graph, state)
        return _card("task", head + _kv(rows) + _details("step graph", graph, open_=True))

    return _safely("this task could not be drawn", build)


# ----- models, workers, runners --------------------------------------------------------------


def _secrets_of(obj: Any) -> list[str]:
    found = []
    for name in ("api_key", "_api_key", "key", "token", "_token", "secret"):
        try:
            value = getattr(obj, name, None)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(value, str) and len(value) >= 4:
            found.append(value)
        inner = getattr(value, "get_secret_value", None)  # pydantic SecretStr
        if callable(inner):
            try:
                secret = inner()
            except Exception:  # noqa: BLE001
                continue
            if isinstance(secret, str) and len(secret) >= 4:
                found.append(secret)
    return found


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "…")
    return text


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def llm_html(llm: Any) -> str:
    """A model: class, model name, base URL, masked key; never the key itself."""

    def build() -> str:
        secrets = _secrets_of(llm)
        rows: list[tuple[str, str]] = []

        def add(label: str, value: Any) -> None:
            if value is None:
                return
            rows.append((label, f"<code>{html_text(_redact(preview(value, 200), secrets))}</code>"))

        add("model", _attr(llm, "model"))
        base_url = _attr(llm, "base_url")
        if base_url:
            add("base_url", redact_url(safe_str(base_url)))
        masked = _attr(llm, "masked_key")
        if masked is not None:
            add("api key", masked)
        for name in ("is_function_calling_model", "is_multimodal", "temperature", "timeout", "max_retries"):
            add(name, _attr(llm, name))
        replies = _attr(llm, "replies")
        if isinstance(replies, list):
            add("script", f"{_attr(llm, 'position') or 0} of {counted(len(replies), 'reply')} used")
        requests = _attr(llm, "requests")
        if isinstance(requests, list):
            add("requests seen", len(requests))
        head = f'<div class="nb-head">Model · <code>{html_text(type(llm).__name__)}</code></div>'
        return _card("llm", head + _kv(rows))

    return _safely("this model could not be drawn", build)


def worker_html(worker: Any) -> str:
    """A worker from its ``describe()``: kind, model, tools, limits."""

    def build() -> str:
        try:
            info = dict(worker.describe())
        except Exception as err:  # noqa: BLE001
            info = {"kind": type(worker).__name__, "describe() failed": f"{type(err).__name__}: {safe_str(err)}"}
        llm = _attr(worker, "llm")
        secrets = _secrets_of(llm) if llm is not None else []
        kind = info.pop("kind", type(worker).__name__)
        rows: list[tuple[str, str]] = []
        for key, value in info.items():
            if key == "tools" and isinstance(value, (list, tuple)):
                cell = " ".join(f"<code>{html_text(_redact(preview(t, 80), secrets))}</code>" for t in value)
                rows.append(("tools", cell or '<span class="nb-muted">none</span>'))
            else:
                rows.append((safe_str(key), f"<code>{html_text(_redact(preview(value, 200), secrets))}</code>"))
        head = f'<div class="nb-head">Worker · <code>{html_text(kind)}</code></div>'
        prompt = ""
        try:
            text = worker.prompt_preview() if callable(getattr(worker, "prompt_preview", None)) else None
        except Exception as err:  # noqa: BLE001
            text = f"(the prompt could not be built: {type(err).__name__}: {safe_str(err)})"
        if isinstance(text, str) and text:
            prompt = _details(
                "system prompt the model sees", _pre(_redact(text, secrets), None), open_=True
            )
        return _card("worker", head + (_kv(rows) if rows else "") + prompt)

    return _safely("this worker could not be drawn", build)


def runner_html(runner: AgentRunner) -> str:
    """A runner: its worker, memory size and a table of its tasks."""

    def build() -> str:
        try:
            kind = runner.agent_worker.describe().get("kind", type(runner.agent_worker).__name__)
        except Exception:  # noqa: BLE001
            kind = type(runner.agent_worker).__name__
        memory = runner.memory
        try:
            count: Any = memory.token_count
            tokens = int(count() if callable(count) else count)
            mem = f"{counted(len(memory), 'message')} · {counted(tokens, 'token')}"
        except Exception:  # noqa: BLE001
            mem = counted(len(memory), "message")
        states = list(runner.tasks.values())
        head = (
            f'<div class="nb-head">{html_text(type(runner).__name__)} · '
            f'{len(states)} task{"s" if len(states) != 1 else ""}</div>'
        )
        info_rows = [("worker", f"<code>{html_text(kind)}</code>"), ("memory", html_text(mem))]
        money = runner_cost_label(runner)  # None unless prices are set
        if money:
            info_rows.append(("cost", html_text(money)))
        info = _kv(info_rows)
        if not states:
            return _card("runner", head + info + _line("no tasks yet", "nb-muted"))
        shown = states[-_MAX_TASK_ROWS:]
        rows = []
        for st in shown:
            counts = status_summary(st)
            queued = len(st.step_queue)  # a failed step waits there to be retried
            fails = len(st.failures)
            fail_cell = f'<span class="nb-error">{fails}</span>' if fails else "0"
            rows.append(
                f"<tr><td>{_id(st.task_id)}</td><td>{html_text(preview(st.task.input, 60))}</td>"
                f"<td>{_task_badge(st.status.value)}</td><td>{counts['done']}</td>"
                f"<td>{queued}</td><td>{fail_cell}</td></tr>"
            )
        table = (
            '<table class="nb-tasks"><tr><th>task</th><th>input</th><th>status</th>'
            f"<th>done</th><th>queued</th><th>failures</th></tr>{''.join(rows)}</table>"
        )
        if len(states) > len(shown):
            table = _line(f"showing the last {len(shown)} of {len(states)} tasks", "nb-muted") + table
        return _card("runner", head + info + table)

    return _safely("this runner could not be drawn", build)


# ----- services' objects: a task's cost, two branches compared ------------------------------


def task_cost_html(cost: TaskCost) -> str:
    """A task's cost (``runner.cost(task)``): one row per step, the total above."""
    rows = "".join(
        f"<tr><td><code>{html_text(short_id(s.step_id))}</code>{' (undone)' if s.undone else ''}</td>"
        f"<td>{html_text(s.model or '?')}</td><td>{s.cost.prompt_tokens}</td>"
        f"<td>{s.cost.completion_tokens}</td><td>{html_text(s.cost.money or '–')}</td></tr>"
        for s in cost.steps
    )
    head = "<tr><th>step</th><th>model</th><th>prompt</th><th>completion</th><th>cost</th></tr>"
    return (
        f'<div class="nbagent nb-cost"><style>{CSS}</style><div class="nb-head">Cost · task '
        f'<code class="nb-id">{html_text(short_id(cost.task_id))}</code></div>'
        f'<div class="nb-line">{html_text(str(cost.total))}</div>'
        f'<table class="nb-tasks">{head}{rows}</table></div>'
    )


def _labelled(label: str, text: str, cls: str = "") -> str:
    """One line of a compare cell: our own label, then ready (escaped) HTML."""
    return f'<div class="nb-line{cls}"><span class="nb-muted">{label}</span> {text}</div>'


def comparison_html(comparison: BranchComparison) -> str:
    """Two branches side by side (``runner.compare``): the shared steps folded, then each row."""
    from nbagent.branches import describe_branch

    def cell(s: BranchStep | None) -> str:
        if s is None:
            return '<td class="nb-muted">—</td>'
        parts = [
            f'<div class="nb-line"><span class="nb-badge nb-s-{html_text(s.status)}">{html_text(s.status)}</span> '
            f'<code class="nb-id">{html_text(short_id(s.step_id))}</code></div>'
        ]
        line = _labelled
        if s.input is not None:
            parts.append(line("in:", html_text(preview(s.input, 200))))
        if s.thought:
            parts.append(line("thought:", html_text(preview(s.thought, 200))))
        for call, obs, err in s.calls:
            parts.append(line("call:", f"<code>{html_text(preview(call, 200))}</code>"))
            parts.append(line("obs:", html_text(preview(obs, 200)), " nb-error" if err else ""))
        if s.output:
            label = "<b>answer:</b>" if s.is_last else '<span class="nb-muted">out:</span>'
            parts.append(f'<div class="nb-line">{label} {html_text(preview(s.output, 300))}</div>')
        meta = []
        if s.tokens is not None:
            meta.append(f"{s.tokens} tok")
        if s.cost:
            meta.append(s.cost)
        if meta:
            parts.append(f'<div class="nb-line nb-muted">{html_text(" · ".join(meta))}</div>')
        return f"<td>{''.join(parts)}</td>"

    def rows(pairs: list[tuple[BranchStep | None, BranchStep | None]], start: int) -> str:
        return "".join(
            f'<tr><th>#{k}</th>{cell(a)}{cell(b)}</tr>' for k, (a, b) in enumerate(pairs, start=start)
        )

    task = f'<code class="nb-id">{html_text(short_id(comparison.task_id))}</code>'
    head = f'<div class="nb-head">Compare branches · task {task}</div>'
    cols = (
        f'<tr><th></th><th style="width:48%">{html_text("left: " + describe_branch(comparison.left))}</th>'
        f'<th style="width:48%">{html_text("right: " + describe_branch(comparison.right))}</th></tr>'
    )
    body = ""
    if comparison.shared:
        n = comparison.shared
        shared = f'<table class="nb-tasks" style="width:100%">{cols}{rows(comparison.rows[:n], 1)}</table>'
        body += f"<details><summary>{n} shared step{'s' if n != 1 else ''}</summary>{shared}</details>"
    rest = comparison.rows[comparison.shared :]
    if rest:
        body += f'<table class="nb-tasks" style="width:100%">{cols}{rows(rest, comparison.shared + 1)}</table>'
    else:
        body += '<div class="nb-line nb-muted">the two branches are the same</div>'
    return f'<div class="nbagent nb-compare"><style>{CSS}</style>{head}{body}</div>'


# ----- one message, a memory ------------------------------------------------------------------


def message_html(message: ChatMessage) -> str:
    """One chat message, as the transcript draws it."""
    return transcript_html([message])


def memory_html(memory: ChatMemoryBuffer) -> str:
    """Every message a memory holds, oldest first."""
    return transcript_html(memory.get_all())
