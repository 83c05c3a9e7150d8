"""The browser runtime in real Pyodide (npm's ``pyodide`` under Node, offline, nbagent from its
wheel): timers on the page's loop, ``run_batch`` on the cell's loop, the panel's runs as tasks
of the loop, and a graph drawn by the browser (graphviz-anywidget) with its DOT as fallback.
Run twice: with WebAssembly stack switching (JSPI, as in Chromium) a sync call that waits
goes on; without it, it says to await the async method. See ``scenario_runtime.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pyodide_harness import JSPI_NODE_ARGS, REQUIRED, node_problem, run_scenario  # noqa: E402

pytestmark = pytest.mark.timeout(600)
ANSWERS = ["5.", "5.", "5."]


def _facts(node_args: tuple[str, ...]) -> dict[str, Any]:
    problem = node_problem()
    if problem:
        if REQUIRED:
            pytest.fail(f"{problem} (REQUIRE_PYODIDE=1)")
        pytest.skip(problem)
    record = run_scenario(HERE / "scenario_runtime.py", node_args=node_args)
    assert record["error"] is None, f"the scenario failed in Pyodide:\n{record['error']}\n" + "\n".join(record.get("logs", [])[-30:])
    assert record["attempts"] == ["fetch https://pypi.org/simple/micropip/", "fetch https://pypi.org/simple/nbagent/"]  # the probes only
    value: dict[str, Any] = record["value"]
    return value


@pytest.fixture(scope="module")
def with_jspi() -> dict[str, Any]:
    return _facts(JSPI_NODE_ARGS)


@pytest.fixture(scope="module")
def without_jspi() -> dict[str, Any]:
    return _facts(())


@pytest.mark.parametrize("facts_of", ["with_jspi", "without_jspi"])
def test_throttled_calls_are_timed_by_the_page_loop(facts_of: str, request: pytest.FixtureRequest) -> None:
    timers = request.getfixturevalue(facts_of)["timers"]
    assert timers["pending"] is True  # the second request of the JavaScript callback was kept...
    assert timers["calls"] == ["js", "js", "cell", "cell"]  # ...and came at its interval's end
    live = timers["live"]
    assert live["pending"] is False and live["answer_drawn"] is True
    assert live["svg_draws"] >= 1  # its picture came once redraws paused (a timer, no thread)
    assert timers["threads"] == 1


def test_with_jspi_run_batch_runs_on_the_cells_loop_and_wait_waits(with_jspi: dict[str, Any]) -> None:
    assert with_jspi["jspi"] is True
    assert with_jspi["run_batch"] == {"ok": ANSWERS}
    assert with_jspi["background"] == {"returned_at_once": True, "wait": {"ok": True}, "results": ANSWERS}
    assert with_jspi["arun_batch"] == ANSWERS


def test_without_jspi_run_batch_says_to_await_and_arun_batch_runs(without_jspi: dict[str, Any]) -> None:
    assert without_jspi["jspi"] is False
    assert without_jspi["run_batch"]["error"] == "CannotWaitHere"
    assert "Await the async method" in without_jspi["run_batch"]["message"]
    background = without_jspi["background"]
    assert background["returned_at_once"] is True and background["results"] == ANSWERS  # awaited
    assert background["wait"]["error"] == "CannotWaitHere"
    assert without_jspi["arun_batch"] == ANSWERS


@pytest.mark.parametrize("facts_of", ["with_jspi", "without_jspi"])
def test_the_panel_steps_and_runs_as_a_task_of_the_loop(facts_of: str, request: pytest.FixtureRequest) -> None:
    panel = request.getfixturevalue(facts_of)["panel"]
    assert panel == {"step": "Observation: 5", "tasks": [True, True], "result": "5.", "status": "finalized"}


@pytest.mark.parametrize("facts_of", ["with_jspi", "without_jspi"])
def test_the_graph_is_drawn_by_the_browser_with_its_dot_as_fallback(facts_of: str, request: pytest.FixtureRequest) -> None:
    graph = request.getfixturevalue(facts_of)["graph"]
    assert graph == {
        "mimetypes": ["application/vnd.jupyter.widget-view+json", "text/html", "text/plain"],
        "widget": "GraphvizAnyWidget",
        "same_dot": True,
        "fallback_escaped": True,
    }


def test_a_sync_call_that_waits_returns_an_awaitable_result_as_it_is(with_jspi: dict[str, Any], without_jspi: dict[str, Any]) -> None:
    """JSPI hands the result over as a promise's value; an awaitable one (a BatchRun, a
    ChatStream, a workflow handler) must come back itself, not be awaited on the way."""
    assert with_jspi["awaitable_result"] == {"ok": "Awaitable"}
    assert without_jspi["awaitable_result"]["error"] == "CannotWaitHere"
