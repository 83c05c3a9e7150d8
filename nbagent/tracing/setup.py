"""Turning tracing on and off: for the whole process (``instrument``) or one runner.

Imported only when tracing is asked for (it imports ``opentelemetry``). A runner's tracer
lives in the runner's service slots (``runner._services``), so the engine declares nothing
for it; one given its own provider (``AgentRunner(tracer_provider=...)``) keeps it whatever
``instrument`` and ``uninstrument`` do.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from nbagent.events import watch_sources
from nbagent.tracing.names import capture_from_env
from nbagent.tracing.runner_spans import RunnerTracer
from nbagent.tracing.spans import get_tracer
from nbagent.tracing.workflow_spans import WorkflowTracer
from nbagent.workflow.handler import WorkflowHandler

__all__ = ["instrument", "uninstrument", "is_instrumented", "trace_runner", "untrace_runner", "trace_workflow"]


class _Global:
    """What ``instrument`` set up: the tracer, and what it attached to (to take it off)."""

    def __init__(self, tracer: Any, capture: bool) -> None:
        self.tracer = tracer
        self.capture = capture
        # the runners it attached a tracer to (weak references: a runner need not be hashable)
        self.runners: list[weakref.ref[Any]] = []
        self.workflows: list[WorkflowTracer] = []
        self.unwatch: Any = None

    def attach(self, source: Any) -> None:
        if isinstance(source, WorkflowHandler):
            self.workflows = [w for w in self.workflows if w.span.is_recording()]
            self.workflows.append(WorkflowTracer(source, self.tracer, self.capture))
            return
        slots = getattr(source, "_services", None)
        if slots is None or slots.get(RunnerTracer) is not None:
            return  # not a runner, or it has a tracer of its own
        if len(self.runners) % 256 == 255:  # now and then: forget runners that are gone
            self.runners = [r for r in self.runners if r() is not None]
        self.runners.append(weakref.ref(source))
        tracer = RunnerTracer(source, self.tracer, self.capture, own=False)
        slots.setdefault(RunnerTracer, lambda: tracer)


_lock = threading.Lock()
_global: _Global | None = None


def instrument(tracer_provider: Any = None, capture_content: bool = False) -> None:
    """Trace every runner of this process (made before or after this call) and every workflow
    run started after it.

    ``tracer_provider``: an OpenTelemetry ``TracerProvider`` (None: the global one, as set
    with ``opentelemetry.trace.set_tracer_provider``). ``capture_content``: put messages,
    tool arguments and results on spans (also on when the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``). Calling it again
    replaces the previous set-up."""
    global _global
    tracer = get_tracer(tracer_provider)
    with _lock:
        _uninstrument_locked()
        _global = _Global(tracer, bool(capture_content) or capture_from_env())
        _global.unwatch = watch_sources(_global.attach)


def _uninstrument_locked() -> None:
    global _global
    g, _global = _global, None
    if g is None:
        return
    g.unwatch()
    for ref in g.runners:
        runner = ref()
        if runner is None:
            continue
        tracer = runner._services.get(RunnerTracer)
        if tracer is not None and not tracer.own:
            runner._services.pop(RunnerTracer)
            tracer.close()
    for w in g.workflows:
        w.close()


def uninstrument() -> None:
    """Stop what ``instrument`` started: no new spans; open ones end now. Runners given a
    ``tracer_provider`` of their own keep tracing."""
    with _lock:
        _uninstrument_locked()


def is_instrumented() -> bool:
    """Whether ``instrument`` is in effect."""
    return _global is not None


def trace_runner(runner: Any, tracer_provider: Any = None, capture_content: bool = False) -> RunnerTracer:
    """Trace one runner with its own provider (what ``AgentRunner(tracer_provider=...)`` does);
    replaces a tracer it had."""
    slots = getattr(runner, "_services", None)
    if slots is None or not hasattr(runner, "events"):
        raise TypeError(f"trace_runner needs an AgentRunner (or another step engine), got {type(runner).__name__}")
    untrace_runner(runner)
    tracer = RunnerTracer(runner, get_tracer(tracer_provider), bool(capture_content) or capture_from_env(), own=True)
    slots.setdefault(RunnerTracer, lambda: tracer)
    return tracer


def untrace_runner(runner: Any) -> None:
    """Stop tracing ``runner`` (its open spans end now)."""
    slots = getattr(runner, "_services", None)
    found = None if slots is None else slots.pop(RunnerTracer)
    if found is not None:
        found.close()
        if _global is not None:
            _global.runners = [r for r in _global.runners if r() is not runner]


def trace_workflow(handler: Any, tracer_provider: Any = None, capture_content: bool = False) -> WorkflowTracer:
    """Trace one workflow run (a ``WorkflowHandler``, best taken before its first step)."""
    if not isinstance(handler, WorkflowHandler):
        raise TypeError(f"trace_workflow needs a WorkflowHandler (what workflow.run() returns), got {type(handler).__name__}")
    return WorkflowTracer(handler, get_tracer(tracer_provider), bool(capture_content) or capture_from_env())
