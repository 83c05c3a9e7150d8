"""Workflow: a class whose ``@step`` methods pass events to each other.

An event goes to the steps whose annotation names its exact class (a subclass is a different
event, as in LlamaIndex); a ``StopEvent`` (or subclass) returned by any step ends the run.

``run(**kwargs)`` sends ``StartEvent(**kwargs)`` to the step that takes it and returns a
``WorkflowHandler`` at once; the run goes on in the background on the running event loop until
a step returns a ``StopEvent``. The steps are read and checked when the class is first
instantiated: every event a step returns must be taken by some step, and so on.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from nbagent.events import announce_source
from nbagent.registry import html_view, show
from nbagent.workflow.base import WorkflowBase
from nbagent.workflow.checkpoint import Checkpoint, checkpoint_style
from nbagent.workflow.context import Context
from nbagent.workflow.decorators import STEP_ATTR, StepSpec, read_step
from nbagent.workflow.errors import WorkflowValidationError
from nbagent.workflow.events import (
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)
from nbagent.workflow.handler import WorkflowHandler
from nbagent.workflow.runtime import Runner

if TYPE_CHECKING:
    from nbagent.viz.workflow_html import DotDisplay
    from nbagent.viz.workflow_panel import WorkflowPanel

__all__ = ["Workflow"]

_SPECS: dict[type, dict[str, StepSpec]] = {}
_UNCHECKED: dict[type, dict[str, StepSpec]] = {}  # read with disable_validation=True


class Workflow(WorkflowBase):
    """Base class of event-driven workflows.

    ``timeout`` (seconds, or None for no limit) bounds a run, waiting for people included.
    ``verbose`` prints each step as it runs.
    """

    def __init__(self, timeout: float | None = None, verbose: bool = False, disable_validation: bool = False) -> None:
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise ValueError(f"timeout must be a number of seconds > 0, or None for no limit; got {timeout!r}")
        self.timeout = None if timeout is None else float(timeout)
        self.verbose = bool(verbose)
        self._steps = type(self).step_specs(validate=not disable_validation)
        starts = {t for s in self._steps.values() for t in s.accepts if issubclass(t, StartEvent)}
        self._start_event_cls: type[StartEvent] = starts.pop() if len(starts) == 1 else StartEvent

    # ----- steps --------------------------------------------------------------------------
    @classmethod
    def step_specs(cls, validate: bool = True) -> dict[str, StepSpec]:
        """The class's steps by name, read from their annotations and checked (cached).

        ``validate=False`` (``disable_validation=True``) skips the check that the steps fit
        together (every event returned is taken by a step, and so on).
        """
        cached = _SPECS.get(cls)
        if cached is not None:
            return cached
        if not validate:
            unchecked = _UNCHECKED.get(cls)
            if unchecked is None:
                unchecked = _UNCHECKED[cls] = _read_specs(cls)
            return unchecked
        specs = _read_specs(cls)
        _validate(cls, specs)
        _SPECS[cls] = specs
        return specs

    @property
    def steps(self) -> dict[str, StepSpec]:
        """The workflow's ``@step`` methods by name, each with the events it takes and
        returns (what ``draw()`` draws)."""
        return self._steps

    # ----- running ------------------------------------------------------------------------
    def run(
        self,
        ctx: Context | None = None,
        stepwise: bool = False,
        checkpoint_callback: Any = None,
        start_event: StartEvent | None = None,
        **kwargs: Any,
    ) -> WorkflowHandler:
        """Start a run (or resume the unfinished one saved in ``ctx``) and return its handler.

        Needs a running event loop: call it in ``async def`` code or in a notebook cell. Keyword
        arguments become the StartEvent's fields (None values are left out). A ``ctx`` with an
        unfinished run (stopped, failed, timed out, or loaded from a checkpoint) resumes it:
        interrupted steps run again, queued events are delivered.

        ``stepwise=True``: nothing runs until ``handler.run_step()`` (one step per call; see
        ``nbagent.workflow.stepwise``; ``timeout`` does not apply). ``checkpoint_callback``: called
        after every step with a ``Checkpoint`` that resumes the run (see
        ``nbagent.workflow.checkpoint``). ``start_event``: the StartEvent itself (instead of
        keyword arguments).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{type(self).__name__}.run() starts the run on the running event loop, and none "
                "is running here: call it inside `async def` code or a notebook cell, or use "
                "workflow.run_sync(...) from plain code"
            ) from None
        if not isinstance(stepwise, bool):
            raise TypeError(f"stepwise must be True or False, got {stepwise!r}")
        if checkpoint_callback is not None:
            checkpoint_style(checkpoint_callback)  # a bad callback fails here, not after a step
        ctx = self._bind(ctx)
        start = {k: v for k, v in kwargs.items() if v is not None}
        if start_event is not None:
            if not isinstance(start_event, self._start_event_cls):
                raise TypeError(
                    f"start_event must be a {self._start_event_cls.__name__}, got {type(start_event).__name__}"
                )
            if start:
                raise ValueError(
                    f"give the run's input either as start_event=... or as keywords, not both (got {sorted(start)})"
                )
        resumed = ctx.has_pending_work
        if resumed:
            if start:
                raise ValueError(
                    f"this context holds an unfinished run; resume it with run(ctx=ctx) and no "
                    f"new input (got {sorted(start)}), or start afresh with a new Context"
                )
            ctx._requeue_interrupted()
        elif start_event is not None:
            ctx._dispatch(start_event)
        else:
            ctx._dispatch(self._start_event_cls(**start))
        runner = Runner(
            self, ctx, loop, self.timeout, stepwise=stepwise, checkpoint_callback=checkpoint_callback
        )
        runner.resumed = resumed
        ctx._runner = runner
        handler = WorkflowHandler(runner)
        announce_source(handler, keep=False)  # process-wide listeners (tracing) attach before it starts
        runner.start()
        return handler

    def run_from(self, checkpoint: Checkpoint, **kwargs: Any) -> WorkflowHandler:
        """Resume a run from a ``Checkpoint`` (a fresh Context loaded from it); returns the handler.

        ``kwargs`` go to ``run`` (``stepwise``, ``checkpoint_callback``), not to the StartEvent.
        """
        if isinstance(checkpoint, dict):
            checkpoint = Checkpoint.from_dict(checkpoint)
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"run_from() takes a Checkpoint, got {type(checkpoint).__name__}")
        return self.run(ctx=checkpoint.context(self), **kwargs)

    def run_sync(self, ctx: Context | None = None, **kwargs: Any) -> Any:
        """Run to the end from plain (non-async) code and return the result."""
        from nbagent._sync import run_sync

        async def go() -> Any:
            return await self.run(ctx=ctx, **kwargs)

        return run_sync(go())

    def _bind(self, ctx: Context | None) -> Context:
        if ctx is None:
            return Context(self)
        if not isinstance(ctx, Context):
            raise TypeError(f"ctx must be a Context, got {type(ctx).__name__}")
        if ctx.is_running:
            raise RuntimeError("this Context is in use by a run that has not finished; await it or stop it first")
        if ctx.workflow is not self:
            if type(ctx.workflow) is not type(self):
                raise ValueError(
                    f"this Context belongs to a {type(ctx.workflow).__name__}, not a "
                    f"{type(self).__name__}"
                )
            ctx._workflow = self  # same class: the context moves to this instance
        return ctx

    # ----- views --------------------------------------------------------------------------
    def draw(self, *, rankdir: str | None = None, max_label: int | None = None, wrap: int | None = None
             ) -> DotDisplay:
        """The steps and the event types between them, as a displayable graph (SVG with
        Graphviz, static HTML without). ``rankdir``: "TB" (default), "LR", "BT" or "RL";
        ``max_label``: characters of a name shown (60); ``wrap``: label line width (36).
        Options left at None are the view's defaults."""
        given = {"rankdir": rankdir, "max_label": max_label, "wrap": wrap}
        return show(self, "draw", **{k: v for k, v in given.items() if v is not None})  # type: ignore[no-any-return]

    def panel(self, *, throttle_s: float | None = None, renderer: str | None = None, **run_kwargs: Any
              ) -> WorkflowPanel:
        """A notebook panel that runs this workflow step by step (Start, Step, Run to end, Stop),
        with a live graph of the run, its events and the questions it asks. ``throttle_s``: at
        most one redraw per so many seconds (0.1); ``renderer``: "auto" (default), "anywidget"
        or "html". ``run_kwargs`` go to every ``run`` the panel starts (``ctx``,
        ``checkpoint_callback``...). Options left at None are the view's defaults."""
        given = {"throttle_s": throttle_s, "renderer": renderer}
        return show(self, "panel", **{k: v for k, v in given.items() if v is not None}, **run_kwargs)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={list(self._steps)}, timeout={self.timeout})"

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _read_specs(cls: type) -> dict[str, StepSpec]:
    """The steps of ``cls`` (its own and inherited), read from their annotations."""
    found: dict[str, tuple[Any, Any, type]] = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            config = getattr(attr, STEP_ATTR, None)
            if config is not None:
                found[name] = (attr, config, klass)
            elif name in found and callable(attr):
                # overridden without @step: still that step, with the parent's settings
                found[name] = (attr, found[name][1], klass)
    return {name: read_step(name, fn, config, owner) for name, (fn, config, owner) in found.items()}


