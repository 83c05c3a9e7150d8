"""The control panel's state as small plain data for its browser front end (``static/panel.js``).

Pure functions of a task's state: every value is a str, int, bool, list or dict that JSON
carries as it is, and every text is cleaned and bounded here (``escape.clean``/``preview``).
The front end puts these texts into the page with ``textContent`` only, never as HTML, so
nothing here is escaped for HTML. The panel widget sends them as traitlets; see
``nbagent.viz.panel.widget`` for the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent.engine.state import StepStatus, TaskStatus
from nbagent.text import args_preview, clean, preview, short_id, truncate

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage
    from nbagent.runner.base import AgentRunner
    from nbagent.engine.state import TaskState

__all__ = [
    "BUTTONS",
    "button_flags",
    "inspector_data",
    "node_data",
    "status_data",
    "status_text",
    "task_options",
    "transcript_data",
    "approval_data",
]

#: The panel's buttons, in the order they are drawn: name -> label.
BUTTONS: dict[str, str] = {
    "new": "New task",
    "step": "Run step",
    "run": "Run to end",
    "stop": "Stop",
    "undo": "Undo",
    "retry": "Retry",
    "skip": "Skip",
    "abandon": "Abandon",
    "release": "Release",
}

ENDED = (TaskStatus.FINALIZED, TaskStatus.ABANDONED)
TEXT_LIMIT = 4000  # one text field (an output, a message) at most this many characters
TRACE_LIMIT = 8000
TRANSCRIPT_RECENT = 8  # messages sent whole; the earlier ones are only counted

# the task's status -> the step status whose colours its badge wears
_BADGE = {
    TaskStatus.FAILED: StepStatus.FAILED, TaskStatus.RUNNING: StepStatus.RUNNING,
    TaskStatus.COMPLETED: StepStatus.DONE, TaskStatus.FINALIZED: StepStatus.DONE,
    TaskStatus.ABANDONED: StepStatus.UNDONE, TaskStatus.ACTIVE: StepStatus.RUNNING,
}


def _text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """Multi-line text, cleaned and bounded (line ends kept, unlike ``preview``)."""
    return truncate(clean(value), limit)


def can_step(state: TaskState | None, busy: bool) -> bool:
    """Whether Run step / Run to end may start: a task, idle, not done, a step ready."""
    return (
        state is not None and not busy
        and state.status not in (*ENDED, TaskStatus.COMPLETED, TaskStatus.RUNNING)
        and any(state.is_step_ready(s) for s in state.step_queue)
    )


def button_flags(state: TaskState | None, busy: bool) -> dict[str, bool]:
    """Which buttons are enabled: what the controller's twins would accept now."""
    status = None if state is None else state.status
    stepping = can_step(state, busy)
    idle_open = state is not None and not busy and status not in (*ENDED, TaskStatus.RUNNING)
    return {
        "new": not busy,
        "step": stepping,
        "run": stepping,
        "stop": busy,
        "undo": idle_open and bool(state.history),  # type: ignore[union-attr]
        "retry": stepping and status == TaskStatus.FAILED,
        "skip": not busy and status == TaskStatus.FAILED,
        "abandon": idle_open,
        "release": state is not None and status not in ENDED and bool(state.held_steps()),
        "task_picker": not busy,
    }


def task_options(runner: AgentRunner) -> list[dict[str, str]]:
    """The task picker's entries: ``{"id", "label"}`` per task, oldest first."""
    return [
        {"id": sid, "label": f"{short_id(sid)} · {st.status.value} · {preview(st.task.input, 40)}"}
        for sid, st in list(runner.tasks.items())
    ]


