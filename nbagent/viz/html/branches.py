"""The view of two branches of a task side by side (``runner.compare``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.branches import describe_branch
from nbagent.viz.escape import html_text, preview, short_id
from nbagent.viz.html.base import CSS

if TYPE_CHECKING:
    from nbagent.branches import BranchComparison, BranchStep

__all__ = ["comparison_html"]


def _labelled(label: str, text: str, cls: str = "") -> str:
    """One line of a compare cell: our own label, then ready (escaped) HTML."""
    return f'<div class="nb-line{cls}"><span class="nb-muted">{label}</span> {text}</div>'


def comparison_html(comparison: BranchComparison) -> str:
    """Two branches side by side (``runner.compare``): the shared steps folded, then each row."""
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
