"""Small helpers every tracer of nbagent shares: times, parents, ending a span once.

Imported only when tracing is on (it imports ``opentelemetry``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from nbagent.events import current_step
from nbagent.tracing import names

__all__ = [
    "ns", "iso_ns", "child", "in_context", "current_in_step", "chat_attributes", "end", "fail", "get_tracer", "SpanKind",
]


def in_context(span: Span) -> Context:
    """A context whose current span is ``span`` (to start many children under it)."""
    return trace.set_span_in_context(span)


def current_in_step(span: Span, step_id: str | None = None) -> Callable[[], None] | None:
    """Make ``span`` the current span for the rest of the running step's code (the step
    ``step_id``, if given), so spans that code makes (a tool's own, an instrumented HTTP
    client's) go under it; it stops being current when the step's code ends, or earlier when
    the function returned is called in the same context (a model call that ended). Heard
    outside a step, or a span that carries no trace (a no-op provider's): nothing to do."""
    ctx = current_step()
    if ctx is None or (step_id is not None and ctx.step_id != step_id) or not span.get_span_context().is_valid:
        return None
    attached = trace.set_span_in_context(span)
    token = otel_context.attach(attached)
    detached = False

    def release() -> None:
        # only where it is still the current one: a call that ended in another context (a
        # stream read by another task) is detached by the step's end, in the step's context
        nonlocal detached
        if not detached and otel_context.get_current() is attached:
            detached = True
            otel_context.detach(token)

    ctx.on_exit(release)
    return release


def chat_attributes(model: str, provider: str) -> dict[str, Any]:
    """A model call's span's attributes known when it starts (GenAI and OpenInference)."""
    return {
        names.OPERATION: "chat",
        names.REQUEST_MODEL: model,
        names.PROVIDER: provider,
        names.OI_KIND: "LLM",
        names.OI_MODEL: model,
        names.OI_PROVIDER: provider,
    }


def ns(seconds: float) -> int:
    """``time.time()`` seconds as the nanoseconds a span's times are."""
    return int(seconds * 1e9)


def iso_ns(text: Any) -> int | None:
    """An ISO-8601 time (an approval's ``at``) as nanoseconds, or None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return ns(_dt.datetime.fromisoformat(text).timestamp())
    except ValueError:
        return None


def get_tracer(provider: Any) -> Tracer:
    """nbagent's tracer from ``provider`` (None: the global one, resolved when spans start)."""
    from nbagent._version import __version__

    if provider is None:
        return trace.get_tracer(names.SCOPE, __version__)
    if not hasattr(provider, "get_tracer"):
        raise TypeError(
            f"tracer_provider must be an OpenTelemetry TracerProvider (with get_tracer), got {type(provider).__name__}"
        )
    return provider.get_tracer(names.SCOPE, __version__)  # type: ignore[no-any-return]


def child(
    tracer: Tracer,
    name: str,
    parent: Span | Context | None,
    start_s: float,
    attributes: dict[str, Any],
    kind: SpanKind = SpanKind.INTERNAL,
    links: Any = None,
) -> Span:
    """Start span ``name`` under ``parent`` (None: a root) at ``start_s`` (``time.time()``).

    The parent is given explicitly, never read from the current context: steps of a
    parallel run and calls of one step come in any order and from any task. A root (a task,
    a workflow run, a batch) goes under the caller's current span, if it has one. A parent
    given as a ``Context`` (``in_context(span)``, kept by the caller) saves making one."""
    ctx = parent if parent is None or isinstance(parent, Context) else trace.set_span_in_context(parent)
    return tracer.start_span(
        name, context=ctx, kind=kind, attributes=attributes, start_time=ns(start_s), links=links
    )


def end(span: Span | None, end_s: float | None = None) -> None:
    """End ``span`` (at ``end_s``, else now) unless it ended already."""
    if span is not None and span.is_recording():
        span.end(end_time=None if end_s is None else ns(end_s))


def fail(span: Span, error_type: str, message: str = "", at: float | None = None) -> None:
    """Mark ``span`` failed: ERROR status, ``error.type``, and an ``exception`` event at
    ``at`` (``time.time()``; a span drawn after the fact gives the time it failed)."""
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}" if message else error_type))
    span.set_attribute(names.ERROR_TYPE, error_type)
    span.add_event(
        "exception", {"exception.type": error_type, "exception.message": message}, timestamp=None if at is None else ns(at)
    )
