"""A trace as a waterfall: one row per span (indented by depth), a bar where it ran.

Pure: ``span_tree_html(tree)`` is a function of a ``nbagent.tracing.SpanTree`` (finished
spans, no server). Every name, attribute and message is escaped; bars are plain ``div``s
placed by percentages, so the picture reads the same in JupyterLab (its theme variables,
dark ones included), in nbconvert's HTML and on GitHub. No JavaScript, nothing fetched.
"""

from __future__ import annotations

from typing import Any

from nbagent.text import html_text

__all__ = ["span_tree_html", "KIND_COLOURS"]

#: bar colours by OpenInference kind: readable on light and dark backgrounds alike
KIND_COLOURS = {
    "AGENT": "#6d5fd3",
    "CHAIN": "#5b7083",
    "LLM": "#1f8a70",
    "TOOL": "#c26a00",
    "": "#8b949e",
}
_ERROR = "#cf222e"
# attributes shown in a row's tooltip, in this order, when the span has them
_SHOWN = (
    "gen_ai.agent.name", "gen_ai.conversation.id", "gen_ai.request.model", "gen_ai.provider.name",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons",
    "gen_ai.tool.name", "gen_ai.tool.call.id", "nbagent.step.id", "nbagent.step.status",
    "nbagent.handoff.from", "nbagent.handoff.to", "error.type",
)
_MAX_ROWS = 400

_CSS = """
.nbagent-trace{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);background:var(--jp-layout-color0,transparent);
 font-size:var(--jp-ui-font-size1,13px);border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:6px;padding:6px 8px;box-sizing:border-box;max-width:100%}
.nbagent-trace .nbt-head{line-height:1.6;color:var(--jp-ui-font-color2,#57606a)}
.nbagent-trace .nbt-row{display:grid;grid-template-columns:minmax(12em,34%) 1fr 6em;
 align-items:center;gap:6px;line-height:1.5;border-top:1px solid var(--jp-border-color3,#eaeef2)}
.nbagent-trace .nbt-name{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.nbagent-trace .nbt-kind{font-size:0.8em;font-weight:600;margin-left:4px;
 color:var(--jp-ui-font-color2,#57606a)}
.nbagent-trace .nbt-lane{position:relative;height:12px}
.nbagent-trace .nbt-bar{position:absolute;top:1px;height:10px;border-radius:3px;min-width:2px}
.nbagent-trace .nbt-dur{text-align:right;font-variant-numeric:tabular-nums;
 color:var(--jp-ui-font-color2,#57606a)}
.nbagent-trace .nbt-err{color:var(--jp-error-color1,#cf222e);font-weight:600}
.nbagent-trace .nbt-ev{position:absolute;top:0;width:2px;height:12px;background:var(--jp-ui-font-color1,#1f2328)}
@media (prefers-color-scheme: dark){
 .nbagent-trace:not(.jp-RenderedHTMLCommon *){color:#e6edf3;border-color:#30363d}
 .nbagent-trace:not(.jp-RenderedHTMLCommon *) .nbt-row{border-top-color:#30363d}
 .nbagent-trace:not(.jp-RenderedHTMLCommon *) :is(.nbt-head,.nbt-kind,.nbt-dur){color:#9198a1}
 .nbagent-trace:not(.jp-RenderedHTMLCommon *) .nbt-ev{background:#e6edf3}
 .nbagent-trace:not(.jp-RenderedHTMLCommon *) .nbt-err{color:#ff7b72}
}
"""


def _duration(ns: int) -> str:
    ms = ns / 1e6
    if ms < 1:
        return f"{ns / 1e3:.0f} µs"
    if ms < 1000:
        return f"{ms:.1f} ms"
    return f"{ms / 1000:.2f} s"


def _tooltip(node: Any) -> str:
    lines = [f"{k} = {node.attributes[k]}" for k in _SHOWN if k in node.attributes]
    if node.status == "ERROR" and node.status_message:
        lines.append(f"status: {node.status_message}")
    for name, _ts, attrs in node.events:
        bits = ", ".join(f"{k}={v}" for k, v in attrs.items())
        lines.append(f"event {name}" + (f": {bits}" if bits else ""))
    return html_text("\n".join(lines), 2000)


def _pct(value: int, start: int, total: int) -> float:
    return max(0.0, min(100.0, (value - start) * 100.0 / total))


def span_tree_html(tree: Any) -> str:
    """The waterfall of ``tree``: names by depth, kinds, bars on one time axis, durations;
    errors in red with their message in the row's tooltip (hover), events as ticks."""
    rows = list(tree)
    start, end = tree.start_ns, tree.end_ns
    total = max(1, end - start)
    errors = sum(1 for _, node in rows if node.status == "ERROR")
    head = (
        f"{len(rows)} span{'s' if len(rows) != 1 else ''} · {html_text(_duration(end - start))}"
        + (f' · <span class="nbt-err">{errors} error{"s" if errors != 1 else ""}</span>' if errors else "")
    )
    out = [f'<div class="nbagent-trace"><style>{_CSS}</style><div class="nbt-head">{head}</div>']
    for depth, node in rows[:_MAX_ROWS]:
        colour = _ERROR if node.status == "ERROR" else KIND_COLOURS.get(node.kind, KIND_COLOURS[""])
        left = _pct(node.start_ns, start, total)
        width = max(0.3, min(100.0 - left, node.duration_ns * 100.0 / total))
        ticks = "".join(
            f'<div class="nbt-ev" style="left:{_pct(ts, start, total):.2f}%" title="{html_text(name, 200)}"></div>'
            for name, ts, _a in node.events
        )
        name_cls = "nbt-name nbt-err" if node.status == "ERROR" else "nbt-name"
        kind = f'<span class="nbt-kind">{html_text(node.kind)}</span>' if node.kind else ""
        out.append(
            f'<div class="nbt-row" title="{_tooltip(node)}">'
            f'<div class="{name_cls}" style="padding-left:{depth * 1.1:.1f}em">{html_text(node.name, 80)}{kind}</div>'
            f'<div class="nbt-lane"><div class="nbt-bar" style="left:{left:.2f}%;width:{width:.2f}%;'
            f'background:{colour}"></div>{ticks}</div>'
            f'<div class="nbt-dur">{html_text(_duration(node.duration_ns))}</div></div>'
        )
    if len(rows) > _MAX_ROWS:
        out.append(f'<div class="nbt-head">… {len(rows) - _MAX_ROWS} more spans not drawn</div>')
    out.append("</div>")
    return "".join(out)
