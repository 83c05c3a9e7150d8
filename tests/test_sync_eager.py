"""``run_sync(coro, eager=True)``: a sync ``run_step`` of a worker that steps without awaiting
is stepped in place, with no event loop round trip. It is an early exit of the general path,
so everything it gives must be what the loop gives: the same task state, events, errors and
tracebacks, the same context, and a worker that suspends after all goes on on the loop from
where it stopped, its step run exactly once."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    CustomSimpleAgentWorker,
    FnAgentWorker,
    MessageRole,
    _sync,
    seed_ids,
)
from nbagent import events as ev
from nbagent.messages import TokenUsage
from tests.interrupt_harness import Interrupter, dump

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("test_mark", default="unset")


class Counter(CustomSimpleAgentWorker):
    target: int = 3
    fail_at: int = 0

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0, "seen": []}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["n"] += 1
        state["seen"].append(input)
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"n={state['n']}"))
        if state["n"] == self.fail_at:
            raise ValueError(f"boom at {state['n']}")
        return AgentChatResponse(response=f"n={state['n']}"), state["n"] >= self.target

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


class Suspending(Counter):
    """Says it steps without awaiting, then awaits a timer, the loop and a task: the step
    must go on on the event loop, in its own context, and run once."""

    steps_synchronously = True
    runs: int = 0

    async def _arun_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        type(self).runs += 1
        loop = asyncio.get_running_loop()
        MARK.set("inside")
        ev.record_llm_call(TokenUsage(prompt_tokens=1, completion_tokens=2, total_tokens=3), 0.0)
        await asyncio.sleep(0)  # a bare yield
        await asyncio.sleep(0.001)  # a timer on the loop
        assert asyncio.get_running_loop() is loop and asyncio.current_task() is not None
        assert MARK.get() == "inside"  # the context it started in goes on with it
        ev.record_llm_call(TokenUsage(prompt_tokens=10, completion_tokens=20, total_tokens=30), 0.0)
        return self._run_step(state, task, input)


def _loop_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sync, "_EAGER_OK", False)  # the general path: run_until_complete


def _run_all(worker: Any, inputs: list[str | None]) -> tuple[dict[str, Any], list[str], list[Any]]:
    seed_ids(5)
    runner = AgentRunner(worker)
    seen: list[str] = []
    runner.subscribe(lambda e: seen.append(type(e).__name__))
    task = runner.create_task("count")
    outs = [runner.run_step(task, input=i) for i in inputs]
    runner.finalize_response(task)
    return dump(runner, task.task_id), seen, [(o.is_last, str(o.output), o.usage) for o in outs]


def _count(state: dict[str, Any]) -> tuple[str, bool]:
    state["n"] = state.get("n", 0) + 1
    return f"x{state['n']}", state["n"] >= 3


@pytest.mark.parametrize("make", [lambda: Counter(), lambda: FnAgentWorker(fn=_count)])
def test_stepping_in_place_gives_what_the_loop_gives(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert make().steps_synchronously
    eager = _run_all(make(), [None, "steer", None])
    _loop_path(monkeypatch)
    assert _run_all(make(), [None, "steer", None]) == eager


def test_a_step_that_suspends_after_all_goes_on_on_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    Suspending.runs = 0
    eager = _run_all(Suspending(), [None, None, None])
    assert Suspending.runs == 3 and MARK.get() == "unset"  # the caller's context is untouched
    assert [u for _, _, u in eager[2]] == [TokenUsage(prompt_tokens=11, completion_tokens=22, total_tokens=33)] * 3
    assert asyncio.events._get_running_loop() is None  # no loop is left pretending to run
    _loop_path(monkeypatch)
    Suspending.runs = 0
    assert _run_all(Suspending(), [None, None, None]) == eager and Suspending.runs == 3


def _failure(worker: Any) -> tuple[Any, ...]:
    seed_ids(5)
    runner = AgentRunner(worker)
    task = runner.create_task("count")
    runner.run_step(task)
    with pytest.raises(ValueError, match="boom at 2") as info:
        runner.run_step(task)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    return dump(runner, task.task_id), frames, runner.state_of(task).failures[-1].error_type


def test_a_failing_step_fails_alike_in_place_and_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    eager = _failure(Counter(fail_at=2))
    assert not any(name.startswith(("_run_eagerly", "_boxed", "_run_sync")) for name in eager[1]), eager[1]
    assert eager[1][-1] == "_run_step"  # the learner sees the worker's line that raised
    _loop_path(monkeypatch)
    assert _failure(Counter(fail_at=2)) == eager


def test_the_step_sees_a_running_loop_and_a_nested_sync_call_works() -> None:
    inner: list[Any] = []

    class Nested(Counter):
        def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> Any:
            inner.append(asyncio.get_running_loop())

            async def twice(x: int) -> int:
                await asyncio.sleep(0)
                return 2 * x

            inner.append(_sync.run_sync(twice(21)))  # a sync tool that bridges to async code
            return super()._run_step(state, task, input)

    runner = AgentRunner(Nested())
    task = runner.create_task("go")
    runner.run_step(task)
    assert inner[0] is _sync._thread_loop() and inner[1] == 42
    assert asyncio.events._get_running_loop() is None
    assert asyncio.run(asyncio.sleep(0, "after")) == "after"  # the thread can run a loop again


def test_inside_a_running_loop_the_portal_path_is_kept() -> None:
    """In a notebook (a loop runs in this thread) nothing is stepped in place: the step runs on
    the portal loop, as before."""
    runner = AgentRunner(Counter())
    task = runner.create_task("go")

    async def cell() -> Any:
        return runner.run_step(task)  # a sync call from a running loop, as in a Jupyter cell

    out = asyncio.run(cell())
    assert str(out.output) == "n=1" and runner.state_of(task).completed_steps == [out]


@pytest.mark.parametrize("eager", [False, True])
def test_an_interrupt_anywhere_in_the_bridge_carries_no_error_of_its_own(eager: bool) -> None:
    """Asking which loop runs raises nothing: it used to raise and catch a RuntimeError ("no
    running event loop") on every sync call from plain code, and an interrupt landing while
    it was handled carried it as its ``__context__`` ("During handling of the above
    exception...", the chains that made interrupted runs' output noisy)."""

    async def step() -> str:
        await asyncio.sleep(0)
        return "done"

    contexts = []
    for k in range(1, 500):
        coro = step()
        try:
            with Interrupter(k):
                result = _sync.run_sync(coro, eager=eager)
        except KeyboardInterrupt as error:
            contexts.append(error.__context__)
            coro.close()  # interrupted before the bridge took it: no "never awaited" warning
            continue
        break  # ran to the end: every line of the bridge was tried
    assert result == "done" and len(contexts) > 5
    assert [c for c in contexts if c is not None] == []


def test_a_coroutine_run_in_place_can_be_cancelled_where_it_waits() -> None:
    """Stepped in place, then suspended: an interrupt while it waits on the loop reaches the
    coroutine (it rolls back), and nothing of it is left on the thread's loop."""
    seen: list[str] = []

    async def waits() -> str:
        try:
            await asyncio.sleep(0)
            seen.append("woke")
            raise KeyboardInterrupt  # as an interrupt landing while the loop runs it
        except BaseException as error:
            seen.append(f"rolled back on {type(error).__name__}")
            raise

    with pytest.raises(KeyboardInterrupt):
        _sync.run_sync(waits(), eager=True)
    assert seen == ["woke", "rolled back on KeyboardInterrupt"]
    assert not [t for t in asyncio.all_tasks(_sync._thread_loop()) if not t.done()]
    assert asyncio.events._get_running_loop() is None


_FRESH = """
import sys
from nbagent import AgentRunner, CustomSimpleAgentWorker, AgentChatResponse

class Counter(CustomSimpleAgentWorker):
    def _initialize_state(self, task, **kwargs):
        return {"n": 0}

    def _run_step(self, state, task, input=None):
        state["n"] += 1
        return AgentChatResponse(response=str(state["n"])), state["n"] >= 2

    def _finalize_task(self, state, **kwargs):
        pass

agent = AgentRunner(Counter(tools=[], llm=None))
loaded = "asyncio" in sys.modules
"""


_PLAIN = (  # plain code: the first sync call imports asyncio and steps on this thread's loop
    "task = agent.create_task('go')\n"
    "print(loaded, agent.run_step(task.task_id).output.response, agent.run_step(task.task_id).is_last,"
    " 'asyncio' in sys.modules, agent.undo_step(task.task_id).step_id is not None)"
)
_IN_A_LOOP = (  # a loop started after nbagent was imported (a notebook's): the sync call goes to the portal
    "import asyncio, threading\n"
    "async def main():\n"
    "    task = agent.create_task('go')\n"
    "    first = agent.run_step(task.task_id).output.response\n"
    "    names = {t.name for t in threading.enumerate()}\n"
    "    last = (await agent.arun_step(task.task_id)).is_last\n"
    "    return first, last, 'nbagent-loop' in names\n"
    "print(loaded, *asyncio.run(main()))"
)


@pytest.mark.parametrize(
    ("then", "expected"),
    [(_PLAIN, "False 1 True True True"), (_IN_A_LOOP, "False 1 True True")],
    ids=["plain", "in-a-running-loop"],
)
def test_the_sync_api_works_when_asyncio_was_not_imported_with_nbagent(then: str, expected: str) -> None:
    """``import nbagent`` leaves asyncio out; the sync API imports it when a call first needs a
    loop, from plain code as from inside a loop started afterwards (Jupyter's)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "-c", _FRESH + then], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected.split()
