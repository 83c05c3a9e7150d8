"""Views of a BatchRun: the live progress grid, the static summary table, a tqdm bar.

- ``BatchGrid`` (Jupyter): counts (done / running / failed / queued), tokens, cost and time
  so far, a Stop button, and a grid with one cell per task coloured by status. Clicking a
  cell shows that task's step DAG (a ``LiveGraph``: it keeps drawing while the task runs)
  and its transcript. Python twins: ``grid.click(i)`` does what a click on cell ``i`` does,
  ``grid.stop()`` what Stop does. Redraws are throttled; the cells travel as one string of
  status letters, so a grid of 10,000 tasks costs 10 kB per redraw.
- ``batch_summary_html`` (nbconvert, nbval, GitHub): a summary table, no JavaScript.
- ``TqdmProgress``: outside Jupyter, a tqdm bar with failures and tokens in its postfix.

The core (``nbagent.batch``) imports this module only when a view is asked for.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.viz.escape import html_text, preview, short_id
from nbagent.viz.live import DISABLED_BUTTON_CSS

if TYPE_CHECKING:
    from nbagent.batch import BatchItem, BatchRun

_DISABLED_CSS = DISABLED_BUTTON_CSS.replace("SCOPE", ".nbagent-batch")

__all__ = ["BatchGrid", "TqdmProgress", "batch_summary_html", "start_progress", "STATUS_STYLE"]

log = logging.getLogger("nbagent.viz")

# item status -> (fill, border, text), the step colours of the DAG so the two views agree
STATUS_STYLE: dict[str, tuple[str, str, str]] = {
    "queued": ("#f1f5f9", "#64748b", "#1e293b"),
    "running": ("#dbeafe", "#1d4ed8", "#172554"),
    "done": ("#dcfce7", "#15803d", "#052e16"),
    "failed": ("#fee2e2", "#b91c1c", "#450a0a"),
    "stopped": ("#e5e7eb", "#6b7280", "#374151"),
}
_LETTER = {s[0]: s for s in STATUS_STYLE}
_MAX_LABELS = 5000  # cell tooltips (input previews) are sent only for grids up to this size
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
    from nbagent.costs import format_money, runner_pricing

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
        from nbagent.batch import _error_text

        outcome = f'<span class="nbb-err">{html_text(preview(_error_text(item.error), 160))}</span>'
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


# ----- the grid widget ---------------------------------------------------------------------

_GRID_ESM = """
const COLORS = %(colors)s;
function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "nbb-grid";
  el.appendChild(box);
  let cells = [];
  function draw() {
    const s = model.get("statuses");
    const labels = model.get("labels");
    const sel = model.get("selected");
    while (cells.length < s.length) {
      const c = document.createElement("div");
      const i = cells.length;
      c.className = "nbb-gcell";
      c.dataset.index = String(i);
      c.addEventListener("click", () => { model.set("selected", i); model.save_changes(); });
      box.appendChild(c);
      cells.push(c);
    }
    while (cells.length > s.length) { box.removeChild(cells.pop()); }
    for (let i = 0; i < s.length; i++) {
      const col = COLORS[s[i]] || COLORS["q"];
      const c = cells[i];
      c.style.background = col[0];
      c.style.borderColor = i === sel ? "#111827" : col[1];
      c.style.outline = i === sel ? "2px solid #111827" : "none";
      c.dataset.status = s[i];
      c.title = "#" + i + " " + (col[2]) + (labels.length > i ? ": " + labels[i] : "");
    }
  }
  model.on("change:statuses", draw);
  model.on("change:selected", draw);
  model.on("change:labels", draw);
  draw();
}
export default { render };
"""

_GRID_CSS = """
.nbb-grid{display:flex;flex-wrap:wrap;gap:4px;max-height:20em;overflow:auto;padding:3px}
.nbb-gcell{width:20px;height:20px;border:1px solid;border-radius:3px;box-sizing:border-box;cursor:pointer}
.nbb-gcell:hover{transform:scale(1.15)}
"""

_GRID_CLASS: Any = None


def _grid_class() -> Any:
    """The anywidget that draws the cells and reports clicks (made once)."""
    global _GRID_CLASS
    if _GRID_CLASS is None:
        import json

        import anywidget
        import traitlets

        colors = {s[0]: [fill, border, s] for s, (fill, border, _) in STATUS_STYLE.items()}

        class BatchCells(anywidget.AnyWidget):  # type: ignore[misc]
            """One cell per task; ``selected`` is the clicked cell (-1: none)."""

            _esm = _GRID_ESM % {"colors": json.dumps(colors)}
            _css = _GRID_CSS
            statuses = traitlets.Unicode("").tag(sync=True)
            labels = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)
            selected = traitlets.Int(-1).tag(sync=True)

        _GRID_CLASS = BatchCells
    return _GRID_CLASS


class BatchGrid:
    """The live progress view of a ``BatchRun`` (see the module docstring)."""

    def __init__(self, batch: BatchRun, *, throttle_s: float = 0.2) -> None:
        import ipywidgets as W

        from nbagent.viz.live import LiveGraph, Throttle

        self.batch = batch
        self.selected: int | None = None
        self._lock = threading.RLock()
        self.status = W.HTML(value="")
        # red only while it can act (_CSS): a button_style would stay red when disabled
        self.stop_button = W.Button(description="Stop", icon="stop",
                                    tooltip="start no new task, cancel the running ones, keep what finished")
        self.stop_button.add_class("nbb-stop")
        self.stop_button.on_click(lambda _b: self._click_stop())
        self.cells = _grid_class()(
            statuses=batch.statuses(),
            labels=[preview(t, 60) for t in batch.inputs] if len(batch) <= _MAX_LABELS else [],
        )
        self.cells.observe(self._on_select, names="selected")
        self.detail = W.HTML(value='<div class="nbb-note">click a cell to open its task</div>')
        self.graph = LiveGraph(batch.runner, None, throttle_s=throttle_s)
        self.transcript = W.HTML(value="")
        header = W.HBox([self.status, self.stop_button])
        # the graph joins the layout only once a task is open: drawn while hidden
        # (display: none), the in-browser renderer has no size and fails
        self._closed_children = (W.HTML(value=f"<style>{_CSS}{_DISABLED_CSS}</style>"), header, self.cells,
                                 self.detail, self.transcript)
        self._open_children = (*self._closed_children[:4], self.graph.widget, self.transcript)
        self.widget = W.VBox(list(self._closed_children))
        self.widget.add_class("nbagent-batch")
        self.redraws = 0
        self._throttle = Throttle(self._draw, throttle_s)
        self._unsubscribe: Any = batch.subscribe(self._on_change)
        self._draw()

    # ----- Python twins of the clicks ------------------------------------------------------
    def click(self, index: int) -> None:
        """Open task ``index``: what a click on its cell does."""
        item = self.batch._item(index)
        self.cells.selected = item.index  # the observer opens it

    def stop(self) -> None:
        """What the Stop button does: ``batch.stop()``."""
        self.batch.stop()
        self._throttle.request()

    # ----- events --------------------------------------------------------------------------
    def _click_stop(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - a click never raises into the kernel
            log.exception("nbagent: Stop failed")

    def _on_select(self, change: dict[str, Any]) -> None:
        index = change["new"]
        try:
            self._open(index if isinstance(index, int) and 0 <= index < len(self.batch) else None)
        except Exception as err:  # noqa: BLE001 - shown, not raised
            log.exception("nbagent: could not open a batch task")
            self.detail.value = f'<div class="nbb-err">{html_text(f"{type(err).__name__}: {err}")}</div>'

    def _on_change(self, batch: BatchRun, item: BatchItem | None) -> None:
        if item is not None and item.index == self.selected:
            self._open_pending = True  # the open task changed: redraw its details too
        self._throttle.request()

    _open_pending = False

    def _open(self, index: int | None) -> None:
        with self._lock:
            self.selected = index
            if index is None:
                self.detail.value = '<div class="nbb-note">click a cell to open its task</div>'
                self._show_graph(False)
                self.transcript.value = ""
                return
            item = self.batch.items[index]
            self.detail.value = self._detail_html(item)
            state = self.batch.runner.tasks.get(item.task_id) if item.task_id else None
            if state is None:
                self._show_graph(False)
                self.graph.show(None)
                self.transcript.value = ""
                return
            self.graph.show(state.task_id)
            self._show_graph(True)
            from nbagent.viz.html import transcript_html

            self.transcript.value = transcript_html(self.batch.transcript(index))

    def _show_graph(self, shown: bool) -> None:
        children = self._open_children if shown else self._closed_children
        if tuple(self.widget.children) != children:
            self.widget.children = children

    @property
    def graph_shown(self) -> bool:
        """Whether the open task's graph is in the layout (it is only while a task is open)."""
        return self.graph.widget in self.widget.children

    def _detail_html(self, item: BatchItem) -> str:
        from nbagent.batch import _error_text

        lines = [
            f"<b>#{item.index}</b> {_badge(item.status, item.status)} "
            f"task <code>{html_text(short_id(item.task_id) if item.task_id else '–')}</code> · "
            f"{counted(item.steps, 'step')} · {counted(item.total_tokens, 'token')} · {html_text(_money(self.batch, item.cost))} · "
            f"{_seconds(item.latency_s)}"
            + (f" · on {html_text(item.worker)}" if item.worker else "")
            + (" · from the store" if item.resumed else ""),
            f"<div>input: {html_text(preview(item.input, 400))}</div>",
        ]
        if item.error is not None:
            lines.append(f'<div class="nbb-err">{html_text(preview(_error_text(item.error), 600))}</div>')
        elif item.response is not None:
            lines.append(f"<div>answer: <b>{html_text(preview(item.response.response, 600))}</b></div>")
        elif item.task_id is None:
            lines.append('<div class="nbb-note">not started</div>')
        return f'<div class="nbagent-batch nbb-detail">{"".join(lines)}</div>'

    def _draw(self) -> None:
        with self._lock:
            self.redraws += 1
            statuses = self.batch.statuses()
            with self.status.hold_sync(), self.cells.hold_sync(), self.stop_button.hold_sync():
                self.status.value = status_line_html(self.batch)
                if self.cells.statuses != statuses:
                    self.cells.statuses = statuses
                self.stop_button.disabled = self.batch.finished
            if self._open_pending and self.selected is not None:
                self._open_pending = False
                self._open(self.selected)

    def flush(self) -> None:
        """Draw a pending change now."""
        self._throttle.flush()
        self.graph.flush()

    def finish(self) -> None:
        """The batch ended: draw its final state."""
        self._throttle.cancel()
        self._draw()
        self.graph.flush()

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._throttle.cancel()
        self.graph.close()
        for w in (self.status, self.stop_button, self.cells, self.detail, self.transcript, self.widget):
            w.close()

    def static_html(self) -> str:
        """The summary table, then the open task (details, DAG, transcript) if one is open."""
        parts = [batch_summary_html(self.batch)]
        index = self.selected
        if index is not None:
            item = self.batch.items[index]
            parts.append(self._detail_html(item))
            state = self.batch.runner.tasks.get(item.task_id) if item.task_id else None
            if state is not None:
                from nbagent.viz.graph import StepGraph
                from nbagent.viz.html import error_html, transcript_html

                try:
                    parts.append(StepGraph(state).html())
                except Exception as err:  # noqa: BLE001 - the rest still shows
                    parts.append(error_html("the step graph could not be drawn", err))
                parts.append(transcript_html(self.batch.transcript(index)))
        return "".join(parts)

    def __repr__(self) -> str:
        return f"BatchGrid({self.batch!r})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        from nbagent.viz.live import widget_bundle

        self.flush()
        return widget_bundle(self.widget, repr(self.batch), lambda: {"text/html": self.static_html()})


