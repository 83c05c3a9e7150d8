"""Views of what runs a task: a model (never its key), a worker (from its ``describe()``) and
a runner (worker, memory, a table of its tasks). A secret found on the model is masked in
everything these cards show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent._counts import counted
from nbagent._redact import redact_url
from nbagent.costs import runner_cost_label
from nbagent.viz.dot import status_summary
from nbagent.viz.escape import html_text, preview, safe_str
from nbagent.viz.html.base import _MAX_TASK_ROWS, _card, _details, _id, _kv, _line, _pre, _safely, _task_badge

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["llm_html", "worker_html", "runner_html"]


def _secrets_of(obj: Any) -> list[str]:
    found = []
    for name in ("api_key", "_api_key", "key", "token", "_token", "secret"):
        try:
            value = getattr(obj, name, None)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(value, str) and len(value) >= 4:
            found.append(value)
        inner = getattr(value, "get_secret_value", None)  # pydantic SecretStr
        if callable(inner):
            try:
                secret = inner()
            except Exception:  # noqa: BLE001
                continue
            if isinstance(secret, str) and len(secret) >= 4:
                found.append(secret)
    return found


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "…")
    return text


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def llm_html(llm: Any) -> str:
    """A model: class, model name, base URL, masked key; never the key itself."""

    def build() -> str:
        secrets = _secrets_of(llm)
        rows: list[tuple[str, str]] = []

        def add(label: str, value: Any) -> None:
            if value is None:
                return
            rows.append((label, f"<code>{html_text(_redact(preview(value, 200), secrets))}</code>"))

        add("model", _attr(llm, "model"))
        base_url = _attr(llm, "base_url")
        if base_url:
            add("base_url", redact_url(safe_str(base_url)))
        masked = _attr(llm, "masked_key")
        if masked is not None:
            add("api key", masked)
        for name in ("is_function_calling_model", "is_multimodal", "temperature", "timeout", "max_retries"):
            add(name, _attr(llm, name))
        replies = _attr(llm, "replies")
        if isinstance(replies, list):
            add("script", f"{_attr(llm, 'position') or 0} of {counted(len(replies), 'reply')} used")
        requests = _attr(llm, "requests")
        if isinstance(requests, list):
            add("requests seen", len(requests))
        head = f'<div class="nb-head">Model · <code>{html_text(type(llm).__name__)}</code></div>'
        return _card("llm", head + _kv(rows))

    return _safely("this model could not be drawn", build)


def worker_html(worker: Any) -> str:
    """A worker from its ``describe()``: kind, model, tools, limits."""

    def build() -> str:
        try:
            info = dict(worker.describe())
        except Exception as err:  # noqa: BLE001
            info = {"kind": type(worker).__name__, "describe() failed": f"{type(err).__name__}: {safe_str(err)}"}
        llm = _attr(worker, "llm")
        secrets = _secrets_of(llm) if llm is not None else []
        kind = info.pop("kind", type(worker).__name__)
        rows: list[tuple[str, str]] = []
        for key, value in info.items():
            if key == "tools" and isinstance(value, (list, tuple)):
                cell = " ".join(f"<code>{html_text(_redact(preview(t, 80), secrets))}</code>" for t in value)
                rows.append(("tools", cell or '<span class="nb-muted">none</span>'))
            else:
                rows.append((safe_str(key), f"<code>{html_text(_redact(preview(value, 200), secrets))}</code>"))
        head = f'<div class="nb-head">Worker · <code>{html_text(kind)}</code></div>'
        prompt = ""
        try:
            text = worker.prompt_preview() if callable(getattr(worker, "prompt_preview", None)) else None
        except Exception as err:  # noqa: BLE001
            text = f"(the prompt could not be built: {type(err).__name__}: {safe_str(err)})"
        if isinstance(text, str) and text:
            prompt = _details(
                "system prompt the model sees", _pre(_redact(text, secrets), None), open_=True
            )
        return _card("worker", head + (_kv(rows) if rows else "") + prompt)

    return _safely("this worker could not be drawn", build)


def runner_html(runner: AgentRunner) -> str:
    """A runner: its worker, memory size and a table of its tasks."""

    def build() -> str:
        try:
            kind = runner.agent_worker.describe().get("kind", type(runner.agent_worker).__name__)
        except Exception:  # noqa: BLE001
            kind = type(runner.agent_worker).__name__
        memory = runner.memory
        try:
            count: Any = memory.token_count
            tokens = int(count() if callable(count) else count)
            mem = f"{counted(len(memory), 'message')} · {counted(tokens, 'token')}"
        except Exception:  # noqa: BLE001
            mem = counted(len(memory), "message")
        states = list(runner.tasks.values())
        head = (
            f'<div class="nb-head">{html_text(type(runner).__name__)} · '
            f'{len(states)} task{"s" if len(states) != 1 else ""}</div>'
        )
        info_rows = [("worker", f"<code>{html_text(kind)}</code>"), ("memory", html_text(mem))]
        money = runner_cost_label(runner)  # None unless prices are set
        if money:
            info_rows.append(("cost", html_text(money)))
        info = _kv(info_rows)
        if not states:
            return _card("runner", head + info + _line("no tasks yet", "nb-muted"))
        shown = states[-_MAX_TASK_ROWS:]
        rows = []
        for st in shown:
            counts = status_summary(st)
            queued = len(st.step_queue)  # a failed step waits there to be retried
            fails = len(st.failures)
            fail_cell = f'<span class="nb-error">{fails}</span>' if fails else "0"
            rows.append(
                f"<tr><td>{_id(st.task_id)}</td><td>{html_text(preview(st.task.input, 60))}</td>"
                f"<td>{_task_badge(st.status.value)}</td><td>{counts['done']}</td>"
                f"<td>{queued}</td><td>{fail_cell}</td></tr>"
            )
        table = (
            '<table class="nb-tasks"><tr><th>task</th><th>input</th><th>status</th>'
            f"<th>done</th><th>queued</th><th>failures</th></tr>{''.join(rows)}</table>"
        )
        if len(states) > len(shown):
            table = _line(f"showing the last {len(shown)} of {len(states)} tasks", "nb-muted") + table
        return _card("runner", head + info + table)

    return _safely("this runner could not be drawn", build)
