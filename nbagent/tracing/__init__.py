"""OpenTelemetry traces of runs: tasks, steps, model and tool calls as GenAI spans.

``pip install "nbagent[otel]"``, then::

    import nbagent.tracing
    nbagent.tracing.instrument()            # every runner and workflow run from now on
    nbagent.tracing.instrument(tracer_provider=provider, capture_content=True)
    nbagent.tracing.uninstrument()

or one runner: ``AgentRunner(worker, tracer_provider=provider)``. Spans follow the GenAI
semantic conventions (``invoke_agent``, ``chat``, ``execute_tool``, ``invoke_workflow``)
with OpenInference span kinds, so Phoenix, Langfuse, Logfire or any OTLP collector reads
them. A service: it listens to the events of the engine and the workflow runtime, which know
nothing of it. Importing this package imports no ``opentelemetry``; turning tracing on does.
``SpanTree`` shows finished spans as a tree, and in a notebook as a waterfall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.tracing.names import CAPTURE_ENV
from nbagent.tracing.tree import SpanNode, SpanTree

if TYPE_CHECKING:
    from nbagent.tracing.runner_spans import RunnerTracer
    from nbagent.tracing.workflow_spans import WorkflowTracer

__all__ = [
    "instrument",
    "uninstrument",
    "is_instrumented",
    "trace_runner",
    "untrace_runner",
    "trace_workflow",
    "SpanTree",
    "SpanNode",
    "CAPTURE_ENV",
]

_MISSING = (
    "nbagent.tracing needs OpenTelemetry: pip install \"nbagent[otel]\" "
    "(opentelemetry-api and opentelemetry-sdk)"
)


def _setup() -> Any:
    try:
        from nbagent.tracing import setup
    except ImportError as err:
        if "opentelemetry" not in str(err):
            raise
        raise ImportError(_MISSING) from err
    return setup


def instrument(tracer_provider: Any = None, capture_content: bool = False) -> None:
    """Trace every runner of this process (made before or after this call) and every workflow
    run started after it.

    ``tracer_provider``: an OpenTelemetry ``TracerProvider`` (None: the global one).
    ``capture_content``: put messages, tool arguments and results on spans (off by default;
    the environment variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``
    turns it on too). Calling it again replaces the previous set-up."""
    _setup().instrument(tracer_provider, capture_content)


def uninstrument() -> None:
    """Stop what ``instrument`` started (open spans end now). Runners given a
    ``tracer_provider`` of their own keep tracing."""
    import sys

    if "nbagent.tracing.setup" in sys.modules:  # never instrumented: nothing to import or undo
        _setup().uninstrument()


def is_instrumented() -> bool:
    """Whether ``instrument`` is in effect."""
    import sys

    setup = sys.modules.get("nbagent.tracing.setup")
    return bool(setup is not None and setup.is_instrumented())


def trace_runner(runner: Any, tracer_provider: Any = None, capture_content: bool = False) -> RunnerTracer:
    """Trace one runner with a provider of its own (``AgentRunner(tracer_provider=...)``)."""
    return _setup().trace_runner(runner, tracer_provider, capture_content)  # type: ignore[no-any-return]


def untrace_runner(runner: Any) -> None:
    """Stop tracing one runner (its open spans end now)."""
    import sys

    if "nbagent.tracing.setup" in sys.modules:
        _setup().untrace_runner(runner)


def trace_workflow(handler: Any, tracer_provider: Any = None, capture_content: bool = False) -> WorkflowTracer:
    """Trace one workflow run (the ``WorkflowHandler`` that ``workflow.run()`` returned)."""
    return _setup().trace_workflow(handler, tracer_provider, capture_content)  # type: ignore[no-any-return]
