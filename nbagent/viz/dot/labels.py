"""Node labels: the text of each step's node (its head words, input, output, calls, approvals,
failures), escaped for Graphviz's HTML-like labels, and the node's attributes.

Every label is a Graphviz HTML-like label (``label=<...>``) whose text is cleaned, truncated and
HTML-escaped (see ``nbagent.text``); node names are generated (``s0``, ``s1``...), never taken
from user data.
"""

from __future__ import annotations

import functools
import html
import re
from typing import TYPE_CHECKING, Any

from nbagent.approval import APPROVAL_KEY, decisions_of
from nbagent.costs import cost_label
from nbagent.engine.state import StepStatus
from nbagent.mcp import tool_server
from nbagent.text import args_preview, clean, output_text, preview, short_id, truncate, wrap_lines
from nbagent.viz.dot.model import (
    _STYLES,
    SKIPPED,
    SKIPPED_COLORS,
    STATUS_COLORS,
    _collect,
    _Node,
    _numbers,
    _status,
    is_skipped,
)
from nbagent.viz.escape import typed_preview

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nbagent.engine.state import StepFailure, TaskState
    from nbagent.schema import TaskStep, TaskStepOutput

__all__ = ["step_heads", "boxed_label", "TITLE_BG"]

_ERROR_COLOR = "#991b1b"
_EDGE_COLOR = "#6b7280"
_UNDONE_EDGE_COLOR = "#6b7280"
_TITLE_COLOR = "#374151"
_FONT = "Helvetica"
_MAX_TOOL_LINES = 4


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
    if out is None:  # not done
        return f"#{number} {_VALUE[status]}"
    if is_skipped(out):
        return f"#{number} {SKIPPED}"
    if out.is_last:
        return f"#{number} {_VALUE[status]} · answer"
    return f"#{number} {_VALUE[status]}"


def _preview(value: Any, limit: int | None) -> str:
    """``preview(value, limit)``, at once for the common text: printable ASCII with single
    inner spaces has nothing to clean and no whitespace to collapse."""
    if (type(value) is str and value.isascii() and value.isprintable() and "  " not in value
            and value[:1] != " " and value[-1:] != " "):
        return value if limit is None or len(value) <= limit else truncate(value, limit)
    return preview(value, limit)


def _metrics(out: TaskStepOutput) -> str:
    latency, usage = out.latency_s, out.usage
    timed = isinstance(latency, (int, float))
    if usage is None:  # the common case: no tokens, no money
        return f"{latency:.2f} s" if timed else ""
    parts = [f"{latency:.2f} s"] if timed else []
    try:
        parts.append(f"{int(usage.total_tokens)} tok")
    except Exception:  # noqa: BLE001
        pass
    money = cost_label(out)  # None unless prices are set (nbagent.costs)
    if money:
        parts.append(money)
    return " · ".join(parts)


def _output_lines(out: TaskStepOutput, limit: int) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if out.reasoning:
        lines.append((f"thought: {_preview(out.reasoning, limit)}", "text"))
    tool_outputs = list(out.tool_outputs) if out.tool_outputs else ()
    for t in tool_outputs[:_MAX_TOOL_LINES]:
        call = f"{clean(t.tool_name)}({args_preview(t.raw_input)})"
        server = tool_server(t)  # an MCP tool: say which server answered
        label = f"call ({_preview(clean(server), 40)}): " if server else "call: "
        lines.append((f"{label}{_preview(call, limit)}", "text"))
        if t.is_error:
            lines.append((f"obs (error): {_preview(t.content, limit)}", "error"))
        else:
            lines.append((f"obs: {_preview(t.content, limit)}", "text"))
    if len(tool_outputs) > _MAX_TOOL_LINES:
        lines.append((f"+{len(tool_outputs) - _MAX_TOOL_LINES} more calls", "muted"))
    text = output_text(out.output)
    if out.is_last:
        typed = getattr(out.output, "structured_response", None)
        if typed is not None:  # the typed answer: its class and fields
            lines.append((f"answer: {_preview(typed_preview(typed), limit)}", "head"))
        else:
            lines.append((f"answer: {_preview(text, limit)}", "head"))
    elif text:
        lines.append((f"out: {_preview(text, limit)}", "text"))
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
            lines.append((f"with: {_preview(call, limit)}", "muted"))
        elif d is None:
            lines.append((f"approve? {_preview(call, limit)}", "error"))
        elif d.get("decision") == "approved":
            edited = d.get("arguments")
            what = f" as ({args_preview(edited)})" if edited is not None else ""
            lines.append((_preview(f"approved by {clean(d.get('by'))}: {call}{what}", limit), "text"))
        else:
            why = f": {clean(d.get('reason'))}" if d.get("reason") else ""
            lines.append((_preview(f"rejected by {clean(d.get('by'))}: {call}{why}", limit), "error"))
    return lines


