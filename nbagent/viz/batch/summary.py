"""A BatchRun as static HTML (nbconvert, nbval, GitHub; no JavaScript): the status line,
one coloured cell per task, a table of tasks, and one task's details. Pure functions of the
batch; every input, answer and error is escaped. The live grid (``grid.py``) shows the same
pieces."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent._counts import counted
from nbagent.batch.results import error_text
from nbagent.costs import format_money, runner_pricing
from nbagent.engine.state import StepStatus
from nbagent.viz.dot import STATUS_COLORS
from nbagent.viz.escape import html_text, preview, short_id
from nbagent.viz.graph import StepGraph
from nbagent.viz.html import error_html, transcript_html

if TYPE_CHECKING:
    from nbagent.batch import BatchItem, BatchRun

__all__ = ["STATUS_STYLE", "status_line_html", "batch_summary_html", "task_detail_html", "batch_static_html"]

# item status -> (fill, border, text): the DAG's step colours, so the two views agree; a task
# stopped before it ran has a grey of its own
STATUS_STYLE: dict[str, tuple[str, str, str]] = {
    **{s.value: STATUS_COLORS[s] for s in (StepStatus.QUEUED, StepStatus.RUNNING, StepStatus.DONE, StepStatus.FAILED)},
    "stopped": ("#e5e7eb", "#6b7280", "#374151"),
}
_STATIC_ROWS = 30

_CSS = """
.nbagent-batch{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);font-size:var(--jp-ui-font-size1,13px);
 border:1px solid var(--jp-border-color2,#d0d7de);border-radius:6px;padding:6px 8px;
 box-sizing:border-box;max-width:100%}
.nbagent-batch .nbb-line{line-height:1.6;overflow-wrap:anywhere}
.nbagent-batch .nbb-badge{display:inline-block;padding:0 7px;border-radius:9px;border:1px solid;
 font-weight:600;font-size:0.9em;margin-right:2px}
