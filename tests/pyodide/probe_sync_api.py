"""Runs inside Pyodide: which of nbagent's calls work there today, one fresh agent per call.

Not a test: a map for the browser runtime (issue 24). It records, for each call, ``ok`` or the
error it raised. A failed sync call can leave the interpreter's loops in a state that breaks
the calls after it, so ``--each`` runs every probe in a fresh Pyodide (about 20 s each):
``python tests/pyodide/pyodide_harness.py tests/pyodide/probe_sync_api.py --each``.
With the runtime seam in (``_sync.NO_THREADS``), each works, or says to await the async
method where nothing can wait (no JSPI: Node without --experimental-wasm-stack-switching), or
is not for a browser (an SVG from the dot program). The tests that assert this are
``test_pyodide_sync.py`` and ``test_pyodide_runtime.py``; this map is for looking around.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import traceback
from collections.abc import Awaitable, Callable
from typing import Any


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


PROBE_TIMEOUT_S = 20.0
CALL = 'Thought: I need add.\nAction: add\nAction Input: {"a": 2, "b": 3}'
ANSWER = "Thought: Done.\nAnswer: 5."


def _agent(replies: list[str] | None = None) -> Any:
    from nbagent import FunctionTool, ReActAgent, ScriptedLLM

    return ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM(replies or [CALL, ANSWER] * 4))


def _outcome(error: BaseException | None, value: Any = None) -> str:
    if error is None:
        return "ok" if value is None else f"ok: {str(value)[:120]}"
    frames = traceback.extract_tb(error.__traceback__)
    where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(frames) if "nbagent" in f.filename), "")
    return f"{type(error).__name__}: {str(error)[:200]}" + (f" (at {where})" if where else "")


async def _try(results: dict[str, str], name: str, fn: Callable[[], Any]) -> None:
    print("probe:", name, flush=True)  # the runner's log shows which one never came back
    results[name] = "never came back: the event loop stopped running tasks"
    _report(results)
    try:
        value = fn()
        if isinstance(value, Awaitable):
            value = await asyncio.wait_for(value, PROBE_TIMEOUT_S)
        results[name] = _outcome(None, None if value is None else value)
    except BaseException as error:  # noqa: BLE001 - the point is to record every kind
        results[name] = _outcome(error)
    _report(results)


def _report(results: dict[str, str]) -> None:
    """Hand the results so far to the Node runner, which keeps them if the loop breaks."""
    import js  # Pyodide's view of JavaScript's globalThis

    js.scenarioPartial = json.dumps(results)


def sync_steps() -> Any:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    agent.run_step(task)
    return agent.run_step(task).is_last


def undo_after_failed_run_step() -> Any:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    try:
        agent.run_step(task)
    except RuntimeError:
        pass
    return agent.undo_step(task)


async def async_then_undo() -> Any:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    await agent.arun_step(task)
    return agent.undo_step(task).step_id is not None


def panel_step() -> Any:
    agent = _agent()
    panel = agent.panel(agent.create_task("2 + 3?"))
    return panel.step()


async def panel_run() -> Any:
    agent = _agent()
    panel = agent.panel(agent.create_task("2 + 3?"))
    result = panel.run()
    if isinstance(result, asyncio.Task):
        result = await result
    return result


def parallel_sync() -> Any:
    from nbagent import ParallelAgentRunner, ReActAgentWorker, ScriptedLLM, FunctionTool

    runner = ParallelAgentRunner(ReActAgentWorker.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER])))
    return runner.run_steps_in_queue(runner.create_task("2 + 3?"))


async def parallel_async() -> Any:
    from nbagent import ParallelAgentRunner, ReActAgentWorker, ScriptedLLM, FunctionTool

    runner = ParallelAgentRunner(ReActAgentWorker.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER])))
    task = runner.create_task("2 + 3?")
    return (await runner.arun_until_done(task)).is_last


def svg_graph() -> Any:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    bundle = agent.graph(task)._repr_mimebundle_()
    if "image/svg+xml" not in bundle:
        raise LookupError(f"no SVG: the graph offers {sorted(bundle)} (no Graphviz program to run)")
    return "svg"


async def live_graph_redraw() -> Any:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    live = agent.live_graph(task)
    await agent.arun_step(task)
    live.request_redraw()
    return live.flush()


def _fail_a_sync_call() -> None:
    agent = _agent()
    try:
        agent.run_step(agent.create_task("2 + 3?"))
    except RuntimeError:
        pass


async def arun_step_after_failed_sync() -> Any:
    _fail_a_sync_call()
    agent = _agent()
    return (await agent.arun_step(agent.create_task("2 + 3?"))).tool_outputs[0].content


async def parallel_async_after_failed_sync() -> Any:
    _fail_a_sync_call()
    return await parallel_async()


def panel_step_after_failed_sync() -> Any:
    _fail_a_sync_call()
    return panel_step()


async def main() -> dict[str, Any]:
    results: dict[str, str] = {}
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # files a call writes (run_batch's store) go here
        probes: list[tuple[str, Callable[[], Any]]] = [
            ("run_step", sync_steps),
            ("undo_step after async steps", async_then_undo),
            ("undo_step after a failed run_step", undo_after_failed_run_step),
            ("stream_step", lambda: (agent := _agent()).stream_step(agent.create_task("x"))),
            ("chat", lambda: _agent().chat("2 + 3?")),
            ("achat", lambda: _agent().achat("2 + 3?")),
            ("query", lambda: _agent().query("2 + 3?")),
            ("ParallelAgentRunner.run_steps_in_queue", parallel_sync),
            ("ParallelAgentRunner.arun_until_done", parallel_async),
            ("graph SVG", svg_graph),
            ("live_graph redraw", live_graph_redraw),
            ("panel.step()", panel_step),
            ("arun_step after a failed run_step", arun_step_after_failed_sync),
            ("ParallelAgentRunner.arun_until_done after a failed run_step", parallel_async_after_failed_sync),
            ("panel.step() after a failed run_step", panel_step_after_failed_sync),
            ("run_batch", lambda: _agent().run_batch(["2 + 3?", "2 + 3?"], progress=False)),
            # last: these may leave the browser's event loop unable to run tasks
            ("panel.run()", panel_run),
            ("arun_batch", lambda: _agent().arun_batch(["2 + 3?", "2 + 3?"], progress=False)),
        ]
        import js

        only = js.scenarioOnly if isinstance(js.scenarioOnly, str) else None  # JavaScript's null is not None
        for name, fn in probes:
            if only is None or only == name:
                await _try(results, name, fn)
        os.chdir(home)  # a folder in use cannot be removed
    return results