def node_data(state: TaskState | None, dot: str) -> list[dict[str, Any]]:
    """One entry per step (``s0``.. in registry order: the step picker lists them; a step
    folded into a run drawn as one node, or cut by an undo, is not drawn on its own), per run an
    undo took back (``u0``..) and per run of steps drawn as one node in ``dot`` (``c0``.., which
    stands for its last step): ``{"name", "step", "number", "status", "head", "text"}`` (and
    ``"label"`` for a folded run). ``dot`` is the DOT text of ``state``'s step graph. The front
    end finds a drawn node by ``name`` (the SVG ``<title>``), selects ``step`` when it is
    clicked and reads ``number``/``status``/``text`` (or ``label``) out to screen readers."""
    if state is None:
        return []
    from nbagent.viz.dot import node_names, shown_status, step_heads, step_numbers

    numbers = step_numbers(state)
    heads = step_heads(state)
    nodes: list[dict[str, Any]] = []
    for sid, name in node_names(state).items():
        step = state.steps.get(sid)
        text = "" if step is None or step.input is None else f"in: {preview(step.input, 120)}"
        out = state.outputs.get(sid)
        if out is not None:
            from nbagent.viz.dot import output_text

            said = preview(output_text(out.output), 120)
            text = f"{text}; out: {said}" if text and said else text or (f"out: {said}" if said else "")
        nodes.append({"name": name, "step": sid, "number": numbers.get(sid, 0),
                      "status": shown_status(state, sid), "head": heads.get(sid, ""), "text": text})
    if "\n  c" in dot:  # runs of steps drawn as one node
        undone = set(state.undone_ids)
        by_number = {n: sid for sid, n in numbers.items() if sid not in undone}
        for name, first, last in _FOLDED_NODE.findall(dot):
            sid = by_number.get(int(last))
            if sid is None:
                continue
            nodes.append({"name": name, "step": sid, "number": int(last), "status": "done",
                          "head": heads.get(sid, ""), "text": f"steps {first} to {last} drawn as one",
                          "label": f"Steps {first} to {last}, done, drawn as one node: opens step {last}"})
    for k, out in enumerate(list(state.undone_outputs)):
        sid = out.task_step.step_id
        nodes.append({"name": f"u{k}", "step": sid, "number": numbers.get(sid, 0), "status": "undone run",
                      "head": f"#{numbers.get(sid, '?')} undone run",
                      "text": "" if out.input is None else f"in: {preview(out.input, 120)}"})
    return nodes


# the node line of a run of steps drawn as one ("#5–#17") in the step graph's DOT text
_FOLDED_NODE = re.compile(r"^  (c\d+) \[label=<[^\n]*?#(\d+)–#(\d+)", re.M)


def status_data(
    state: TaskState | None, *, busy: bool, notice: str = "", notice_is_error: bool = False
) -> dict[str, Any]:
    """The status line: ``state`` (the word on the badge), ``colour`` (the step status whose
    colours it wears, by name: ``done``, ``awaiting``...), ``task`` (short id), ``parts`` (counts, tokens, time), ``error`` (the
    failed step and what to do), ``answer``, ``notice`` (the last click that could not be
    done) and ``notice_error``."""
    data: dict[str, Any] = {"state": "", "colour": "", "task": "", "parts": [], "error": "", "answer": "",
                            "notice": _text(notice, 400), "notice_error": bool(notice_is_error)}
    if state is None:
        data["state"] = "no task"
        data["parts"] = ["no task selected: type one above and press New task"]
        return data
    from nbagent.costs import task_cost_label
    from nbagent.viz.dot import output_text, status_summary, step_numbers

    status = state.status
    data["state"] = "running" if busy and status != TaskStatus.RUNNING and status not in ENDED else status.value
    data["colour"] = _BADGE.get(status, StepStatus.QUEUED).name.lower()
    data["task"] = short_id(state.task_id)
    counts = status_summary(state)
    tokens, latency = 0, 0.0
    for out in list(state.completed_steps):
        if out.usage is not None:
            tokens += out.usage.total_tokens
        if isinstance(out.latency_s, (int, float)):
            latency += out.latency_s
    parts = [f"{counts.get('done', 0)} done", f"{len(state.step_queue) - counts.get('held', 0)} queued"]
    for name in ("held", "undone"):
        if counts.get(name):
            parts.append(f"{counts[name]} {name}")
    parts.append(f"{tokens} tokens")
    money = task_cost_label(state)
    if money is not None:
        parts.append(money)
    parts.append(seconds(latency))
    data["parts"] = parts
    failed = state.failed_step_id()
    if failed is not None and state.failures:
        f = state.failures[-1]
        if f.error_type == "ScriptExhaustedError":
            hint = ("the scripted model has no replies left, so Retry would fail the same way: "
                    "Undo, Skip, or give the model more replies")
        else:
            hint = "Retry runs it again; Skip goes on without it"
        number = step_numbers(state).get(failed, "?")
        data["error"] = f"step #{number} failed: {preview(f'{f.error_type}: {f.message}', 300)} ({hint})"
    if status == TaskStatus.FINALIZED and state.final_response is not None:
        data["answer"] = preview(output_text(state.final_response), 300)
    return data


