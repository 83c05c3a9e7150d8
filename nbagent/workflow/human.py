"""People in the loop: a step (or a tool) asks a question and the run waits for the answer.

``await ask_human(ctx, "Delete the file?")`` writes an ``InputRequiredEvent`` to the stream and
waits for a ``HumanResponseEvent``. Answer from code with ``handler.respond("yes")`` (or
``handler.send_event(HumanResponseEvent(...))``), or in a notebook with
``handler.input_box()``. A run waiting for an answer can be checkpointed and resumed.
"""

from __future__ import annotations

from typing import Any

from nbagent.workflow.context import Context, current_context
from nbagent.workflow.events import HumanResponseEvent, InputRequiredEvent

__all__ = ["ask_human"]


async def ask_human(
    ctx: Context | None, question: str, *, timeout: float | None = None, **fields: Any
) -> str:
    """Ask the person ``question`` and return their answer's text.

    ``ctx`` may be None inside a tool (the running step's context is used). ``fields`` go on the
    question event (e.g. ``user_name="Ada"``) and are required on the answer too.
    """
    ctx = ctx or current_context()
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"ask_human needs a question (non-empty str), got {question!r}")
    answer = await ctx.wait_for_event(
        HumanResponseEvent,
        waiter_event=InputRequiredEvent(prefix=question, **fields),
        requirements=dict(fields),
        timeout=timeout,
    )
    return answer.response
