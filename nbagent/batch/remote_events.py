"""What a task that runs elsewhere did, as events its calling side can hear.

A Ray worker runs a batch task on a runner of its own, in another process: the calling
runner's listeners (tracing) hear nothing of it. When the calling side asks for it (someone
there listens to ``TaskReplayed``), the worker records the task's events (``EventLog``),
sends them back in its plain record as tagged JSON (the run files' value encoding: no
pickle), and the calling side rebuilds them (``decode_events``) and tells its listeners in
one ``TaskReplayed``, before the task is adopted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nbagent import events as ev
from nbagent.messages import ToolOutput
from nbagent.store.decoder import ValueDecoder
from nbagent.store.encoder import ValueEncoder, _strip_unused

__all__ = ["REPLAYED", "EventLog", "encode_events", "decode_events"]

#: the events of one task that are recorded where it runs
REPLAYED: tuple[str, ...] = (
    "TaskCreated", "StepStarted", "StepCompleted", "StepFailed", "ModelCalled", "ToolCalled",
    "TaskFinalized", "TaskAbandoned",
)


class EventLog:
    """Records ``runner``'s task events from now until ``close()``."""

    def __init__(self, runner: Any) -> None:
        self.events: list[ev.Event] = []
        types = tuple(getattr(ev, name) for name in REPLAYED)
        self._unsubscribe = runner.events.subscribe(self.events.append, types)

    def close(self) -> None:
        self._unsubscribe()

    def of(self, task_id: str) -> list[ev.Event]:
        return [e for e in self.events if e.task_id == task_id]


def _fields(event: ev.Event) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


def _without_content(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields with what may hold objects of the worker's own types made plain."""
    plain = dict(fields)
    if "messages" in plain:
        plain["messages"] = ()
        plain["reply"] = None
    out = plain.get("output")
    if out is not None:
        plain["output"] = ToolOutput(
            content=str(getattr(out, "content", out)),
            tool_name=str(getattr(out, "tool_name", "") or ""),
            is_error=bool(getattr(out, "is_error", False)),
            tool_call_id=getattr(out, "tool_call_id", None),
        )
    return plain


def encode_events(events: list[ev.Event]) -> list[dict[str, Any]]:
    """``events`` as plain JSON-able records. An event whose content (messages, a tool's
    output) holds a type the run files cannot keep goes without that content."""
    records = []
    for event in events:
        fields = _fields(event)
        enc = ValueEncoder()
        try:
            data = enc.value(fields, (None, "event"))
        except Exception:  # noqa: BLE001 - content of a type that cannot be kept: the event goes without it
            enc = ValueEncoder()
            data = enc.value(_without_content(fields), (None, "event"))
        records.append({"type": type(event).__name__, "fields": _strip_unused(data, enc.used)})
    return records


def decode_events(records: Any, source: str) -> tuple[ev.Event, ...]:
    """The events ``encode_events`` recorded (only the kinds in ``REPLAYED``); ValueError
    names what is wrong with a damaged record."""
    if not isinstance(records, list):
        raise ValueError(f"{source}: the task's events are not a list")
    out = []
    for i, record in enumerate(records):
        kind = record.get("type") if isinstance(record, dict) else None
        if kind not in REPLAYED:
            raise ValueError(f"{source}: event {i} is of kind {kind!r}; a task's events are of {', '.join(REPLAYED)}")
        fields = ValueDecoder(source).value(record.get("fields"), f"event {i}")
        if not isinstance(fields, dict):
            raise ValueError(f"{source}: event {i} has no fields")
        try:
            out.append(getattr(ev, kind)(**fields))
        except TypeError as err:
            raise ValueError(f"{source}: event {i} ({kind}) does not fit: {err}") from None
    return tuple(out)
