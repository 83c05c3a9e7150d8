"""Ctrl-C between any two lines: a call either takes effect whole or leaves the task as it was.

Each sweep raises ``KeyboardInterrupt`` at every nbagent line a call executes (see
``tests/interrupt_harness.py``), then checks the task against a full structural dump taken
before the call (same objects back in place, not copies), checks that nothing is left
running, and that the same call then works and gives what an uninterrupted call gives.

An interrupted step is recorded as a failed attempt (``failures``; the panel shows it and
offers a retry), so the failure log may grow by one ``KeyboardInterrupt`` record. One other
thing may be there: if the interrupt came after the step's tool call ran, the step keeps
that call's output (its ``tool_journal``) and the retry reuses it instead of calling the tool
again (what the tool did is not taken back by a rollback). Nothing else may change.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    CustomSimpleAgentWorker,
    FunctionLLM,
    FunctionTool,
    MessageRole,
    costs,
    seed_ids,
)
from nbagent.runner import txn
from nbagent.workers.react import ReActAgentWorker
from tests.interrupt_harness import diff, dump, sweep

RESULTS: dict[str, str] = {}


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _reply(messages: list[ChatMessage], tools: Any) -> str:
    """A ReAct model that adds 1 three times, then answers: its reply depends only on the
    prompt, so a rolled-back attempt and its retry see the same thing."""
    seen = sum(m.text.count("Observation:") for m in messages)
    if seen < 3:
        return f'Thought: add one more.\nAction: add\nAction Input: {{"a": {seen}, "b": 1}}'
    return "Thought: done.\nAnswer: three"


def _answer(messages: list[ChatMessage], tools: Any) -> str:
    return "Thought: I know this.\nAnswer: three"


def react_runner(reply: Any = _reply, **kw: Any) -> AgentRunner:
    # the same (seeded) task ids in every setup: start the global runner registry afresh, so
    # every run executes the same lines and interrupt point k is the same place each time
    costs._RUNNERS.clear()
    worker = ReActAgentWorker.from_tools(
        [FunctionTool.from_defaults(add)], llm=FunctionLLM(reply, function_calling=False)
    )
    return AgentRunner(worker, **kw)


class Counter(CustomSimpleAgentWorker):
    """Counts to three, saying so in the task's memory: it steps without awaiting, so a sync
    ``run_step`` steps it in place (``run_sync``'s eager path), not on the event loop."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["n"] += 1
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"n={state['n']} input={input}"))
        return AgentChatResponse(response=f"n={state['n']}"), state["n"] >= 3

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


class SuspendingCounter(Counter):
    """Promises to step without awaiting, and suspends anyway: the eager step goes on, on the
    event loop, from where it stopped."""

    steps_synchronously = True

    async def _arun_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        await asyncio.sleep(0)
        return self._run_step(state, task, input)


class Ctx:
    """One setup: a runner and a task that has done ``done`` steps."""

    worker: Any = None  # a worker class to run instead of the ReAct agent

    def __init__(self, done: int, memory: bool = False) -> None:
        seed_ids(12)
        if self.worker is None:
            self.runner = react_runner()
        else:
            costs._RUNNERS.clear()
            self.runner = AgentRunner(self.worker())
        if memory:
            self.runner.chat("warm up")
        self.task = self.runner.create_task("add one three times")
        self.step_ids = []
        for _ in range(done):
            self.step_ids.append(self.runner.state_of(self.task).step_queue[0].step_id)
            self.runner.run_step(self.task)
        self.failures = len(self.runner.state_of(self.task).failures)

    @property
    def tid(self) -> str:
        return self.task.task_id


def _snapshot(ctx: Ctx) -> dict[str, Any]:
    return dump(ctx.runner, ctx.tid, identity=True)


def _reference(done: int, call: Any, make: type[Ctx] = Ctx) -> dict[str, Any]:
    ctx = make(done)
    call(ctx)
    return dump(ctx.runner, ctx.tid)


