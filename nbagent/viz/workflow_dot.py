"""Workflows and their runs -> DOT text: pure functions, like ``task_to_dot``.

- ``workflow_to_dot(workflow)``: every step (box) and event type (ellipse), with an edge from
  each event type to the steps that take it and from each step to the events it returns.
- ``agents_to_dot(workflow)``: an AgentWorkflow's agents, the root marked, and who may hand off
  to whom.
- ``run_to_dot(trace)``: one run as it goes: one cluster per agent (the active one highlighted),
  a node per agent step and per tool call, handoffs as bold edges between agents, the answer.

Same conventions as the step DAG: HTML-like labels whose text is cleaned, truncated and escaped
(``escape.py``), node names generated (``s0``, ``e0``, ``a0``, ``t0``...) and never taken from
user data, the palette of ``dot.py``, and no timestamps or addresses, so the same input gives the
same text.
"""

from __future__ import annotations

import html

from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.engine.state import StepStatus
from nbagent.viz.dot import RANKDIRS, STATUS_COLORS, TITLE_BG, boxed_label
from nbagent.viz.dot.labels import _attr_list, _render_label
from nbagent.viz.escape import args_preview, clean, preview

if TYPE_CHECKING:
    from nbagent.workflow.trace import RunTrace, ToolCallView, Turn
    from nbagent.workflow.workflow import Workflow

__all__ = [
    "workflow_to_dot",
    "agents_to_dot",
    "run_to_dot",
    "HANDOFF_COLOR",
    "EVENT_COLORS",
    "check_workflow_options",
]

_FONT = "Helvetica"
_EDGE_COLOR = "#6b7280"
_TITLE_COLOR = "#374151"  # >= 4.5:1 on the light boxes texts sit in (the background is transparent)
_MUTED_COLOR = "#9ca3af"
HANDOFF_COLOR = "#7c3aed"

_QUEUED = STATUS_COLORS[StepStatus.QUEUED]
_RUNNING = STATUS_COLORS[StepStatus.RUNNING]
_DONE = STATUS_COLORS[StepStatus.DONE]
_FAILED = STATUS_COLORS[StepStatus.FAILED]
_WAITING = STATUS_COLORS[StepStatus.BLOCKED]
_UNDONE = STATUS_COLORS[StepStatus.UNDONE]
_USER = ("#dbeafe", "#1d4ed8", "#172554")
_ANSWER = ("#e0e7ff", "#4338ca", "#1e1b4b")
_STEP = ("#f8fafc", "#334155", "#0f172a")

#: Fill, border and text colour of event nodes by kind.
EVENT_COLORS: dict[str, tuple[str, str, str]] = {
    "start": _DONE,
    "stop": _ANSWER,
    "question": _WAITING,
    "answer": _USER,
    "event": _QUEUED,
}

_CALL_COLORS: dict[str, tuple[str, str, str]] = {
    "queued": _QUEUED,
    "running": _RUNNING,
    "waiting": _WAITING,
    "done": _DONE,
    "error": _FAILED,
}
_TURN_COLORS: dict[str, tuple[str, str, str]] = {
    "running": _RUNNING,
    "done": _DONE,
    "retry": _WAITING,
}


def check_workflow_options(**options: Any) -> None:
    """Raise a clear error for an unknown or invalid drawing option."""
    allowed = ("rankdir", "max_label", "wrap", "max_turns")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"unknown drawing option(s) {unknown}; allowed: {list(allowed)}")
    rankdir = options.get("rankdir", "TB")
    if rankdir not in RANKDIRS:
        raise ValueError(f"rankdir must be one of {RANKDIRS}, got {rankdir!r}")
    for name, low in (("max_label", 8), ("wrap", 8), ("max_turns", 2)):
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _header(name: str, rankdir: str, title: list[tuple[str, str]], wrap: int) -> list[str]:
    return [
        f"digraph {name} {{",
        f'  graph [rankdir="{rankdir}", bgcolor="transparent", pad="0.1", fontname="{_FONT}", fontsize="11", '
        f'fontcolor="{_TITLE_COLOR}", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.4", '
        f"compound=\"true\", label={boxed_label(_render_label(title, max(wrap, 60))[1:-1])}];",
        f'  node [shape="box", fontname="{_FONT}", fontsize="10", margin="0.12,0.06"];',
        f'  edge [color="{_EDGE_COLOR}", arrowsize="0.7", fontname="{_FONT}", fontsize="9"];',
    ]


