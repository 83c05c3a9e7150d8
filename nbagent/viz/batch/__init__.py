"""Views of a BatchRun: the live progress grid, the static summary table, a tqdm bar.

- ``BatchGrid`` (``grid.py``, Jupyter): counts, tokens, cost and time so far, a Stop button and
  one cell per task; clicking a cell opens that task's live step DAG and transcript.
- ``batch_summary_html`` (``summary.py``, nbconvert, nbval, GitHub): a summary table, no JavaScript.
- ``TqdmProgress`` (``progress.py``): outside Jupyter, a tqdm bar with failures and tokens in its postfix.

The core (``nbagent.batch``) reaches these through the view registry only when a view is asked for.
"""

from __future__ import annotations

from nbagent.viz.batch.grid import BatchGrid
from nbagent.viz.batch.progress import TqdmProgress, start_progress
from nbagent.viz.batch.summary import (
    STATUS_STYLE,
    batch_static_html,
    batch_summary_html,
    status_line_html,
    task_detail_html,
)

__all__ = [
    "BatchGrid",
    "TqdmProgress",
    "batch_summary_html",
    "start_progress",
    "STATUS_STYLE",
    "status_line_html",
    "task_detail_html",
    "batch_static_html",
]
