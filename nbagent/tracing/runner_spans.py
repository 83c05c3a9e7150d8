"""``RunnerTracer``: one runner's events as OpenTelemetry spans.

The span tree of a task (GenAI semantic conventions, OpenInference kinds)::

    invoke_agent {agent}            AGENT  one per task, from its creation to its end
      step {n}                      CHAIN  one per step run (a retry is a new one)
        chat {model}                LLM    one per model call of the step
        execute_tool {tool}         TOOL   one per tool call; approvals are its events

While a step's code runs its span is the current span (``StepContext.on_exit`` closes
that in the step's own context), so spans a tool or an instrumented client makes go under it.
Steps of a parallel run are siblings under their task. An undo is an event on the task's
span (the undone step's span has ended). A batch is a span of its own; each of its tasks
links to it. Everything comes from the runner's events (``nbagent.events``): the engine
knows nothing of tracing, and a tracer that fails is logged by the dispatcher, never breaks
a step.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from nbagent.events import (
    BatchEnded,
    BatchStarted,
    BatchTaskStarted,
    Event,
    ModelCalled,
    ModelCallStarted,
    RunnerReset,
    StepCompleted,
    StepFailed,
    StepStarted,
    StepUndone,
    TaskAbandoned,
    TaskCreated,
    TaskDeleted,
    TaskFinalized,
    TaskReplayed,
    ToolCalled,
    ToolCallStarted,
)
from nbagent.tracing import names as n
from nbagent.tracing.content import messages_json, value_json
from nbagent.tracing.spans import chat_attributes, child, current_in_step, end, fail, in_context, iso_ns, ns

__all__ = ["RunnerTracer", "EVENTS"]

#: what a tracer listens to (the engine builds no other event for it)
EVENTS: tuple[type[Event], ...] = (
    TaskCreated, StepStarted, StepCompleted, StepFailed, StepUndone, TaskFinalized, TaskAbandoned,
    TaskDeleted, RunnerReset, ModelCallStarted, ModelCalled, ToolCallStarted, ToolCalled, BatchStarted,
    BatchTaskStarted, BatchEnded, TaskReplayed,
)


class _Step:
    """A running step: its span, number and input, and the calls it made so far.

    The span starts with the step and is the current span while the step's code runs, so
    spans that code makes (a tool's own, an instrumented HTTP client's) go under it. Its
    calls' spans are drawn when it ends, with their own times, from the calls' events.
    """

    __slots__ = ("span", "at", "number", "input", "calls", "open_calls", "open_tools")

    def __init__(self, span: Span, at: float, number: int, input: str | None) -> None:
        self.span = span
        self.at = at
        self.number = number
        self.input = input
        self.calls: list[Event] = []
        #: model calls running now, by number: their span and what stops it being current
        self.open_calls: dict[int, tuple[Span, Any]] = {}
        self.open_tools: dict[str, tuple[Span, Any]] = {}  # tool calls running now, by call id


class _TaskSpans:
    """The open span of one task, and its running steps by step id."""

    __slots__ = ("span", "context", "steps", "count", "batch", "failed_at")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = in_context(span)  # made once: every step span starts under it
        self.steps: dict[str, _Step] = {}
        self.count = 0  # steps run so far (a step's number)
        self.batch: str | None = None  # the batch it runs in: its span ends with the batch at the latest
        self.failed_at: float | None = None  # when its last step failed, if it did


class RunnerTracer:
    """Subscribes to ``runner.events`` and draws its tasks as spans (``close`` stops it)."""

    def __init__(self, runner: Any, tracer: Tracer, capture_content: bool = False, *, own: bool = True) -> None:
        self._runner = weakref.ref(runner)  # the runner holds its tracer, not the other way round
        self.own = own  # given to this runner (tracer_provider=), not by instrument()
        self.tracer = tracer
        self.capture = bool(capture_content)
        self.agent = str(getattr(runner, "name", None) or type(runner).__name__)
        self._tasks: dict[str, _TaskSpans] = {}
        self._batches: dict[str, Span] = {}
        self._replayed: set[str] = set()  # tasks drawn from a replay, whose adoption is still to come
        self._unsubscribe = runner.events.subscribe(self.on_event, EVENTS)

    @property
    def runner(self) -> Any:
        """The runner traced (None once it is gone)."""
        return self._runner()

    def close(self) -> None:
        """Stop listening; spans still open end now (their work is not traced any more)."""
        self._unsubscribe()
        for task_id in list(self._tasks):
            self._end_task(task_id, "untraced")
        for span in self._batches.values():
            end(span)
        self._batches.clear()

    # ----- dispatch ----------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # ----- tasks -------------------------------------------------------------------------
    def _model_of_worker(self) -> tuple[str | None, str | None]:
        llm = getattr(getattr(self.runner, "agent_worker", None), "llm", None)
        if llm is None:
            return None, None
        return getattr(llm, "model", None), getattr(llm, "provider_name", None)

    def _task(self, task_id: str, at: float, input: str | None = None) -> _TaskSpans:
        """The task's spans, its span started now if the task began before tracing did."""
        found = self._tasks.get(task_id)
        if found is not None:
            return found
        attrs: dict[str, Any] = {
            n.OPERATION: "invoke_agent",
            n.AGENT_NAME: self.agent,
            n.CONVERSATION_ID: task_id,
            n.OI_KIND: "AGENT",
            n.OI_SESSION: task_id,
        }
        model, provider = self._model_of_worker()
        if provider:
            attrs[n.PROVIDER] = provider
        if model:
            attrs[n.REQUEST_MODEL] = model
        worker = getattr(self.runner, "agent_worker", None)
        if worker is not None:
            attrs["nbagent.worker"] = type(worker).__name__
        if self.capture and input is not None:
            attrs[n.OI_INPUT] = value_json(input)
        span = child(self.tracer, f"invoke_agent {self.agent}", None, at, attrs)
        found = self._tasks[task_id] = _TaskSpans(span)
        return found

    def _task_created(self, e: TaskCreated) -> None:
        if e.task_id in self._replayed:  # a task drawn from its replay, adopted now: drawn already
            self._replayed.discard(e.task_id)
            return
        self._task(e.task_id, e.at, e.input)

    def _task_replayed(self, e: TaskReplayed) -> None:
        """A task that ran elsewhere (a Ray worker): drawn from its events, with their times,
        as if it had run here; its span ends with its last event if none ended it."""
        for inner in e.events:
            handler = _HANDLERS.get(type(inner))
            if handler is not None and type(inner) is not TaskReplayed:
                handler(self, inner)
        task = self._tasks.get(e.task_id)
        if task is not None:  # it did not finish there
            self._end_unfinished(e.task_id, task, e.events[-1].at if e.events else e.at)
        self._replayed.add(e.task_id)

    def _end_unfinished(self, task_id: str, task: _TaskSpans, at: float) -> None:
        """End the span of a task that will not finish (its batch is over): ``failed`` when
        its last step failed, at that time; else ``stopped``, at ``at``."""
        if task.failed_at is not None:
            self._end_task(task_id, "failed", task.failed_at)
        else:
            self._end_task(task_id, "stopped", at)

    def _end_task(self, task_id: str, status: str, at: float | None = None, output: str | None = None) -> None:
        spans = self._tasks.pop(task_id, None)
        if spans is None:
            return
        for step_id, step in spans.steps.items():  # a step still running when its task ended
            when = at or time.time()
            end(self._draw_step(spans, step_id, step, {"nbagent.step.status": "interrupted"}, when), when)
        spans.span.set_attribute("nbagent.task.status", status)
        spans.span.set_attribute("nbagent.task.steps", spans.count)
        if self.capture and output is not None:
            spans.span.set_attribute(n.OI_OUTPUT, value_json(output))
        end(spans.span, at)

    def _finalized(self, e: TaskFinalized) -> None:
        self._end_task(e.task_id, "finalized", e.at, e.response)

    def _abandoned(self, e: TaskAbandoned) -> None:
        self._end_task(e.task_id, "abandoned", e.at)

    def _deleted(self, e: TaskDeleted) -> None:
        self._end_task(e.task_id, "deleted", e.at)

    def _reset(self, e: RunnerReset) -> None:
        for task_id in list(self._tasks):
            self._end_task(task_id, "reset", e.at)

    # ----- steps -------------------------------------------------------------------------
    def _step_started(self, e: StepStarted) -> None:
        task = self._task(e.task_id, e.at)
        task.count += 1
        attrs: dict[str, Any] = {n.OI_KIND: "CHAIN", "nbagent.step.id": e.step_id, "nbagent.step.number": task.count}
        if self.capture and e.input is not None:
            attrs[n.OI_INPUT] = value_json(e.input)
        span = child(self.tracer, f"step {task.count}", task.context, e.at, attrs)
        task.steps[e.step_id] = _Step(span, e.at, task.count, e.input)
        current_in_step(span, e.step_id)  # heard in the step's own context: its code runs under the span

    def _draw_step(
        self, task: _TaskSpans, step_id: str, step: _Step, attrs: dict[str, Any], at: float, error: tuple[str, str] | None = None
    ) -> Span:
        """The span of a step that ended, its last attributes set and its calls' spans under it."""
        span = step.span
        span.set_attributes(attrs)
        for call_span, release in (*step.open_calls.values(), *step.open_tools.values()):  # calls that never ended
            if release is not None:
                release()
            call_span.set_attribute("nbagent.call.interrupted", True)
            end(call_span, at)
        step.open_calls.clear()
        step.open_tools.clear()
        for call in step.calls:
            if isinstance(call, ModelCalled):
                self._draw_model_call(call, span)
            elif isinstance(call, ToolCalled):
                self._draw_tool_call(call, span)
        if error is not None:
            fail(span, *error, at=at)
        return span

    def _step_completed(self, e: StepCompleted) -> None:
        task = self._tasks.get(e.task_id)
        step = None if task is None else task.steps.pop(e.step_id, None)
        if task is None or step is None:
            return
        attrs: dict[str, Any] = {"nbagent.step.status": "done", "nbagent.step.is_last": e.is_last}
        if e.usage is not None:
            # the step's sum, under nbagent's name: a backend adding up gen_ai.usage counts each call once
            attrs["nbagent.step.input_tokens"] = e.usage.prompt_tokens
            attrs["nbagent.step.output_tokens"] = e.usage.completion_tokens
        span = self._draw_step(task, e.step_id, step, attrs, e.at)
        self._rejected_calls(e.task_id, e.step_id, span, e.at)
        end(span, e.at)
        task.failed_at = None

    def _step_failed(self, e: StepFailed) -> None:
        task = self._tasks.get(e.task_id)
        step = None if task is None else task.steps.pop(e.step_id, None)
        if task is None or step is None:
            return
        span = self._draw_step(task, e.step_id, step, {"nbagent.step.status": "failed"}, e.at, (e.error_type, e.error))
        end(span, e.at)
        task.failed_at = e.at

    def _step_undone(self, e: StepUndone) -> None:
        task = self._task(e.task_id, e.at)
        task.span.add_event("nbagent.step.undone", {"nbagent.step.id": e.step_id}, timestamp=ns(e.at))

    # ----- model and tool calls ----------------------------------------------------------
    def _model_call_started(self, e: ModelCallStarted) -> None:
        """The span of a model call of a running step starts now, current while the call
        runs (an instrumented HTTP client's spans go under it)."""
        task = self._tasks.get(e.task_id)
        step = None if task is None else task.steps.get(e.step_id)
        if step is None:
            return
        span = child(self.tracer, f"chat {e.model}", step.span, e.at, chat_attributes(e.model, e.provider), SpanKind.CLIENT)
        step.open_calls[e.call_no] = (span, current_in_step(span, e.step_id))

    def _tool_call_started(self, e: ToolCallStarted) -> None:
        """The span of a tool call of a running step starts now, current while the tool runs
        (its name is known when it ends: the span is named then)."""
        task = self._tasks.get(e.task_id)
        step = None if task is None else task.steps.get(e.step_id)
        if step is None:
            return
        span = self._tool_span(step.span, "", e.call_id, e.tool_call_id, e.at)
        step.open_tools[e.call_id] = (span, current_in_step(span, e.step_id))

    def _call(self, e: ModelCalled | ToolCalled) -> None:
        """A call of a running step waits for its step's span; any other goes under its task."""
        task = self._task(e.task_id, e.started_at)
        step = task.steps.get(e.step_id)
        if step is not None and type(e) is ModelCalled and e.call_no in step.open_calls:
            span, release = step.open_calls.pop(e.call_no)
            if release is not None:
                release()
            self._finish_model_call(e, span)
        elif step is not None and type(e) is ToolCalled and e.call_id in step.open_tools:
            span, release = step.open_tools.pop(e.call_id)
            if release is not None:
                release()
            self._finish_tool_call(e, span)
        elif step is not None:
            step.calls.append(e)
        elif isinstance(e, ModelCalled):
            self._draw_model_call(e, task.span)
        else:
            self._draw_tool_call(e, task.span)

    def _draw_model_call(self, e: ModelCalled, parent: Span) -> None:
        """A model call's span after the fact (its step's span started after it, or the
        call was not announced): from its event, with its own times."""
        span = child(self.tracer, f"chat {e.model}", parent, e.started_at, chat_attributes(e.model, e.provider),
                     SpanKind.CLIENT)
        self._finish_model_call(e, span)

    def _finish_model_call(self, e: ModelCalled, span: Span) -> None:
        reasons = ("tool_calls",) if getattr(e.reply, "tool_calls", None) else ("stop",)
        attrs: dict[str, Any] = {"gen_ai.request.stream": e.streamed}
        if e.error_type is None:
            attrs[n.FINISH_REASONS] = reasons
        if e.usage is not None:
            attrs[n.INPUT_TOKENS] = attrs[n.OI_PROMPT_TOKENS] = e.usage.prompt_tokens
            attrs[n.OUTPUT_TOKENS] = attrs[n.OI_COMPLETION_TOKENS] = e.usage.completion_tokens
            attrs[n.OI_TOTAL_TOKENS] = e.usage.total_tokens
        if self.capture:
            attrs[n.INPUT_MESSAGES] = messages_json(e.messages)
            if e.reply is not None:
                attrs[n.OUTPUT_MESSAGES] = messages_json([e.reply], reasons[0])
        span.set_attributes(attrs)
        if e.error_type is not None:
            fail(span, e.error_type, at=e.started_at + e.latency_s)
        end(span, e.started_at + e.latency_s)

    def _tool_span(self, parent: Span, name: str, call_id: str, tool_call_id: str | None, start: float) -> Span:
        """A tool call's span (``name`` "": not known yet, given when the call ends)."""
        attrs: dict[str, Any] = {
            n.OPERATION: "execute_tool",
            n.TOOL_CALL_ID: tool_call_id or call_id,
            n.TOOL_TYPE: "function",
            n.OI_KIND: "TOOL",
            "nbagent.call.id": call_id,
        }
        if name:
            attrs[n.TOOL_NAME] = attrs[n.OI_TOOL_NAME] = name
        return child(self.tracer, f"execute_tool {name}" if name else "execute_tool", parent, start, attrs)

    def _approvals(self, task_id: str, step_id: str) -> dict[str, Any] | None:
        """The approval record of a step (``nbagent.approval``), if it has one."""
        runner = self.runner
        task = None if runner is None else runner.tasks.get(task_id)
        step = None if task is None else task.steps.get(step_id)
        state = getattr(step, "step_state", None)
        record = state.get("approval") if isinstance(state, dict) else None
        return record if isinstance(record, dict) else None

    def _approval_events(self, span: Span, record: dict[str, Any] | None, call_id: str) -> None:
        """Every decision on ``call_id`` (overridden ones too), as events: who, what, why."""
        for entry in (record or {}).get("log") or ():
            if not isinstance(entry, dict) or entry.get("call_id") != call_id:
                continue
            attrs = {
                "nbagent.approval.decision": str(entry.get("decision")),
                "nbagent.approval.by": str(entry.get("by") or ""),
                "nbagent.approval.reason": str(entry.get("reason") or ""),
            }
            span.add_event("nbagent.approval", attrs, timestamp=iso_ns(entry.get("at")))

    def _draw_tool_call(self, e: ToolCalled, parent: Span) -> None:
        """A tool call's span after the fact, from its event, with its own times."""
        self._finish_tool_call(e, self._tool_span(parent, "", e.call_id, e.tool_call_id, e.started_at))

    def _finish_tool_call(self, e: ToolCalled, span: Span) -> None:
        out = e.output
        name = str(getattr(out, "tool_name", None) or "unknown")
        span.update_name(f"execute_tool {name}")
        span.set_attributes({n.TOOL_NAME: name, n.OI_TOOL_NAME: name})
        self._approval_events(span, self._approvals(e.task_id, e.step_id), e.call_id)
        if self.capture and out is not None:
            span.set_attribute(n.TOOL_ARGUMENTS, value_json(getattr(out, "raw_input", None)))
            span.set_attribute(n.TOOL_RESULT, value_json(str(getattr(out, "content", ""))))
        if e.error_type is not None:
            fail(span, e.error_type, at=e.started_at + e.latency_s)
        elif getattr(out, "is_error", False):
            fail(span, "ToolError", str(getattr(out, "content", ""))[:200], at=e.started_at + e.latency_s)
        end(span, e.started_at + e.latency_s)

    def _rejected_calls(self, task_id: str, step_id: str, parent: Span, at: float) -> None:
        """A rejected call never runs: its span is the decision alone (no time, no result)."""
        record = self._approvals(task_id, step_id)
        decisions = None if record is None else record.get("decisions")
        if not decisions or not isinstance(decisions, dict):
            return
        calls = {c.get("call_id"): c for c in record.get("calls") or () if isinstance(c, dict)}  # type: ignore[union-attr]
        for call_id, d in decisions.items():
            if not isinstance(d, dict) or d.get("decision") != "rejected":
                continue
            call = calls.get(call_id, {})
            when = (iso_ns(d.get("at")) or ns(at)) / 1e9
            span = self._tool_span(parent, str(call.get("tool_name") or "unknown"), call_id, call.get("tool_id"), when)
            span.set_attribute("nbagent.call.rejected", True)
            self._approval_events(span, record, call_id)
            end(span, when)

    # ----- batches -----------------------------------------------------------------------
    def _batch_started(self, e: BatchStarted) -> None:
        attrs = {n.OI_KIND: "CHAIN", "nbagent.batch.name": e.batch, "nbagent.batch.size": e.size}
        self._batches[e.batch] = child(self.tracer, f"batch {e.batch}", None, e.at, attrs)

    def _batch_task(self, e: BatchTaskStarted) -> None:
        batch = self._batches.get(e.batch)
        task = self._task(e.task_id, e.at)
        task.batch = e.batch
        task.span.set_attribute("nbagent.batch.name", e.batch)
        task.span.set_attribute("nbagent.batch.index", e.index)
        if batch is not None:
            task.span.add_link(batch.get_span_context(), {"nbagent.link": "batch"})

    def _batch_ended(self, e: BatchEnded) -> None:
        for task_id, task in list(self._tasks.items()):  # its tasks that never finished: failed or stopped
            if task.batch == e.batch:
                self._end_unfinished(task_id, task, e.at)
        span = self._batches.pop(e.batch, None)
        if span is not None:
            span.set_attribute("nbagent.batch.failed", e.failed)
            span.set_attribute("nbagent.batch.stopped", e.stopped)
            end(span, e.at)


_HANDLERS: dict[type[Event], Any] = {
    TaskCreated: RunnerTracer._task_created,
    StepStarted: RunnerTracer._step_started,
    StepCompleted: RunnerTracer._step_completed,
    StepFailed: RunnerTracer._step_failed,
    StepUndone: RunnerTracer._step_undone,
    TaskFinalized: RunnerTracer._finalized,
    TaskAbandoned: RunnerTracer._abandoned,
    TaskDeleted: RunnerTracer._deleted,
    RunnerReset: RunnerTracer._reset,
    ModelCallStarted: RunnerTracer._model_call_started,
    ModelCalled: RunnerTracer._call,
    ToolCallStarted: RunnerTracer._tool_call_started,
    ToolCalled: RunnerTracer._call,
    BatchStarted: RunnerTracer._batch_started,
    BatchTaskStarted: RunnerTracer._batch_task,
    BatchEnded: RunnerTracer._batch_ended,
    TaskReplayed: RunnerTracer._task_replayed,
}
