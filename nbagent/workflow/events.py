"""Events: the typed messages steps pass to each other, and the engine's built-in ones.

A step is chosen by the type of event it takes (``isinstance``), so events are plain
pydantic models with a class each. Every subclass is registered by ``module:QualName`` so a
checkpoint can name an event's class and find it again without importing anything.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from nbagent.registry import html_view

__all__ = [
    "Event",
    "StartEvent",
    "StopEvent",
    "InputRequiredEvent",
    "HumanResponseEvent",
    "event_type_name",
    "event_class",
]

_REGISTRY: dict[str, type[Event]] = {}


def event_type_name(cls: type) -> str:
    """The registry name of an event class: ``module:QualName``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def event_class(name: str) -> type[Event] | None:
    """The event class registered under ``name``, or None."""
    return _REGISTRY.get(name)


class Event(BaseModel):
    """Base of every workflow event.

    Subclass it and add fields; a step that takes ``MyEvent`` receives every ``MyEvent`` (and
    subclass) the run produces.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[event_type_name(cls)] = cls

    def get(self, key: str, default: Any = None) -> Any:
        """A field (or, for events that allow extra fields, an extra value) by name."""
        extra = self.model_extra or {}
        if key in extra:
            return extra[key]
        if key in type(self).model_fields:
            return getattr(self, key)
        return default

    def fields(self) -> dict[str, Any]:
        """Declared fields and extra values, in order (the values themselves, not dumps).

        Example:

        >>> from nbagent.workflow import StartEvent
        >>> StartEvent(user_msg="Hi", n=2).fields()  # a StartEvent takes any keyword
        {'user_msg': 'Hi', 'n': 2}
        """
        out = {name: getattr(self, name) for name in type(self).model_fields}
        out.update(self.model_extra or {})
        return out

    def _repr_html_(self) -> str | None:
        return html_view(self)


_REGISTRY[event_type_name(Event)] = Event


class StartEvent(Event):
    """Starts a run; carries the keyword arguments given to ``workflow.run(...)``."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)


class StopEvent(Event):
    """Ends a run; ``result`` is what awaiting the handler returns."""

    result: Any = None


class InputRequiredEvent(Event):
    """A question for the person at the keyboard, written to the stream while a step waits.

    ``prefix`` is the question. ``waiter_id`` is filled in by ``ctx.wait_for_event`` so an
    answer can name the question it answers. Extra fields are allowed (e.g. ``user_name``).
    """

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    prefix: str = ""
    waiter_id: str | None = None


class HumanResponseEvent(Event):
    """The person's answer. With ``waiter_id`` it answers that question, else the oldest one."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    response: str = ""
    waiter_id: str | None = None