def status_text(status: dict[str, Any]) -> str:
    """The status line (``status_data``) as one line of plain text."""
    parts = [status.get("state", "")]
    if status.get("task"):
        parts.append(f"task {status['task']}")
    parts += list(status.get("parts", ()))
    if status.get("answer"):
        parts.append(f"answer: {status['answer']}")
    parts += [status.get("error", ""), status.get("notice", "")]
    return " · ".join(p for p in parts if p)


def seconds(value: float) -> str:
    """A duration people can read: milliseconds below one second."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def inspector_data(state: TaskState | None, step_id: str | None, *, busy: bool,
                   runner: AgentRunner | None = None) -> dict[str, Any]:
    """One step for the inspector (``{}`` when there is none): ``step``, ``head``, ``status``,
    ``input``, ``output``, ``thought``, ``tools`` (name, args, result, error), ``error`` and
    ``traceback`` of its last failure, ``calls`` (its tool calls waiting for approval), and
    what the person may do from here: ``can_goto`` (undo back to just after it), ``can_fork``
    (go back to just before it and queue a new step there), ``can_edit`` (change its input:
    a queued step)."""
    if state is None or step_id is None or step_id not in state.steps:
        return {}
    from nbagent.viz.dot import output_text, shown_status, step_heads

    step = state.steps[step_id]
    out = state.outputs.get(step_id)
    data: dict[str, Any] = {
        "step": step_id, "short": short_id(step_id), "head": step_heads(state).get(step_id, "#?"),
        "status": shown_status(state, step_id),
        "input": "" if step.input is None else _text(step.input),
        "output": "", "thought": "", "tools": [], "error": "", "traceback": "",
    }
    if out is not None:
        data["output"] = _text(output_text(out.output))
        data["thought"] = _text(out.reasoning or "")
        data["tools"] = [
            {"name": preview(t.tool_name, 100), "args": preview(args_preview(t.raw_input), 400),
             "result": _text(t.content, 1000), "error": bool(t.is_error)}
            for t in list(out.tool_outputs)
        ]
    failures = [f for f in list(state.failures) if f.step_id == step_id]
    if failures:
        f = failures[-1]
        data["error"] = f"attempt {f.attempt} failed: {preview(f'{f.error_type}: {f.message}', 500)}"
        data["traceback"] = _text(f.traceback, TRACE_LIMIT)
    open_task = not busy and state.status not in (*ENDED, TaskStatus.RUNNING)
    queued = any(s.step_id == step_id for s in state.step_queue)
    failed = state.failed_step_id() == step_id
    data["can_goto"] = open_task and step_id in state.outputs
    data["can_fork"] = open_task and (step_id in state.outputs or (queued and not failed))
    data["can_edit"] = open_task and queued
    calls = [] if runner is None else approval_data(runner, state)
    data["calls"] = [c["call"] for c in calls if c["step"] == step_id]
    return data


def approval_data(runner: AgentRunner, state: TaskState | None) -> list[dict[str, str]]:
    """The task's tool calls waiting for a decision: ``{"call", "step", "tool", "args"
    (the arguments as JSON, for the Edit box), "label"}``."""
    if state is None or state.finalized or state.abandoned:
        return []
    import json

    return [
        {"call": p.call_id, "step": p.step_id, "tool": preview(p.tool_name, 100),
         "args": _text(json.dumps(p.arguments, ensure_ascii=False), 2000),
         "label": preview(f"{p.tool_name}({args_preview(p.arguments)})", 200)}
        for p in runner.pending_approvals(state.task_id)
    ]


def transcript_data(messages: Sequence[ChatMessage], *, recent: int = TRANSCRIPT_RECENT) -> dict[str, Any]:
    """The last ``recent`` messages (``{"role", "name", "text", "calls"}``) and how many
    came before them (``earlier``): the panel folds those."""
    msgs = list(messages)
    earlier = max(0, len(msgs) - recent)
    shown = []
    for m in msgs[earlier:]:
        role = m.role.value if hasattr(m.role, "value") else clean(m.role)
        shown.append({
            "role": preview(role, 20), "name": preview(m.name or "", 60), "text": _text(m.text),
            "calls": [preview(f"{c.tool_name}({args_preview(c.tool_kwargs)})", 400) for c in m.tool_calls],
        })
    return {"earlier": earlier, "total": len(msgs), "messages": shown}
