"""A StructuredPlannerAgent's plan -> DOT: the sub-tasks as the DAG they are.

``plan_to_dot`` is a pure function of plain data (the sub-tasks and each one's status), like
``task_to_dot``: a node per sub-task (its name, input and expected output, coloured by status),
an edge from each dependency to the sub-task that waits for it, and a dashed node for a
dependency the plan does not contain (such a sub-task never becomes ready). Labels are cleaned,
truncated and escaped; node names are generated (``p0``, ``p1``...), never taken from the plan.
``draw_plan`` reads an agent's plan and statuses and returns a displayable graph;
``planner_html`` is the agent's notebook card: the runner's, then its newest plan drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nbagent.engine.state import StepStatus, TaskStatus
from nbagent.viz.dot import STATUS_COLORS
from nbagent.viz.escape import clean, html_text, preview
from nbagent.viz.workflow_dot import _colors, _header, _node, check_workflow_options
from nbagent.viz.graph import DotDisplay
from nbagent.viz.html.agents import runner_html

__all__ = ["plan_to_dot", "plan_statuses", "draw_plan", "planner_html", "PLAN_STATUSES"]

# status -> (colours, what the legend calls it)
PLAN_STATUSES: dict[str, tuple[tuple[str, str, str], str]] = {
    "done": (STATUS_COLORS[StepStatus.DONE], "done"),
    "running": (STATUS_COLORS[StepStatus.RUNNING], "running"),
    "failed": (STATUS_COLORS[StepStatus.FAILED], "failed"),
    "ready": (STATUS_COLORS[StepStatus.QUEUED], "ready"),
    "waiting": (STATUS_COLORS[StepStatus.BLOCKED], "waiting for its dependencies"),
}
_MISSING = ("#ffffff", "#9ca3af", "#374151")


def plan_to_dot(
    sub_tasks: Sequence[Any],
    statuses: Mapping[str, str],
    *,
    title: str = "plan",
    rankdir: str = "TB",
    max_label: int = 60,
    wrap: int = 36,
) -> str:
    """DOT text for ``sub_tasks`` (objects with ``name``, ``input``, ``expected_output`` and
    ``dependencies``); ``statuses`` maps a sub-task's name to a key of ``PLAN_STATUSES``
    (missing: "waiting")."""
    check_workflow_options(rankdir=rankdir, max_label=max_label, wrap=wrap)
    for name, status in statuses.items():
        if status not in PLAN_STATUSES:
            raise ValueError(f"status of sub-task {name!r} must be one of {sorted(PLAN_STATUSES)}, got {status!r}")
    names = {s.name: f"p{i}" for i, s in enumerate(sub_tasks)}
    counts: dict[str, int] = {}
    for s in sub_tasks:
        status = statuses.get(s.name, "waiting")
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {PLAN_STATUSES[k][1]}" for k, n in counts.items()) or "no sub-tasks"
    n = len(sub_tasks)
    head = [(f"{preview(title, max_label)} · {n} sub-task{'s' if n != 1 else ''}", "head"), (summary, "muted")]
    lines = _header("plan", rankdir, head, wrap)
    missing: dict[str, str] = {}
    for s in sub_tasks:
        status = statuses.get(s.name, "waiting")
        label = [(preview(s.name, max_label), "head"), (preview(s.input, max_label, words=True), "text")]
        if s.expected_output:
            label.append((preview("→ " + clean(s.expected_output), max_label, words=True), "muted"))
        label.append((PLAN_STATUSES[status][1], "muted"))
        attrs = {"style": "rounded,filled", **_colors(PLAN_STATUSES[status][0])}
        lines.append(_node(names[s.name], label, wrap, **attrs))
    for s in sub_tasks:
        for dep in s.dependencies:
            source = names.get(dep)
            if source is None:
                source = missing.get(dep)
                if source is None:
                    source = missing[dep] = f"m{len(missing)}"
                    label = [(preview(dep, max_label), "head"), ("not in the plan", "muted")]
                    lines.append(_node(source, label, wrap, style="rounded,dashed,filled", **_colors(_MISSING)))
            lines.append(f"  {source} -> {names[s.name]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def plan_statuses(agent: Any, plan_id: str) -> dict[str, str]:
    """Each sub-task's status in ``agent``'s plan: done (marked complete in the plan),
    running or failed (its task says so), ready (its dependencies are done) or waiting."""
    state = agent.state
    done = {s.name for s in state.get_completed_sub_tasks(plan_id)}
    ready = {s.name for s in state.get_next_sub_tasks(plan_id)}
    out: dict[str, str] = {}
    for s in state.plan_dict[plan_id].sub_tasks:
        task = agent.tasks.get(s.name)
        task_status = task.status if task is not None else None
        if s.name in done:
            out[s.name] = "done"
        elif task_status == TaskStatus.RUNNING:
            out[s.name] = "running"
        elif task_status == TaskStatus.FAILED:
            out[s.name] = "failed"
        else:
            out[s.name] = "ready" if s.name in ready else "waiting"
    return out


def _fallback_html(sub_tasks: Sequence[Any], statuses: Mapping[str, str]) -> str:
    """The plan as a list, where no ``dot`` program draws it."""
    items = "".join(
        f"<li><b>{html_text(s.name)}</b> ({html_text(PLAN_STATUSES[statuses.get(s.name, 'waiting')][1])})"
        f": {html_text(preview(s.input, 200, words=True))}"
        + (f" · after {html_text(', '.join(s.dependencies))}" if s.dependencies else "")
        + "</li>"
        for s in sub_tasks
    )
    return f"<ol>{items}</ol>"


def draw_plan(agent: Any, plan_id: str, **options: Any) -> DotDisplay:
    """``StructuredPlannerAgent.draw_plan``: the plan's sub-tasks and dependencies, displayable."""
    sub_tasks = list(agent.state.plan_dict[plan_id].sub_tasks)
    statuses = plan_statuses(agent, plan_id)
    return DotDisplay(
        plan_to_dot(sub_tasks, statuses, **options),
        title=f"{type(agent).__name__} plan",
        fallback=lambda: _fallback_html(sub_tasks, statuses),
    )


def planner_html(agent: Any) -> str:
    """A StructuredPlannerAgent in a notebook: the runner's card (its tasks are the sub-tasks),
    then its newest plan as the DAG it is."""
    card = runner_html(agent)
    plans = getattr(agent.state, "plan_dict", None) or {}
    if not plans:
        return card
    return card + draw_plan(agent, next(reversed(plans))).html()