# ----- tqdm ---------------------------------------------------------------------------------


class TqdmProgress:
    """A tqdm bar that counts finished tasks; failures and tokens in its postfix."""

    def __init__(self, batch: BatchRun, file: Any = None) -> None:
        from tqdm.auto import tqdm

        self.batch = batch
        self._seen = 0
        self.bar = tqdm(total=len(batch), desc=batch.name, unit="task", file=file or sys.stderr, leave=True)
        self._unsubscribe: Any = batch.subscribe(self._on_change)

    def _on_change(self, batch: BatchRun, item: BatchItem | None) -> None:
        c = batch.counts()
        finished = c["done"] + c["failed"]
        if finished > self._seen:
            self.bar.set_postfix(failed=c["failed"], tokens=batch.tokens, refresh=False)
            self.bar.update(finished - self._seen)
            self._seen = finished

    def finish(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
            c = self.batch.counts()
            self.bar.set_postfix(failed=c["failed"], stopped=c["stopped"], tokens=self.batch.tokens, refresh=False)
            self.bar.close()


# ----- choosing a view ------------------------------------------------------------------------


def _in_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


class _Shown:
    """A grid displayed in the notebook; at the end its output is updated so that a saved
    notebook (nbconvert, GitHub) shows the final summary, not the first one."""

    def __init__(self, grid: BatchGrid) -> None:
        from IPython.display import display

        self.grid = grid
        self.handle = display(grid, display_id=True)

    def finish(self) -> None:
        self.grid.finish()
        if self.handle is not None:
            self.handle.update(self.grid)


def start_progress(batch: BatchRun, mode: str) -> Any:
    """The progress view ``run_batch(progress=mode)`` asked for (None: none available)."""
    if mode == "grid" or (mode == "auto" and _in_kernel()):
        return _Shown(BatchGrid(batch))
    if mode in ("tqdm", "auto"):
        try:
            return TqdmProgress(batch)
        except ImportError:
            if mode == "tqdm":
                raise ImportError("progress='tqdm' needs tqdm: pip install tqdm") from None
            return None
    return None