_VALUE = {st: st.value for st in StepStatus}
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
    head = step_id[:8]
    if head.isascii() and head.isprintable():  # nothing for ``clean`` to change (ids: hex)
        return head
    return short_id(step_id)


def _short(step_id: Any) -> str:
    """``short_id``, remembered for the ids drawn again and again (a step's id is drawn
    while it is queued, when it is done, and at the ends of a collapsed run)."""
    return _short_str(step_id) if type(step_id) is str else short_id(step_id)


_S_DONE, _S_UNDONE, _S_FAILED, _S_HELD = StepStatus.DONE, StepStatus.UNDONE, StepStatus.FAILED, StepStatus.HELD


def _step_node(
    state: TaskState,
    number: int,
    sid: str,
    step: TaskStep | None,
    status: StepStatus,
    failures: Sequence[StepFailure],
    undone_outs: Sequence[TaskStepOutput],
    limit: int,
) -> _Node:
    out = state.outputs.get(sid) if status is _S_DONE else None
    is_answer = out is not None and bool(out.is_last)
    skipped = out is not None and is_skipped(out)
    head = _head(number, status, out, bool(undone_outs))
    lines: list[tuple[str, str]] = [(f"{head} · {_short(sid)}", "head")]
    if step is not None and step.input is not None:
        lines.append((f"in: {_preview(step.input, limit)}", "text"))
    if status is _S_HELD:
        lines.append(("held: release_step() lets it run", "muted"))
    if step is not None and APPROVAL_KEY in step.step_state:
        lines.extend(_approval_lines(step, limit))
    if skipped:
        reason = out.output.reason  # type: ignore[union-attr]
        lines.append((_preview(f"not run: {reason}" if reason != SKIPPED else "not run", limit), "muted"))
    elif out is not None:
        lines.extend(_output_lines(out, limit))
    if failures:
        last = failures[-1]
        if status is _S_FAILED:
            err = f"error: {last.error_type}: {last.message}"
            lines.append((_preview(err, limit), "error"))
            if last.attempt > 1:
                lines.append((f"attempt {last.attempt}", "muted"))
        else:
            n = len(failures)
            lines.append((_preview(f"failed {n}× before ({last.error_type})", limit), "muted"))
    if undone_outs and status is not _S_UNDONE:
        n = len(undone_outs)
        runs = "its undone run is dashed" if n == 1 else f"its {n} undone runs are dashed"
        if status is _S_DONE:
            lines.append((f"ran again; {runs}", "muted"))
        else:  # queued (or failed, held...) again after an undo
            lines.append((f"ran before; {runs}", "muted"))
    attrs = _SKIPPED_ATTRS if skipped else _ANSWER_ATTRS if is_answer else _ATTRS[status]
    return _Node("", attrs, lines)  # attrs shared: read only


