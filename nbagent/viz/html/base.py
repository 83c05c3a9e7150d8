"""The parts every HTML card is built from: the scoped, theme-aware CSS (status, task, role
and badge colours), the card and its small builders (badge, id chip, ``<pre>``, ``<details>``,
key/value table), and ``error_html`` for a view that could not be drawn. A builder escapes the
text it is given (badge, id, ``<pre>``, a table's keys); what it takes as HTML (a line, a
summary, a table's values) its caller has escaped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nbagent.engine.state import StepStatus
from nbagent.viz.dot import SKIPPED, SKIPPED_COLORS, STATUS_COLORS
from nbagent.viz.escape import args_preview, html_text, safe_str, short_id

__all__ = ["CSS", "error_html"]

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


def _line(html_body: str, cls: str = "") -> str:
    extra = f" {cls}" if cls else ""
    return f'<div class="nb-line{extra}">{html_body}</div>'


def _call(tool_name: Any, arguments: Any) -> str:
    """How a tool call reads in every view: ``name(a=1, b='x')`` (text, not yet escaped)."""
    return f"{safe_str(tool_name)}({args_preview(arguments)})"


def _ids_html(ids: Iterable[Any]) -> str:
    chips = [_id(i) for i in ids]
    return " ".join(chips) if chips else '<span class="nb-muted">none</span>'


def _graph_or_list(svg: str | None, list_html: Callable[[], str], dot_source: str | None, *, shown: str) -> str:
    """A graph's body: its inline SVG, or (no Graphviz) a note saying how it is ``shown``
    instead, the list ``list_html()`` draws, and the DOT source when there is one."""
    if svg is not None:
        return f'<div class="nb-graph">{svg}</div>'
    body = _line(f"Graphviz (the <code>dot</code> program) is not available: {shown}.", "nb-muted") + list_html()
    if dot_source is not None:
        body += _details("DOT source", _pre(dot_source, None))
    return body


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
