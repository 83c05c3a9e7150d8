"""Views of a task: its steps as a timeline (the graph without Graphviz), the step graph card,
and the task card with its inline graph (SVG from ``viz.render``, else the timeline)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.costs import task_cost_label
from nbagent.engine.state import StepStatus
from nbagent.mcp import tool_server
from nbagent.viz.dot import SKIPPED, is_skipped, node_names, output_text, status_summary, step_numbers, task_to_dot
from nbagent.viz.escape import html_text, preview, safe_str
from nbagent.viz.html.base import (
    _MAX_TIMELINE,
    _PREVIEW,
    _badge,
    _card,
    _css_name,
    _details,
    _graph_or_list,
    _id,
    _ids_html,
    _kv,
    _line,
    _pre,
    _safely,
    _status_badge,
    _task_badge,
)
from nbagent.viz.html.chat import _call_text
from nbagent.viz.html.steps import _metrics
from nbagent.viz.render import svg_or_none

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import Task

__all__ = ["timeline_html", "graph_html", "task_html"]


def _timeline_item(state: TaskState, index: int, sid: str, undone_next: dict[str, list[str]],
                   limit: int) -> str:
    status = _status_of(state, sid)
    step = state.steps.get(sid)
    out = state.outputs.get(sid) if status == StepStatus.DONE else None
    shown = SKIPPED if is_skipped(out) else status.value  # a skipped step is done, but never ran
    head = [_status_badge(shown), f'<span class="nb-muted">#{index + 1}</span>', _id(sid)]
    if out is not None and out.is_last:
        head.append(_badge("answer", "nb-b-answer"))
    lines = [_line(" ".join(head))]
    if step is not None and step.input is not None:
        lines.append(_line(f'<span class="nb-muted">in:</span> {html_text(preview(step.input, limit))}'))
    if shown == SKIPPED:
        reason = out.output.reason  # type: ignore[union-attr]
        lines.append(_line(html_text(preview("not run" + (f": {reason}" if reason != SKIPPED else ""), limit)),
                           "nb-muted"))
    elif out is not None:
        if out.reasoning:
            lines.append(_line(f'<span class="nb-muted">thought:</span> {html_text(preview(out.reasoning, limit))}'))
        for t in out.tool_outputs or []:
            server = tool_server(t)
            label = f"call ({html_text(preview(server, 40))}):" if server else "call:"
            lines.append(_line(f'<span class="nb-muted">{label}</span> <code>{html_text(preview(_call_text(t), limit))}</code>'))
            cls = "nb-error" if t.is_error else ""
            label = "obs (error):" if t.is_error else "obs:"
            lines.append(_line(f'<span class="nb-muted">{label}</span> {html_text(preview(t.content, limit))}', cls))
        text = output_text(out.output)
        if out.is_last:
            lines.append(_line(f"<b>answer:</b> {html_text(preview(text, limit))}"))
        elif text:
            lines.append(_line(f'<span class="nb-muted">out:</span> {html_text(preview(text, limit))}'))
    failures = [f for f in state.failures if f.step_id == sid]
    if failures and status == StepStatus.FAILED:
        last = failures[-1]
        lines.append(_line(html_text(preview(f"error: {last.error_type}: {last.message}", limit)) +
                           (f" (attempt {last.attempt})" if last.attempt > 1 else ""), "nb-error"))
    elif failures:
        lines.append(_line(html_text(f"failed {len(failures)}× before ({failures[-1].error_type})"), "nb-muted"))
    meta = []
    if out is not None:
        metrics = _metrics(out)
        if metrics:
            meta.append(html_text(metrics))
    if step is not None and step.next_steps:
        meta.append("next: " + _ids_html(step.next_steps))
    if undone_next.get(sid):
        meta.append("undone next: " + _ids_html(undone_next[sid]))
    undone_runs = [o for o in state.undone_outputs if o.task_step.step_id == sid]
    if undone_runs:
        meta.append(html_text(f"{len(undone_runs)} undone run{'s' if len(undone_runs) != 1 else ''}"))
    if meta:
        lines.append(_line(" · ".join(meta), "nb-muted"))
    return f'<li class="nb-l-{_css_name(shown)}">{"".join(lines)}</li>'


def _status_of(state: TaskState, sid: str) -> StepStatus:
    try:
        return state.step_status(sid)
    except Exception:  # noqa: BLE001
        return StepStatus.QUEUED


def _timeline_body(state: TaskState, *, max_label: int = _PREVIEW, max_items: int = _MAX_TIMELINE) -> str:
    order = list(node_names(state))
    if not order:
        return _line("no steps", "nb-muted")
    undone_next: dict[str, list[str]] = {}
    for a, b in state.undone_edges:
        undone_next.setdefault(a, []).append(b)
    numbers = step_numbers(state)  # the numbers the graph shows (undo does not shift them)
    indexed = [(numbers[sid] - 1, sid) for sid in order]
    items: list[str] = []
    if len(indexed) > max_items:
        half = max_items // 2
        head, tail = indexed[:half], indexed[-half:]
        items += [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in head]
        hidden = len(indexed) - len(head) - len(tail)
        items.append(f'<li class="nb-muted">… {hidden} more step{"" if hidden == 1 else "s"} …</li>')
        items += [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in tail]
    else:
        items = [_timeline_item(state, i, sid, undone_next, max_label) for i, sid in indexed]
    return f'<ol class="nb-timeline">{"".join(items)}</ol>'


def _summary_line(state: TaskState) -> str:
    counts = status_summary(state)
    parts = [f"{_status_badge(s)} {n}" for s, n in counts.items() if n]
    return " ".join(parts) if parts else '<span class="nb-muted">no steps</span>'


def timeline_html(state: TaskState, *, max_label: int = _PREVIEW, max_items: int = _MAX_TIMELINE) -> str:
    """The task's steps as a list (registry order) with statuses: the graph without Graphviz."""
    return _safely(
        "the timeline could not be drawn",
        lambda: _card("timeline", _timeline_body(state, max_label=max_label, max_items=max_items)),
    )


