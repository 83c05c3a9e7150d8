"""A task's step graph as DOT text: pure functions of the task's state, so they can be
snapshot-tested, used where no Graphviz runs, and kept up to date step by step.

- ``model``: which steps and edges, their order, statuses and numbers (no text);
- ``labels``: each node's text, escaped, and its attributes;
- ``collapse``: long chains of plain steps drawn as one node, undone runs as dashed ghosts;
- ``task_dot``: ``task_to_dot``, the whole text;
- ``live_state``, ``live_frame`` and ``live_text``: ``LiveDot``, the same text kept up to
  date in O(what changed) for the live graph: what it keeps of the task and how it follows
  it, the steps after the settled prefix as drawn now, and the text (imported only by the
  live view).
"""

from __future__ import annotations

from nbagent.text import output_text
from nbagent.viz.dot.labels import TITLE_BG, boxed_label, step_heads
from nbagent.viz.dot.model import (
    SKIPPED,
    SKIPPED_COLORS,
    STATUS_COLORS,
    STATUS_ORDER,
    is_skipped,
    node_names,
    shown_status,
    status_summary,
    step_numbers,
)
from nbagent.viz.dot.task_dot import RANKDIRS, check_options, task_to_dot

__all__ = [
    "task_to_dot",
    "status_summary",
    "node_names",
    "step_numbers",
    "output_text",
    "is_skipped",
    "shown_status",
    "step_heads",
    "SKIPPED",
    "SKIPPED_COLORS",
    "STATUS_COLORS",
    "STATUS_ORDER",
    "RANKDIRS",
    "TITLE_BG",
    "boxed_label",
    "check_options",
]
