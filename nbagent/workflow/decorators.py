"""The ``@step`` decorator and what the engine reads from a step's signature.

A step is an ``async def`` method taking one event (its type annotation says which) and,
optionally, the run's ``Context``; its return annotation says which events it may produce. The
annotations are read when the workflow class is first instantiated, so steps may name event
classes defined later in the module.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from nbagent.workflow.context import Context
from nbagent.workflow.errors import WorkflowValidationError
from nbagent.workflow.events import Event

__all__ = ["step", "StepSpec", "STEP_ATTR", "read_step"]

STEP_ATTR = "__nbagent_step__"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class StepConfig:
    num_workers: int
    localns: dict[str, Any] | None = None  # names visible where the step was defined


@dataclass(frozen=True)
class StepSpec:
    """What the engine knows about one step."""

    name: str
    fn: Callable[..., Any]
    accepts: tuple[type[Event], ...]
    returns: tuple[type[Event], ...]
    num_workers: int
    event_param: str
    ctx_param: str | None
    doc: str

    def takes(self, event: Event) -> bool:
        """Whether this step takes ``event``: its exact class is one the step names.

        Exact, not ``isinstance``: ``ToolCallResult`` subclasses ``ToolCall`` and must not go to
        the step that takes tool calls.

        Example:

        >>> from nbagent.workflow import Event, StartEvent, StopEvent, Workflow, step
        >>> class Echo(Workflow):
        ...     @step
        ...     async def echo(self, ev: StartEvent) -> StopEvent:
        ...         return StopEvent(result=ev.get("text"))
        >>> spec = Echo().step_specs()["echo"]
        >>> spec.takes(StartEvent()), spec.takes(Event())
        (True, False)
        """
        return type(event) in self.accepts

    async def invoke(self, workflow: Any, ctx: Any, event: Event) -> Any:
        """Run the step on ``event`` (with ``ctx`` if it takes the context); returns what the
        step returned, for the engine to route. The engine calls it; a test may too.

        Example:

        >>> import asyncio
        >>> from nbagent.workflow import StartEvent, StopEvent, Workflow, step
        >>> class Echo(Workflow):
        ...     @step
        ...     async def echo(self, ev: StartEvent) -> StopEvent:
        ...         return StopEvent(result=ev.get("text"))
        >>> echo = Echo()
        >>> stop = asyncio.run(echo.step_specs()["echo"].invoke(echo, None, StartEvent(text="hi")))  # one step, alone
        >>> stop.result
        'hi'
        """
        kwargs: dict[str, Any] = {self.event_param: event}
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        return await self.fn(workflow, **kwargs)


def step(fn: F | None = None, *, num_workers: int = 1) -> F | Callable[[F], F]:
    """Mark an ``async def`` method of a ``Workflow`` as a step.

    ``num_workers`` is how many events this step may handle at the same time.
    Use as ``@step`` or ``@step(num_workers=4)``.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
    localns = _defining_scope(sys._getframe(1))

    def mark(f: F) -> F:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(
                f"@step needs an async def method, and {getattr(f, '__qualname__', f)!r} is not "
                "a coroutine function"
            )
        setattr(f, STEP_ATTR, StepConfig(num_workers=num_workers, localns=localns))
        return f

    return mark if fn is None else mark(fn)


def _defining_scope(frame: Any) -> dict[str, Any] | None:
    """Names of the scope a workflow class is defined in (the class body and, for a class made
    inside a function, that function's locals), so event classes local to a function resolve.
    Used only when the module's globals do not resolve an annotation."""
    try:
        names: dict[str, Any] = {}
        outer = frame.f_back
        if outer is not None and outer.f_code.co_name != "<module>":
            names.update(outer.f_locals)
        names.update(frame.f_locals)
        return names
    except Exception:  # noqa: BLE001 - an odd interpreter: annotations must then be global
        return None


def _event_types(annotation: Any) -> list[type[Event]] | None:
    """Event classes named by an annotation (Union, Optional, X | Y, list[X]); None if other."""
    if annotation is None or annotation is type(None):
        return []
    if isinstance(annotation, type) and issubclass(annotation, Event):
        return [annotation]
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType, list, tuple, abc.Sequence):
        out: list[type[Event]] = []
        for arg in get_args(annotation):
            if arg is Ellipsis:
                continue
            found = _event_types(arg)
            if found is None:
                return None
            out.extend(found)
        return out
    return None


def read_step(name: str, fn: Callable[..., Any], config: StepConfig, owner: type) -> StepSpec:
    """Read a step's event types from its annotations (errors name the step and the fix)."""
    where = f"step {owner.__name__}.{name}"
    try:
        try:
            hints = get_type_hints(fn)
        except NameError:
            if not config.localns:
                raise
            hints = get_type_hints(fn, localns=config.localns)
    except Exception as err:
        raise WorkflowValidationError(
            f"{where}: its type annotations could not be resolved ({type(err).__name__}: {err}); "
            "annotate the event parameter and the return type with importable classes"
        ) from err
    params = list(inspect.signature(fn).parameters.values())[1:]  # drop self
    event_param: str | None = None
    accepts: list[type[Event]] = []
    ctx_param: str | None = None
    for p in params:
        ann = hints.get(p.name)
        if ann is Context or p.name == "ctx":
            ctx_param = p.name
            continue
        found = _event_types(ann) if ann is not None else None
        if found:
            if event_param is not None:
                raise WorkflowValidationError(f"{where}: takes two event parameters ({event_param}, {p.name}); a step takes one")
            event_param, accepts = p.name, found
        elif p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            raise WorkflowValidationError(
                f"{where}: parameter {p.name!r} is neither the event (annotate it with an Event "
                "class) nor the context (ctx: Context)"
            )
    if event_param is None:
        raise WorkflowValidationError(
            f"{where}: no parameter is annotated with an Event class; write e.g. "
            f"`async def {name}(self, ctx: Context, ev: StartEvent) -> StopEvent`"
        )
    if "return" not in hints:
        raise WorkflowValidationError(
            f"{where}: has no return annotation; annotate the events it returns, "
            "e.g. -> StopEvent, -> MyEvent | None, or -> None"
        )
    returns = _event_types(hints["return"])
    if returns is None:
        raise WorkflowValidationError(
            f"{where}: its return annotation {hints['return']!r} names something other than Event "
            "classes and None"
        )
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    return StepSpec(
        name=name,
        fn=fn,
        accepts=tuple(dict.fromkeys(accepts)),
        returns=tuple(dict.fromkeys(returns)),
        num_workers=config.num_workers,
        event_param=event_param,
        ctx_param=ctx_param,
        doc=doc[0] if doc else "",
    )