def _edge_label(text: str) -> str:
    """A short edge label on a light box (the graph's background is transparent)."""
    return (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2" BGCOLOR="{TITLE_BG}">'
            f'<TR><TD>{html.escape(text)}</TD></TR></TABLE>>')


def _colors(c: tuple[str, str, str]) -> dict[str, str]:
    return {"fillcolor": c[0], "color": c[1], "fontcolor": c[2]}


def _node(name: str, lines: list[tuple[str, str]], wrap: int, **attrs: str) -> str:
    return f"  {name} [{_attr_list({'label': _render_label(lines, wrap), **attrs})}];"


# ----- steps and events ----------------------------------------------------------------------


def _event_kind(cls: type) -> str:
    from nbagent.workflow.events import HumanResponseEvent, InputRequiredEvent, StartEvent, StopEvent

    if issubclass(cls, StartEvent):
        return "start"
    if issubclass(cls, StopEvent):
        return "stop"
    if issubclass(cls, InputRequiredEvent):
        return "question"
    if issubclass(cls, HumanResponseEvent):
        return "answer"
    return "event"


def workflow_to_dot(workflow: Workflow, *, rankdir: str = "TB", max_label: int = 60, wrap: int = 36) -> str:
    """The workflow's possible flows: steps, the event types between them, and their edges."""
    check_workflow_options(rankdir=rankdir, max_label=max_label, wrap=wrap)
    specs = list(workflow.steps.values())
    events: list[type] = []
    for spec in specs:
        for cls in (*spec.accepts, *spec.returns):
            if cls not in events:
                events.append(cls)
    # StartEvent first, StopEvent last, the rest in order of first mention
    events.sort(key=lambda c: {"start": 0, "stop": 2}.get(_event_kind(c), 1))
    ev_name = {cls: f"e{i}" for i, cls in enumerate(events)}
    title = [
        (f"{clean(type(workflow).__name__)} · {counted(len(specs), 'step')} · {counted(len(events), 'event type')}", "head"),
        ("boxes are steps, ellipses the events they take and return", "muted"),
    ]
    lines = _header("workflow", rankdir, title, wrap)
    for cls, name in ev_name.items():
        kind = _event_kind(cls)
        attrs = {"shape": "ellipse", "style": "filled", **_colors(EVENT_COLORS[kind])}
        if kind == "stop":
            attrs["peripheries"] = "2"
        lines.append(_node(name, [(preview(cls.__name__, max_label), "head")], wrap, **attrs))
    for i, spec in enumerate(specs):
        label = [(preview(spec.name, max_label), "head")]
        if spec.num_workers > 1:
            label.append((f"{spec.num_workers} at a time", "muted"))
        if spec.doc:
            label.append((preview(spec.doc, max_label, words=True), "text"))
        lines.append(_node(f"s{i}", label, wrap, style="rounded,filled", **_colors(_STEP)))
    for i, spec in enumerate(specs):
        for cls in spec.accepts:
            lines.append(f"  {ev_name[cls]} -> s{i};")
        for cls in spec.returns:
            lines.append(f"  s{i} -> {ev_name[cls]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----- agents and handoffs -------------------------------------------------------------------


def _model_name(llm: Any) -> str:
    name = getattr(llm, "model", None)
    return clean(name) if isinstance(name, str) else clean(type(llm).__name__)


def agents_to_dot(workflow: Any, *, rankdir: str = "LR", max_label: int = 60, wrap: int = 36) -> str:
    """An AgentWorkflow's agents (root marked, tools listed) and the handoffs they may make."""
    check_workflow_options(rankdir=rankdir, max_label=max_label, wrap=wrap)
    agents = list(workflow.agents.values())
    names = {a.name: f"a{i}" for i, a in enumerate(agents)}
    root = workflow.root_agent
    title = [
        (f"{clean(type(workflow).__name__)} · {len(agents)} agent{'s' if len(agents) != 1 else ''} · root: {preview(root, max_label)}", "head"),
        ("arrows: who may hand off to whom", "muted"),
    ]
    lines = _header("agents", rankdir, title, wrap)
    lines.append(_node("user", [("user", "head")], wrap, shape="box", style="rounded,filled", **_colors(_USER)))
    for agent in agents:
        head = preview(agent.name, max_label) + (" · root" if agent.name == root else "")
        label = [(head, "head"), (f"{type(agent).__name__} · {preview(_model_name(agent.llm), 40)}", "muted")]
        if agent.description:
            label.append((preview(agent.description, max_label, words=True), "text"))
        tools = [t.name for t in agent.tools]
        if tools:
            label.append((preview("tools: " + ", ".join(tools), max_label), "text"))
        if agent.tool_retriever is not None:
            label.append(("+ tools from a retriever", "muted"))
        attrs = {"style": "rounded,filled", **_colors(_RUNNING if agent.name == root else _QUEUED)}
        if agent.name == root:
            attrs["penwidth"] = "2"
        lines.append(_node(names[agent.name], label, wrap, **attrs))
    lines.append(f"  user -> {names[root]} [label={_edge_label('start')}, fontcolor=\"{_TITLE_COLOR}\"];")
    for agent in agents:
        for target in workflow.handoff_targets(agent.name):
            lines.append(
                f'  {names[agent.name]} -> {names[target]} [color="{HANDOFF_COLOR}", '
                f'fontcolor="{HANDOFF_COLOR}", style="dashed"];'
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----- one run -------------------------------------------------------------------------------


def _call_lines(call: ToolCallView, limit: int) -> list[tuple[str, str]]:
    text = f"{clean(call.tool_name)}({args_preview(call.kwargs)})"
    lines = [(preview(text, limit), "head")]
    if call.question is not None:
        lines.append((f"asks: {preview(call.question, limit)}", "text"))
        if call.answer is not None:
            lines.append((f"person: {preview(call.answer, limit)}", "text"))
        else:
            lines.append(("waiting for an answer…", "muted"))
    if call.result is not None:
        kind = "error" if call.status == "error" else "text"
        lines.append((f"→ {preview(call.result, limit)}", kind))
    elif call.status in ("queued", "running"):
        lines.append((call.status + "…", "muted"))
    return lines


def _turn_lines(turn: Turn, number: int, limit: int) -> list[tuple[str, str]]:
    head = f"step {number}"
    if turn.status == "running":
        head += " · thinking…"
    elif turn.status == "retry":
        head += " · unusable reply, asked again"
    lines = [(head, "head")]
    if turn.text:
        lines.append((preview(turn.text, limit, words=True), "text"))
    calls = [c.tool_name for c in turn.tool_calls if not (c.is_handoff and turn.handoff_to)]
    if turn.handoff_to:
        lines.append((f"hands off to {preview(turn.handoff_to, 40)}", "muted"))
    elif calls and not turn.text:
        lines.append((preview("calls " + ", ".join(calls), limit), "muted"))
    return lines


def run_to_dot(
    trace: RunTrace, *, rankdir: str = "TB", max_label: int = 60, wrap: int = 36, max_turns: int = 30
) -> str:
    """One run: agents as clusters, agent steps and tool calls as nodes, handoffs as edges.

    The active agent's cluster is drawn in the running colour with a bold border; the agent
    that answered gets the done colour. With more than ``max_turns`` agent steps, the oldest are
    left out (a note says how many).
    """
    check_workflow_options(rankdir=rankdir, max_label=max_label, wrap=wrap, max_turns=max_turns)
    turns = trace.turns
    hidden = max(0, len(turns) - max_turns)
    shown = turns[hidden:]
    agents = list(trace.agents)
    for t in shown:
        if t.agent not in agents:
            agents.append(t.agent)
    active = trace.active_agent
    status = trace.status
    shown_status = "paused" if getattr(trace, "paused", False) and status in ("idle", "running") else status
    title_bits = [f"run · {shown_status}", f"{len(turns)} agent step{'s' if len(turns) != 1 else ''}"]
    if active:
        title_bits.append(f"active: {preview(active, 40)}")
    if trace.answered_by:
        title_bits.append(f"answered by {preview(trace.answered_by, 40)}")
    title = [(" · ".join(title_bits), "head")]
    if hidden:
        title.append((f"{hidden} earlier agent step{'s' if hidden != 1 else ''} not shown", "muted"))
    lines = _header("run", rankdir, title, wrap)

    user_text = "user" if trace.user_msg is None else f"user: {preview(trace.user_msg, max_label, words=True)}"
    lines.append(_node("user", [(user_text, "head")], wrap, style="rounded,filled", **_colors(_USER)))

    turn_node = {t.index: f"t{t.index}" for t in shown}
    call_nodes: dict[int, list[str]] = {}
    first_node: dict[str, str] = {}
    for k, agent in enumerate(agents):
        mine = [t for t in shown if t.agent == agent]
        is_active = agent == active
        answered = status == "done" and agent == trace.answered_by
        if is_active:
            box = _RUNNING
        elif answered:
            box = _DONE
        elif status == "failed" and shown and shown[-1].agent == agent:
            box = _FAILED
        else:
            box = _QUEUED
        head = preview(agent, max_label)
        tags = []
        if agent == trace.root:
            tags.append("root")
        if is_active:
            tags.append("active")
        if answered:
            tags.append("answered")
        if tags:
            head += " · " + ", ".join(tags)
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(
            f'    graph [label={_render_label([(head, "head")], max(wrap, 40))}, style="rounded,filled", '
            f'fillcolor="{box[0]}", color="{box[1]}", fontcolor="{box[2]}", '
            f'penwidth="{2.5 if is_active else 1}"];'
        )
        if not mine:
            placeholder = "not called yet" if status in ("idle", "running", "waiting") else "not called"
            name = f"a{k}_idle"
            first_node[agent] = name
            lines.append(
                "  " + _node(name, [(placeholder, "muted")], wrap, style="rounded,dashed", color=_MUTED_COLOR, fontcolor=_TITLE_COLOR)
            )
        for t in mine:
            first_node.setdefault(agent, turn_node[t.index])
            colors = _TURN_COLORS.get(t.status, _QUEUED)
            attrs = {"style": "rounded,filled" + (",bold" if t.status == "running" else ""), **_colors(colors)}
            lines.append("  " + _node(turn_node[t.index], _turn_lines(t, t.index + 1, max_label), wrap, **attrs))
            names = []
            for j, call in enumerate(t.tool_calls):
                if call.is_handoff and t.handoff_to:
                    continue  # drawn as the handoff edge
                name = f"t{t.index}c{j}"
                names.append(name)
                attrs = {"style": "filled" + (",bold" if call.status in ("running", "waiting") else ""),
                         **_colors(_CALL_COLORS.get(call.status, _QUEUED))}
                lines.append("  " + _node(name, _call_lines(call, max_label), wrap, **attrs))
            call_nodes[t.index] = names
        lines.append("  }")

    # edges: the user to the first step, step to its calls, calls to the next step, handoffs
    if shown:
        if hidden == 0:
            lines.append(f"  user -> {turn_node[shown[0].index]};")
        else:
            lines.append(f'  user -> {turn_node[shown[0].index]} [style="dotted", label={_edge_label("…")}, '
                         f'fontcolor="{_TITLE_COLOR}"];')
    elif trace.root is not None and trace.root in first_node:
        lines.append(f'  user -> {first_node[trace.root]} [style="dashed", color="{_MUTED_COLOR}"];')
    for a, b in zip(shown, shown[1:]):
        na, nb = turn_node[a.index], turn_node[b.index]
        for c in call_nodes.get(a.index, []):
            lines.append(f"  {na} -> {c};")
        if b.via == "handoff":
            reason = f"handoff: {preview(a.handoff_reason, 40)}" if a.handoff_reason else "handoff"
            # the label sits in a table with an empty first column: Graphviz puts an edge label's
            # box against the edge, so without the gap the arrow runs through its first letters
            text = _render_label([(reason, "text")], 24)[1:-1]
            label = (f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR>'
                     f'<TD WIDTH="10"></TD><TD ALIGN="LEFT" BALIGN="LEFT" BGCOLOR="{TITLE_BG}">{text}</TD>'
                     f'</TR></TABLE>>')
            lines.append(
                f'  {na} -> {nb} [color="{HANDOFF_COLOR}", fontcolor="{HANDOFF_COLOR}", penwidth="2.2", '
                f"label={label}];"
            )
        elif call_nodes.get(a.index):
            for c in call_nodes[a.index]:
                lines.append(f"  {c} -> {nb};")
        else:
            style = ' [style="dashed"]' if b.via == "retry" else ""
            lines.append(f"  {na} -> {nb}{style};")
    if shown:
        last = shown[-1]
        for c in call_nodes.get(last.index, []):
            lines.append(f"  {turn_node[last.index]} -> {c};")
    if status == "done":
        answer = [(f"answer · {preview(trace.answered_by or '?', 40)}", "head"), (preview(trace.answer or "", max_label, words=True), "text")]
        lines.append(_node("answer", answer, wrap, style="rounded,filled", peripheries="2", **_colors(_ANSWER)))
        if shown:
            src = turn_node[shown[-1].index]
            lines.append(f"  {src} -> answer;")
    elif status in ("failed", "cancelled") and trace.error:
        kind = "stopped" if status == "cancelled" else "failed"
        lines.append(
            _node("error", [(kind, "head"), (preview(trace.error, max_label), "error")], wrap,
                  style="rounded,filled", **_colors(_FAILED if status == "failed" else _UNDONE))
        )
        if shown:
            lines.append(f"  {turn_node[shown[-1].index]} -> error;")
    lines.append("}")
    return "\n".join(lines) + "\n"
