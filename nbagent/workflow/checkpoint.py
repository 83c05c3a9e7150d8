"""Checkpoints taken after every step of a workflow run, and the callback that receives them.

``workflow.run(..., checkpoint_callback=fn)`` calls ``fn`` once each step has been handled
(its events queued), in step-wise runs and in ordinary ones. ``fn`` may be sync or async and
takes either

- one argument, a ``Checkpoint`` (``checkpoint.ctx_state`` is ``ctx.to_dict()`` at that moment:
  ``workflow.run_from(checkpoint)`` resumes the run from there, in this process or another), or
- the reference's keywords ``run_id, ctx, last_completed_step, input_ev, output_ev`` (``ctx`` is
  the live Context; code written for the reference runs unchanged).

An exception raised by the callback ends the run with that exception: a checkpoint that could
not be kept is not silently skipped. ``WorkflowCheckpointer`` (``checkpointer.py``) keeps them
by run id, as the reference's checkpointer does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from nbagent.ids import new_id
from nbagent.workflow.context import Context
from nbagent.workflow.errors import CheckpointError
from nbagent.workflow.events import Event
from nbagent.workflow.serde import decode_event, encode_event

if TYPE_CHECKING:
    from nbagent.workflow.workflow import Workflow

__all__ = ["Checkpoint", "CheckpointCallback", "checkpoint_style", "call_checkpoint_callback"]

CheckpointCallback = Callable[..., Any]
_REFERENCE_KEYWORDS = ("run_id", "ctx", "last_completed_step", "input_ev", "output_ev")


class Checkpoint(BaseModel):
    """The state of a run right after one step: enough to resume it (``ctx_state``).

    ``output_event`` is the first event the step produced (None if it produced none);
    ``output_events`` all of them.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id_: str = Field(default_factory=new_id)
    run_id: str
    last_completed_step: str | None
    input_event: Event | None = None
    output_event: Event | None = None
    output_events: list[Event] = Field(default_factory=list)
    ctx_state: dict[str, Any]

    def context(self, workflow: Workflow) -> Context:
        """A Context for ``workflow`` loaded from this checkpoint (``workflow.run(ctx=...)``)."""
        return Context.from_dict(workflow, self.ctx_state)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe data (``json.dumps`` takes it as is); ``Checkpoint.from_dict`` reads it."""
        return {
            "id_": self.id_,
            "run_id": self.run_id,
            "last_completed_step": self.last_completed_step,
            "input_event": None if self.input_event is None else encode_event(self.input_event, "input_event"),
            "output_events": [encode_event(e, f"output_events[{i}]") for i, e in enumerate(self.output_events)],
            "ctx_state": self.ctx_state,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        """The Checkpoint that ``to_dict`` saved (events decoded through the type allow-list);
        CheckpointError names what is missing or not allowed."""
        if not isinstance(data, dict) or "ctx_state" not in data:
            raise CheckpointError("not a saved Checkpoint: expected a dict with 'ctx_state'")
        outputs = [decode_event(e, f"output_events[{i}]") for i, e in enumerate(data.get("output_events") or [])]
        raw_input = data.get("input_event")
        return cls(
            id_=str(data.get("id_") or new_id()),
            run_id=str(data.get("run_id") or ""),
            last_completed_step=data.get("last_completed_step"),
            input_event=None if raw_input is None else decode_event(raw_input, "input_event"),
            output_event=outputs[0] if outputs else None,
            output_events=outputs,
            ctx_state=dict(data["ctx_state"]),
        )

    def __repr__(self) -> str:
        out = ", ".join(type(e).__name__ for e in self.output_events) or "nothing"
        return f"Checkpoint(after {self.last_completed_step!r} -> {out}, run_id={self.run_id!r})"


def checkpoint_style(callback: Any) -> str:
    """``"checkpoint"`` (one argument) or ``"reference"`` (the reference's keywords)."""
    if not callable(callback):
        raise TypeError(
            f"checkpoint_callback must be callable: fn(checkpoint) or "
            f"fn(run_id, ctx, last_completed_step, input_ev, output_ev); got {type(callback).__name__}"
        )
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return "checkpoint"
    names = {p.name for p in params}
    if "checkpoint" in names:
        return "checkpoint"
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params) or set(_REFERENCE_KEYWORDS) <= names:
        return "reference"
    positional = [
        p for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) >= 1 or any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return "checkpoint"
    raise TypeError(
        "checkpoint_callback must take one argument (the Checkpoint) or the keywords "
        f"{', '.join(_REFERENCE_KEYWORDS)}; got a callable with parameters {[p.name for p in params]}"
    )


async def call_checkpoint_callback(
    callback: Any,
    style: str,
    *,
    run_id: str,
    ctx: Context,
    step: str,
    input_event: Event,
    output_events: list[Event],
) -> None:
    """Call ``callback`` the way it wants to be called; await it if it is async."""
    first = output_events[0] if output_events else None
    if style == "reference":
        result = callback(
            run_id=run_id, ctx=ctx, last_completed_step=step, input_ev=input_event, output_ev=first
        )
    else:
        checkpoint = Checkpoint(
            run_id=run_id,
            last_completed_step=step,
            input_event=input_event,
            output_event=first,
            output_events=list(output_events),
            ctx_state=ctx.to_dict(),
        )
        result = callback(checkpoint)
    if inspect.isawaitable(result):
        await result
