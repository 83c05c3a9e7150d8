"""Task state -> DOT text: a pure function, so it can be snapshot-tested and reused everywhere.

Every label is a Graphviz HTML-like label (``label=<...>``) whose text is cleaned, truncated and
HTML-escaped (see ``escape.py``); node names are generated (``s0``, ``s1``... in registry order,
``c0``... for collapsed runs), never taken from user data. No timestamps, no addresses: the same
state gives the same text.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbagent.approval import APPROVAL_KEY, decisions_of
from nbagent.costs import cost_label
from nbagent.mcp import tool_server
from nbagent.engine.state import StepStatus
from nbagent.schema import SkippedOutput
from nbagent.text import args_preview, clean, output_text, preview, short_id, truncate, wrap_lines
from nbagent.viz.escape import typed_preview

if TYPE_CHECKING:
    from nbagent.engine.state import StepFailure, TaskState
    from nbagent.schema import TaskStep, TaskStepOutput

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
    "STATUS_COLORS",
    "STATUS_ORDER",
    "RANKDIRS",
    "check_options",
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
_ERROR_COLOR = "#991b1b"
_EDGE_COLOR = "#6b7280"
_UNDONE_EDGE_COLOR = "#6b7280"
_TITLE_COLOR = "#374151"
_FONT = "Helvetica"
RANKDIRS = ("TB", "LR", "BT", "RL")
_MAX_TOOL_LINES = 4
_MIN_CHAIN = 2


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


def step_heads(state: TaskState) -> dict[str, str]:
    """Step id -> the first words of its node in the graph (``#4 done · answer``,
    ``#5 undone · never ran``, ``#3 skipped``): the number and status every view shows."""
    g = _collect(state)
    statuses = {sid: _status(state, sid) for sid in g.order}
    numbers = _numbers(state, g, statuses)
    ran = {o.task_step.step_id for o in list(state.undone_outputs)}
    heads = {}
    for sid in g.order:
        status = statuses[sid]
        if status is StepStatus.UNDONE and sid in ran:  # drawn as its undone runs
            heads[sid] = f"#{numbers[sid]} undone run"
        else:
            out = state.outputs.get(sid) if status is StepStatus.DONE else None
            heads[sid] = _head(numbers[sid], status, out, sid in ran)
    return heads


def _head(number: int, status: StepStatus, out: TaskStepOutput | None, ran_before: bool) -> str:
    """A step's head words (without its id): what ``step_heads`` and the node label show."""
    if status is StepStatus.UNDONE and not ran_before:
        return f"#{number} undone · never ran"
    if is_skipped(out):
        return f"#{number} {SKIPPED}"
    if out is not None and out.is_last:
        return f"#{number} {_VALUE[status]} · answer"
    return f"#{number} {_VALUE[status]}"


def status_summary(state: TaskState) -> dict[str, int]:
    """How many of the task's steps are in each status (every status present, fixed order)."""
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


# ----- graph model ---------------------------------------------------------------------------


@dataclass
class _Node:
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


# ----- labels --------------------------------------------------------------------------------


def _metrics(out: TaskStepOutput) -> str:
    parts = []
    if isinstance(out.latency_s, (int, float)):
        parts.append(f"{out.latency_s:.2f} s")
    usage = out.usage
    if usage is not None:
        try:
            parts.append(f"{int(usage.total_tokens)} tok")
        except Exception:  # noqa: BLE001
            pass
    money = cost_label(out) if usage is not None else None  # None unless prices are set (nbagent.costs)
    if money:
        parts.append(money)
    return " · ".join(parts)


def _output_lines(out: TaskStepOutput, limit: int) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if out.reasoning:
        lines.append((f"thought: {preview(out.reasoning, limit)}", "text"))
    tool_outputs = list(out.tool_outputs or [])
    for t in tool_outputs[:_MAX_TOOL_LINES]:
        call = f"{clean(t.tool_name)}({args_preview(t.raw_input)})"
        server = tool_server(t)  # an MCP tool: say which server answered
        label = f"call ({preview(clean(server), 40)}): " if server else "call: "
        lines.append((f"{label}{preview(call, limit)}", "text"))
        if t.is_error:
            lines.append((f"obs (error): {preview(t.content, limit)}", "error"))
        else:
            lines.append((f"obs: {preview(t.content, limit)}", "text"))
    if len(tool_outputs) > _MAX_TOOL_LINES:
        lines.append((f"+{len(tool_outputs) - _MAX_TOOL_LINES} more calls", "muted"))
    text = output_text(out.output)
    if out.is_last:
        typed = getattr(out.output, "structured_response", None)
        if typed is not None:  # the typed answer: its class and fields
            lines.append((f"answer: {preview(typed_preview(typed), limit)}", "head"))
        else:
            lines.append((f"answer: {preview(text, limit)}", "head"))
    elif text:
        lines.append((f"out: {preview(text, limit)}", "text"))
    metrics = _metrics(out)
    if metrics:
        lines.append((metrics, "muted"))
    return lines


def _approval_lines(step: TaskStep, limit: int) -> list[tuple[str, str]]:
    """The calls of a step that waits (or waited) for approval, each with its decision."""
    lines: list[tuple[str, str]] = []
    for c in decisions_of(step):
        call = f"{clean(c.get('tool_name'))}({args_preview(c.get('arguments') or {})})"
        d = c.get("decision")
        if not c.get("needs_approval"):
            lines.append((f"with: {preview(call, limit)}", "muted"))
        elif d is None:
            lines.append((f"approve? {preview(call, limit)}", "error"))
        elif d.get("decision") == "approved":
            edited = d.get("arguments")
            what = f" as ({args_preview(edited)})" if edited is not None else ""
            lines.append((preview(f"approved by {clean(d.get('by'))}: {call}{what}", limit), "text"))
        else:
            why = f": {clean(d.get('reason'))}" if d.get("reason") else ""
            lines.append((preview(f"rejected by {clean(d.get('by'))}: {call}{why}", limit), "error"))
    return lines


_VALUE = {st: st.value for st in StepStatus}
_PLAIN_VALUES = all(html.escape(v) == v for v in _VALUE.values())  # status names: nothing to escape
_ATTRS = {
    st: {"fillcolor": STATUS_COLORS[st][0], "color": STATUS_COLORS[st][1], "fontcolor": STATUS_COLORS[st][2],
         "style": _STYLES[st]}
    for st in StepStatus
}
_ANSWER_ATTRS = {**_ATTRS[StepStatus.DONE], "peripheries": "2"}
_SKIPPED_ATTRS = {"fillcolor": SKIPPED_COLORS[0], "color": SKIPPED_COLORS[1], "fontcolor": SKIPPED_COLORS[2],
                  "style": "rounded,filled"}
_CONST_ATTRS: dict[int, tuple[dict[str, str], str]] = {}  # filled below, once _attr_list exists


@functools.lru_cache(maxsize=4096)
def _short_str(step_id: str) -> str:
    return short_id(step_id)


def _short(step_id: Any) -> str:
    """``short_id``, remembered for the ids drawn again and again (a step's id is drawn
    while it is queued, when it is done, and at the ends of a collapsed run)."""
    return _short_str(step_id) if type(step_id) is str else short_id(step_id)


@functools.lru_cache(maxsize=4096)
def _short_esc_str(step_id: str) -> tuple[str, str]:
    short = short_id(step_id)
    return short, html.escape(short)


def _short_esc(step_id: Any) -> tuple[str, str]:
    """``_short`` and its HTML escape (the id is drawn in labels)."""
    if type(step_id) is str:
        return _short_esc_str(step_id)
    short = short_id(step_id)
    return short, html.escape(short)
_S_DONE, _S_UNDONE, _S_FAILED, _S_HELD = StepStatus.DONE, StepStatus.UNDONE, StepStatus.FAILED, StepStatus.HELD


def _step_node(
    state: TaskState,
    number: int,
    sid: str,
    step: TaskStep | None,
    status: StepStatus,
    failures: list[StepFailure],
    undone_outs: list[TaskStepOutput],
    limit: int,
) -> _Node:
    out = state.outputs.get(sid) if status is _S_DONE else None
    is_answer = out is not None and bool(out.is_last)
    skipped = is_skipped(out)
    head = _head(number, status, out, bool(undone_outs))
    lines: list[tuple[str, str]] = [(f"{head} · {_short(sid)}", "head")]
    if step is not None and step.input is not None:
        lines.append((f"in: {preview(step.input, limit)}", "text"))
    if status is _S_HELD:
        lines.append(("held: release_step() lets it run", "muted"))
    if step is not None and APPROVAL_KEY in step.step_state:
        lines.extend(_approval_lines(step, limit))
    if skipped:
        reason = out.output.reason  # type: ignore[union-attr]
        lines.append((preview(f"not run: {reason}" if reason != SKIPPED else "not run", limit), "muted"))
    elif out is not None:
        lines.extend(_output_lines(out, limit))
    if failures:
        last = failures[-1]
        if status is _S_FAILED:
            err = f"error: {last.error_type}: {last.message}"
            lines.append((preview(err, limit), "error"))
            if last.attempt > 1:
                lines.append((f"attempt {last.attempt}", "muted"))
        else:
            n = len(failures)
            lines.append((preview(f"failed {n}× before ({last.error_type})", limit), "muted"))
    if undone_outs and status is not _S_UNDONE:
        n = len(undone_outs)
        runs = "its undone run is dashed" if n == 1 else f"its {n} undone runs are dashed"
        if status is _S_DONE:
            lines.append((f"ran again; {runs}", "muted"))
        else:  # queued (or failed, held...) again after an undo
            lines.append((f"ran before; {runs}", "muted"))
    attrs = _SKIPPED_ATTRS if skipped else _ANSWER_ATTRS if is_answer else _ATTRS[status]
    return _Node(name="", attrs=attrs, label=lines)  # shared: read only


_BR = '<BR ALIGN="LEFT"/>'
_PLAIN = (StepStatus.QUEUED, StepStatus.BLOCKED, StepStatus.RUNNING, StepStatus.DONE)


def _preview(value: Any, limit: int | None) -> str:
    """``preview(value, limit)``, at once for the common text: printable ASCII with single
    inner spaces has nothing to clean and no whitespace to collapse."""
    if (type(value) is str and value.isascii() and value.isprintable() and "  " not in value
            and value[:1] != " " and value[-1:] != " "):
        return value if limit is None or len(value) <= limit else truncate(value, limit)
    return preview(value, limit)


def _plain_step_line(name: str, number: int, sid: str, step: TaskStep | None, status: StepStatus,
                     out: TaskStepOutput | None, limit: int, wrap: int) -> str | None:
    """``_node_line(_step_node(...))`` of the most common step, in one go (the live graph draws
    one or two per step): queued, blocked, running, or done with a plain output, without
    approvals, failures, undo runs, tools or thought, every line within ``wrap``. None for
    any other step (the caller checks failures and undo runs)."""
    if step is None or status not in _PLAIN or APPROVAL_KEY in step.step_state:
        return None
    if status is _S_DONE and (out is None or out.is_last or out.reasoning or out.tool_outputs
                              or type(out.output) is SkippedOutput):
        return None
    esc = html.escape
    value = _VALUE[status]
    short, short_esc = _short_esc(sid)
    if len(value) + len(short) + len(str(number)) + 5 > wrap:  # the head, f"#{number} {value} · {short}"
        return None
    # the status names need no escaping (_PLAIN_VALUES): only the id may
    parts = [f"<B>#{number} {value} · {short_esc}</B>{_BR}" if _PLAIN_VALUES else
             f"<B>{esc(f'#{number} {value} · {short}')}</B>{_BR}"]
    if step.input is not None:
        text = f"in: {_preview(step.input, limit)}"
        if len(text) > wrap:
            return None
        parts.append(esc(text) + _BR)
    if status is _S_DONE:
        text = output_text(out.output)  # type: ignore[union-attr]
        if text:
            text = f"out: {_preview(text, limit)}"
            if len(text) > wrap:
                return None
            parts.append(esc(text) + _BR)
        metrics = _metrics(out)  # type: ignore[arg-type]
        if metrics:
            if len(metrics) > wrap:
                return None
            parts.append(f"<I>{esc(metrics)}</I>{_BR}")
    return f"  {name} [label=<{''.join(parts)}>, {_CONST_ATTRS[id(_ATTRS[status])][1]}];"


def _ghost_node(out: TaskStepOutput, number: int, nth: int, of: int, limit: int) -> _Node:
    """A run that ``undo_step`` took back: everything it did, dashed, so the learner sees it."""
    which = f" {nth}/{of}" if of > 1 else ""
    lines: list[tuple[str, str]] = [
        (f"#{number} undone run{which} · {short_id(out.task_step.step_id)}", "head")
    ]
    if out.input is not None:  # what this run had (an undo may have given the step new input)
        lines.append((f"in: {preview(out.input, limit)}", "text"))
    lines.extend(_output_lines(out, limit))
    if len(lines) == 1:
        lines.append(("(no output)", "muted"))
    fill, border, font = STATUS_COLORS[StepStatus.UNDONE]
    attrs = {"fillcolor": fill, "color": border, "fontcolor": font, "style": _STYLES[StepStatus.UNDONE]}
    return _Node(name="", attrs=attrs, label=lines)


def _label_piece(text: str, kind: str, wrap: int) -> str:
    """One line of a label, wrapped at ``wrap``, escaped and styled by ``kind``."""
    if text and len(text) <= wrap:  # the common case: one piece
        esc = html.escape(text, quote=True)
        if kind == "head":
            return f'<B>{esc}</B><BR ALIGN="LEFT"/>'
        if kind == "error":
            return f'<FONT COLOR="{_ERROR_COLOR}">{esc}</FONT><BR ALIGN="LEFT"/>'
        if kind == "muted":
            return f'<I>{esc}</I><BR ALIGN="LEFT"/>'
        return esc + '<BR ALIGN="LEFT"/>'
    parts: list[str] = []
    for piece in wrap_lines(text, wrap):
        if not piece:
            continue
        esc = html.escape(piece, quote=True)
        if kind == "head":
            esc = f"<B>{esc}</B>"
        elif kind == "error":
            esc = f'<FONT COLOR="{_ERROR_COLOR}">{esc}</FONT>'
        elif kind == "muted":
            esc = f"<I>{esc}</I>"
        parts.append(esc + '<BR ALIGN="LEFT"/>')
    return "".join(parts)


def _render_label(lines: list[tuple[str, str]], wrap: int) -> str:
    parts = ["<"]
    for text, kind in lines:
        if text and len(text) <= wrap:  # _label_piece's common case, inline
            parts.append(_PIECE.get(kind, _PIECE["text"]).format(html.escape(text, quote=True)))
        else:
            parts.append(_label_piece(text, kind, wrap))
    parts.append(">")
    return "".join(parts)


_PIECE = {
    "head": '<B>{}</B><BR ALIGN="LEFT"/>',
    "error": '<FONT COLOR="' + _ERROR_COLOR + '">{}</FONT><BR ALIGN="LEFT"/>',
    "muted": '<I>{}</I><BR ALIGN="LEFT"/>',
    "text": '{}<BR ALIGN="LEFT"/>',
}


def _attr_list(attrs: dict[str, str]) -> str:
    """The attributes of a node, after its label."""
    # Values are our own constants (colours, styles, numbers), quoted for DOT; labels are <...>.
    items = []
    for key, value in attrs.items():
        items.append(f"{key}={value}" if key == "label" else f'{key}="{value}"')
    return ", ".join(items)


# ----- collapse ------------------------------------------------------------------------------


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
        (f"#{n_first}–#{n_last} · {short_id(first)} … {short_id(last)}", "text"),
    ]
    metrics = []
    if latency is not None:
        metrics.append(f"{latency:.2f} s")
    if tokens is not None:
        metrics.append(f"{tokens} tok")
    if metrics:
        lines.append((" · ".join(metrics), "muted"))
    fill, border, font = STATUS_COLORS[StepStatus.DONE]
    attrs = {"shape": "box3d", "style": "filled", "fillcolor": fill, "color": border, "fontcolor": font}
    return _Node(name="", attrs=attrs, label=lines)


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


