"""Runs drawn as one node: chains of plain done steps in a long task ("… N steps …"), and the
runs an undo took back (dashed ghosts hung where their step hangs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.engine.state import StepStatus
from nbagent.viz.dot.labels import _const_attrs, _short
from nbagent.viz.dot.model import STATUS_COLORS, _Graph, _Node, is_skipped

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import TaskStepOutput

_MIN_CHAIN = 2
_COLLAPSED_ATTRS = _const_attrs({"shape": "box3d", "style": "filled", "fillcolor": STATUS_COLORS[StepStatus.DONE][0],
                                 "color": STATUS_COLORS[StepStatus.DONE][1], "fontcolor": STATUS_COLORS[StepStatus.DONE][2]})


def _collapsible(
    state: TaskState,
    g: _Graph,
    statuses: dict[str, StepStatus],
    keep_ends: int,
    failed_ids: set[str],
    undone_ids: set[str],
) -> set[str]:
    ins: dict[str, int] = {}
    outs: dict[str, int] = {}
    for a, b in [*g.live, *g.undone]:
        outs[a] = outs.get(a, 0) + 1
        ins[b] = ins.get(b, 0) + 1
    result: set[str] = set()
    n = len(g.order)
    for i, sid in enumerate(g.order):
        if i < keep_ends or i >= n - keep_ends:
            continue
        if statuses[sid] != StepStatus.DONE or ins.get(sid) != 1 or outs.get(sid) != 1:
            continue
        if sid in failed_ids or sid in undone_ids:
            continue
        out = state.outputs.get(sid)
        if out is None or out.is_last or is_skipped(out) or any(t.is_error for t in out.tool_outputs or []):
            continue
        result.add(sid)
    return result


def _chains(g: _Graph, ok: set[str]) -> list[list[str]]:
    """Maximal runs of collapsible steps linked one after the other."""
    succ: dict[str, str] = {}
    pred: dict[str, str] = {}
    for a, b in g.live:
        if a in ok:
            succ[a] = b
        if b in ok:
            pred[b] = a
    chains: list[list[str]] = []
    for sid in g.order:
        if sid not in ok:
            continue
        p = pred.get(sid)
        if p is not None and p in ok and succ.get(p) == sid:
            continue  # not the start of a chain
        chain = [sid]
        members = {sid}
        nxt = succ.get(sid)
        while nxt is not None and nxt in ok and pred.get(nxt) == chain[-1] and nxt not in members:
            chain.append(nxt)
            members.add(nxt)
            nxt = succ.get(nxt)
        if len(chain) >= _MIN_CHAIN:
            chains.append(chain)
    return chains


def _chain_metrics(outs: list[TaskStepOutput | None], latency: float | None = None, tokens: int | None = None
                   ) -> tuple[float | None, int | None]:
    """Latency and tokens of a collapsed run, summed in step order (from earlier sums)."""
    for out in outs:
        if out is None:
            continue
        if isinstance(out.latency_s, (int, float)):
            latency = (latency or 0.0) + out.latency_s
        if out.usage is not None:
            tokens = (tokens or 0) + out.usage.total_tokens
    return latency, tokens


def _collapsed_node(state: TaskState, chain: list[str], index_of: dict[str, int]) -> _Node:
    latency, tokens = _chain_metrics([state.outputs.get(sid) for sid in chain])
    return _collapsed_node_of(len(chain), chain[0], chain[-1], index_of[chain[0]], index_of[chain[-1]],
                              latency, tokens)


def _collapsed_node_of(count: int, first: str, last: str, n_first: int, n_last: int,
                       latency: float | None, tokens: int | None) -> _Node:
    lines = [
        (f"… {count} steps …", "head"),
        (f"#{n_first}–#{n_last} · {_short(first)} … {_short(last)}", "text"),
    ]
    if tokens is not None:
        lines.append((f"{latency:.2f} s · {tokens} tok" if latency is not None else f"{tokens} tok", "muted"))
    elif latency is not None:
        lines.append((f"{latency:.2f} s", "muted"))
    return _Node("", _COLLAPSED_ATTRS, lines)  # attrs shared: read only


def _undone_runs(
    state: TaskState, g: _Graph, statuses: dict[str, StepStatus], names: dict[str, str]
) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    """Node names of the undone runs (``u0``... in undo order) and the dashed edges.

    An undone run hangs where its step hangs: under the step's ``prev_steps``, or, for a step
    that an earlier undo cut off, under the undone run that had queued it. Edges cut by an undo
    start at the undone run that made them, and go to the cut step when it never ran (a step
    that did run is drawn as its own undone runs instead).
    """
    ghosts = [f"u{k}" for k in range(len(state.undone_outputs))]
    made_by: dict[str, list[str]] = {}  # step id -> undone runs that queued it
    runs: dict[str, list[str]] = {}
    for k, out in enumerate(state.undone_outputs):
        runs.setdefault(out.task_step.step_id, []).append(ghosts[k])
        for nxt in out.next_steps:
            made_by.setdefault(nxt.step_id, []).append(ghosts[k])
    cut_from: dict[str, list[str]] = {}
    for a, b in g.undone:
        cut_from.setdefault(b, []).append(a)

    def sources(sid: str) -> list[str]:
        """Where a cut step hangs: the undone runs that queued it, else its cutting step."""
        made = made_by.get(sid)
        if made:
            return made
        return [names[a] for a in cut_from.get(sid, []) if a in names]

    ghost_edges: list[tuple[str, str]] = []
    for k, out in enumerate(state.undone_outputs):
        sid = out.task_step.step_id
        if statuses.get(sid) == StepStatus.UNDONE:
            parents = sources(sid)
        else:
            step = g.steps.get(sid)
            prev = list(step.prev_steps) if step is not None else []
            parents = [names[p] for p in prev if p in names]
        ghost_edges.extend((p, ghosts[k]) for p in parents)
    cut_edges: list[tuple[str, str]] = []
    for a, b in g.undone:
        if b in runs and statuses.get(b) == StepStatus.UNDONE:
            continue  # drawn as its undone runs, hung under their parents above
        made = [gname for gname in made_by.get(b, []) if gname in runs.get(a, [])]
        for src in made or [names[a]]:
            cut_edges.append((src, names[b]))
    return ghosts, ghost_edges, cut_edges

