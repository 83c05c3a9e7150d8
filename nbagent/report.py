"""One self-contained HTML file of a run: open it offline in any browser, hand it out, archive it.

``write_report(runner_or_run_json, task_id=None, path="run.html")`` (or the command
``nbagent report run.json -o run.html``) writes, for each task (or just ``task_id``): a summary
(status, tokens, cost when prices are set, time, failures, answer), the step DAG as inline SVG
(via graphviz-pure, or the ``dot`` that ``NBAGENT_DOT`` names; else the static HTML timeline), every step (input,
thought, tool calls and observations, output, tokens, time, errors with tracebacks, undone
runs) and the task's transcript.

Everything is inline: CSS in one ``<style>``, no script, no external URL; a Content Security
Policy forbids loading anything. All text from users, models and tools is escaped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent.text import html_text, preview, safe_str, short_id

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.engine.state import StepFailure, TaskState
    from nbagent.schema import TaskStepOutput

__all__ = ["write_report", "report_html", "load_for_report"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_PAGE_CSS = """
body{margin:0;padding:16px 24px;background:#ffffff;color:#1f2328;
font-family:system-ui,-apple-system,"Segoe UI",sans-serif}
@media (prefers-color-scheme: dark){body{background:#0d1117;color:#e6edf3}}
h1{font-size:1.4em;margin:0 0 4px} h2{font-size:1.2em;margin:18px 0 6px} h3{font-size:1.05em;margin:12px 0 4px}
section.task{margin:0 0 28px}
.nbagent.nb-page{border:none;padding:0;background:transparent}
.nbagent .nb-step{border:1px solid var(--nb-border);border-radius:6px;padding:4px 10px;margin:6px 0}
.nbagent .nb-step.nb-undone{opacity:0.75;border-style:dashed}
nav ol{margin:4px 0 12px;padding-left:22px}
footer{margin-top:24px;font-size:0.85em;opacity:0.7}
"""


def load_for_report(path: str | os.PathLike[str], run: str | None = None) -> AgentRunner:
    """A saved run (in a run store: run ``run``, else the newest), loaded without its worker
    (enough to draw it); ids are left alone."""
    from nbagent.runner.base import AgentRunner

    kwargs = {} if run is None else {"run": run}
    return AgentRunner.load(path, restore_ids=False, **kwargs)  # type: ignore[no-any-return]


def _runner_of(source: Any) -> tuple[AgentRunner, str]:
    from nbagent.runner.base import AgentRunner

    if isinstance(source, AgentRunner):
        return source, "a live runner"
    if isinstance(source, (str, os.PathLike)):
        return load_for_report(source), os.path.basename(os.fspath(source))
    raise TypeError(
        f"write_report takes an AgentRunner or the path of a saved run (.json), got {type(source).__name__}"
    )


def report_html(
    source: AgentRunner | str | os.PathLike[str], task_id: str | None = None, *, title: str | None = None
) -> str:
    """The report as one HTML document (see the module docstring)."""
    from nbagent._version import __version__
    from nbagent.viz.html import CSS

    runner, origin = _runner_of(source)
    states = list(runner.tasks.values()) if task_id is None else [runner.state_of(task_id)]
    worker = _worker_line(runner)
    heading = title or (f"nbagent run · task {short_id(states[0].task_id)}" if len(states) == 1 else "nbagent run")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html_text(heading, 200)}</title>",
        f"<style>{CSS}{_PAGE_CSS}</style>",
        '</head><body><div class="nbagent nb-page">',
        f"<h1>{html_text(heading, 200)}</h1>",
        f'<div class="nb-line nb-muted">{html_text(worker)} · {len(states)} task{"s" if len(states) != 1 else ""} '
        f"· from {html_text(origin, 200)}</div>",
    ]
    total = _runner_cost_text(runner, states)
    if total:
        parts.append(f'<div class="nb-line">{html_text(total)}</div>')
    if len(states) > 1:
        items = "".join(
            f'<li><a href="#task-{i}">{html_text(short_id(s.task_id))}</a> · '
            f"{html_text(preview(s.task.input, 100))}</li>"
            for i, s in enumerate(states)
        )
        parts.append(f"<nav><ol>{items}</ol></nav>")
    skipped = runner.skipped_tasks
    if skipped:
        listing = "; ".join(f"{tid} ({what})" for tid, what in skipped.items())
        parts.append(
            f'<div class="nb-line nb-error">{len(skipped)} damaged task{"s" if len(skipped) != 1 else ""} '
            f"of the saved run could not be loaded and {'are' if len(skipped) != 1 else 'is'} not in this "
            f"report: {html_text(listing, 5000)}</div>"
        )
    if not states:
        parts.append('<div class="nb-line nb-muted">This run has no tasks.</div>')
    for i, state in enumerate(states):
        parts.append(_task_section_or_note(runner, state, i))
    parts.append(
        f"<footer>Written by nbagent {html_text(__version__)}. This file is self-contained: "
        "no script, no external resource.</footer>"
    )
    parts.append("</div></body></html>\n")
    return "\n".join(parts)


def write_report(
    source: AgentRunner | str | os.PathLike[str],
    task_id: str | None = None,
    path: str | os.PathLike[str] = "run.html",
    *,
    title: str | None = None,
) -> Path:
    """Write the report of a runner (or of a saved run file) to ``path``; returns the path."""
    from nbagent.persist import atomic_write_text

    return atomic_write_text(path, report_html(source, task_id, title=title))


# ----- pieces ----------------------------------------------------------------------------------


def _worker_line(runner: AgentRunner) -> str:
    try:
        info = dict(runner.agent_worker.describe())
    except Exception:  # noqa: BLE001
        info = {"kind": type(runner.agent_worker).__name__}
    text = f"worker {safe_str(info.get('kind', '?'))}"
    if info.get("model"):
        text += f" · model {safe_str(info['model'])}"
    return text


def _runner_cost_text(runner: AgentRunner, states: list[TaskState]) -> str:
    from nbagent.costs import Cost, task_cost

    # the same two words as the API (TaskCost.total / .spent): "total" counts the steps that
    # stand, "spent" also the undone runs (they were paid for)
    total = Cost()
    spent = Cost()
    for s in states:
        cost = task_cost(runner, s)
        total = total + cost.total
        spent = spent + cost.spent
    if not spent.total_tokens:
        return ""
    if spent.total_tokens == total.total_tokens and spent.amount == total.amount:
        return f"total: {total}"
    return f"total: {total} · spent, undone runs included: {spent}"


def _badge(text: str, cls: str) -> str:
    return f'<span class="nb-badge {cls}">{html_text(text)}</span>'


def _kv(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{html_text(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="nb-kv">{body}</table>'


_NONE = '<div class="nb-line nb-muted">(none)</div>'


def _label(text: str) -> str:
    return f'<div class="nb-line"><span class="nb-muted">{html_text(text)}</span></div>'


def _pre(text: Any) -> str:
    return f"<pre>{html_text(text, 200_000)}</pre>"


def _graph(state: TaskState) -> str:
    from nbagent.viz.dot import task_to_dot
    from nbagent.viz.graph import render_svg
    from nbagent.viz.html import timeline_html

    source = task_to_dot(state)
    try:
        svg = render_svg(source)
    except Exception:  # noqa: BLE001 - a failing dot falls back to the timeline
        svg = None
    if svg is not None:
        return f'<div class="nb-graph">{svg}</div>'
    note = (
        '<div class="nb-line nb-muted">Graphviz was not available when this report was written: '
        "the steps as a list.</div>"
    )
    return note + timeline_html(state)


def _task_section_or_note(runner: AgentRunner, state: TaskState, index: int) -> str:
    """A task's section; for a task whose saved values are not what they should be (a
    damaged file can hold valid JSON of the wrong shape), a note saying so: the rest stands."""
    try:
        return _task_section(runner, state, index)
    except Exception as err:  # noqa: BLE001 - one unreadable task must not cost the others
        return (
            f'<section class="task" id="task-{index}"><h2>Task <code class="nb-id">'
            f"{html_text(short_id(state.task_id, 36))}</code></h2>"
            f'<div class="nb-line nb-error">This task could not be drawn: {html_text(type(err).__name__)}: '
            f"{html_text(preview(str(err), 500))}</div></section>"
        )


def _task_section(runner: AgentRunner, state: TaskState, index: int) -> str:
    from nbagent.costs import task_cost_label
    from nbagent.text import output_text
    from nbagent.viz.dot import node_names, status_summary, step_numbers
    from nbagent.viz.html import transcript_html

    task = state.task
    status = state.status.value
    counts = ", ".join(f"{n} {s}" for s, n in status_summary(state).items() if n) or "no steps"
    outputs = [*state.completed_steps, *state.undone_outputs]
    prompt = sum(o.usage.prompt_tokens for o in state.completed_steps if o.usage is not None)
    completion = sum(o.usage.completion_tokens for o in state.completed_steps if o.usage is not None)
    seconds = sum(o.latency_s for o in outputs if isinstance(o.latency_s, (int, float)))
    rows = [
        ("input", _pre(task.input)),
        ("status", _badge(status, f"nb-t-{status}")),
        ("steps", html_text(counts)),
        ("tokens", html_text(f"{prompt + completion} ({prompt} prompt + {completion} completion)")),
        ("time", html_text(f"{seconds:.2f} s in steps")),
    ]
    cost = task_cost_label(state)
    if cost:
        rows.append(("cost", html_text(cost)))
    if state.failures:
        last = state.failures[-1]
        rows.append(("failures", f'<span class="nb-error">{len(state.failures)} · last: '
                                 f"{html_text(preview(f'{last.error_type}: {last.message}', 300))}</span>"))
    final = state.final_response
    if final is None and state.completed_steps and state.completed_steps[-1].is_last:
        final = state.completed_steps[-1].output
    if final is not None:
        rows.append(("answer", _pre(output_text(final))))
    failures: dict[str, list[StepFailure]] = {}
    for f in state.failures:
        failures.setdefault(f.step_id, []).append(f)
    undone: dict[str, list[TaskStepOutput]] = {}
    for o in state.undone_outputs:
        undone.setdefault(o.task_step.step_id, []).append(o)
    numbers = step_numbers(state)  # the numbers the graph shows
    steps = [
        _step_block(state, n, sid, failures.get(sid, []), undone.get(sid, []))
        for sid, n in ((sid, numbers[sid] - 1) for sid in node_names(state))
    ]
    messages = task.scratch_memory.get_all()
    return (
        f'<section class="task" id="task-{index}">'
        f'<h2>Task <code class="nb-id">{html_text(short_id(task.task_id, 36))}</code> '
        f"{_badge(status, f'nb-t-{status}')}</h2>"
        + _kv(rows)
        + "<h3>Step graph</h3>"
        + _graph(state)
        + f"<h3>Steps ({len(steps)})</h3>"
        + "".join(steps)
        + "<h3>Transcript</h3>"
        + '<div class="nb-line nb-muted">The messages this task added to the conversation.</div>'
        + transcript_html(messages)
        + "</section>"
    )


def _output_body(out: TaskStepOutput) -> list[str]:
    from nbagent.costs import cost_label
    from nbagent.text import args_preview, output_text

    body: list[str] = []
    if out.reasoning:
        body.append(_label("thought") + _pre(out.reasoning))
    for t in out.tool_outputs or []:
        call = f"{safe_str(t.tool_name)}({args_preview(t.raw_input)})"
        err = " " + _badge("error", "nb-b-error") if t.is_error else ""
        obs = _pre(t.content)
        if t.is_error:
            obs = f'<div class="nb-error">{obs}</div>'
        code = f"<code>{html_text(call, 5000)}</code>"
        body.append(f'<div class="nb-line"><span class="nb-muted">call</span> {code}{err}</div>{obs}')
    text = output_text(out.output)
    label = "answer" if out.is_last else "output"
    body.append(_label(label) + (_pre(text) if text else _NONE))
    metrics = []
    if isinstance(out.latency_s, (int, float)):
        metrics.append(f"{out.latency_s:.2f} s")
    if out.usage is not None:
        u = out.usage
        metrics.append(f"{counted(u.total_tokens, 'token')} ({u.prompt_tokens} prompt + {u.completion_tokens} completion)")
    money = cost_label(out)
    if money:
        metrics.append(money)
    if metrics:
        body.append(f'<div class="nb-line nb-muted">{html_text(" · ".join(metrics))}</div>')
    return body


def _step_block(
    state: TaskState, n: int, sid: str, failures: list[StepFailure], undone: list[TaskStepOutput]
) -> str:
    from nbagent.engine.state import StepStatus

    try:
        status = state.step_status(sid)
    except Exception:  # noqa: BLE001
        status = StepStatus.QUEUED
    step = state.steps.get(sid)
    out = state.outputs.get(sid) if status == StepStatus.DONE else None
    from nbagent.viz.dot import SKIPPED, is_skipped

    shown = SKIPPED if is_skipped(out) else status.value  # a skipped step is done, but never ran
    head = [_badge(shown, f"nb-s-{shown.replace(' ', '-')}"), f'<span class="nb-muted">#{n + 1}</span>',
            f'<code class="nb-id">{html_text(short_id(sid, 36))}</code>']
    if out is not None and out.is_last:
        head.append(_badge("answer", "nb-b-answer"))
    body = [f'<div class="nb-line">{" ".join(head)}</div>']
    if step is not None:
        body.append(_label("input") + (_pre(step.input) if step.input is not None else _NONE))
        from nbagent.viz.html import approval_html

        body.append(approval_html(step))  # who approved or rejected which call, and why
    if out is not None:
        body.extend(_output_body(out))
    for f in failures:
        body.append(
            f'<div class="nb-line nb-error">attempt {f.attempt} failed: {html_text(f.error_type)}: '
            f"{html_text(preview(f.message, 500))}</div>"
            f"<details><summary>traceback</summary>{_pre(f.traceback)}</details>"
        )
    for k, o in enumerate(undone, start=1):
        body.append(f"<details><summary>undone run {k}</summary>{''.join(_output_body(o))}</details>")
    cls = " nb-undone" if status == StepStatus.UNDONE else ""
    return f'<div class="nb-step{cls}" id="step-{html_text(sid, 64)}">{"".join(body)}</div>'
