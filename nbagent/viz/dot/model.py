"""The drawing's model: which steps, which edges, in which order, in which status, and the
numbers a learner sees. Everything here is plain data about a ``TaskState``; no text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nbagent.engine.state import StepStatus
from nbagent.schema import SkippedOutput

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import TaskStep, TaskStepOutput

__all__ = [
    "STATUS_ORDER",
    "STATUS_COLORS",
    "SKIPPED",
    "SKIPPED_COLORS",
    "is_skipped",
    "shown_status",
    "status_summary",
    "node_names",
    "step_numbers",
]

STATUS_ORDER: tuple[StepStatus, ...] = (
    StepStatus.QUEUED,
    StepStatus.AWAITING,
    StepStatus.HELD,
    StepStatus.BLOCKED,
    StepStatus.RUNNING,
    StepStatus.DONE,
    StepStatus.FAILED,
    StepStatus.UNDONE,
)

# (fill, border, text): light fills with dark text, readable on light and dark pages alike.
STATUS_COLORS: dict[StepStatus, tuple[str, str, str]] = {
    StepStatus.QUEUED: ("#f1f5f9", "#64748b", "#1e293b"),
    StepStatus.AWAITING: ("#ffedd5", "#c2410c", "#431407"),
    StepStatus.HELD: ("#ede9fe", "#6d28d9", "#2e1065"),
    StepStatus.BLOCKED: ("#fef3c7", "#b45309", "#451a03"),
    StepStatus.RUNNING: ("#dbeafe", "#1d4ed8", "#172554"),
    StepStatus.DONE: ("#dcfce7", "#15803d", "#052e16"),
    StepStatus.FAILED: ("#fee2e2", "#b91c1c", "#450a0a"),
    StepStatus.UNDONE: ("#f3f4f6", "#6b7280", "#374151"),
}
#: How a step that ``skip_step`` marked done without running is drawn (its status is done):
#: the name views show instead of "done", and its stone-grey colours (fill, border, text).
SKIPPED = "skipped"
SKIPPED_COLORS = ("#f5f5f4", "#78716c", "#292524")

_STYLES: dict[StepStatus, str] = {
    StepStatus.QUEUED: "rounded,filled",
    StepStatus.AWAITING: "rounded,filled,bold",
    StepStatus.HELD: "rounded,filled,bold,dashed",
    StepStatus.BLOCKED: "rounded,filled,dotted",
    StepStatus.RUNNING: "rounded,filled,bold",
    StepStatus.DONE: "rounded,filled",
    StepStatus.FAILED: "rounded,filled,bold",
    StepStatus.UNDONE: "rounded,filled,dashed",
}


def is_skipped(out: TaskStepOutput | None) -> bool:
    """Whether a step output is ``skip_step``'s: the step was marked done without running."""
    return out is not None and type(out.output) is SkippedOutput


def shown_status(state: TaskState, sid: str) -> str:
    """The status a view shows for a step: its ``StepStatus`` value, or "skipped" for a done
    step that never ran (``skip_step``)."""
    status = _status(state, sid)
    if status is StepStatus.DONE and is_skipped(state.outputs.get(sid)):
        return SKIPPED
    return status.value


def status_summary(state: TaskState) -> dict[str, int]:
    """How many of the task's steps are in each status (every status present, fixed order).

    Example:

    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.viz import status_summary
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> task = agent.create_task("2 + 2?")
    >>> _ = agent.run_step(task)
    >>> {k: n for k, n in status_summary(agent.state_of(task)).items() if n}
    {'done': 1}
    """
    counts = {s.value: 0 for s in STATUS_ORDER}
    for sid in _all_step_ids(state):
        counts[_status(state, sid).value] += 1
    return counts


def node_names(state: TaskState) -> dict[str, str]:
    """Step id -> DOT node name (``s0``, ``s1``... in registry order), as ``task_to_dot`` uses."""
    return {sid: f"s{i}" for i, sid in enumerate(_all_step_ids(state))}


def step_numbers(state: TaskState) -> dict[str, int]:
    """Step id -> the number a learner sees (``#n``), as ``task_to_dot`` draws it.

    Live steps are numbered in registry order; a step cut by an undo (it was queued after the
    run that was taken back) is numbered after its parent, so the step that replaces it gets
    the same number and nothing after it shifts.
    """
    g = _collect(state)
    statuses = {sid: _status(state, sid) for sid in g.order}
    return _numbers(state, g, statuses)


def _numbers(state: TaskState, g: _Graph, statuses: dict[str, StepStatus]) -> dict[str, int]:
    numbers: dict[str, int] = {}
    n = 0
    for sid in g.order:
        if statuses[sid] != StepStatus.UNDONE:
            n += 1
            numbers[sid] = n
    cut_parent = {b: a for a, b in reversed(g.undone)}  # first cutting edge wins
    for sid in g.order:
        if sid in numbers:
            continue
        parent = cut_parent.get(sid)
        numbers[sid] = numbers[parent] + 1 if parent in numbers else n + 1
    return numbers


@dataclass(slots=True)
class _Node:
    """A node to draw: its name, attributes and label lines (made by the thousand: slotted,
    built with positional arguments)."""

    name: str
    attrs: dict[str, str]
    label: list[tuple[str, str]]  # (text, kind) with kind in {"head", "text", "error", "muted"}


@dataclass
class _Graph:
    order: list[str] = field(default_factory=list)  # step ids, registry order first
    steps: dict[str, TaskStep | None] = field(default_factory=dict)
    live: list[tuple[str, str]] = field(default_factory=list)
    undone: list[tuple[str, str]] = field(default_factory=list)


def _all_step_ids(state: TaskState) -> list[str]:
    return _collect(state).order


def _collect(state: TaskState) -> _Graph:
    """Nodes and edges, in a stable order: registry order, then steps only reachable by links."""
    g = _Graph()

    def add(sid: str, step: TaskStep | None) -> None:
        if sid not in g.steps:
            g.order.append(sid)
            g.steps[sid] = step
        elif g.steps[sid] is None and step is not None:
            g.steps[sid] = step

    for sid, step in list(state.steps.items()):
        add(sid, step)
    seen: set[tuple[str, str]] = set()
    i = 0
    while i < len(g.order):  # links may reach steps missing from the registry (odd states)
        sid = g.order[i]
        current = g.steps[sid]
        i += 1
        if current is None:
            continue
        for pid, prev in list(current.prev_steps.items()):
            add(pid, prev)
            if (pid, sid) not in seen:
                seen.add((pid, sid))
                g.live.append((pid, sid))
        for nid, nxt in list(current.next_steps.items()):
            add(nid, nxt)
            if (sid, nid) not in seen:
                seen.add((sid, nid))
                g.live.append((sid, nid))
    # order live edges by their source's position, then by discovery (stable)
    pos = {sid: k for k, sid in enumerate(g.order)}
    g.live.sort(key=lambda e: (pos[e[0]], pos[e[1]]))
    for a, b in list(state.undone_edges):
        add(a, None)
        add(b, None)
        if (a, b) not in seen:
            seen.add((a, b))
            g.undone.append((a, b))
    return g


def _status(state: TaskState, sid: str) -> StepStatus:
    try:
        return state.step_status(sid)
    except Exception:  # noqa: BLE001 - an odd state still draws
        return StepStatus.QUEUED


def _summary_from(statuses: dict[str, StepStatus]) -> dict[str, int]:
    """Counts by status from already computed statuses."""
    counts = {s.value: 0 for s in STATUS_ORDER}
    for st in statuses.values():
        counts[st.value] += 1
    return counts

