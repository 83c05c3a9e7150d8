"""Ctrl-C at every line of a streamed step, its stream read included (issue 29, item 1).

A step whose reply streams ends when its stream has been read. Interrupted anywhere, from
``stream_step`` to the last token read, the call leaves the task as it was (the step back in
the queue, one failed attempt recorded), or took effect whole (past the step's commit), or,
interrupted in the reader's own lines between two tokens, left the step streaming as a
``break`` would: reading the rest ends it exactly as an unbroken read. Nothing is left claimed,
and the next call does what an uninterrupted one does.
(tests/interrupt_harness.py raises the KeyboardInterrupt; tests/test_interrupts.py does the
same for the unstreamed calls.)
"""

from __future__ import annotations

from typing import Any

from nbagent import AgentRunner, ChatMessage, FunctionLLM, FunctionTool, costs, seed_ids
from nbagent.runner import txn
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.react import ReActAgentWorker
from tests.interrupt_harness import diff, dump, sweep


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _fc_reply(messages: list[ChatMessage], tools: Any) -> Any:
    """Text, then a tool call; once the tool has answered, the answer (a function of the
    prompt, so an attempt and its retry see the same thing)."""
    if any(m.role.value == "tool" for m in messages):
        return "The sum is 3."
    return {"content": "I will add them.", "tool_calls": [{"id": "call_a", "name": "add", "arguments": {"a": 1, "b": 2}}]}


def _react_reply(messages: list[ChatMessage], tools: Any) -> str:
    return "Thought: I know this.\nAnswer: three, streamed in pieces"


def _runner(kind: str) -> AgentRunner:
    costs._RUNNERS.clear()  # the same lines run in every setup
    tools = [FunctionTool.from_defaults(add)]
    if kind == "fc":
        return AgentRunner(FunctionCallingAgentWorker(tools, FunctionLLM(_fc_reply)))
    return AgentRunner(ReActAgentWorker.from_tools(tools, llm=FunctionLLM(_react_reply, function_calling=False)))


class Ctx:
    def __init__(self, kind: str) -> None:
        seed_ids(7)
        self.runner = _runner(kind)
        self.task = self.runner.create_task("1 + 2?")
        self.failures = 0


def _streamed_step(ctx: Ctx) -> None:
    out = ctx.runner.stream_step(ctx.task)
    str(out.output)  # read to its end: the step ends here


def _sweep(kind: str) -> None:
    ref = Ctx(kind)
    _streamed_step(ref)
    want_after = dump(ref.runner, ref.task.task_id)

    def check(ctx: Ctx, before: dict[str, Any], where: str) -> None:
        state = ctx.runner.state_of(ctx.task)
        if state.streaming is not None:
            # the reader was stopped between two tokens, as by a `break`: the step is still
            # streaming; reading the rest ends it as an uninterrupted read would have
            assert state.running == {state.streaming.task_step.step_id}, state.running
            str(state.streaming.output)
            again = dump(ctx.runner, ctx.task.task_id)
            assert again == want_after, f"the rest read differs: {diff(want_after, again)}"
            return
        assert not state.running, f"left running: {state.running}"
        assert not txn.claims(ctx.runner), "the task was left claimed (busy)"
        now = dump(ctx.runner, ctx.task.task_id)
        if now == want_after:
            return  # interrupted past the commit: the step took effect whole
        new = state.failures[ctx.failures :]  # none if it came before the step was taken
        assert len(new) <= 1 and all(f.error_type in ("KeyboardInterrupt", "CancelledError") for f in new), new
        for st in now["steps"].values():  # a tool call that ran is kept for the retry, not run again
            if isinstance(st["state"], dict):
                st["state"].pop("tool_journal", None)
        status = now.pop("status")
        assert status == (before["status"] if not new else "failed"), status
        same = {k: v for k, v in before.items() if k != "status"}
        assert now == same, f"task changed: {diff(same, now)}"
        _streamed_step(ctx)  # the retry does what an uninterrupted call does
        again = dump(ctx.runner, ctx.task.task_id)
        assert again == want_after, f"retry differs: {diff(want_after, again)}"

    result = sweep(
        f"stream_step + read ({kind})", lambda: Ctx(kind), _streamed_step, check,
        snapshot=lambda c: dump(c.runner, c.task.task_id),
    )
    print(result)
    assert result.tried > 50, result
    assert not result.broken, f"{result}; first broken points:\n" + "\n".join(result.broken[:8])


def test_a_streamed_reply_with_text_then_calls_survives_an_interrupt_at_every_line() -> None:
    _sweep("fc")


def test_a_streamed_react_answer_survives_an_interrupt_at_every_line() -> None:
    _sweep("react")
