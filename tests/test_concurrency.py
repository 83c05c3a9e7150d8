"""Two callers on one task, and interrupting a run whose model or tool blocks.

- Two threads (or the panel's background run and a cell) on one task: exactly one step runs,
  the other call gets ``TaskStateError`` saying the task is busy, and the running step's
  input is never overwritten.
- A real SIGINT (what Ctrl-C and Jupyter's "Interrupt kernel" send) while a synchronous model
  blocks: the step is rolled back before ``KeyboardInterrupt`` reaches the caller, the task
  is usable at once, and what the model returns later is never committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    ChatMessage,
    FunctionLLM,
    FunctionTool,
    ParallelAgentRunner,
    TaskStateError,
    TaskStatus,
    _sync,
)
from nbagent.llms.scripted import ScriptedLLM
from nbagent.workers.react import ReActAgentWorker


class Gate:
    """A model reply that waits until released: the step is "running" meanwhile."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def reply(self, messages: list[ChatMessage], tools: Any) -> str:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10), "the test never released the model"
        return "Thought: done.\nAnswer: late answer"


def gated_runner(cls: type = AgentRunner) -> tuple[Any, Any, Gate]:
    gate = Gate()
    worker = ReActAgentWorker.from_tools([], llm=FunctionLLM(gate.reply, function_calling=False))
    runner = cls(worker)
    return runner, runner.create_task("question"), gate


@pytest.mark.parametrize("cls", [AgentRunner, ParallelAgentRunner])
def test_a_second_thread_gets_busy_and_never_touches_the_running_step(cls: type) -> None:
    runner, task, gate = gated_runner(cls)
    state = runner.state_of(task)
    step = state.step_queue[0]
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(runner.run_step(task)))
    first.start()
    assert gate.entered.wait(5)
    for call in (
        lambda: runner.run_step(task, input="overwrite it"),
        lambda: runner.run_step(task, step=step, input="overwrite it"),
        lambda: runner.undo_step(task),
    ):
        errors: list[BaseException] = []

        def other(call: Any = call) -> None:
            try:
                call()
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join(5)
        assert len(errors) == 1 and isinstance(errors[0], TaskStateError), errors
        assert "busy" in str(errors[0]) or "running" in str(errors[0])
    assert step.input == "question"  # never overwritten
    gate.release.set()
    first.join(5)
    assert [str(r.output) for r in results] == ["late answer"]
    assert gate.calls == 1 and len(state.completed_steps) == 1 and not state.running


def test_many_threads_racing_on_one_task_run_each_step_once() -> None:
    """Eight threads call run_step on one task until it is done: every call either runs a
    step or gets TaskStateError; no ValueError, no step run twice or lost."""

    def reply(messages: list[ChatMessage], tools: Any) -> str:
        time.sleep(0.001)  # let the threads interleave
        n = sum(m.text.count("Observation:") for m in messages)
        if n < 6:
            return f'Thought: more.\nAction: add\nAction Input: {{"a": {n}, "b": 1}}'
        return "Thought: done.\nAnswer: six"

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    worker = ReActAgentWorker.from_tools([FunctionTool.from_defaults(add)], llm=FunctionLLM(reply, function_calling=False))
    runner = AgentRunner(worker)
    task = runner.create_task("count")
    state = runner.state_of(task)
    unexpected: list[BaseException] = []
    ran: list[str] = []

    def hammer() -> None:
        while not (state.completed_steps and state.completed_steps[-1].is_last):
            try:
                ran.append(runner.run_step(task).task_step.step_id)
            except TaskStateError:
                time.sleep(0.0005)
            except BaseException as e:  # anything else is a bug
                unexpected.append(e)
                return

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not unexpected, unexpected
    done = [o.task_step.step_id for o in state.completed_steps]
    assert len(done) == len(set(done)) == len(ran) and sorted(done) == sorted(ran)
    assert state.status == TaskStatus.COMPLETED and not state.step_queue and not state.running
    assert str(state.completed_steps[-1].output) == "six"


def test_panel_style_background_run_and_a_cell_on_one_task() -> None:
    """A run on an event loop in another thread (the panel's) and a sync call from "a cell"."""
    runner, task, gate = gated_runner()
    loop = asyncio.new_event_loop()
    bg = threading.Thread(target=loop.run_forever, daemon=True)
    bg.start()
    try:
        fut = asyncio.run_coroutine_threadsafe(runner.arun_step(task), loop)
        assert gate.entered.wait(5)
        with pytest.raises(TaskStateError, match="busy"):
            runner.run_step(task, input="from the cell")
        with pytest.raises(TaskStateError, match="busy"):
            runner.goto_step(task, runner.state_of(task).steps.__iter__().__next__())
        gate.release.set()
        assert str(fut.result(5).output) == "late answer"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        bg.join(5)
        loop.close()


