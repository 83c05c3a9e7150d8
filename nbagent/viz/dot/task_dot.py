"""Task state -> DOT text: a pure function, so it can be snapshot-tested and reused everywhere.

``task_to_dot`` puts the pieces together: the title (task, input, status counts), one node per
step (``labels``), the collapsed and undone runs (``collapse``), the edges, the legend. No
timestamps, no addresses: the same state gives the same text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.engine.state import StepStatus
from nbagent.text import preview, short_id
from nbagent.viz.dot.collapse import _chains, _collapsed_node, _collapsible, _undone_runs
from nbagent.viz.dot.labels import (
    _BOX_CLOSE,
    _BOX_OPEN,
    _EDGE_COLOR,
    _FONT,
    _TITLE_COLOR,
    _UNDONE_EDGE_COLOR,
    TITLE_BG,
    _attr_list,
    _ghost_node,
    _label_piece,
    _node_line,
    _render_label,
    _step_node,
)
from nbagent.viz.dot.model import _STYLES, STATUS_COLORS, STATUS_ORDER, _collect, _Node, _numbers, _status, _summary_from

if TYPE_CHECKING:
    from nbagent.engine.state import StepFailure, TaskState
    from nbagent.schema import TaskStepOutput

__all__ = ["task_to_dot", "check_options", "RANKDIRS"]

RANKDIRS = ("TB", "LR", "BT", "RL")


def task_to_dot(
    state: TaskState,
    *,
    max_label: int = 80,
    collapse_after: int | None = 40,
    rankdir: str = "TB",
    keep_ends: int = 4,
    wrap: int = 44,
    legend: bool = False,
) -> str:
    """The task's step graph as DOT text.

    One node per registered step (undone ones greyed and dashed), edges to ``next_steps`` and
    the edges cut by undo (dashed). With more than ``collapse_after`` steps, runs of plain done
    steps between the first and last ``keep_ends`` steps become one "… N steps …" node.
    ``max_label`` caps each text value (an ellipsis marks the cut); ``wrap`` is the line width.

    Example:

    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.viz import task_to_dot
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> task = agent.create_task("2 + 2?")
    >>> _ = agent.run_step(task)
    >>> task_to_dot(agent.state_of(task), rankdir="LR").splitlines()[0]  # render it with Graphviz
    'digraph task {'
    """
    check_options(max_label=max_label, collapse_after=collapse_after, rankdir=rankdir,
                  keep_ends=keep_ends, wrap=wrap, legend=legend)

    g = _collect(state)
    statuses = {sid: _status(state, sid) for sid in g.order}
    failures: dict[str, list[StepFailure]] = {}
    for f in list(state.failures):
        failures.setdefault(f.step_id, []).append(f)
    undone_outs: dict[str, list[TaskStepOutput]] = {}
    for o in list(state.undone_outputs):
        undone_outs.setdefault(o.task_step.step_id, []).append(o)
    index_of = _numbers(state, g, statuses)

    # step id -> node name; collapsed steps map to their chain's node
    names = {sid: f"s{i}" for i, sid in enumerate(g.order)}
    chain_of: dict[str, int] = {}
    chains: list[list[str]] = []
    if collapse_after is not None and len(g.order) > collapse_after:
        ok = _collapsible(state, g, statuses, keep_ends, set(failures), set(undone_outs))
        chains = _chains(g, ok)
        for k, chain in enumerate(chains):
            for sid in chain:
                chain_of[sid] = k
                names[sid] = f"c{k}"

    ghosts, ghost_edges, cut_edges = _undone_runs(state, g, statuses, names)

    nodes: list[_Node] = []
    for sid in g.order:
        if statuses[sid] == StepStatus.UNDONE and undone_outs.get(sid):
            continue  # a cut step that had run: its undone runs stand for it
        chain_k = chain_of.get(sid)
        if chain_k is not None:
            if chains[chain_k][0] == sid:
                node = _collapsed_node(state, chains[chain_k], index_of)
                node.name = f"c{chain_k}"
                nodes.append(node)
            continue
        node = _step_node(
            state, index_of[sid], sid, g.steps[sid], statuses[sid],
            failures.get(sid, []), undone_outs.get(sid, []), max_label,
        )
        node.name = names[sid]
        nodes.append(node)
    runs_of: dict[str, int] = {}
    for k, out in enumerate(state.undone_outputs):
        sid = out.task_step.step_id
        runs_of[sid] = runs_of.get(sid, 0) + 1
        node = _ghost_node(out, index_of.get(sid, 0), runs_of[sid], len(undone_outs[sid]), max_label)
        node.name = ghosts[k]
        nodes.append(node)

    counts = _summary_from(statuses)
    task = state.task
    try:
        task_status = state.status.value
    except Exception:  # noqa: BLE001
        task_status = "unknown"
    lines = _header_lines(task.task_id, task.input, task_status, counts, max_label, rankdir, wrap)
    for node in nodes:
        lines.append(_node_line(node, wrap))

    drawn: set[tuple[str, str]] = set()
    live = [(names[a], names[b]) for a, b in g.live]
    for kind, edges in (("live", live), ("undone", [*ghost_edges, *cut_edges])):
        for na, nb in edges:
            if na == nb or (na, nb) in drawn:
                continue  # inside a collapsed run, or already drawn
            drawn.add((na, nb))
            if kind == "live":
                lines.append(f"  {na} -> {nb};")
            else:
                lines.append(f'  {na} -> {nb} [style="dashed", color="{_UNDONE_EDGE_COLOR}"];')

    if legend:
        lines.extend(_legend_lines(wrap))
    lines.append("}")
    return "\n".join(lines) + "\n"


# The pieces of the text, shared with the incremental renderer (nbagent.viz.dot.live_text).
def _header_lines(task_id: str, task_input: str, task_status: str, counts: dict[str, int],
                  max_label: int, rankdir: str, wrap: int) -> list[str]:
    return _header_from(_title_top(task_id, task_input, task_status, max_label, wrap), counts, rankdir, wrap)


def _title_top(task_id: str, task_input: str, task_status: str, max_label: int, wrap: int) -> str:
    """The title's first two lines (task and input), rendered: they change rarely, the
    summary under them at every step."""
    width = max(wrap, 60)
    return (_label_piece(f"task {short_id(task_id)} · {task_status}", "head", width)
            + _label_piece(f"input: {preview(task_input, max_label)}", "text", width))


def _header_from(top: str, counts: dict[str, int], rankdir: str, wrap: int) -> list[str]:
    before, after = _header_around(top, rankdir)
    return [f"{before}{_summary_piece(counts, wrap)}{after}"]


def _header_around(top: str, rankdir: str) -> tuple[str, str]:
    """The header's text before and after the status summary (the part that changes at
    every step): ``digraph task {``, the graph's attributes and title, the defaults."""
    return (f"digraph task {{\n{_GRAPH_OPEN[rankdir]}label={_BOX_OPEN}{top}",
            f"{_BOX_CLOSE}];\n{_NODE_DEFAULTS}\n{_EDGE_DEFAULTS}")


def _summary_piece(counts: dict[str, int], wrap: int) -> str:
    """The title's last line: how many steps are in each status (by status value)."""
    summary = ", ".join([f"{n} {s}" for s, n in counts.items() if n])
    return _label_piece(summary or "no steps", "muted", max(wrap, 60))


_GRAPH_OPEN = {
    rankdir: f'  graph [rankdir="{rankdir}", bgcolor="transparent", pad="0.1", fontname="{_FONT}", fontsize="11", '
             f'fontcolor="{_TITLE_COLOR}", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.35", '
    for rankdir in RANKDIRS
}
_NODE_DEFAULTS = f'  node [shape="box", fontname="{_FONT}", fontsize="10", margin="0.12,0.06"];'
_EDGE_DEFAULTS = f'  edge [color="{_EDGE_COLOR}", arrowsize="0.7"];'


def _legend_lines(wrap: int) -> list[str]:
    lines = ['  subgraph cluster_legend {']
    lines.append(f'    label="legend"; fontsize="9"; color="{_UNDONE_EDGE_COLOR}"; style="rounded,filled"; '
                 f'fillcolor="{TITLE_BG}"; fontcolor="{_TITLE_COLOR}";')
    for status in STATUS_ORDER:
        fill, border, font = STATUS_COLORS[status]
        attrs = {
            "label": _render_label([(status.value, "text")], wrap),
            "fillcolor": fill, "color": border, "fontcolor": font,
            "style": _STYLES[status], "fontsize": "9",
        }
        lines.append(f"    legend_{status.name.lower()} [{_attr_list(attrs)}];")
    names_in_order = " -> ".join(f"legend_{s.name.lower()}" for s in STATUS_ORDER)
    lines.append(f'    {{ rank="same"; {names_in_order} [style="invis"]; }}')
    lines.append("  }")
    return lines


def check_options(**options: Any) -> None:
    """Raise a clear error for an unknown or invalid ``task_to_dot`` option (before any rendering)."""
    allowed = ("max_label", "collapse_after", "rankdir", "keep_ends", "wrap", "legend")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"unknown graph option(s) {unknown}; allowed: {list(allowed)}")
    rankdir = options.get("rankdir", "TB")
    max_label = options.get("max_label", 80)
    collapse_after = options.get("collapse_after", 40)
    keep_ends = options.get("keep_ends", 4)
    wrap = options.get("wrap", 44)
    if rankdir not in RANKDIRS:
        raise ValueError(f"rankdir must be one of {RANKDIRS}, got {rankdir!r}")
    if not isinstance(max_label, int) or max_label < 8:
        raise ValueError(f"max_label must be an int >= 8, got {max_label!r}")
    if collapse_after is not None and (not isinstance(collapse_after, int) or collapse_after < 1):
        raise ValueError(f"collapse_after must be a positive int or None, got {collapse_after!r}")
    if not isinstance(keep_ends, int) or keep_ends < 0:
        raise ValueError(f"keep_ends must be an int >= 0, got {keep_ends!r}")
    if not isinstance(wrap, int) or wrap < 8:
        raise ValueError(f"wrap must be an int >= 8, got {wrap!r}")

