"""``BatchGrid``, the live progress view of a BatchRun in Jupyter: counts (done / running /
failed / queued), tokens, cost and time so far, a Stop button, and one cell per task coloured
by status (an anywidget). Clicking a cell shows that task's step DAG (a ``LiveGraph``: it keeps
drawing while the task runs) and its transcript. Python twins: ``grid.click(i)`` does what a
click on cell ``i`` does, ``grid.stop()`` what Stop does. Redraws are throttled; the cells
travel as one string of status letters, so a grid of 10,000 tasks costs 10 kB per redraw.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nbagent.viz.batch.summary import (
    _CSS,
    STATUS_STYLE,
    batch_static_html,
    status_line_html,
    task_detail_html,
)
from nbagent.viz.escape import html_text, preview
from nbagent.viz.html.chat import transcript_html
from nbagent.viz.live import DISABLED_BUTTON_CSS, LiveGraph, Throttle, widget_bundle

if TYPE_CHECKING:
    from nbagent.batch import BatchItem, BatchRun

__all__ = ["BatchGrid"]

log = logging.getLogger("nbagent.viz")

_DISABLED_CSS = DISABLED_BUTTON_CSS.replace("SCOPE", ".nbagent-batch")
_MAX_LABELS = 5000  # cell tooltips (input previews) are sent only for grids up to this size

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
            self.detail.value = task_detail_html(self.batch, item)
            state = self.batch.runner.tasks.get(item.task_id) if item.task_id else None
            if state is None:
                self._show_graph(False)
                self.graph.show(None)
                self.transcript.value = ""
                return
            self.graph.show(state.task_id)
            self._show_graph(True)
            self.transcript.value = transcript_html(self.batch.transcript(index))

    def _show_graph(self, shown: bool) -> None:
        children = self._open_children if shown else self._closed_children
        if tuple(self.widget.children) != children:
            self.widget.children = children

    @property
    def graph_shown(self) -> bool:
        """Whether the open task's graph is in the layout (it is only while a task is open)."""
        return self.graph.widget in self.widget.children

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
        return batch_static_html(self.batch, self.selected)

    def __repr__(self) -> str:
        return f"BatchGrid({self.batch!r})"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        self.flush()
        return widget_bundle(self.widget, repr(self.batch), lambda: {"text/html": self.static_html()})