def _validate(cls: type, specs: dict[str, StepSpec]) -> None:
    """Check that the steps fit together; the error says which step and what to change."""
    name = cls.__name__
    if not specs:
        raise WorkflowValidationError(f"{name} has no steps: mark async methods with @step")
    if not any(issubclass(t, StartEvent) for s in specs.values() for t in s.accepts):
        raise WorkflowValidationError(f"{name}: no step takes a StartEvent, so a run could not begin")
    if not any(issubclass(t, StopEvent) for s in specs.values() for t in s.returns):
        raise WorkflowValidationError(f"{name}: no step returns a StopEvent, so a run could not end")
    starts = {t for s in specs.values() for t in s.accepts if issubclass(t, StartEvent)}
    if len(starts) > 1:
        raise WorkflowValidationError(
            f"{name}: steps take different StartEvent classes {sorted(t.__name__ for t in starts)}; use one"
        )
    produced = {t for s in specs.values() for t in s.returns}
    for s in specs.values():
        for t in s.returns:
            if issubclass(t, (StopEvent, InputRequiredEvent)):
                continue
            if not any(t is a for other in specs.values() for a in other.accepts):
                raise WorkflowValidationError(
                    f"{name}: step {s.name!r} returns {t.__name__}, but no step takes it"
                )
        for a in s.accepts:
            if issubclass(a, (StartEvent, HumanResponseEvent)):
                continue
            if a not in produced:
                raise WorkflowValidationError(
                    f"{name}: step {s.name!r} takes {a.__name__}, but no step returns it (a step "
                    "that sends it with ctx.send_event must list it in its return annotation)"
                )