# ----- the renderer --------------------------------------------------------------------------


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


# The pieces of the text, shared with the incremental renderer (nbagent.viz.dot_live).
def _header_lines(task_id: str, task_input: str, task_status: str, counts: dict[str, int],
                  max_label: int, rankdir: str, wrap: int) -> list[str]:
    return _header_from(_title_top(task_id, task_input, task_status, max_label, wrap), counts, rankdir, wrap)


def _title_top(task_id: str, task_input: str, task_status: str, max_label: int, wrap: int) -> str:
    """The title's first two lines (task and input), rendered: they change rarely, the
    summary under them at every step."""
    width = max(wrap, 60)
    return (_label_piece(f"task {short_id(task_id)} · {task_status}", "head", width)
            + _label_piece(f"input: {preview(task_input, max_label)}", "text", width))


# The graph's background is transparent (no white box on a dark page) and every text sits on
# a light shape: nodes are filled, and the title (and an edge's label) is in a light table.
TITLE_BG = "#f8fafc"
_TITLE_OPEN = (f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="{TITLE_BG}" '
               'STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT">')
_TITLE_CLOSE = "</TD></TR></TABLE>"


def boxed_label(inner: str) -> str:
    """An HTML-like label whose text (``inner``: label markup without the outer ``<>``) sits
    in a light rounded box, readable on a light or a dark page."""
    return f"<{_TITLE_OPEN}{inner}{_TITLE_CLOSE}>"


