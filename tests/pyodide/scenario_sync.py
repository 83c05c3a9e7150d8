"""Runs inside Pyodide (``test_pyodide_sync.py``): nbagent's sync API from a running event loop,
as a notebook cell in the browser calls it, where no thread can start.

Returns what it saw: the quick start with ``run_step``, ``undo_step``, ``finalize_response``
and ``chat`` (an offline model: nothing waits), and a worker whose steps wait on a timer (as
a model over the network does), run with ``run_step``: with JSPI it waits; without, the call
is rolled back with ``CannotWaitHere`` and ``await agent.arun_step`` runs it.
"""

from __future__ import annotations

import asyncio
from typing import Any


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CALL = 'Thought: I need add.\nAction: add\nAction Input: {"a": 2, "b": 3}'
ANSWER = "Thought: Done.\nAnswer: 5."


def quick_start() -> dict[str, Any]:
    from nbagent import FunctionTool, ReActAgent, ScriptedLLM

    agent = ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, CALL, ANSWER, ANSWER]))
    task = agent.create_task("What is 2 + 3?")
    first = agent.run_step(task)
    agent.undo_step(task)
    again = agent.run_step(task)
    last = agent.run_step(task)
    return {
        "first": first.output.sources[0].content if first.output.sources else None,
        "again": again.output.sources[0].content if again.output.sources else None,
        "last_is_last": last.is_last,
        "response": str(agent.finalize_response(task)),
        "chat": str(agent.chat("And again?")),
        "completed": len(agent.state_of(task).completed_steps),
    }


async def waiting_worker() -> dict[str, Any]:
    from nbagent import AgentChatResponse, AgentRunner, CustomSimpleAgentWorker

    class Waits(CustomSimpleAgentWorker):
        steps_synchronously = True  # says so, and waits anyway: the sync call must cope

        def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
            return {"n": 0}

        async def _arun_step(self, state: dict[str, Any], task: Any, input: Any = None) -> Any:
            await asyncio.sleep(0.01)  # a timer on the page's loop
            state["n"] += 1
            return AgentChatResponse(response=f"n={state['n']}"), state["n"] >= 2

        def _run_step(self, state: dict[str, Any], task: Any, input: Any = None) -> Any:
            raise NotImplementedError

        def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
            pass

    runner = AgentRunner(Waits())
    task = runner.create_task("go")
    out: dict[str, Any] = {}
    try:
        out["sync"] = [str(runner.run_step(task).output) for _ in range(2)]
    except Exception as error:  # noqa: BLE001 - what it raised is the finding
        state = runner.state_of(task)
        out["sync"] = f"{type(error).__name__}: {error}"
        out["after_error"] = {"queued": len(state.step_queue), "completed": len(state.completed_steps)}
        await asyncio.sleep(0.05)  # the next cell
        out["awaited"] = str((await runner.arun_step(task)).output)
    return out


async def main() -> dict[str, Any]:
    from pyodide.ffi import can_run_sync

    from nbagent import _sync

    return {
        "jspi": can_run_sync(),
        "no_threads": _sync.NO_THREADS,
        "loop_running": asyncio.get_running_loop() is not None,
        "quick_start": quick_start(),
        "waiting": await waiting_worker(),
    }