def _take_journals(dumped: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool journals kept on the steps of a dump (taken out of it)."""
    return [st["state"].pop("tool_journal") for st in dumped["steps"].values()
            if isinstance(st["state"], dict) and "tool_journal" in st["state"]]


def _check_task(call: Any, done: int, make: type[Ctx] = Ctx) -> Any:
    want_after = _reference(done, call, make)

    def check(ctx: Ctx, before: dict[str, Any], where: str) -> None:
        state = ctx.runner.state_of(ctx.tid)
        now = dump(ctx.runner, ctx.tid, identity=True)
        for journal in _take_journals(now):  # only for a call that ran, with what it returned
            outputs = journal["outputs"]
            assert len(outputs) == 1 and state.failures[ctx.failures :], journal
            (out,) = outputs.values()
            assert out[0] == "ToolOutput" and out[1]["tool_name"] == "add" and not out[1]["is_error"], out
        new = state.failures[ctx.failures :]
        assert len(new) <= 1 and all(f.error_type == "KeyboardInterrupt" for f in new), new
        status = now.pop("status")
        assert status == (before["status"] if not new else "failed"), status
        assert now == {k: v for k, v in before.items() if k != "status"}, f"task changed: {diff(before, now)}"
        assert not state.running
        assert not txn.claims(ctx.runner), "the task was left claimed (busy)"
        call(ctx)  # the next call works, and does what an uninterrupted call does
        again = dump(ctx.runner, ctx.tid)
        assert again == want_after, f"retry differs: {diff(want_after, again)}"

    return check


def _run(name: str, done: int, call: Any, make: type[Ctx] = Ctx) -> None:
    result = sweep(name, lambda: make(done), call, _check_task(call, done, make), snapshot=_snapshot)
    RESULTS[name] = str(result)
    print(result)
    assert result.tried > 20, result
    assert not result.broken, f"{result}; first broken points:\n" + "\n".join(result.broken[:8])


def test_run_step_survives_an_interrupt_at_every_line() -> None:
    _run("run_step", 1, lambda c: c.runner.run_step(c.task))


def test_run_step_with_steering_input_survives_an_interrupt_at_every_line() -> None:
    _run("run_step(input=...)", 1, lambda c: c.runner.run_step(c.task, input="now add two"))


class CounterCtx(Ctx):
    worker = Counter


class SuspendingCtx(Ctx):
    worker = SuspendingCounter


def test_run_step_stepped_in_place_survives_an_interrupt_at_every_line() -> None:
    _run("run_step (stepped in place)", 1, lambda c: c.runner.run_step(c.task, input="go on"), CounterCtx)


def test_last_step_stepped_in_place_survives_an_interrupt_at_every_line() -> None:
    _run("run_step (in place, last)", 2, lambda c: _last(c.runner.run_step(c.task)), CounterCtx)


def test_run_step_that_suspends_after_all_survives_an_interrupt_at_every_line() -> None:
    _run("run_step (in place, then on the loop)", 1, lambda c: c.runner.run_step(c.task), SuspendingCtx)


def test_arun_step_survives_an_interrupt_at_every_line() -> None:
    def call(c: Ctx) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(c.runner.arun_step(c.task))
        finally:
            loop.close()

    _run("arun_step", 1, call)


def _last(output: Any) -> None:
    assert output.is_last

def test_last_step_survives_an_interrupt_at_every_line() -> None:
    _run("run_step (last)", 2, lambda c: _last(c.runner.run_step(c.task)))


def test_undo_step_survives_an_interrupt_at_every_line() -> None:
    _run("undo_step", 2, lambda c: c.runner.undo_step(c.task))


def test_goto_step_survives_an_interrupt_at_every_line() -> None:
    _run("goto_step", 2, lambda c: c.runner.goto_step(c.task, c.step_ids[0]))


def test_fork_survives_an_interrupt_at_every_line() -> None:
    _run("fork", 2, lambda c: c.runner.fork(c.task, c.step_ids[1], input="try again"))


def test_chat_survives_an_interrupt_at_every_line() -> None:
    """chat makes a task: interrupted, memory is as before and no task is left running (or
    the exchange is in memory once and its task is finalized); the next chat works."""

    def setup() -> AgentRunner:
        seed_ids(12)
        runner = react_runner(_answer)  # one step per chat: the sweep stays short
        runner.chat("first question")
        return runner

    ref = setup()
    assert len(ref.memory.get_all()) == 2
    ref.chat("second question")
    want_memory = [m.model_dump() for m in ref.memory.get_all()]

    def snapshot(runner: AgentRunner) -> dict[str, Any]:
        return {
            "memory": [m.model_dump() for m in runner.memory.get_all()],
            "tasks": {t: dump(runner, t, identity=True) for t in runner.tasks},
        }

    def check(runner: AgentRunner, before: dict[str, Any], where: str) -> None:
        memory = [m.model_dump() for m in runner.memory.get_all()]
        for tid, old in before["tasks"].items():
            now = dump(runner, tid, identity=True)
            now["memory"] = old["memory"]  # compared below
            assert now == old, f"an earlier task changed: {diff(old, now)}"
        new = [s for t, s in runner.tasks.items() if t not in before["tasks"]]
        assert all(not s.running for s in new)
        assert not txn.claims(runner), "a task was left claimed (busy)"
        if memory == before["memory"]:
            assert all(not s.finalized for s in new)
        else:
            assert memory == want_memory, "memory is neither as before nor as after"
            assert len(new) == 1 and new[0].finalized
        if memory == before["memory"]:
            assert str(runner.chat("second question")) == "three"
            assert [m.model_dump() for m in runner.memory.get_all()] == want_memory

    result = sweep("chat", setup, lambda r: r.chat("second question"), check, snapshot=snapshot)
    RESULTS["chat"] = str(result)
    print(result)
    assert result.tried > 50, result
    assert not result.broken, f"{result}; first broken points:\n" + "\n".join(result.broken[:8])


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    if RESULTS:
        print("\ninterrupt points: " + "; ".join(RESULTS.values()))


# ----- the parallel runner ---------------------------------------------------------------------


def _consistent(state: Any) -> None:
    """No step running; every step done once or queued once; outputs and completed agree."""
    assert not state.running, f"left running: {state.running}"
    done_ids = [o.task_step.step_id for o in state.completed_steps]
    assert len(done_ids) == len(set(done_ids)) and set(done_ids) == set(state.outputs)
    assert all(state.outputs[o.task_step.step_id] is o for o in state.completed_steps)
    queued = [s.step_id for s in state.step_queue]
    assert len(queued) == len(set(queued)) and not set(queued) & set(done_ids), (queued, done_ids)
    for sid in done_ids:
        for nid in state.steps[sid].next_steps:
            assert nid in state.outputs or nid in queued, f"step {nid} is lost"


def test_parallel_run_survives_an_interrupt_at_every_line() -> None:
    """run_until_done over a diamond DAG whose branches interleave: after an interrupt at any
    line no branch is left running, no task is left on the loop, no step is lost or doubled,
    and the next call neither re-raises a stale KeyboardInterrupt nor hangs: it finishes."""
    from tests.test_parallel_runner import DIAMOND, DagWorker

    from nbagent import ParallelAgentRunner, _sync

    async def yield_then(step: Any, task: Any) -> str:
        await asyncio.sleep(0)
        return str(step.step_state["name"])

    def setup() -> Any:
        seed_ids(12)
        costs._RUNNERS.clear()
        worker = DagWorker(DIAMOND, "j", {n: yield_then for n in DIAMOND})
        runner = ParallelAgentRunner(worker)
        task = runner.create_task("go")
        runner.run_step(task)  # the root: plans a, b, c, j
        return runner, task

    def check(ctx: Any, before: Any, where: str) -> None:
        runner, task = ctx
        state = runner.state_of(task)
        _consistent(state)
        assert not txn.claims(runner), "the task was left claimed (busy)"
        loop = _sync._thread_loop()
        assert not [t for t in asyncio.all_tasks(loop) if not t.done()], "a task was left on the loop"
        if state.completed_steps and state.completed_steps[-1].is_last:
            out = state.completed_steps[-1]  # the interrupt came after the last step was recorded
        else:
            out = runner.run_until_done(task)
        assert str(out.output) == "j"
        _consistent(state)
        assert sorted(o.task_step.step_state["name"] for o in state.completed_steps) == ["a", "b", "c", "j", "root"]

    result = sweep(
        "ParallelAgentRunner.run_until_done", setup, lambda c: c[0].run_until_done(c[1]), check,
        snapshot=lambda c: None,
    )
    RESULTS["parallel"] = str(result)
    print(result)
    assert result.tried > 100, result
    assert not result.broken, f"{result}; first broken points:\n" + "\n".join(result.broken[:8])
