"""What tracing costs a step: a traced no-op ``run_step`` vs an untraced one (budget: traced
<= 1.5x untraced, spans going to the SDK's in-memory exporter), the same for a sync
``CustomSimpleAgentWorker`` no-op step (the engine's sync early exit) and for a step that
calls a scripted model and a tool (three spans a step instead of one).

Which span processor is fair is a judgement, so both are measured. ``SimpleSpanProcessor``
exports each span inside ``span.end()``, on the step's thread: the worst case, and the one to
avoid with a real collector (a collector that is down would block the step for the exporter's
timeout). ``BatchSpanProcessor`` (what the OpenTelemetry docs recommend, and what keeps a
collector that is down from slowing a step) queues the span and exports from its own thread;
its window ends with ``force_flush()``, so the export is counted, not hidden in a thread.

The floor: the same untraced runner with a step's bare SDK spans made by hand (one a step,
three for the step with calls; each with the step span's five attributes, explicit start
and end times, under a parent context built once), into the same processor and exporter,
and no nbagent tracing at all. Tracing cannot cost less than that with the stock SDK;
nbagent's own part is the distance above it (and the no-op provider line: events,
bookkeeping, the API calls). For a step as fast as an untraced no-op one (23-25 us) the
SDK's own span is most of a step (a bare one, with no attributes and no processor, ~10 us),
so the floor is over 1.5x: the verdict prints the floor beside the figure.
The last floor line makes and ends the same spans with no processor at all (exported
nowhere): what the span object alone costs.

Every figure is the best of several windows of steps, all runners' windows interleaved (a
busy machine slows them alike), in CPU time of the whole process: every thread's (a batch
processor's export is counted), and none of the machine's other processes (a shared
machine's preemptions are not the step's cost); ``BENCH_TRACING_CLOCK=wall`` uses the
wall clock. Off, tracing costs nothing: no listener, no event built, no
opentelemetry import (tests/test_architecture.py checks the import)."""

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
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor  # noqa: E402
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
WINDOW = int(os.environ.get("BENCH_TRACING_WINDOW", "100"))
WINDOWS = int(os.environ.get("BENCH_TRACING_WINDOWS", "40"))
#: CPU seconds of the whole process (every thread: a batch processor's export is counted);
#: BENCH_TRACING_CLOCK=wall times by the wall clock instead
CLOCK = time.perf_counter if os.environ.get("BENCH_TRACING_CLOCK") == "wall" else time.process_time


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


#: the step span's attributes, for the floor's bare span (nbagent's own are the same five)
STEP_ATTRIBUTES = {"openinference.span.kind": "CHAIN", "nbagent.step.id": "s", "nbagent.step.number": 1,
                   "nbagent.step.status": "done", "nbagent.step.is_last": False}
PROCESSORS = {"simple": SimpleSpanProcessor, "batch": BatchSpanProcessor}


class Subject:
    """One runner of the comparison, traced or not, and how one window of its steps is timed."""

    def __init__(self, make: Any, steps: int, processor: str | None = None, *, bare: int = 0, noop: bool = False) -> None:
        self.runner, self.task = make(steps)
        self.provider: Any = None
        self.exporter: InMemorySpanExporter | None = None
        self.bare: Any = None
        if processor is not None:
            self.exporter = InMemorySpanExporter()
            self.provider = TracerProvider()
            if processor in PROCESSORS:  # "none": spans made and ended, exported nowhere
                self.provider.add_span_processor(PROCESSORS[processor](self.exporter))
        if bare:  # the floor: the SDK's spans of a step (``bare`` of them), by hand, nothing of nbagent
            tracer = self.provider.get_tracer("bench")
            self.bare = (tracer, trace.set_span_in_context(tracer.start_span("task")), range(bare))
        elif noop:
            nbagent.tracing.trace_runner(self.runner, NoOpTracerProvider())
        elif self.provider is not None:
            nbagent.tracing.trace_runner(self.runner, self.provider)

    def window(self, n: int) -> float:
        """Seconds a step over ``n`` steps (a batch processor's export included: flushed)."""
        runner, task = self.runner, self.task
        start = CLOCK()
        if self.bare is None:
            for _ in range(n):
                runner.run_step(task)
        else:
            tracer, parent, spans = self.bare
            for _ in range(n):
                began = time.time_ns()
                runner.run_step(task)
                for _ in spans:
                    span = tracer.start_span("step 1", context=parent, attributes=STEP_ATTRIBUTES, start_time=began)
                    span.end(end_time=time.time_ns())
        if self.provider is not None:
            self.provider.force_flush()
        took = (CLOCK() - start) / n
        if self.exporter is not None:
            self.exporter.clear()  # the exporter's list is the user's memory, not the step's cost
        return took


def compare(make: Any, label: str, window_steps: int, spans: int = 1) -> dict[str, float]:
    """Best-of-windows seconds per step of each subject (the floor: ``spans`` bare spans a
    step); prints them, returns the ratios to the untraced step."""
    steps = window_steps * (WINDOWS + 2) + 20
    subjects = {"untraced": Subject(make, steps), "nbagent, no-op provider": Subject(make, steps, noop=True)}
    for name in PROCESSORS:
        subjects[f"floor, {name}"] = Subject(make, steps, name, bare=spans)
        subjects[f"nbagent, {name}"] = Subject(make, steps, name)
    subjects["floor, no processor"] = Subject(make, steps, "none", bare=spans)
    times: dict[str, list[float]] = {k: [] for k in subjects}
    for subject in subjects.values():  # warm each
        subject.window(window_steps)
    for _ in range(WINDOWS):
        for key, subject in subjects.items():
            times[key].append(subject.window(window_steps))
    counted = subjects["nbagent, simple"]
    assert counted.exporter is not None
    for _ in range(10):
        counted.runner.run_step(counted.task)
    spans_per_step = len(counted.exporter.get_finished_spans()) / 10
    base = min(times["untraced"])
    print(f"{label} ({spans_per_step:.0f} span(s) a step, best of {WINDOWS} windows of {window_steps} steps [mean]):")
    ratios = {}
    for key, got in times.items():
        best = min(got)
        ratios[key] = best / base
        extra = "" if key == "untraced" else f"  +{(best - base) * 1e6:5.1f} us"
        print(f"  {key:24} {best * 1e6:8.1f} us/step [{sum(got) / len(got) * 1e6:8.1f}]  {best / base:.2f}x{extra}")
    return ratios


def main() -> None:
    ratios = compare(noop_runner, "a no-op step", WINDOW)
    compare(sync_noop_runner, "a sync no-op step (CustomSimpleAgentWorker)", WINDOW)
    compare(tool_runner, "a step with a scripted model call and a tool call", max(20, WINDOW // 10), spans=3)
    print(f"budget: a traced no-op step <= {BUDGET}x an untraced one (SDK, in-memory exporter):")
    for name in PROCESSORS:
        got, floor = ratios[f"nbagent, {name}"], ratios[f"floor, {name}"]
        verdict = "within" if got <= BUDGET else "OVER"
        below = "  (the SDK's own span alone is over it: the budget is below the floor here)" if floor > BUDGET else ""
        print(f"  {name:6} span processor: {got:.2f}x, {verdict} budget; floor {floor:.2f}x, nbagent above it {got - floor:+.2f}x{below}")


if __name__ == "__main__":
    main()
