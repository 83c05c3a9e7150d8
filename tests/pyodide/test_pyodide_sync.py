"""nbagent's sync API in Pyodide (npm's ``pyodide`` under Node, offline), called from a running
event loop as in a browser notebook, where no thread can start (``_sync``'s runtime with no
threads). Run twice: without JSPI (Node's default) and with it
(``--experimental-wasm-stack-switching``, as Chromium has it). Needs Node 18+ and npm, as
``test_pyodide.py`` does (skipped without them, a failure with ``REQUIRE_PYODIDE=1``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pyodide_harness import JSPI_NODE_ARGS, REQUIRED, node_problem, run_scenario  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=[False, True], ids=["no-jspi", "jspi"])
def seen(request: pytest.FixtureRequest) -> dict[str, Any]:
    problem = node_problem()
    if problem:
        if REQUIRED:
            pytest.fail(f"{problem} (REQUIRE_PYODIDE=1)")
        pytest.skip(problem)
    record = run_scenario(HERE / "scenario_sync.py", node_args=JSPI_NODE_ARGS if request.param else ())
    assert record["error"] is None, f"the scenario failed in Pyodide:\n{record['error']}\n" + "\n".join(record.get("logs", [])[-30:])
    value: dict[str, Any] = record["value"]
    assert value["jspi"] is request.param and value["no_threads"] and value["loop_running"]
    return value


def test_the_quick_start_runs_with_the_sync_api(seen: dict[str, Any]) -> None:
    assert seen["quick_start"] == {
        "first": "5",
        "again": "5",
        "last_is_last": True,
        "response": "5.",
        "chat": "5.",
        "completed": 2,
    }


def test_a_step_that_waits_runs_with_jspi_and_says_to_await_without(seen: dict[str, Any]) -> None:
    waiting = seen["waiting"]
    if seen["jspi"]:
        assert waiting == {"sync": ["n=1", "n=2"]}
        return
    assert waiting["sync"].startswith("CannotWaitHere: this call had to wait")
    assert "`await agent.arun_step(task)`" in waiting["sync"]
    assert waiting["after_error"] == {"queued": 1, "completed": 0}  # rolled back: still queued
    assert waiting["awaited"] == "n=1"
