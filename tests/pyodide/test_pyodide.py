"""nbagent in Pyodide (npm's ``pyodide``, run by Node), offline, installed from its wheel.

One Pyodide runs ``scenario_today.py``: the quick start with the async API, undo, the HTML
views and DOT with hostile text, save/load to JSON and to SQLite. Before it, the Node runner
blocks every network call and two probes show the block works; nothing else may have tried
the network, so every wheel came from the local folder. The sync API (``run_step`` and the
rest) needs the browser runtime of issue 24 and is mapped by ``probe_sync_api.py`` instead.

Node 18+ and npm are needed: without them the test is skipped, or fails with
``REQUIRE_PYODIDE=1`` (CI). The first run downloads Pyodide (``npm ci`` in ``lite/``) and the
pinned wheels (pip, from PyPI) into folders ignored by git; later runs reuse them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pyodide_harness import REQUIRED, node_problem, run_scenario  # noqa: E402

from lite.collect_wheels import read_pins  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    problem = node_problem()
    if problem:
        if REQUIRED:
            pytest.fail(f"{problem} (REQUIRE_PYODIDE=1)")
        pytest.skip(problem)
    result = run_scenario(HERE / "scenario_today.py")
    timings = result["timings_ms"]
    print(f"\nPyodide under Node: loaded {timings.get('pyodide_loaded')} ms, installed "
          f"{timings.get('installed')} ms, scenario done {timings.get('scenario_done')} ms, "
          f"process {result['wall_s']} s")
    return result


@pytest.fixture(scope="module")
def facts(record: dict[str, Any]) -> dict[str, Any]:
    assert record["error"] is None, f"the scenario failed in Pyodide:\n{record['error']}\n" + "\n".join(record.get("logs", [])[-30:])
    value: dict[str, Any] = record["value"]
    return value


def test_the_network_is_blocked_and_nothing_but_the_probes_tried_it(record: dict[str, Any]) -> None:
    js_probe = "fetch https://pypi.org/simple/micropip/"
    py_probe = "fetch https://pypi.org/simple/nbagent/"
    assert record["probes"]["js"] == f"network blocked in this test: {js_probe}"
    assert record["probes"]["python"].endswith(f"network blocked in this test: {py_probe}")
    assert record["attempts"] == [js_probe, py_probe]  # micropip asked no index: all wheels local


def test_micropip_installs_nbagent_with_exactly_the_pinned_wheels(record: dict[str, Any]) -> None:
    installed = {canonicalize_name(name): version for name, version in record["installed"].items()}
    pins = read_pins()
    assert installed.pop("nbagent") == "0.1.0"
    assert installed == pins  # micropip from the lock file, the rest from the local wheels
    assert "graphviz-pure" not in installed  # a native program: not required on emscripten


def test_it_is_really_pyodide(facts: dict[str, Any]) -> None:
    assert facts["platform"] == "emscripten"
    assert facts["python"].startswith("3.14.")


def test_quick_start_with_the_async_api_undo_and_steering(facts: dict[str, Any]) -> None:
    assert facts["first_step"] == {"tool": "multiply", "observation": "363", "is_last": False, "upcoming": 1}
    assert facts["after_undo"] == {"completed": 0, "upcoming": 1, "requeued_is_first": True, "input": "Make it 121 * 4."}
    assert facts["finished"] == {
        "observation": "484",
        "is_last": True,
        "response": "121 * 4 is 484.",
        "memory": ["user", "user", "assistant"],  # the question, the steering input, the answer
    }


def test_dot_shows_the_rerun_and_the_undone_branch(facts: dict[str, Any]) -> None:
    dot = facts["dot"]
    assert dot.startswith("digraph task {")
    assert "finalized" in dot and "2 done, 1 undone" in dot
    assert "call: multiply(a=121, b=4)" in dot and "obs: 484" in dot  # the step that counts
    assert "call: multiply(a=121, b=3)" in dot and "undone run" in dot  # the one taken back
    assert "answer: 121 * 4 is 484." in dot


def test_html_views_render(facts: dict[str, Any]) -> None:
    assert facts["task_html"].startswith('<div class="nbagent nb-task">')
    assert "121 * 4 is 484." in facts["task_html"]
    assert facts["step_html"].startswith('<div class="nbagent nb-step-output">')
    assert facts["runner_html"].startswith('<div class="nbagent nb-runner">')
    assert "text/html" in facts["graph_mimetypes"]
    assert re.fullmatch(r"LiveGraph\(task='[0-9a-f-]+', status=finalized, 2 done, 1 undone\)", facts["live_text"])


def test_untrusted_text_is_escaped_in_html_and_dot(facts: dict[str, Any]) -> None:
    hostile = facts["hostile"]
    assert hostile["observation"] == '<script>alert("x")</script> & "quotes"'
    for view in ("step_html", "task_html", "dot"):
        text = hostile[view]
        assert "alert" in text, view  # the text is shown...
        assert "<script>alert" not in text, view  # ...as text, never as markup
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text, view


def test_save_to_json_load_and_continue(facts: dict[str, Any]) -> None:
    assert facts["json"] == {
        "file_starts": "{",
        "loaded_completed": 1,
        "observation": "42",
        "continued_is_last": True,
        "response": "42.",
    }


def test_autosave_to_sqlite_and_read_back(facts: dict[str, Any]) -> None:
    sqlite = facts["sqlite"]
    assert (sqlite["steps"], sqlite["response"], sqlite["finalized"]) == (2, "42.", True)
    assert sqlite["journal_mode"] == "wal"
