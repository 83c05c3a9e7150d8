"""The runtime with no threads (Pyodide, in a browser page or Node), simulated here: no thread
may start, and every sync call is made from a running event loop, as in a notebook cell. A
sync call is then stepped in place on that loop; one that waits after all goes on through
WebAssembly stack switching (JSPI: ``pyodide.ffi.run_sync``) where there is some, and
elsewhere is rolled back with an error that says to await the async method."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nbagent import AgentRunner, FunctionTool, ReActAgent, ScriptedLLM, _sync, seed_ids
from tests.interrupt_harness import dump
from tests.test_sync_eager import Counter, Suspending


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CALL = 'Thought: I need add.\nAction: add\nAction Input: {"a": 2, "b": 3}'
ANSWER = "Thought: Done.\nAnswer: 5."
_REAL_START = threading.Thread.start
_REAL_RUN_IN_EXECUTOR = asyncio.BaseEventLoop.run_in_executor


def _agent() -> ReActAgent:
    seed_ids(3)
    return ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER] * 3))


def _session(agent: ReActAgent) -> dict[str, Any]:
    """What a learner does with the sync API in a notebook: steps, undo, steps, chat."""
    task = agent.create_task("What is 2 + 3?")
    first = agent.run_step(task)
    agent.undo_step(task)
    outs = [agent.run_step(task)]
    while not outs[-1].is_last and len(outs) < 4:
        outs.append(agent.run_step(task))
    answer = str(agent.finalize_response(task))
    reply = str(agent.chat("And again?"))
    return {"first": str(first.output), "outs": [(str(o.output), o.is_last) for o in outs], "answer": answer,
            "reply": reply, "task": dump(agent, task.task_id)}


def _run_at_once(loop: asyncio.AbstractEventLoop, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
    done = loop.create_future()
    try:
        done.set_result(func(*args))
    except BaseException as error:  # noqa: BLE001 - the future carries it, as an executor's does
        done.set_exception(error)
    return done


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Pyodide as far as ``_sync`` can tell: no thread starts (it would raise, as there), no JSPI."""
    started: list[str] = []

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        raise RuntimeError("can't start new thread")

    # the portal thread, if a test before started it, is not this runtime's
    monkeypatch.setattr(_sync, "_portal", None)
    monkeypatch.setattr(threading.Thread, "start", start)
    # Pyodide's loop runs what an executor would run at once, in this thread (it cannot
    # start one): so does every loop here (``asyncio.to_thread``, a sync tool's call)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", _run_at_once)
    monkeypatch.setattr(_sync, "NO_THREADS", True)
    monkeypatch.setattr(_sync, "_jspi_wait", lambda: None)
    yield started


def _in_a_cell(fn: Any) -> Any:
    """Run ``fn()`` from a running event loop, as a notebook cell (or Pyodide's page) does."""

    async def cell() -> Any:
        return fn()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(cell())
    finally:
        loop.close()


def test_without_threads_the_sync_api_works_in_a_cell_as_elsewhere(no_threads: list[str]) -> None:
    here = _in_a_cell(lambda: _session(_agent()))
    assert no_threads == []  # no thread was even tried
    assert here["answer"] == "5." and here["outs"][-1][1] is True
    with pytest.MonkeyPatch.context() as laptop:  # the same session with threads: the portal path
        laptop.setattr(threading.Thread, "start", _REAL_START)
        laptop.setattr(asyncio.BaseEventLoop, "run_in_executor", _REAL_RUN_IN_EXECUTOR)
        laptop.setattr(_sync, "NO_THREADS", False)
        elsewhere = _in_a_cell(lambda: _session(_agent()))
    assert here == elsewhere


def test_a_step_that_waits_is_rolled_back_and_the_error_says_to_await(no_threads: list[str]) -> None:
    Suspending.runs = 0
    runner = AgentRunner(Suspending())
    task = runner.create_task("count")
    before = dump(runner, task.task_id)

    async def cell() -> Any:
        with pytest.raises(_sync.CannotWaitHere, match=r"await agent\.arun_step\(task\)") as info:
            runner.run_step(task)
        after = dump(runner, task.task_id)
        assert after.pop("status") == "failed" and before.pop("status") == "pending"
        assert after == before  # the step is still queued, nothing else changed
        assert runner.state_of(task).failures[-1].error_type == "CannotWaitHere"
        assert info.value.__traceback__ is not None
        return await runner.arun_step(task)  # what the message says works

    out = asyncio.run(cell())
    assert str(out.output) == "n=1" and Suspending.runs == 2  # the rolled back try, then the awaited one
    assert no_threads == []


def test_with_jspi_a_step_that_waits_goes_on_on_the_loop(no_threads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """JSPI simulated where it can be: with no loop running yet (a script's top level), its
    ``run_sync`` is the loop running the awaitable to its end."""
    loop = _sync._thread_loop()
    waited: list[Any] = []

    def jspi_run_sync(awaitable: Any) -> Any:
        waited.append(awaitable)
        return loop.run_until_complete(awaitable)

    monkeypatch.setattr(_sync, "_jspi_wait", lambda: jspi_run_sync)
    Suspending.runs = 0
    runner = AgentRunner(Suspending())
    task = runner.create_task("count")
    outs = [runner.run_step(task) for _ in range(3)]
    assert [str(o.output) for o in outs] == ["n=1", "n=2", "n=3"] and outs[-1].is_last
    assert Suspending.runs == 3 and len(waited) == 3  # each step ran once, and waited through JSPI
    assert asyncio.events._get_running_loop() is None
    assert no_threads == []


def test_a_worker_that_never_waits_needs_no_jspi(no_threads: list[str]) -> None:
    runner = AgentRunner(Counter())
    task = runner.create_task("count")
    outs = _in_a_cell(lambda: [runner.run_step(task) for _ in range(3)])
    assert [o.is_last for o in outs] == [False, False, True]
    assert no_threads == []


def test_a_parallel_run_waits_for_its_branches_so_without_jspi_it_says_to_await(no_threads: list[str]) -> None:
    """A parallel run's branches are tasks of the loop: a sync call cannot wait for them
    without JSPI. It is rolled back (its rollback ends on the loop, the cell going on) and
    the awaited call then runs it."""
    from nbagent import ParallelAgentRunner, ReActAgentWorker

    seed_ids(3)
    worker = ReActAgentWorker.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER]))
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("2 + 3?")
    before = dump(runner, task.task_id)

    async def cell() -> Any:
        with pytest.raises(_sync.CannotWaitHere, match="Await the async method"):
            runner.run_steps_in_queue(task)
        for _ in range(3):  # the loop runs between cells
            await asyncio.sleep(0)
        after = dump(runner, task.task_id)
        after.pop("status"), before.pop("status")
        assert after == before  # rolled back: the first step is queued again
        return await runner.arun_until_done(task)

    out = _in_a_cell_async(cell)
    assert out.is_last and str(out.output) == "5."
    assert no_threads == []


def _in_a_cell_async(cell: Any) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(cell())
    finally:
        loop.close()
