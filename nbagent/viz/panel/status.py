"""The control panel as static HTML: what notebooks shown without a widget front end display
(nbconvert, nbval, GitHub, the docs site). Pure functions: the same state gives the same HTML,
and every text from a model, a tool or a person is escaped here.

The status line is drawn from the same data the widget sends to the browser
(``data.status_data``), so the picture and the live panel say the same things.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbagent.engine.state import StepStatus
from nbagent.text import html_text
from nbagent.viz.panel.data import TRANSCRIPT_RECENT, status_data

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.messages import ChatMessage

__all__ = ["PANEL_CSS", "static_html", "status_html"]

# theme-aware: JupyterLab's variables, with light fallbacks elsewhere
PANEL_CSS = """
.nbagent-panel{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);background:var(--jp-layout-color1,transparent);
 border:1px solid var(--jp-border-color2,#d0d7de);border-radius:6px;padding:6px 8px;
 box-sizing:border-box;max-width:100%}
.nbagent-panel .nbagent-status-line{font-size:var(--jp-ui-font-size1,13px);line-height:1.5;
 padding:3px 6px;border-radius:4px;background:var(--jp-layout-color2,#f6f8fa);
 color:var(--jp-ui-font-color1,#1f2328);overflow-wrap:anywhere}
.nbagent-panel .nbagent-err{color:var(--jp-error-color1,#b91c1c);font-weight:600}
.nbagent-panel .nbagent-note{color:var(--jp-ui-font-color2,#57606a)}
.nbagent-panel .nbagent-badge{display:inline-block;padding:0 7px;border-radius:9px;
 border:1px solid;font-weight:600;font-size:0.9em}
"""


def status_html(status: Mapping[str, Any]) -> str:
    """The status line from ``data.status_data``: the task's badge (in the colours its steps
    wear in the graph), counts, tokens, cost, time, a failure and what to do about it, the
    answer, and the last press that could not be done."""
    parts: list[str] = []
    if status.get("colour"):
        from nbagent.viz.dot import STATUS_COLORS

        fill, border, fg = STATUS_COLORS[StepStatus[str(status["colour"]).upper()]]
        parts.append(f'<span class="nbagent-badge" style="background:{fill};border-color:{border};color:{fg}">'
                     f"{html_text(status['state'])}</span>")
    if status.get("task"):
        parts.append(f"task <code>{html_text(status['task'])}</code>")
    note = "nbagent-note" if not status.get("colour") else ""
    for part in status.get("parts", ()):
        parts.append(f'<span class="{note}">{html_text(part)}</span>' if note else html_text(part))
    if status.get("error"):
        parts.append(f'<span class="nbagent-err">{html_text(status["error"])}</span>')
    if status.get("answer"):
        parts.append(f"answer: <b>{html_text(status['answer'])}</b>")
    if status.get("notice"):
        cls = "nbagent-err" if status.get("notice_error") else "nbagent-note"
        parts.append(f'<span class="{cls}">{html_text(status["notice"])}</span>')
    return '<div class="nbagent-status-line">' + " · ".join(parts) + "</div>"


def static_html(
    state: TaskState | None,
    messages: Sequence[ChatMessage],
    *,
    busy: bool = False,
    notice: str = "",
    notice_is_error: bool = False,
    dot_options: Mapping[str, Any] | None = None,
) -> str:
    """The panel as static HTML: the status line, the step graph (an inline SVG when Graphviz
    is there, else a timeline) and the transcript (the last messages whole)."""
    from nbagent.viz.html import transcript_html

    status = status_data(state, busy=busy, notice=notice, notice_is_error=notice_is_error)
    parts = [f"<style>{PANEL_CSS}</style>", '<div class="nbagent-panel">', status_html(status)]
    if state is not None:
        from nbagent.viz.graph import StepGraph

        try:
            parts.append(StepGraph(state, **dict(dot_options or {})).html())
        except Exception as err:  # noqa: BLE001 - the rest of the picture still shows
            from nbagent.viz.html import error_html

            parts.append(error_html("the step graph could not be drawn", err))
    parts.append(transcript_html(messages, recent=TRANSCRIPT_RECENT))
    parts.append("</div>")
    return "".join(parts)