# ----- a real SIGINT while a synchronous model blocks --------------------------------------------


def _interrupt_when(entered: threading.Event) -> threading.Thread:
    def fire() -> None:
        if entered.wait(5):
            time.sleep(0.05)  # the caller is now waiting for the step
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]

    t = threading.Thread(target=fire, daemon=True)
    t.start()
    return t


def _in_a_notebook_cell(cell: Any) -> None:
    """Run ``cell()`` the way ipykernel does: a loop runs in the main thread and SIGINT
    raises KeyboardInterrupt there (asyncio.run would install a handler that only cancels)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cell())
    finally:
        loop.close()


def _assert_rolled_back_and_usable(runner: Any, task: Any, gate: Gate, before_scratch: int) -> None:
    state = runner.state_of(task)
    # at once: nothing running, the step back at the head of the queue, recorded as failed
    assert not state.running and len(state.step_queue) == 1 and not state.completed_steps
    assert state.status == TaskStatus.FAILED and state.failures[-1].error_type in ("KeyboardInterrupt", "CancelledError")
    gate.release.set()  # the model now returns its answer...
    time.sleep(0.3)
    assert not state.completed_steps and not state.running  # ...and it is never committed
    assert len(task.scratch_memory.get_all()) == before_scratch
    assert not runner.memory.get_all()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_ctrl_c_in_plain_python_while_the_model_blocks() -> None:
    runner, task, gate = gated_runner()
    firing = _interrupt_when(gate.entered)
    with pytest.raises(KeyboardInterrupt):
        runner.run_step(task)
    firing.join(5)
    _assert_rolled_back_and_usable(runner, task, gate, 0)
    gate2 = ScriptedLLM(["Thought: ok.\nAnswer: fine"])
    runner.agent_worker.llm = gate2
    assert str(runner.run_step(task).output) == "fine"  # the next call works


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_interrupt_kernel_in_a_notebook_while_the_model_blocks() -> None:
    """Jupyter: a loop is running in the main thread and the sync call runs on the portal."""
    runner, task, gate = gated_runner()

    async def cell() -> None:
        firing = _interrupt_when(gate.entered)
        with pytest.raises(KeyboardInterrupt):
            runner.run_step(task)
        firing.join(5)

    _in_a_notebook_cell(cell)
    _assert_rolled_back_and_usable(runner, task, gate, 0)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_a_model_that_blocks_the_loop_never_commits_after_the_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that blocks the loop itself (sync code inside an async method): the interrupt
    cannot stop it, but when it returns its step is rolled back instead of committed."""
    monkeypatch.setattr(_sync, "SETTLE_S", 0.1)
    gate = Gate()

    class Blocking(ScriptedLLM):
        async def _achat(self, messages: Any, tools: Any, tool_choice: Any, **kw: Any) -> Any:
            gate.reply(messages, tools)  # blocks the portal loop: no await
            return await super()._achat(messages, tools, tool_choice, **kw)

    worker = ReActAgentWorker.from_tools([], llm=Blocking(["Thought: t.\nAnswer: late answer"], function_calling=False))
    runner = AgentRunner(worker)
    task = runner.create_task("question")
    state = runner.state_of(task)

    async def cell() -> None:
        firing = _interrupt_when(gate.entered)
        with pytest.raises(KeyboardInterrupt):
            runner.run_step(task)
        firing.join(5)

    _in_a_notebook_cell(cell)
    assert state.running  # still blocked: it could not be stopped...
    gate.release.set()
    deadline = time.monotonic() + 5
    while state.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not state.running and not state.completed_steps  # ...and it did not commit
    assert len(state.step_queue) == 1 and state.failures[-1].error_type == "CancelledError"
    assert not task.scratch_memory.get_all()


def test_panel_stop_while_a_synchronous_model_blocks() -> None:
    """The panel's Stop (cancel) while a blocking model runs on the kernel's loop: the loop
    stays free (the model runs off it), the step is rolled back at once, and the answer the
    model returns afterwards is never committed."""
    runner, task, gate = gated_runner()

    async def main() -> None:
        panel = runner.panel(task)
        panel.step()
        for _ in range(200):
            if gate.entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert gate.entered.is_set()
        started = time.monotonic()
        panel.stop(cancel=True)  # the click is handled: the loop is not blocked
        assert await panel.wait() is None
        assert time.monotonic() - started < 1.0  # at once, not when the model returns
        state = runner.state_of(task)
        assert not state.running and not state.completed_steps and len(state.step_queue) == 1
        gate.release.set()
        await asyncio.sleep(0.3)
        assert not state.completed_steps and not task.scratch_memory.get_all()
        gate.release.clear()
        runner.agent_worker.llm = ScriptedLLM(["Thought: ok.\nAnswer: fine"])
        panel.step()  # usable at once
        out = await panel.wait()
        assert str(out.output) == "fine"

    asyncio.run(main())
