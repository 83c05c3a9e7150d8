"""The view of a task's cost (``runner.cost(task)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.viz.escape import html_text, short_id
from nbagent.viz.html.base import CSS

if TYPE_CHECKING:
    from nbagent.costs import TaskCost

__all__ = ["task_cost_html"]


def task_cost_html(cost: TaskCost) -> str:
    """A task's cost (``runner.cost(task)``): one row per step, the total above."""
    rows = "".join(
        f"<tr><td><code>{html_text(short_id(s.step_id))}</code>{' (undone)' if s.undone else ''}</td>"
        f"<td>{html_text(s.model or '?')}</td><td>{s.cost.prompt_tokens}</td>"
        f"<td>{s.cost.completion_tokens}</td><td>{html_text(s.cost.money or '–')}</td></tr>"
        for s in cost.steps
    )
    head = "<tr><th>step</th><th>model</th><th>prompt</th><th>completion</th><th>cost</th></tr>"
    return (
        f'<div class="nbagent nb-cost"><style>{CSS}</style><div class="nb-head">Cost · task '
        f'<code class="nb-id">{html_text(short_id(cost.task_id))}</code></div>'
        f'<div class="nb-line">{html_text(str(cost.total))}</div>'
        f'<table class="nb-tasks">{head}{rows}</table></div>'
    )
