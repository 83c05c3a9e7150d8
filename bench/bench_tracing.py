"""What tracing costs a step: a traced no-op ``run_step`` vs an untraced one (budget: traced
<= 1.5x untraced, spans going to the SDK's in-memory exporter), the same for a sync
``CustomSimpleAgentWorker`` no-op step (the engine's sync early exit) and for a step that
calls a scripted model and a tool (three spans a step instead of one).

Every figure is the best of several windows of steps, the traced and untraced runners'
windows interleaved (a busy machine slows them alike); the mean of the windows is in
brackets. The no-op provider line is nbagent's own part (events, bookkeeping, the API calls);
the bare SDK span line is what the OpenTelemetry SDK itself takes for one span, the floor. Off, tracing costs nothing: no listener, no event built, no opentelemetry import
(tests/test_architecture.py checks the import)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _noop import NoopWorker  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.trace import NoOpTracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import nbagent.tracing  # noqa: E402
from nbagent import (  # noqa: E402
    AgentChatResponse,
    AgentRunner,
    CustomSimpleAgentWorker,
    FunctionCallingAgent,
    FunctionTool,
    ScriptedLLM,
    tool_call,
)

BUDGET = 1.5
WINDOW = int(os.environ.get("BENCH_TRACING_WINDOW", "200"))
WINDOWS = int(os.environ.get("BENCH_TRACING_WINDOWS", "15"))


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def noop_runner(steps: int) -> tuple[Any, Any]:
    runner = AgentRunner(NoopWorker(steps))
    return runner, runner.create_task("go")


class SyncNoop(CustomSimpleAgentWorker):
    """A sync worker that does nothing: the engine runs its steps by its sync early exit."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        return AgentChatResponse(response="ok"), False

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def sync_noop_runner(steps: int) -> tuple[Any, Any]:
    runner = AgentRunner(SyncNoop(tools=[], llm=ScriptedLLM(["unused"])))
    return runner, runner.create_task("go")


def tool_runner(steps: int) -> tuple[Any, Any]:
    llm = ScriptedLLM([tool_call("add", a=1, b=2)], repeat_last=True)
    runner = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm, max_function_calls=10**9)
    return runner, runner.create_task("add forever")


def window(runner: Any, task: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        runner.run_step(task)
    return (time.perf_counter() - start) / n


def in_memory() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def compare(make: Any, label: str, window_steps: int) -> float:
    """Best-of-windows seconds per step: untraced, traced into a no-op provider (nbagent's own
    part: events and bookkeeping) and traced into the SDK with an in-memory exporter; prints
    them and returns the last ratio."""
    steps = window_steps * (WINDOWS + 2) + 10
    provider, exporter = in_memory()
    runners = {"untraced": make(steps), "no-op provider": make(steps), "SDK, in memory": make(steps)}
    nbagent.tracing.trace_runner(runners["no-op provider"][0], NoOpTracerProvider())
    nbagent.tracing.trace_runner(runners["SDK, in memory"][0], provider)
    times: dict[str, list[float]] = {k: [] for k in runners}
    for key, (runner, task) in runners.items():  # warm each
        window(runner, task, window_steps)
    for _ in range(WINDOWS):
        for key, (runner, task) in runners.items():
            times[key].append(window(runner, task, window_steps))
        exporter.clear()  # the exporter's list is the user's memory, not the step's cost
    runner, task = runners["SDK, in memory"]
    window(runner, task, 10)
    spans_per_step = len(exporter.get_finished_spans()) / 10
    base = min(times["untraced"])
    print(f"{label} ({spans_per_step:.0f} span(s) a step, best of {WINDOWS} windows of {window_steps} steps [mean]):")
    for key, got in times.items():
        best = min(got)
        print(f"  {key:16} {best * 1e6:8.1f} us/step [{sum(got) / len(got) * 1e6:8.1f}]  {best / base:.2f}x")
    return min(times["SDK, in memory"]) / base


def bare_span_us(window_spans: int) -> float:
    """What the SDK alone takes for one span like a step's (started under a parent with five
    attributes and ended, into the in-memory exporter): the floor of tracing a step."""
    from opentelemetry import trace

    provider, exporter = in_memory()
    tracer = provider.get_tracer("bench")
    parent = trace.set_span_in_context(tracer.start_span("task"))
    attrs = {"openinference.span.kind": "CHAIN", "nbagent.step.id": "s", "nbagent.step.number": 1,
             "nbagent.step.status": "done", "nbagent.step.is_last": False}
    best = float("inf")
    for _ in range(WINDOWS):
        start = time.perf_counter()
        for _ in range(window_spans):
            tracer.start_span("step 1", context=parent, attributes=attrs, start_time=time.time_ns()).end()
        best = min(best, (time.perf_counter() - start) / window_spans)
        exporter.clear()
    return best * 1e6


def main() -> None:
    ratio = compare(noop_runner, "a no-op step", WINDOW)
    print(f"  (one bare SDK span like a step's, best of {WINDOWS} windows: {bare_span_us(WINDOW):.1f} us)")
    compare(sync_noop_runner, "a sync no-op step (CustomSimpleAgentWorker)", WINDOW)
    compare(tool_runner, "a step with a scripted model call and a tool call", max(20, WINDOW // 10))
    verdict = "within" if ratio <= BUDGET else "OVER"
    print(f"budget: a traced no-op step <= {BUDGET}x an untraced one (SDK, in-memory exporter): {ratio:.2f}x, {verdict} budget")


if __name__ == "__main__":
    main()
