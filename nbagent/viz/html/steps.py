"""Views of one step: the step itself (ids, input, links, state, approvals) and its output
(answer, thought, tool calls, next steps, time, tokens and cost)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbagent.approval import decisions_of
from nbagent.costs import cost_label
from nbagent.viz.dot import output_text
from nbagent.viz.escape import args_preview, html_text, preview, safe_str
from nbagent.viz.html.base import (
    _MAX_STATE_KEYS,
    _PREVIEW,
    _badge,
    _call,
    _card,
    _details,
    _id,
    _ids_html,
    _kv,
    _line,
    _pre,
    _safely,
)
from nbagent.viz.html.chat import _tool_call_block, _typed_block

if TYPE_CHECKING:
    from nbagent.schema import TaskStep, TaskStepOutput

__all__ = ["approval_html", "step_html", "step_output_html"]


def approval_html(step: TaskStep) -> str:
    """The tool calls of a step that waits (or waited) for approval: each call's arguments
    and its decision (who, when, edited arguments, reason); '' for other steps."""
    calls = decisions_of(step)
    if not calls:
        return ""
    rows = []
    for c in calls:
        call = _call(c.get("tool_name"), c.get("arguments") or {})
        d = c.get("decision")
        if not c.get("needs_approval"):
            verdict = '<span class="nb-muted">runs with the others (no approval needed)</span>'
        elif d is None:
            verdict = '<span class="nb-error"><b>awaiting approval</b></span>'
        else:
            what = html_text(d.get("decision"))
            parts = [f"<b>{what}</b> by {html_text(d.get('by'))} at {html_text(d.get('at'))}"]
            if d.get("arguments") is not None:
                parts.append(f"as <code>{html_text(args_preview(d['arguments']))}</code>")
            if d.get("reason"):
                parts.append(f"reason: {html_text(preview(d['reason'], 500))}")
            verdict = " · ".join(parts)
        rows.append((safe_str(c.get("call_id")), f"<code>{html_text(call, 2000)}</code><br>{verdict}"))
    return _details(f"tool calls for approval · {len(calls)}", _kv(rows), open_=True)


def _metrics(out: TaskStepOutput) -> str:
    parts = []
    if isinstance(out.latency_s, (int, float)):
        parts.append(f"{out.latency_s:.2f} s")
    if out.usage is not None:
        try:
            u = out.usage
            parts.append(
                f"{int(u.total_tokens)} tokens ({int(u.prompt_tokens)} prompt + "
                f"{int(u.completion_tokens)} completion)"
            )
        except Exception:  # noqa: BLE001
            pass
    money = cost_label(out)  # None unless prices are set (nbagent.costs)
    if money:
        parts.append(money)
    return " · ".join(parts)


def step_html(step: TaskStep) -> str:
    """A step before (or without) its output: ids, input, links, state keys."""

    def build() -> str:
        ready = "" if step.is_ready else " " + _badge("held", "nb-s-held")
        head = f'<div class="nb-head">Step {_id(step.step_id)}{ready}</div>'
        rows = [
            ("task", _id(step.task_id)),
            ("input", _pre(step.input) if step.input is not None else '<span class="nb-muted">none</span>'),
            ("next", _ids_html(step.next_steps)),
            ("prev", _ids_html(step.prev_steps)),
        ]
        body = _kv(rows) + approval_html(step)
        state = dict(step.step_state)
        if state:
            items = list(state.items())
            shown = items[:_MAX_STATE_KEYS]
            table = _kv((safe_str(k), f"<code>{html_text(preview(v, 200))}</code>") for k, v in shown)
            if len(items) > len(shown):
                table += _line(f"+{len(items) - len(shown)} more", "nb-muted")
            body += _details(f"step_state · {len(items)} key{'s' if len(items) != 1 else ''}", table)
        return _card("step", head + body)

    return _safely("this step could not be drawn", build)


def step_output_html(out: TaskStepOutput) -> str:
    """A step's result: output (or answer), thought, tool calls and observations, next steps."""

    def build() -> str:
        sid = out.task_step.step_id
        flag = " " + _badge("answer", "nb-b-answer") if out.is_last else ""
        head = f'<div class="nb-head">Step output {_id(sid)}{flag}</div>'
        text = output_text(out.output)
        body = [_pre(text) if text else _line("(no output)", "nb-muted")]
        body.append(_typed_block(out.output))
        if out.reasoning:
            body.append(_details("thought", _pre(out.reasoning)))
        tools = list(out.tool_outputs or [])
        if tools:
            errors = sum(1 for t in tools if t.is_error)
            summary = f"{len(tools)} tool call{'s' if len(tools) != 1 else ''}"
            if errors:
                summary += f' · <span class="nb-error">{errors} error{"s" if errors != 1 else ""}</span>'
            body.append(_details(summary, "".join(_tool_call_block(t) for t in tools), open_=True))
        rows = [
            ("input", html_text(preview(out.task_step.input, _PREVIEW)) if out.task_step.input is not None
             else '<span class="nb-muted">none</span>'),
            ("is_last", html_text(out.is_last)),
            ("next steps", _ids_html(s.step_id for s in out.next_steps)),
        ]
        metrics = _metrics(out)
        if metrics:
            rows.append(("usage", html_text(metrics)))
        body.append(_kv(rows))
        return _card("step-output", head + "".join(body))

    return _safely("this step output could not be drawn", build)
