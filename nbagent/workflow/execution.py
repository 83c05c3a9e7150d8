"""One step execution and what a context keeps about it: the event it runs on (``Item``), a
question it waits on (``Waiter``), and the execution running in this asyncio task
(``Execution``, a context variable), through which tools and helpers reach the run's context.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbagent.workflow.events import Event

if TYPE_CHECKING:
    from nbagent.workflow.context import Context

__all__ = ["Item", "Waiter", "Execution", "current_execution", "current_context"]


@dataclass
class Item:
    """An event for one step; ``exec_id`` is set once the step starts on it."""

    step: str
    event: Event
    exec_id: int | None = None


@dataclass
class Waiter:
    """A step waiting in ``wait_for_event``; ``future`` is None while no run is live."""

    key: str
    exec_id: int
    event_type: type[Event]
    requirements: dict[str, Any]
    waiter_event: Event | None
    future: asyncio.Future[Event] | None = None
    announced: Any = None  # the run whose stream has shown the question (not saved)


@dataclass
class Execution:
    """The step execution running in this asyncio task (a context variable)."""

    ctx: Context
    step: str
    exec_id: int
    waits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


_CURRENT: ContextVar[Execution | None] = ContextVar("nbagent_workflow_step", default=None)


def current_execution() -> Execution | None:
    return _CURRENT.get()


def current_context() -> Context:
    """The context of the workflow step running now (tools use it to reach the run)."""
    ex = _CURRENT.get()
    if ex is None:
        raise RuntimeError(
            "no workflow step is running here: the workflow Context is only available inside "
            "a step (and the tools a step calls) of a running workflow"
        )
    return ex.ctx
