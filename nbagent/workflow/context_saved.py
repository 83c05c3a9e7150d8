"""A context as JSON-safe data and back: ``Context.to_dict()`` saves everything needed to
resume a run (the state, the queued and interrupted executions, the buffers of
``collect_events``, the questions and their answers, the tool calls that ran);
``Context.from_dict(workflow, data)`` loads it, checking every step name and event class."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from nbagent.workflow.base import as_workflow
from nbagent.workflow.errors import CheckpointError
from nbagent.workflow.events import Event, event_type_name
from nbagent.workflow.execution import Item, Waiter
from nbagent.workflow.serde import check_serializer, decode_event, decode_value, encode_event, encode_value

if TYPE_CHECKING:
    from nbagent.workflow.context import Context
    from nbagent.workflow.workflow import Workflow

__all__ = ["SavedContext", "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION"]

CHECKPOINT_FORMAT = "nbagent.workflow.Context"
CHECKPOINT_VERSION = 1


class SavedContext:
    """The saved form of ``Context`` (its attributes are declared by ``Context.__init__``)."""

    _workflow: Workflow
    _state: dict[str, Any]
    _pending: deque[Item]
    _in_progress: dict[int, Item]
    _collected: dict[str, list[tuple[int, Event]]]
    _consumed: dict[int, list[Event]]
    _waiters: dict[str, Waiter]
    _answers: dict[str, tuple[int, Event]]
    _ran: dict[int, dict[str, Any]]
    _next_exec: int

    # ----- checkpoints --------------------------------------------------------------------
    def to_dict(self, serializer: Any = None) -> dict[str, Any]:
        """Everything needed to resume, as JSON-safe data (``json.dumps`` takes it as is).

        A value that cannot be saved raises ``CheckpointError`` naming its key and type. Call it
        from the run's own thread (or when no run is live). ``serializer``: the reference's
        ``JsonSerializer()`` (the only format there is) or nothing.
        """
        check_serializer(serializer)
        interrupted = [self._in_progress[k] for k in sorted(self._in_progress)]
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "workflow": event_type_name(type(self._workflow)),
            "state": {k: encode_value(v, f"state[{k!r}]") for k, v in self._state.items()},
            "pending": [
                {"step": it.step, "event": encode_event(it.event, f"pending[{i}].event")}
                for i, it in enumerate(self._pending)
            ],
            "interrupted": [
                {"exec_id": it.exec_id, "step": it.step, "event": encode_event(it.event, f"interrupted[{i}].event")}
                for i, it in enumerate(interrupted)
            ],
            "collected": {
                step: [
                    {"exec_id": eid, "event": encode_event(ev, f"collected[{step!r}][{i}]")}
                    for i, (eid, ev) in enumerate(entries)
                ]
                for step, entries in self._collected.items()
                if entries
            },
            "consumed": {
                str(eid): [encode_event(ev, f"consumed[{eid}][{i}]") for i, ev in enumerate(evs)]
                for eid, evs in self._consumed.items()
            },
            "waiters": [
                {
                    "key": w.key,
                    "exec_id": w.exec_id,
                    "event_type": event_type_name(w.event_type),
                    "requirements": encode_value(w.requirements, f"waiters[{w.key!r}].requirements"),
                    "waiter_event": None
                    if w.waiter_event is None
                    else encode_event(w.waiter_event, f"waiters[{w.key!r}].waiter_event"),
                }
                for w in self._waiters.values()
            ],
            "answers": [
                {"key": key, "exec_id": eid, "event": encode_event(ev, f"answers[{key!r}]")}
                for key, (eid, ev) in self._answers.items()
            ],
            "ran": {
                str(eid): {"outputs": encode_value(dict(j["outputs"]), f"ran[{eid}]")}
                for eid, j in self._ran.items()
                if j.get("outputs")
            },
            "next_exec": self._next_exec,
        }

    @classmethod
    def from_dict(cls, workflow: Workflow, data: dict[str, Any], serializer: Any = None) -> Context:
        """Load a context saved by ``to_dict`` for ``workflow`` (a workflow of the same class)."""
        check_serializer(serializer)
        workflow = as_workflow(workflow)
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(
                f"not a saved workflow context: expected a dict with format={CHECKPOINT_FORMAT!r}"
            )
        if data.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint version {data.get('version')!r} is not supported (this nbagent reads "
                f"version {CHECKPOINT_VERSION})"
            )
        saved_for = data.get("workflow")
        if saved_for != event_type_name(type(workflow)):
            raise CheckpointError(
                f"this checkpoint was saved by a {saved_for!r} run and cannot resume a "
                f"{event_type_name(type(workflow))!r}"
            )
        ctx: Context = cls(workflow)  # type: ignore[call-arg]  # Context's __init__
        steps = workflow.steps

        def step_name(name: Any, where: str) -> str:
            if name not in steps:
                raise CheckpointError(f"{where}: the workflow has no step {name!r}; steps: {list(steps)}")
            return str(name)

        ctx._state = {k: decode_value(v, f"state[{k!r}]") for k, v in dict(data.get("state") or {}).items()}
        for i, it in enumerate(data.get("pending") or []):
            ctx._pending.append(
                Item(step_name(it["step"], f"pending[{i}]"), decode_event(it["event"], f"pending[{i}].event"))
            )
        for i, it in enumerate(data.get("interrupted") or []):
            eid = int(it["exec_id"])
            ctx._in_progress[eid] = Item(
                step_name(it["step"], f"interrupted[{i}]"),
                decode_event(it["event"], f"interrupted[{i}].event"),
                eid,
            )
        for step, entries in dict(data.get("collected") or {}).items():
            ctx._collected[step_name(step, f"collected[{step!r}]")] = [
                (int(e["exec_id"]), decode_event(e["event"], f"collected[{step!r}][{i}]"))
                for i, e in enumerate(entries)
            ]
        for eid, events in dict(data.get("consumed") or {}).items():
            ctx._consumed[int(eid)] = [decode_event(e, f"consumed[{eid}][{i}]") for i, e in enumerate(events)]
        from nbagent.workflow.serde import _find_class

        for w in data.get("waiters") or []:
            key = str(w["key"])
            event_type = _find_class(str(w["event_type"]), f"waiters[{key!r}].event_type")
            if not issubclass(event_type, Event):
                raise CheckpointError(f"waiters[{key!r}]: {w['event_type']!r} is not an Event class")
            ctx._waiters[key] = Waiter(
                key=key,
                exec_id=int(w["exec_id"]),
                event_type=event_type,
                requirements=dict(decode_value(w.get("requirements") or {}, f"waiters[{key!r}].requirements")),
                waiter_event=None
                if w.get("waiter_event") is None
                else decode_event(w["waiter_event"], f"waiters[{key!r}].waiter_event"),
            )
        for a in data.get("answers") or []:
            ctx._answers[str(a["key"])] = (int(a["exec_id"]), decode_event(a["event"], f"answers[{a['key']!r}]"))
        for eid, j in dict(data.get("ran") or {}).items():
            ctx._ran[int(eid)] = {"outputs": dict(decode_value(j.get("outputs") or {}, f"ran[{eid}]"))}
        ctx._next_exec = int(data.get("next_exec") or 1)
        return ctx