def graph_html(state: TaskState, *, svg: str | None, dot_source: str | None) -> str:
    """The step graph as a card: the inline SVG, or (no Graphviz) the timeline + DOT source."""
    try:
        status = state.status.value
    except Exception:  # noqa: BLE001
        status = "unknown"
    head = (
        f'<div class="nb-head">Step graph · task {_id(state.task.task_id)} {_task_badge(status)}</div>'
        + _line(_summary_line(state))
    )
    body = _graph_or_list(svg, lambda: _timeline_body(state), dot_source, shown="steps as a list")
    return _card("graph", head + body)


def _inline_graph(state: TaskState) -> str:
    svg = svg_or_none(task_to_dot(state))
    if svg is not None:
        return f'<div class="nb-graph">{svg}</div>'
    return _timeline_body(state)


def task_html(task: Task) -> str:
    """A task: input, status, step counts, its graph (SVG, or a timeline without Graphviz)."""

    def build() -> str:
        runner = getattr(task, "_runner", None)
        state = None
        problem = ""
        if runner is not None:
            try:
                state = runner.state_of(task)
            except Exception as err:  # noqa: BLE001 - e.g. a deleted task
                problem = f"{type(err).__name__}: {safe_str(err)}"
        if state is not None:
            status = _task_badge(state.status.value)
        else:
            status = _badge("detached", "nb-b-info")
        head = f'<div class="nb-head">Task {_id(task.task_id)} {status}</div>'
        rows = [("input", _pre(task.input))]
        if task.extra_state.get("image_docs"):  # MultimodalReActAgentWorker's images
            from nbagent.workers.multimodal import images_html

            rows.append(("images", _safely("the images could not be drawn", images_html, task.extra_state["image_docs"])))
        if state is None:
            note = "not attached to a runner" if runner is None else f"unknown to its runner ({problem})"
            rows.append(("state", f'<span class="nb-muted">{html_text(note, 500)}</span>'))
            return _card("task", head + _kv(rows))
        rows.append(("steps", _summary_line(state)))
        if state.failures:
            last = state.failures[-1]
            rows.append((
                "failures",
                f'<span class="nb-error">{len(state.failures)} · last: '
                f"{html_text(preview(f'{last.error_type}: {last.message}', _PREVIEW))}</span>",
            ))
        final = state.final_response
        if final is None and state.completed_steps and state.completed_steps[-1].is_last:
            final = state.completed_steps[-1].output
        if final is not None:
            rows.append(("answer", _pre(output_text(final))))
        money = task_cost_label(state)  # None unless prices are set
        if money:
            rows.append(("cost", html_text(money)))
        graph = _safely("the step graph could not be drawn", _inline_graph, state)
        return _card("task", head + _kv(rows) + _details("step graph", graph, open_=True))

    return _safely("this task could not be drawn", build)
