"""The control panel's pictures as HTML: pure functions of a task's state.

The status line, the step inspector, the token view and the static picture that notebooks
without a widget front end show (nbconvert, nbval, GitHub, the docs site). Same state in,
same HTML out; every text from a model, a tool or a person is escaped here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbagent.engine.state import StepStatus, TaskStatus
from nbagent.text import html_text, preview, short_id
from nbagent.viz.live import DISABLED_BUTTON_CSS

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.messages import ChatMessage
    from nbagent.runner.base import AgentRunner

__all__ = [
    "ENDED",
    "PANEL_CSS",
    "TRANSCRIPT_RECENT",
    "inspector_html",
    "seconds",
    "static_html",
    "status_html",
    "step_options",
    "task_options",
    "tokens_html",
    "transcript_html_for",
]

ENDED = (TaskStatus.FINALIZED, TaskStatus.ABANDONED)
TRANSCRIPT_RECENT = 8  # messages the transcript shows whole; the earlier ones are folded

PANEL_CSS = """
.nbagent-panel{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);background:var(--jp-layout-color1,transparent);
 border:1px solid var(--jp-border-color2,#d0d7de);border-radius:6px;padding:6px 8px;
 box-sizing:border-box;max-width:100%}
.nbagent-panel .nbagent-h{font-weight:600;font-size:var(--jp-ui-font-size1,13px);
 color:var(--jp-ui-font-color2,#57606a);margin:4px 0 2px 0}
.nbagent-panel .nbagent-status-line{font-size:var(--jp-ui-font-size1,13px);line-height:1.5;
 padding:3px 6px;border-radius:4px;background:var(--jp-layout-color2,#f6f8fa);
 color:var(--jp-ui-font-color1,#1f2328);overflow-wrap:anywhere}
.nbagent-panel .nbagent-err{color:var(--jp-error-color1,#b91c1c);font-weight:600}
.nbagent-panel .nbagent-note{color:var(--jp-ui-font-color2,#57606a)}
.nbagent-panel .nbagent-badge{display:inline-block;padding:0 7px;border-radius:9px;
 border:1px solid;font-weight:600;font-size:0.9em}
.nbagent-panel .nbagent-tail{display:flex;flex-direction:column-reverse;overflow:auto;
 font-size:var(--jp-code-font-size,12px);max-height:calc(7 * 1.4em + 8px);border-radius:4px;
 border:1px solid var(--jp-border-color2,#d0d7de);background:var(--jp-layout-color2,#f6f8fa)}
.nbagent-panel .nbagent-tokens pre{font-family:var(--jp-code-font-family,monospace);
 font-size:inherit;line-height:1.4;white-space:pre-wrap;word-break:break-word;margin:0;
 padding:4px 6px;min-height:2.8em;background:transparent;color:var(--jp-ui-font-color1,#1f2328);
 border:none}
.nbagent-panel .nbagent-graphbox{border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:4px;background:var(--jp-layout-color0,transparent)}
.nbagent-panel .nbagent-btn-step.jupyter-button:not([disabled]){background:#1565c0;color:#fff}
.nbagent-panel .nbagent-btn-run.jupyter-button:not([disabled]){background:#2e7d32;color:#fff}
.nbagent-panel .nbagent-btn-stop.jupyter-button:not([disabled]){background:#b45309;color:#fff}
.nbagent-panel .nbagent-btn-retry.jupyter-button:not([disabled]){background:#b91c1c;color:#fff}
""" + DISABLED_BUTTON_CSS.replace("SCOPE", ".nbagent-panel")
# the coloured buttons: Jupyter's own success/warning/danger colours carry white text at
# 2-4:1; these keep the same hues at >= 4.9:1 in light and dark themes. The Streaming box
# is 7 lines of 1.4em tall, so its edge falls between two lines, never through one.

# the task's status -> the step status whose colours its badge wears
_BADGE = {
    TaskStatus.FAILED: StepStatus.FAILED, TaskStatus.RUNNING: StepStatus.RUNNING,
    TaskStatus.COMPLETED: StepStatus.DONE, TaskStatus.FINALIZED: StepStatus.DONE,
    TaskStatus.ABANDONED: StepStatus.UNDONE, TaskStatus.ACTIVE: StepStatus.RUNNING,
}


def seconds(value: float) -> str:
    """A duration people can read: milliseconds below one second."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def failure_hint(error_type: str) -> str:
    """What to do about a failed step (a used-up script fails the same way on Retry)."""
    if error_type == "ScriptExhaustedError":
        return ("the scripted model has no replies left, so Retry would fail the same "
                "way: Undo, Skip, or give the model more replies")
    return "Retry runs it again; Skip goes on without it"


def status_html(
    state: TaskState | None, *, busy: bool, notice: str = "", notice_is_error: bool = False
) -> str:
    """The status line: the task's badge, counts, tokens, cost, time, a failure and what to
    do about it, the answer, and the last click that could not be done (``notice``)."""
    parts: list[str] = []
    if state is None:
        parts.append('<span class="nbagent-note">no task selected: type one above and press New task</span>')
    else:
        from nbagent.viz.dot import STATUS_COLORS, status_summary

        status = state.status
        fill, border, fg = STATUS_COLORS[_BADGE.get(status, StepStatus.QUEUED)]
        label = "running" if busy and status != TaskStatus.RUNNING and status not in ENDED else status.value
        parts.append(
            f'<span class="nbagent-badge" style="background:{fill};border-color:{border};color:{fg}">'
            f"{html_text(label)}</span>"
        )
        counts = status_summary(state)
        # every step waiting in the queue, the failed one included (as get_upcoming_steps)
        queued = len(state.step_queue) - counts.get("held", 0)
        tokens = 0
        latency = 0.0
        for out in list(state.completed_steps):
            if out.usage is not None:
                tokens += out.usage.total_tokens
            if isinstance(out.latency_s, (int, float)):
                latency += out.latency_s
        parts.append(f"task <code>{html_text(short_id(state.task_id))}</code>")
        parts.append(f"{counts.get('done', 0)} done")
        parts.append(f"{queued} queued")
        if counts.get("held"):
            parts.append(f"{counts['held']} held")
        if counts.get("undone"):
            parts.append(f"{counts['undone']} undone")
        parts.append(f"{tokens} tokens")
        from nbagent.costs import task_cost_label

        money = task_cost_label(state)  # None unless prices are set (nbagent.costs)
        if money is not None:
            parts.append(html_text(money))
        parts.append(seconds(latency))
        failed = state.failed_step_id()
        if failed is not None and state.failures:
            from nbagent.viz.dot import step_numbers

            f = state.failures[-1]
            index = step_numbers(state).get(failed, "?")
            parts.append(
                f'<span class="nbagent-err">step #{index} failed: '
                f"{html_text(f'{f.error_type}: {f.message}', 300)} ({failure_hint(f.error_type)})</span>"
            )
        if status == TaskStatus.FINALIZED and state.final_response is not None:
            from nbagent.text import output_text

            parts.append(f"answer: <b>{html_text(preview(output_text(state.final_response), 120))}</b>")
    if notice:
        cls = "nbagent-err" if notice_is_error else "nbagent-note"
        parts.append(f'<span class="{cls}">{html_text(notice, 400)}</span>')
    return '<div class="nbagent-status-line">' + " · ".join(parts) + "</div>"


def inspector_html(state: TaskState | None, step_id: str | None) -> str:
    """One step as the inspector shows it: its number and status as the graph says them, the
    step, its output, and its last failure with the traceback folded."""
    if state is None or step_id is None or step_id not in state.steps:
        return '<div class="nbagent-note">no step to inspect</div>'
    from nbagent.viz.dot import step_heads
    from nbagent.viz.html import step_html, step_output_html

    step = state.steps[step_id]
    head = step_heads(state).get(step_id, "#?")  # the graph's number and status for this step
    parts = [f'<div class="nbagent-note">step <b>{html_text(head)}</b></div>', step_html(step)]
    out = state.outputs.get(step_id)
    if out is not None:
        parts.append(step_output_html(out))
    failures = [f for f in list(state.failures) if f.step_id == step_id]
    if failures:
        f = failures[-1]
        parts.append(
            f'<div class="nbagent-err">attempt {f.attempt} failed: '
            f"{html_text(f'{f.error_type}: {f.message}', 500)}</div>"
            f"<details><summary>traceback</summary><pre>{html_text(f.traceback, 8000)}</pre></details>"
        )
    return "".join(parts)


def tokens_html(note: str, text: str) -> str:
    """The token view: which step streamed (``note``) and the tail of what it said."""
    body = html_text(text) if text else ""
    return f'<div class="nbagent-note">{html_text(note)}</div><div class="nbagent-tail"><pre>{body}</pre></div>'


def transcript_html_for(messages: Sequence[ChatMessage]) -> str:
    """The transcript: the last ``TRANSCRIPT_RECENT`` messages whole, the earlier ones folded."""
    from nbagent.viz.html import transcript_html

    return transcript_html(messages, recent=TRANSCRIPT_RECENT)


def task_options(runner: AgentRunner) -> list[tuple[str, str]]:
    """The task picker's entries, oldest first: (label, task id)."""
    return [
        (f"{short_id(sid)} · {st.status.value} · {preview(st.task.input, 40)}", sid)
        for sid, st in list(runner.tasks.items())
    ]


def step_options(state: TaskState | None) -> list[tuple[str, str]]:
    """The step picker's entries in registry order: (the graph's number and words, the input)."""
    if state is None:
        return []
    from nbagent.viz.dot import step_heads

    heads = step_heads(state)  # the graph's numbers and words: "#4 done · answer"
    return [
        (f"{heads.get(sid, '#?')} · {preview(step.input, 40) if step.input else '(no input)'}", sid)
        for sid, step in list(state.steps.items())
    ]


def static_html(
    state: TaskState | None,
    messages: Sequence[ChatMessage],
    *,
    busy: bool = False,
    notice: str = "",
    notice_is_error: bool = False,
    dot_options: Mapping[str, Any] | None = None,
) -> str:
    """The panel as static HTML (status, the step graph, the transcript) for notebooks shown
    without widgets; the graph is an inline SVG when Graphviz is there."""
    parts = [f"<style>{PANEL_CSS}</style>", '<div class="nbagent-panel">',
             status_html(state, busy=busy, notice=notice, notice_is_error=notice_is_error)]
    if state is not None:
        from nbagent.viz.graph import StepGraph

        try:
            parts.append(StepGraph(state, **dict(dot_options or {})).html())
        except Exception as err:  # noqa: BLE001
            from nbagent.viz.html import error_html

            parts.append(error_html("the step graph could not be drawn", err))
    parts.append(transcript_html_for(messages))
    parts.append("</div>")
    return "".join(parts)