def _header_from(top: str, counts: dict[str, int], rankdir: str, wrap: int) -> list[str]:
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    label = boxed_label(top + _label_piece(summary or "no steps", "muted", max(wrap, 60)))
    return [
        "digraph task {",
        f'  graph [rankdir="{rankdir}", bgcolor="transparent", pad="0.1", fontname="{_FONT}", fontsize="11", '
        f'fontcolor="{_TITLE_COLOR}", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.35", '
        f"label={label}];",
        f'  node [shape="box", fontname="{_FONT}", fontsize="10", margin="0.12,0.06"];',
        f'  edge [color="{_EDGE_COLOR}", arrowsize="0.7"];',
    ]


_ATTR_TEXT: dict[tuple[tuple[str, str], ...], str] = {}  # our own constants: a handful of combinations


def _node_line(node: _Node, wrap: int) -> str:
    attrs = node.attrs
    const = _CONST_ATTRS.get(id(attrs))
    if const is not None and const[0] is attrs:  # a status's own attributes
        rest = const[1]
    else:
        key = tuple(attrs.items())
        rest = _ATTR_TEXT.get(key)
        if rest is None:
            rest = _ATTR_TEXT[key] = _attr_list(attrs)
    return f"  {node.name} [label={_render_label(node.label, wrap)}, {rest}];"


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


def _summary_from(statuses: dict[str, StepStatus]) -> dict[str, int]:
    """Counts by status from already computed statuses."""
    counts = {s.value: 0 for s in STATUS_ORDER}
    for st in statuses.values():
        counts[st.value] += 1
    return counts


for _attrs in (*_ATTRS.values(), _ANSWER_ATTRS, _SKIPPED_ATTRS):
    _CONST_ATTRS[id(_attrs)] = (_attrs, _attr_list(_attrs))
