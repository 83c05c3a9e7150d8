"""Steps whose reply is still streaming when ``stream_step`` returns (issue 29).

A streamed reply is the same reply as unstreamed. Its text goes to the caller as it comes, but
only its end says what the step is: text followed by tool calls is a step like any other (the
calls run, or wait for approval), not the answer. So such a step keeps running while its
caller reads it: the runner wraps the reply's token source (``stream_on``), and when the
source ends the worker's ``finish_step`` gives the step's real output, which the returned
output takes (``TaskStepOutput.settle``), and the step commits; a reply that breaks, or a
read that is interrupted, puts the step back in the queue as a failed step.

Any later call on the task first reads what is left (``end_streamed_step``), so it sees the
task as ``run_step`` would have left it. ``stream_chat`` reads on to the answer
(``chat_stream``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbagent import events as ev
from nbagent._lazy import LazyModule
from nbagent.events import StepContext, _reset_current, _set_current
from nbagent.engine import txn
from nbagent.engine.state import TaskState

if TYPE_CHECKING:
    from nbagent.engine.step_engine import StepEngine
    from nbagent.schema import StreamingAgentChatResponse, TaskStepOutput

__all__ = ["is_open", "stream_on", "end_streamed_step", "aend_streamed_step", "chat_stream"]


@LazyModule
def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import schema as module

    return module


def is_open(output: TaskStepOutput) -> bool:
    """The step's reply is still streaming (its end has not been read)."""
    stream = output.output
    return isinstance(stream, schema.StreamingAgentChatResponse) and not stream.is_done and stream.error is None


def stream_on(
    runner: StepEngine, state: TaskState, att: txn.StepAttempt, ctx: StepContext, output: TaskStepOutput, start: float
) -> None:
    """Let a step's reply go on streaming to its caller while the step runs: its tokens are
    reported (``TokenStreamed``) as the caller reads them, the model's usage counts for the
    step, and the step ends, or fails, where the stream does."""
    stream = output.output
    assert isinstance(stream, schema.StreamingAgentChatResponse)
    state.streaming = output
    ctx.tokens_muted = True  # the stream reports what its reader gets, once
    tid, sid = state.task_id, ctx.step_id
    events = runner.events
    stream.add_token_callback(
        lambda tok: events.emit(ev.TokenStreamed(tid, step_id=sid, token=tok)) if events.wants(ev.TokenStreamed) else None
    )

    async def until_the_end(source: Any) -> AsyncIterator[str]:
        try:
            while True:
                token = _set_current(ctx)  # inside the step: the model's usage is this step's
                try:
                    piece = next(source) if isinstance(source, Iterator) else await source.__anext__()
                except (StopIteration, StopAsyncIteration):
                    break
                finally:
                    _reset_current(token)
                yield piece
            finish, stream.finish_step = stream.finish_step, None  # used once; kept by nothing
            token = _set_current(ctx)
            try:  # the reply has ended: what does it make of the step?
                final = None if finish is None else await finish(stream.response)
            finally:
                _reset_current(token)
            if final is not None:
                output.settle(final)
            runner._end_step(state, att, ctx, output, time.perf_counter() - start)
        except BaseException as error:  # a broken reply, an interrupted read: the step goes back
            runner._abort_step(state, att, error)
            raise

    stream.wrap_source(until_the_end)
    # a read that breaks where ``until_the_end`` cannot catch it (an interrupt on a line the
    # generator has not entered its ``try`` on) still puts the step back
    stream.add_error_callback(lambda error: runner._abort_step(state, att, error))


async def aend_streamed_step(state: TaskState) -> None:
    """A step whose streamed reply nobody read to its end ends now (its tokens stay in its
    response), so that the call that needs the task sees it as ``run_step`` left it."""
    out = state.streaming
    if out is not None and isinstance(out.output, schema.StreamingAgentChatResponse):
        await out.output.aget_response()


def end_streamed_step(state: TaskState) -> None:
    """``aend_streamed_step`` from sync code (undo, skip, goto, fork, decisions, abandon)."""
    out = state.streaming
    if out is not None and isinstance(out.output, schema.StreamingAgentChatResponse):
        out.output.get_response()


def chat_stream(runner: StepEngine, task_id: str, first: TaskStepOutput) -> StreamingAgentChatResponse:
    """``stream_chat``'s answer when it starts while a step's reply is still streaming.

    The model's words come as they are said. If that step turns out to call tools, the task
    goes on as ``chat`` would, until its answer: what a later step says follows a blank line,
    and ``response`` starts again there, so that it ends as the answer alone (what ``chat``
    answers), while the tokens read keep everything said.
    """
    box: list[StreamingAgentChatResponse] = []

    async def tokens() -> AsyncIterator[str]:
        chat, out, spoke = box[0], first, False
        while True:
            async for piece, anew in _what_it_says(out):
                if anew and spoke:
                    yield "\n\n"  # what an earlier step said was not the answer
                    chat.response = ""
                spoke = True
                yield piece
            if out.is_last:
                break
            out = await runner._arun_to_end(task_id, "stream", "auto")
        final = runner.finalize_response(task_id, out)
        chat.sources = list(final.sources)
        chat.metadata.update(getattr(final, "metadata", None) or {})
        chat.structured_response = final.structured_response

    chat = schema.StreamingAgentChatResponse(tokens(), strip_end=True)
    box.append(chat)
    return chat


async def _what_it_says(out: TaskStepOutput) -> AsyncIterator[tuple[str, bool]]:
    """The pieces a step says to the chat stream, each with whether it starts a new part: a
    reply still streaming, read to its end (the step ends with it); then, from the last step,
    its answer if that is not what streamed (a return_direct tool's output)."""
    stream = out.output
    if isinstance(stream, schema.StreamingAgentChatResponse) and not stream.is_done:
        anew = True
        async for piece in stream.async_response_gen():
            yield piece, anew
            anew = False
        if out.output is stream:
            return
    if out.is_last:
        answer = out.output
        text = "" if answer is None else str(getattr(answer, "response", answer))
        if text:
            yield text, True