.nbagent-batch .nbb-cells{display:flex;flex-wrap:wrap;gap:2px;margin:6px 0;max-height:16em;overflow:auto}
.nbagent-batch .nbb-cell{width:12px;height:12px;border:1px solid;border-radius:2px;box-sizing:border-box}
.nbagent-batch table{border-collapse:collapse;margin-top:4px;font-size:0.95em}
.nbagent-batch th,.nbagent-batch td{border:1px solid var(--jp-border-color2,#d0d7de);padding:2px 6px;
 text-align:left;vertical-align:top}
.nbagent-batch td.nbb-num{text-align:right;font-variant-numeric:tabular-nums}
.nbagent-batch .nbb-err{color:var(--jp-error-color1,#b91c1c)}
.nbagent-batch .nbb-note{color:var(--jp-ui-font-color2,#57606a)}
.nbagent-batch .nbb-stop.jupyter-button:not([disabled]){background:#b91c1c;color:#fff}
"""


def _badge(status: str, text: str) -> str:
    fill, border, fg = STATUS_STYLE[status]
    return (
        f'<span class="nbb-badge" style="background:{fill};border-color:{border};color:{fg}">'
        f"{html_text(text)}</span>"
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _money(batch: BatchRun, amount: float | None) -> str:
    if amount is None:
        return "–"
    return format_money(amount, runner_pricing(batch.runner).currency)


def status_line_html(batch: BatchRun) -> str:
    """Counts, tokens, cost and time: the first line of the grid and of the summary."""
    c = batch.counts()
    parts = [
        _badge("done", f"{c['done']} done"),
        _badge("running", f"{c['running']} running"),
        _badge("failed", f"{c['failed']} failed"),
        _badge("queued", f"{c['queued']} queued"),
    ]
    if c["stopped"]:
        parts.append(_badge("stopped", f"{c['stopped']} stopped"))
    state = "not started" if batch.started_at is None else (
        "stopped" if batch.stopped else ("finished" if batch.finished else "running")
    )
    if batch.interrupted:
        state = "interrupted"
    facts = [
        counted(len(batch), "task"),
        state,
        counted(batch.tokens, "token"),
    ]
    if batch.cost is not None:
        facts.append(_money(batch, batch.cost))
    facts.append(_seconds(batch.elapsed_s))
    if batch.backend != "asyncio":
        facts.append(f"on {batch.backend}")
    resumed = sum(1 for it in batch.items if it.resumed)
    if resumed:
        facts.append(f"{resumed} from the store")
    return f'<div class="nbb-line">{" ".join(parts)} · {html_text(" · ".join(facts))}</div>'


def _static_cells(batch: BatchRun, limit: int = 2000) -> str:
    cells = []
    for item in batch.items[:limit]:
        fill, border, _ = STATUS_STYLE[item.status]
        title = html_text(f"#{item.index} {item.status}: {preview(item.input, 60)}")
        cells.append(f'<span class="nbb-cell" style="background:{fill};border-color:{border}" title="{title}"></span>')
    more = f'<span class="nbb-note">… {len(batch) - limit} more</span>' if len(batch) > limit else ""
    return f'<div class="nbb-cells">{"".join(cells)}{more}</div>'


def _row_html(batch: BatchRun, item: BatchItem) -> str:
    if item.status == "failed" and item.error is not None:
        outcome = f'<span class="nbb-err">{html_text(preview(error_text(item.error), 160))}</span>'
    elif item.response is not None:
        outcome = html_text(preview(item.response.response, 160))
    else:
        outcome = '<span class="nbb-note">–</span>'
    return (
        f'<tr><td class="nbb-num">{item.index}</td><td>{html_text(preview(item.input, 80))}</td>'
        f"<td>{_badge(item.status, item.status)}</td><td class=\"nbb-num\">{item.steps}</td>"
        f'<td class="nbb-num">{item.total_tokens}</td><td class="nbb-num">{html_text(_money(batch, item.cost))}</td>'
        f'<td class="nbb-num">{_seconds(item.latency_s)}</td><td>{outcome}</td></tr>'
    )


def batch_summary_html(batch: BatchRun) -> str:
    """The batch as static HTML: status line, cells, and a table of tasks (every task up to
    30; beyond that the failed ones first, then the first others)."""
    items = list(batch.items)
    if len(items) > _STATIC_ROWS:
        failed = [it for it in items if it.status == "failed"]
        others = [it for it in items if it.status != "failed"]
        shown = sorted(failed[:_STATIC_ROWS] + others[: max(0, _STATIC_ROWS - len(failed))], key=lambda it: it.index)
    else:
        shown = items
    head = (
        "<tr><th>#</th><th>input</th><th>status</th><th>steps</th><th>tokens</th><th>cost</th>"
        "<th>latency</th><th>answer / error</th></tr>"
    )
    rows = "".join(_row_html(batch, it) for it in shown)
    more = ""
    if len(shown) < len(items):
        more = f'<div class="nbb-note">{len(items) - len(shown)} more rows: batch.to_pandas() has them all</div>'
    return (
        f'<div class="nbagent-batch"><style>{_CSS}</style>'
        f'<div class="nbb-line"><b>Batch</b> {html_text(batch.name)}</div>'
        f"{status_line_html(batch)}{_static_cells(batch)}"
        f"<table>{head}{rows}</table>{more}</div>"
    )


def task_detail_html(batch: BatchRun, item: BatchItem) -> str:
    """One task of the batch: status, steps, tokens, cost, time, its input and its answer or error."""
    lines = [
        f"<b>#{item.index}</b> {_badge(item.status, item.status)} "
        f"task <code>{html_text(short_id(item.task_id) if item.task_id else '–')}</code> · "
        f"{counted(item.steps, 'step')} · {counted(item.total_tokens, 'token')} · {html_text(_money(batch, item.cost))} · "
        f"{_seconds(item.latency_s)}"
        + (f" · on {html_text(item.worker)}" if item.worker else "")
        + (" · from the store" if item.resumed else ""),
        f"<div>input: {html_text(preview(item.input, 400))}</div>",
    ]
    if item.error is not None:
        lines.append(f'<div class="nbb-err">{html_text(preview(error_text(item.error), 600))}</div>')
    elif item.response is not None:
        lines.append(f"<div>answer: <b>{html_text(preview(item.response.response, 600))}</b></div>")
    elif item.task_id is None:
        lines.append('<div class="nbb-note">not started</div>')
    return f'<div class="nbagent-batch nbb-detail">{"".join(lines)}</div>'


def batch_static_html(batch: BatchRun, open_index: int | None = None) -> str:
    """The summary table, then task ``open_index`` (details, step graph, transcript) if given:
    what the grid shows, without a browser."""
    parts = [batch_summary_html(batch)]
    if open_index is not None:
        item = batch.items[open_index]
        parts.append(task_detail_html(batch, item))
        state = batch.runner.tasks.get(item.task_id) if item.task_id else None
        if state is not None:
            try:
                parts.append(StepGraph(state).html())
            except Exception as err:  # noqa: BLE001 - the rest still shows
                parts.append(error_html("the step graph could not be drawn", err))
            parts.append(transcript_html(batch.transcript(open_index)))
    return "".join(parts)
