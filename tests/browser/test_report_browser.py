"""The HTML report opened offline in a real browser (Debian's Chromium via Playwright).

A run with a tool error, a failed attempt, an undo and hostile text is saved to JSON, turned
into a report by the command line (``python -m nbagent report run.json -o run.html``) and
opened from disk: the page must load nothing else, run no script, draw the DAG and show the
hostile text as text.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jlab import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]

from nbagent import FunctionTool, ReActAgent, ScriptedLLM, seeded_ids

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def make_run(path: Path) -> int:
    """Save a finished run; return how many steps its graph shows."""
    llm = ScriptedLLM([
        'Thought: multiply.\nAction: multiply\nAction Input: {"a": 6, "b": "seven"}',
        RuntimeError("rate limited " + HOSTILE),
        'Thought: fix the argument.\nAction: multiply\nAction Input: {"a": 6, "b": 7}',
        'Thought: again.\nAction: multiply\nAction Input: {"a": 6, "b": 7}',
        "Thought: I can answer without using any more tools.\nAnswer: 42 " + HOSTILE,
    ])
    with seeded_ids(3):
        agent = ReActAgent.from_tools([FunctionTool.from_defaults(multiply)], llm=llm)
        task = agent.create_task("What is 6 * 7? " + HOSTILE)
        agent.run_step(task)  # a tool error (bad argument)
        with pytest.raises(RuntimeError):
            agent.run_step(task)  # a failed attempt, rolled back
        agent.run_step(task)
        agent.undo_step(task)
        agent.run_step(task)
        agent.run_step(task)
        agent.finalize_response(task)
        agent.save(path)
    # nodes drawn: one per step, plus one per undone run (a cut step that had run is drawn as
    # its undone runs only)
    state = agent.state_of(task)
    ran_and_cut = {o.task_step.step_id for o in state.undone_outputs} & state.undone_ids
    return len(state.steps) - len(ran_and_cut) + len(state.undone_outputs)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    check_browser_tools()
    import playwright.sync_api as api

    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_TIMEOUT_MS)
        try:
            yield browser
        finally:
            browser.close()


def test_report_opens_offline_and_is_inert(chromium: Any, tmp_path: Path, shots: Path) -> None:
    run_json = tmp_path / "run.json"
    steps = make_run(run_json)
    report = tmp_path / "run.html"
    subprocess.run(
        [sys.executable, "-m", "nbagent", "report", str(run_json), "-o", str(report)],
        check=True, timeout=120, capture_output=True,
    )
    page = chromium.new_page(viewport={"width": 1100, "height": 1400})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(report.as_uri(), wait_until="load", timeout=STEP_TIMEOUT_MS)
        page.screenshot(path=str(shots / "report_full_page.png"), full_page=True)
        assert requests == [report.as_uri()], f"the report loaded something else: {requests}"
        assert errors == []
        assert page.evaluate("window.__pwned") is None  # no script ran
        assert page.locator("script").count() == 0
        nodes = page.locator("svg g.node")
        assert nodes.count() == steps  # the DAG is drawn inline: every step and undone run
        text = page.inner_text("body")
        assert "What is 6 * 7? <script>window.__pwned = 1</script>" in text  # shown as text
        assert "rate limited" in text and "RuntimeError" in text
        assert "undone" in text
        assert page.locator("img").count() == 0  # the hostile <img> is text, not an element
    finally:
        page.close()
