"""Timers, batches and graphs where no thread can start (Pyodide), simulated as in
``test_sync_no_threads``: a view's timer goes on the page's event loop, ``run_batch`` runs its
tasks on the cell's loop, and a graph with no ``dot`` program offers a widget that draws it
in the browser (Graphviz compiled to WASM), its DOT text as the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from nbagent import FunctionTool, ReActAgent, ScriptedLLM, _sync, seed_ids
from nbagent.viz import graph as graph_module
from nbagent.viz.live import LiveGraph
from nbagent.viz.throttle import Throttle
from tests.test_sync_no_threads import ANSWER, CALL, _in_a_cell, add, no_threads  # noqa: F401 - a fixture

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def page_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The page's loop: in Pyodide the browser runs its callbacks between cells; here the
    test runs it when the page would."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def _agent(rounds: int = 3) -> ReActAgent:
    seed_ids(5)
    return ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([CALL, ANSWER] * rounds))


def test_a_throttled_call_waits_on_the_page_loop_not_a_thread(no_threads: list[str], page_loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    throttle = Throttle(lambda: calls.append(len(calls)), interval_s=0.05)
    throttle.request()  # called at once
    throttle.request()  # within the interval: kept for its end
    assert calls == [0] and throttle.pending
    page_loop.run_until_complete(asyncio.sleep(0.2))  # the browser's timers fire
    assert calls == [0, 1] and not throttle.pending
    throttle.request()
    throttle.request()
    throttle.cancel()  # a cancelled call never comes
    page_loop.run_until_complete(asyncio.sleep(0.2))
    assert calls == [0, 1, 2]
    assert no_threads == []


def test_the_live_graph_redraws_on_the_page_loop_after_sync_steps(no_threads: list[str], page_loop: asyncio.AbstractEventLoop) -> None:
    """Steps run by the sync API from plain code: the live graph's pending redraw is timed on
    the page's loop (not on the loop a sync call steps on, which stops with the call)."""
    agent = _agent()
    task = agent.create_task("2 + 3?")
    live = LiveGraph(agent, task, throttle_s=0.05, renderer="html")
    first = live.redraws
    agent.run_step(task)
    agent.run_step(task)
    assert live._throttle.pending  # the second step's redraw waits for the interval
    page_loop.run_until_complete(asyncio.sleep(0.2))
    assert not live._throttle.pending and live.redraws > first
    assert "Answer" in live.source or "5." in live.source
    assert no_threads == []


def test_the_html_live_graph_draws_its_picture_on_the_page_loop(
    no_threads: list[str], page_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LiveGraph, "SVG_IDLE_S", 0.05)
    agent = _agent()
    task = agent.create_task("2 + 3?")
    live = LiveGraph(agent, task, renderer="html")
    assert live._svg_timer is not None and live._svg_timer.loop is page_loop
    assert live.svg_draws == 0
    page_loop.run_until_complete(asyncio.sleep(0.3))
    assert live.svg_draws == 1 and live._svg_timer is None
    assert no_threads == []


def test_run_batch_in_a_cell_without_jspi_says_to_await_and_arun_batch_runs_it(no_threads: list[str]) -> None:
    """The batch's tasks run concurrently on the cell's loop; a sync call cannot wait for them
    without JSPI, so it says to await, and awaiting runs them all."""
    agent = _agent(rounds=4)

    async def cell() -> Any:
        with pytest.raises(_sync.CannotWaitHere, match="Await the async method"):
            agent.run_batch(["2 + 3?", "3 + 2?"], progress=False)
        return await agent.arun_batch(["2 + 3?", "3 + 2?"], progress=False)

    loop = asyncio.new_event_loop()
    try:
        batch = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert [str(r) for r in batch.results] == ["5.", "5."] and batch.finished
    assert no_threads == []


def test_a_background_batch_is_a_task_of_the_cells_loop(no_threads: list[str]) -> None:
    agent = _agent(rounds=4)

    async def cell() -> Any:
        batch = agent.run_batch(["2 + 3?", "3 + 2?"], progress=False, background=True)
        assert not batch.finished  # returned at once: the loop runs it after this cell
        return await batch

    loop = asyncio.new_event_loop()
    try:
        batch = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert [str(r) for r in batch.results] == ["5.", "5."]
    assert no_threads == []


def test_run_batch_at_a_scripts_top_level_runs_on_this_threads_loop(no_threads: list[str]) -> None:
    batch = _agent(rounds=4).run_batch(["2 + 3?", "3 + 2?", "1 + 4?"], progress=False, max_concurrency=2)
    assert [str(r) for r in batch.results] == ["5.", "5.", "5."]
    assert batch.wait() is batch  # finished: nothing to wait for
    assert no_threads == []


def test_a_graph_with_no_dot_program_is_drawn_by_the_browser_with_the_dot_text_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent()
    task = agent.create_task("<b>2 + 3?</b>")
    agent.run_step(task)
    graph = agent.graph(task)
    assert "image/svg+xml" in graph._repr_mimebundle_()  # with a dot program: the SVG only
    assert WIDGET_VIEW not in graph._repr_mimebundle_()
    monkeypatch.setattr(graph_module, "svg_or_none", lambda source: None)  # Pyodide: no subprocess
    bundle = graph._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", WIDGET_VIEW}
    from ipywidgets.widgets.widget import _instances  # the live widgets by model id

    model = _instances[bundle[WIDGET_VIEW]["model_id"]]
    assert type(model).__name__ == "GraphvizAnyWidget"
    assert model.dot_source == graph.source  # the same DOT the fallback shows
    assert "&lt;b&gt;2 + 3?&lt;/b&gt;" in bundle["text/html"] and "<b>2 + 3?</b>" not in bundle["text/html"]
    assert WIDGET_VIEW not in agent.graph(task, renderer="html")._repr_mimebundle_()  # static HTML only
    assert set(graph._repr_mimebundle_(exclude=[WIDGET_VIEW])) == {"text/plain", "text/html"}
