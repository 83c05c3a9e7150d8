"""The batch grid as a user sees it in JupyterLab: cells fill in while the batch runs, a click
on a cell opens that task (its DAG drawn in the page, its transcript), Stop stops the batch.

A notebook written here starts a batch of 16 tasks (a slow offline model, two at a time) in
the background and shows its grid. The test waits until some cells are done, clicks one (a
real click on the cell's element), waits for that task's answer, graph and transcript, then
clicks Stop and waits until the grid says the batch stopped with every unfinished cell grey.
Every request must stay on loopback and the console must log no error. Cells are big enough
to click (20 px, 24 px apart). Screenshot: ``batch_01_open_task.png``.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.timeout(300)

KERNEL = "nbagent-dot"

CELL_BATCH = '''\
import asyncio
from nbagent import FunctionCallingAgent, FunctionLLM, MessageRole, seed_ids, tool_call

seed_ids(0)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class SlowLLM(FunctionLLM):
    async def _achat(self, messages, tools, tool_choice, **kw):
        await asyncio.sleep(0.4)
        return await super()._achat(messages, tools, tool_choice, **kw)


def model(messages, tools):
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"The answer is {last.text} <b>ok</b>"
    a, b = [int(x) for x in last.text.split() if x.isdigit()]
    return tool_call("add", a=a, b=b)


agent = FunctionCallingAgent.from_tools([add], llm=SlowLLM(model))
batch = agent.run_batch([f"add {i} and {i * 100}" for i in range(16)], max_concurrency=2,
                        background=True, progress=False)
grid = batch.widget(throttle_s=0.05)
grid'''


def test_batch_grid_fills_opens_a_task_on_click_and_stops(request: pytest.FixtureRequest) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    name = "batch.ipynb"
    nb = new_notebook(metadata={"kernelspec": {"name": KERNEL, "display_name": KERNEL, "language": "python"}})
    nb.cells = [new_code_cell(CELL_BATCH)]
    nbformat.write(nb, lab.root_dir / name)

    ctx, page, offsite, errors = loopback_page(
        browser, lab, width=1300, height=1400, timeout_ms=STEP_TIMEOUT_MS, console_errors=True
    )
    try:
        page.goto(lab.url(f"/lab/workspaces/batch/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

        cells = page.locator(".nbb-gcell")
        cells.first.wait_for()
        assert cells.count() == 16
        # big enough to click: 20 px squares, 24 px apart (WCAG 2.5.8's 24 px target spacing)
        first, second = cells.nth(0).bounding_box(), cells.nth(1).bounding_box()
        assert first is not None and second is not None
        assert first["width"] >= 20 and first["height"] >= 20, first
        assert second["x"] - first["x"] >= 24, (first, second)
        # cells turn green while the batch runs; some are still queued or running then
        page.wait_for_function(
            "() => document.querySelectorAll('.nbb-gcell[data-status=d]').length >= 3")
        statuses = page.evaluate("() => [...document.querySelectorAll('.nbb-gcell')].map(c => c.dataset.status).join('')")
        assert "q" in statuses or "r" in statuses, statuses

        # a real click on a finished cell opens that task
        done = page.locator(".nbb-gcell[data-status=d]").first
        index = int(done.get_attribute("data-index") or "-1")
        done.click()
        detail = page.locator(".nbb-detail")
        detail.wait_for()
        page.wait_for_function(
            "([el, want]) => el.textContent.includes(want)",
            arg=[detail.element_handle(), f"#{index}"])
        want = f"The answer is {index + index * 100}"
        assert want in detail.inner_text()
        assert "<b>ok</b>" in detail.inner_text()  # the model's markup is shown as text, not applied
        # the task's DAG is drawn in the page (graphviz in WASM), and its transcript shown
        page.wait_for_selector(".nbagent-livegraph svg g.node")
        assert page.locator(".nbagent-livegraph svg g.node").count() >= 2
        assert f"add {index} and {index * 100}" in page.locator(".nbagent-batch").first.inner_text()
        page.screenshot(path=str(shots / "batch_01_open_task.png"), animations="disabled")

        # Stop: no new task starts, the unfinished cells turn grey
        page.locator(".nbagent-batch button", has_text="Stop").click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.nbagent-batch .nbb-line')].some(e => e.textContent.includes('stopped'))")
        time.sleep(0.3)
        final = page.evaluate("() => [...document.querySelectorAll('.nbb-gcell')].map(c => c.dataset.status).join('')")
        assert set(final) <= {"d", "s"} and "s" in final and final.count("d") >= 3, final
        assert not offsite, offsite
        # no console error either: the task's graph joins the page only once a task is open
        # (drawn while hidden, the in-browser renderer logged "SVG initialization failed")
        assert not errors, errors
    except Exception:
        page.screenshot(path=str(shots / "batch_FAILED.png"))
        raise
    finally:
        ctx.close()