def _ghost_node(out: TaskStepOutput, number: int, nth: int, of: int, limit: int) -> _Node:
    """A run that ``undo_step`` took back: everything it did, dashed, so the learner sees it."""
    which = f" {nth}/{of}" if of > 1 else ""
    lines: list[tuple[str, str]] = [
        (f"#{number} undone run{which} · {short_id(out.task_step.step_id)}", "head")
    ]
    if out.input is not None:  # what this run had (an undo may have given the step new input)
        lines.append((f"in: {_preview(out.input, limit)}", "text"))
    lines.extend(_output_lines(out, limit))
    if len(lines) == 1:
        lines.append(("(no output)", "muted"))
    fill, border, font = STATUS_COLORS[StepStatus.UNDONE]
    attrs = {"fillcolor": fill, "color": border, "fontcolor": font, "style": _STYLES[StepStatus.UNDONE]}
    return _Node("", attrs, lines)


_BR = '<BR ALIGN="LEFT"/>'
_STYLE = {"head": ("<B>", "</B>"), "error": (f'<FONT COLOR="{_ERROR_COLOR}">', "</FONT>"), "muted": ("<I>", "</I>")}
_PLAIN = ("", "")
_SPECIAL = re.compile("[&<>\"']")


_special = _SPECIAL.search


def _escape(text: str) -> str:
    """``html.escape(text, quote=True)``, at once when there is nothing to escape."""
    return html.escape(text, quote=True) if _special(text) else text


def _label_piece(text: str, kind: str, wrap: int) -> str:
    """One line of a label, wrapped at ``wrap``, escaped and styled by ``kind``."""
    start, end = _STYLE.get(kind, _PLAIN)
    if text and len(text) <= wrap:  # the common case: one piece
        return f"{start}{html.escape(text, quote=True) if _special(text) else text}{end}{_BR}"
    return "".join([f"{start}{_escape(piece)}{end}{_BR}" for piece in wrap_lines(text, wrap) if piece])


def _render_label(lines: list[tuple[str, str]], wrap: int) -> str:
    pieces = []
    for text, kind in lines:
        if text and len(text) <= wrap:  # ``_label_piece``'s common case, without the call
            start, end = _STYLE.get(kind, _PLAIN)
            pieces.append(f"{start}{html.escape(text, quote=True) if _special(text) else text}{end}{_BR}")
        else:
            pieces.append(_label_piece(text, kind, wrap))
    return f"<{''.join(pieces)}>"


def _attr_list(attrs: dict[str, str]) -> str:
    """The attributes of a node, after its label."""
    # Values are our own constants (colours, styles, numbers), quoted for DOT; labels are <...>.
    items = []
    for key, value in attrs.items():
        items.append(f"{key}={value}" if key == "label" else f'{key}="{value}"')
    return ", ".join(items)


# The graph's background is transparent (no white box on a dark page) and every text sits on
# a light shape: nodes are filled, and the title (and an edge's label) is in a light table.
TITLE_BG = "#f8fafc"
_TITLE_OPEN = (f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="{TITLE_BG}" '
               'STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT">')
_TITLE_CLOSE = "</TD></TR></TABLE>"


_BOX_OPEN, _BOX_CLOSE = f"<{_TITLE_OPEN}", f"{_TITLE_CLOSE}>"


def boxed_label(inner: str) -> str:
    """An HTML-like label whose text (``inner``: label markup without the outer ``<>``) sits
    in a light rounded box, readable on a light or a dark page."""
    return f"{_BOX_OPEN}{inner}{_BOX_CLOSE}"


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


def _const_attrs(attrs: dict[str, str]) -> dict[str, str]:
    """``attrs``, registered as a constant: ``_node_line`` writes its text once, not per node
    (never change a registered dict: nodes share it)."""
    _CONST_ATTRS[id(attrs)] = (attrs, _attr_list(attrs))
    return attrs


for _attrs in (*_ATTRS.values(), _ANSWER_ATTRS, _SKIPPED_ATTRS):
    _const_attrs(_attrs)
