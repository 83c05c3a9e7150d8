"""Choosing a BatchRun's progress view (``run_batch(progress=...)``): the grid in a Jupyter
kernel, else ``TqdmProgress``, a tqdm bar with failures and tokens in its postfix."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from nbagent.viz.batch.grid import BatchGrid

if TYPE_CHECKING:
    from nbagent.batch import BatchItem, BatchRun

__all__ = ["TqdmProgress", "start_progress"]


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
