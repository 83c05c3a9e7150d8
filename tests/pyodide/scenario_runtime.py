"""Runs inside Pyodide (tests/pyodide/run_pyodide.mjs): the browser runtime's timers, batches,
panel runs and graphs, where no thread can start. ``main()`` returns plain facts;
``test_pyodide_runtime.py`` asserts on them, with and without JSPI (Node's
--experimental-wasm-stack-switching).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

CALL = 'Thought: I need add.\nAction: add\nAction Input: {"a": 2, "b": 3}'
ANSWER = "Thought: Done.\nAnswer: 5."
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(rounds: int = 4) -> Any:
    from nbagent import FunctionTool, ReActAgent, ScriptedLLM

    return ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER] * rounds))


def _outcome(fn: Any) -> Any:
    try:
        return {"ok": fn()}
    except Exception as error:  # noqa: BLE001 - the fact is which error
        return {"error": type(error).__name__, "message": str(error)}


async def timers(facts: dict[str, Any]) -> None:
    """A throttled call requested from a JavaScript callback (a comm message, a timer) or from
    a cell is timed by the page's loop; the widgetless live graph's picture too."""
    from pyodide.ffi import create_once_callable
    import js

    from nbagent.viz.throttle import Throttle

    calls: list[str] = []
    from_js = Throttle(lambda: calls.append("js"), interval_s=0.05)
    seen: dict[str, Any] = {}

    def in_a_js_callback() -> None:
        try:
            asyncio.get_running_loop()
            seen["running_loop"] = True
        except RuntimeError:
            seen["running_loop"] = False
        from_js.request()
        from_js.request()  # kept for the end of the interval
        seen["pending"] = from_js.pending

    js.setTimeout(create_once_callable(in_a_js_callback), 0)
    await asyncio.sleep(0.3)
    in_cell = Throttle(lambda: calls.append("cell"), interval_s=0.05)
    in_cell.request()
    in_cell.request()
    await asyncio.sleep(0.3)
    from nbagent.viz.live import LiveGraph

    agent = _agent()
    task = agent.create_task("2 + 3?")
    LiveGraph.SVG_IDLE_S = 0.05  # the picture once redraws pause (1 s in a notebook)
    live = LiveGraph(agent, task, renderer="html", throttle_s=0.05)  # the widgetless view
    agent.run_step(task)
    agent.run_step(task)
    await asyncio.sleep(0.5)  # its pending redraw and its picture, each on a timer
    facts["timers"] = {**seen, "calls": calls, "threads": threading.active_count(),
                       "live": {"pending": live._throttle.pending, "svg_draws": live.svg_draws,
                                "answer_drawn": "5." in live.widget.value}}


async def batches(facts: dict[str, Any]) -> None:
    from nbagent import FunctionTool, ReActAgent, ScriptedLLM

    # tasks run concurrently: each answers at once, whichever reply it gets
    agent = ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([ANSWER], repeat_last=True))
    questions = ["2 + 3?", "3 + 2?", "1 + 4?"]

    def sync_batch() -> Any:
        batch = agent.run_batch(questions, progress=False, max_concurrency=2)
        return [str(r) for r in batch.results]

    facts["run_batch"] = _outcome(sync_batch)
    background = agent.run_batch(questions, progress=False, background=True)
    started_unfinished = not background.finished
    waited = _outcome(lambda: background.wait() is background)
    await background
    facts["background"] = {
        "returned_at_once": started_unfinished,
        "wait": waited,
        "results": [str(r) for r in background.results],
    }
    awaited = await agent.arun_batch(questions, progress=False)
    facts["arun_batch"] = [str(r) for r in awaited.results]


async def panel(facts: dict[str, Any]) -> None:
    agent = _agent()
    task = agent.create_task("2 + 3?")
    panel = agent.panel(task)
    step = panel.step()  # the Run step button's method: in a cell, a task of the page's loop
    step_is_task = isinstance(step, asyncio.Task)
    first = await step if step_is_task else step
    run = panel.run()  # Run to end: a task of the page's loop too
    run_is_task = isinstance(run, asyncio.Task)
    result = await run if run_is_task else run
    facts["panel"] = {"step": str(first), "tasks": [step_is_task, run_is_task], "result": str(result),
                      "status": agent.state_of(task).status.value}


def graph(facts: dict[str, Any]) -> None:
    from ipywidgets.widgets.widget import _instances

    agent = _agent()
    task = agent.create_task("<b>2 + 3?</b>")
    agent.run_step(task)
    graph = agent.graph(task)
    bundle = graph._repr_mimebundle_()
    view = bundle.get(WIDGET_VIEW) or {}
    model = _instances.get(view.get("model_id", ""))
    facts["graph"] = {
        "mimetypes": sorted(bundle),
        "widget": type(model).__name__,
        "same_dot": model is not None and model.dot_source == graph.source,
        "fallback_escaped": "&lt;b&gt;2 + 3?&lt;/b&gt;" in bundle.get("text/html", ""),
    }


class Awaitable:
    """A result that is itself awaitable, as a BatchRun, a ChatStream or a workflow handler is."""

    def __await__(self) -> Any:
        yield from asyncio.sleep(0).__await__()
        return "awaited: not what the sync call returns"


def awaitable_result(facts: dict[str, Any]) -> None:
    """A sync call that waits (JSPI) returns its coroutine's result as it is, even awaitable."""
    from nbagent import _sync

    async def waits_then_returns_an_awaitable() -> Awaitable:
        await asyncio.sleep(0.01)
        return Awaitable()

    facts["awaitable_result"] = _outcome(lambda: type(_sync.run_sync(waits_then_returns_an_awaitable())).__name__)


async def main() -> dict[str, Any]:
    from pyodide.ffi import can_run_sync

    facts: dict[str, Any] = {"jspi": can_run_sync()}
    await timers(facts)
    await batches(facts)
    await panel(facts)
    graph(facts)
    awaitable_result(facts)
    return facts
