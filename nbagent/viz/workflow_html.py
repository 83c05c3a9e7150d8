"""HTML views of workflows, agents, events and runs: pure functions returning one card each,
with the CSS, escaping and no-JavaScript rules of ``viz.html`` (whose helpers they reuse).

``draw_workflow`` and ``draw_agents`` return a ``DotDisplay`` (``viz.graph``, re-exported here):
the DOT text of ``viz.workflow_dot`` with these lists to show without Graphviz.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.messages import ChatMessage, ToolOutput, ToolSelection
from nbagent.viz.escape import args_preview, html_text, preview
from nbagent.viz.graph import DotDisplay
from nbagent.viz.html.base import _badge, _call, _card, _details, _graph_or_list, _kv, _line, _pre, _safely
from nbagent.viz.html.chat import _tool_call_block, _transcript_body
from nbagent.viz.render import svg_or_none
from nbagent.viz.workflow_dot import agents_to_dot, run_to_dot, workflow_to_dot

if TYPE_CHECKING:
    from nbagent.workflow.agents import BaseWorkflowAgent
    from nbagent.workflow.events import Event
    from nbagent.workflow.trace import RunTrace
    from nbagent.workflow.workflow import Workflow

__all__ = [
    "DotDisplay",
    "workflow_html",
    "agent_html",
    "event_html",
    "run_html",
    "run_timeline_html",
    "agents_fallback_html",
    "steps_fallback_html",
    "draw_workflow",
    "draw_agents",
    "workflow_panel_html",
]

_PREVIEW = 120
_RUN_STATUS = {
    "idle": "nb-s-queued",
    "running": "nb-s-running",
    "waiting": "nb-s-blocked",
    "done": "nb-s-done",
    "failed": "nb-s-failed",
    "cancelled": "nb-s-undone",
}
_CALL_STATUS = {
    "queued": "nb-s-queued",
    "running": "nb-s-running",
    "waiting": "nb-s-blocked",
    "done": "nb-s-done",
    "error": "nb-s-failed",
}


def _graph_block(source: str, fallback: Callable[[], str]) -> str:
    """The inline SVG of ``source``, or (no Graphviz) ``fallback()`` and the DOT source."""
    listed = functools.partial(_safely, "the list could not be drawn", fallback)
    return _graph_or_list(svg_or_none(source), listed, source, shown="shown as a list")


# ----- workflows and agents ------------------------------------------------------------------


def steps_fallback_html(workflow: Workflow) -> str:
    """The steps as a table: what each takes and returns (the drawing without Graphviz)."""
    rows = []
    for spec in workflow.steps.values():
        takes = ", ".join(t.__name__ for t in spec.accepts)
        gives = ", ".join(t.__name__ for t in spec.returns) or "nothing"
        workers = f" ({spec.num_workers} at a time)" if spec.num_workers > 1 else ""
        rows.append(
            f"<tr><td><code>{html_text(spec.name)}</code>{html_text(workers)}</td>"
            f"<td>{html_text(takes)}</td><td>{html_text(gives)}</td>"
            f"<td>{html_text(preview(spec.doc, _PREVIEW))}</td></tr>"
        )
    return (
        '<table class="nb-steps"><tr><th>step</th><th>takes</th><th>returns</th><th>what</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def agents_fallback_html(workflow: Any) -> str:
    """The agents as a table: kind, model, tools, who they may hand off to."""
    rows = []
    for agent in workflow.agents.values():
        root = " " + _badge("root", "nb-b-info") if agent.name == workflow.root_agent else ""
        tools = " ".join(f"<code>{html_text(t.name, 64)}</code>" for t in agent.tools) or '<span class="nb-muted">none</span>'
        targets = ", ".join(workflow.handoff_targets(agent.name)) or "nobody"
        rows.append(
            f"<tr><td><code>{html_text(agent.name, 100)}</code>{root}</td>"
            f"<td>{html_text(type(agent).__name__)}</td>"
            f"<td>{html_text(preview(agent.description, _PREVIEW))}</td><td>{tools}</td>"
            f"<td>{html_text(preview(targets, _PREVIEW))}</td></tr>"
        )
    return (
        '<table class="nb-agents"><tr><th>agent</th><th>kind</th><th>does</th><th>tools</th>'
        "<th>hands off to</th></tr>" + "".join(rows) + "</table>"
    )


def draw_workflow(workflow: Workflow, **options: Any) -> DotDisplay:
    """``Workflow.draw``: the steps and the event types between them, as a displayable graph."""
    return DotDisplay(
        workflow_to_dot(workflow, **options),
        title=f"{type(workflow).__name__} steps",
        fallback=lambda: steps_fallback_html(workflow),
    )


def draw_agents(workflow: Any) -> DotDisplay:
    """``AgentWorkflow.draw_agents``: the agents and who may hand off to whom."""
    return DotDisplay(
        agents_to_dot(workflow),
        title=f"{type(workflow).__name__} agents",
        fallback=lambda: agents_fallback_html(workflow),
    )


def workflow_html(workflow: Workflow) -> str:
    """A workflow: for an AgentWorkflow its agents and handoffs, then its steps and events."""

    def build() -> str:
        name = type(workflow).__name__
        agents = getattr(workflow, "agents", None)
        timeout = "none" if workflow.timeout is None else f"{workflow.timeout:g} s"
        if isinstance(agents, dict) and agents:
            head = (
                f'<div class="nb-head">{html_text(name)} · {len(agents)} agent'
                f'{"s" if len(agents) != 1 else ""} · root <code>{html_text(workflow.root_agent)}</code></div>'  # type: ignore[attr-defined]
            )
            body = _graph_block(agents_to_dot(workflow), lambda: agents_fallback_html(workflow))
            body += _kv([("timeout", html_text(timeout)),
                         ("max_iterations", html_text(getattr(workflow, "max_iterations", "")))])
            steps = _graph_block(workflow_to_dot(workflow), lambda: steps_fallback_html(workflow))
            body += _details(f"{counted(len(workflow.steps), 'step')} and the events between them", steps)
        else:
            head = f'<div class="nb-head">Workflow · {html_text(name)} · {counted(len(workflow.steps), "step")}</div>'
            body = _graph_block(workflow_to_dot(workflow), lambda: steps_fallback_html(workflow))
            body += _kv([("timeout", html_text(timeout))])
        return _card("workflow", head + body)

    return _safely("this workflow could not be drawn", build)


def agent_html(agent: BaseWorkflowAgent) -> str:
    """An agent: kind, model, description, tools, handoff targets, system prompt."""

    def build() -> str:
        kind = type(agent).__name__
        head = f'<div class="nb-head">{html_text(kind)} · <code>{html_text(agent.name, 100)}</code></div>'
        tools = " ".join(f"<code>{html_text(t.name, 64)}</code>" for t in agent.tools)
        rows = [
            ("description", html_text(agent.description, 2000)),
            ("model", f"<code>{html_text(preview(getattr(agent.llm, 'model', type(agent.llm).__name__), 80))}</code>"),
            ("tools", tools or '<span class="nb-muted">none</span>'),
        ]
        if agent.tool_retriever is not None:
            rows.append(("tool retriever", f"<code>{html_text(type(agent.tool_retriever).__name__)}</code>"))
        handoff = "any other agent" if agent.can_handoff_to is None else (", ".join(agent.can_handoff_to) or "nobody")
        rows.append(("can hand off to", html_text(handoff, 500)))
        body = _kv(rows)
        if agent.system_prompt:
            body += _details("system prompt", _pre(agent.system_prompt))
        system_message = getattr(agent, "system_message", None)
        if callable(system_message):  # ReAct: the system prompt the model sees, tools filled in
            seen = system_message(list(agent.tools), agent.system_prompt)
            body += _details("the prompt the model sees (react_header filled in)", _pre(seen.text))
        return _card("agent", head + body)

    return _safely("this agent could not be drawn", build)


# ----- events --------------------------------------------------------------------------------


def _value_html(value: Any) -> str:
    if isinstance(value, ChatMessage):
        return _transcript_body([value])
    if isinstance(value, list) and value and all(isinstance(v, ChatMessage) for v in value):
        return _details(f"{len(value)} message{'s' if len(value) != 1 else ''}", _transcript_body(value))
    if isinstance(value, list) and value and all(isinstance(v, ToolSelection) for v in value):
        calls = (_call(c.tool_name, c.tool_kwargs) for c in value)
        return "<br>".join(f"<code>{html_text(preview(c, 200))}</code>" for c in calls)
    if isinstance(value, ToolOutput):
        return _tool_call_block(value, open_=True)
    if isinstance(value, dict):
        return f"<code>{html_text(preview(args_preview(value), 400))}</code>"
    if isinstance(value, str):
        return _pre(value) if "\n" in value or len(value) > _PREVIEW else html_text(value)
    return f"<code>{html_text(preview(value, 400))}</code>"


def event_html(event: Event) -> str:
    """An event: its class and fields (messages as a transcript, tool outputs as a call)."""

    def build() -> str:
        fields = event.fields()
        name = type(event).__name__
        agent = fields.get("current_agent_name")
        who = f" · <code>{html_text(agent, 100)}</code>" if isinstance(agent, str) else ""
        head = f'<div class="nb-head">Event · {html_text(name)}{who}</div>'
        rows = []
        for key, value in fields.items():
            if key == "current_agent_name" or (key in ("raw", "retry_messages", "tool_calls") and not value):
                continue
            rows.append((key, _value_html(value)))
        body = _kv(rows) if rows else _line("no fields", "nb-muted")
        return _card("event", head + body)

    return _safely("this event could not be drawn", build)


# ----- runs ----------------------------------------------------------------------------------


def run_timeline_html(trace: RunTrace) -> str:
    """A run as a list of agent steps and tool calls (the run graph without Graphviz)."""
    if not trace.turns:
        return _line("no agent step yet", "nb-muted")
    items = []
    for turn in trace.turns:
        badge = _badge(turn.status, "nb-s-blocked" if turn.status == "retry" else _RUN_STATUS.get(turn.status, "nb-s-queued"))
        via = f'<span class="nb-muted">{html_text(turn.via)}</span>' if turn.via not in ("start", "tools", "next") else ""
        lines = [_line(f"{badge} <b>{html_text(turn.agent, 100)}</b> · step {turn.index + 1} {via}")]
        if turn.text:
            lines.append(_line(html_text(preview(turn.text, _PREVIEW))))
        for call in turn.tool_calls:
            status = _badge(call.status, _CALL_STATUS.get(call.status, "nb-s-queued"))
            text = _call(call.tool_name, call.kwargs)
            lines.append(_line(f"{status} <code>{html_text(preview(text, _PREVIEW))}</code>"))
            if call.question is not None:
                lines.append(_line(f'<span class="nb-muted">asks:</span> {html_text(preview(call.question, _PREVIEW))}'))
            if call.answer is not None:
                lines.append(_line(f'<span class="nb-muted">person:</span> {html_text(preview(call.answer, _PREVIEW))}'))
            if call.result is not None:
                cls = "nb-error" if call.status == "error" else ""
                lines.append(_line(f'<span class="nb-muted">→</span> {html_text(preview(call.result, _PREVIEW))}', cls))
        if turn.handoff_to:
            reason = f": {preview(turn.handoff_reason, _PREVIEW)}" if turn.handoff_reason else ""
            lines.append(_line(f"<b>handoff → {html_text(turn.handoff_to, 100)}</b>{html_text(reason)}"))
        cls = {"running": "running", "done": "done", "retry": "blocked"}.get(turn.status, "queued")
        items.append(f'<li class="nb-l-{cls}">{"".join(lines)}</li>')
    return f'<ol class="nb-timeline">{"".join(items)}</ol>'


def run_html(trace: RunTrace, source: str | None = None) -> str:
    """A run as a card: status, answer or error, and its graph (or the list without Graphviz)."""

    def build() -> str:
        status = _badge(trace.status, _RUN_STATUS.get(trace.status, "nb-s-queued"))
        active = f" · active <code>{html_text(trace.active_agent, 100)}</code>" if trace.active_agent else ""
        head = f'<div class="nb-head">Run {status}{active}</div>'
        rows = []
        if trace.user_msg is not None:
            rows.append(("user", html_text(preview(trace.user_msg, 400))))
        if trace.answer is not None:
            by = _line(f"by <code>{html_text(trace.answered_by, 100)}</code>", "nb-muted") if trace.answered_by else ""
            rows.append(("answer", _pre(trace.answer) + by))
        if trace.error is not None:
            rows.append(("error", f'<span class="nb-error">{html_text(preview(trace.error, 400))}</span>'))
        body = _kv(rows) if rows else ""
        body += _graph_block(source if source is not None else run_to_dot(trace), lambda: run_timeline_html(trace))
        return _card("run", head + body)

    return _safely("this run could not be drawn", build)


_PANEL_CSS = """
.nbagent-wfpanel{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 color:var(--jp-ui-font-color1,#1f2328);border:1px solid var(--jp-border-color2,#d0d7de);
 border-radius:6px;padding:6px 8px;box-sizing:border-box;max-width:100%}
.nbagent-wfpanel .nbagent-status-line{padding:3px 6px;border-radius:4px;
 background:var(--jp-layout-color2,#f6f8fa);overflow-wrap:anywhere}
.nbagent-wfpanel .nbagent-err{color:var(--jp-error-color1,#b91c1c);font-weight:600}
.nbagent-wfpanel .nbagent-q{font-weight:600;overflow-wrap:anywhere}
.nbagent-wfpanel ol{margin:2px 0 2px 1.4em;padding:0}
"""


def workflow_panel_html(
    status: str, problems: Iterable[str], question: str, events: Iterable[tuple[str, str]], run: str
) -> str:
    """The workflow panel as a static picture, for front ends without widgets: the ``status``
    sentence, the ``problems`` (the last step's error, a press that could not be done), the
    ``question`` the run waits on, the last step's ``events`` as (name, what it is about) and the
    ``run`` card (``run_html``, already HTML). Every text is escaped here."""
    line = html_text(status, 300)
    for problem in problems:
        line += f' <span class="nbagent-err">{html_text(problem, 500)}</span>'
    asked = f'<div class="nbagent-q">Question: {html_text(question, 2000)}</div>' if question else ""
    items = "".join(f"<li>{f'<b>{html_text(name, 200)}</b> {html_text(about, 80)}'.rstrip()}</li>"
                    for name, about in events)
    listed = f"<div>Last step produced:<ol>{items}</ol></div>" if items else ""
    parts = [f"<style>{_PANEL_CSS}</style>", f'<div class="nbagent-status-line">{line}</div>', asked, listed, run]
    return f'<div class="nbagent-wfpanel">{"".join(parts)}</div>'
