"""Notebook 08 after Run All in JupyterLab: a learner answers the tool's question in the box.

The stored notebook is opened with its outputs cleared, run with Run All Cells, and then used
as a learner would (issue 29, item 5): the answer box under *Your turn* asks its question with
the box and **Send** enabled; the test types ``yes`` and clicks Send; the box then says how
the run ended (the writer reports the tool's result), and the workflow's live view, drawn in
the page, shows the call that ran. No box on the page may be a dead one that says its run
was stopped. Screenshots: ``nb08_01_question.png``, ``nb08_02_answered.png`` (or
``nb08_FAILED.png``).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "08_agent_workflow.ipynb"
KERNEL = "nbagent-nodot"
QUESTION = "Question: Publish the summary as 'Paris tonight'? (yes/no)"
ENDED = "The run has ended. writer answered: The publish tool says: Published 'Paris tonight'."


def _cleared() -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": f"nbagent test ({KERNEL})", "language": "python"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


BOXES_JS = "() => [...document.querySelectorAll('.nbagent-hitl')].map(b => b.textContent.trim())"
VIEW_TEXT_JS = """
() => [...document.querySelectorAll('.nbagent-livegraph svg')]
  .map(svg => [...svg.querySelectorAll('text')].map(t => t.textContent).join(' ')).join(' | ')
"""


def test_after_run_all_the_answer_box_of_notebook_08_takes_an_answer(request: pytest.FixtureRequest) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    t0 = time.monotonic()
    name = "nb08.ipynb"
    nbformat.write(_cleared(), lab.root_dir / name)
    ctx, page, offsite, errors = loopback_page(browser, lab, width=1300, height=1100, timeout_ms=STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url(f"/lab/workspaces/nb08/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        # the last cell ran (the workflow panel's run printed its status) and the kernel is idle
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(e => e.textContent.includes('Paris today: sunny, 24 °C.'))", timeout=120_000)
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)

        boxes = page.evaluate(BOXES_JS)
        assert boxes, "no answer box on the page"
        assert not any("stopped" in b for b in boxes), boxes  # no dead box after Run All
        box = page.locator(".nbagent-hitl").last
        box.scroll_into_view_if_needed()
        assert QUESTION in boxes[-1], boxes
        # JupyterLab lays out a cell only once it is near the viewport: wait until it shows
        page.wait_for_function("([el, want]) => el.innerText.includes(want)", arg=[box.element_handle(), QUESTION])
        text = box.locator("input[placeholder='Your answer']")
        send = box.locator("button", has_text="Send")
        assert text.is_enabled() and send.is_enabled()
        before = page.evaluate(VIEW_TEXT_JS)
        assert "Paris tonight" in before  # the view drew the call that waits
        box.screenshot(path=str(shots / "nb08_01_question.png"))

        text.fill("yes")
        send.click()
        page.wait_for_function(
            "([el, want]) => el.textContent.includes(want)", arg=[box.element_handle(), ENDED])
        assert send.is_disabled() and text.is_disabled()  # nothing waits any more
        # the live view redrew: the run ended after the call returned
        page.wait_for_function(f"(before) => ({VIEW_TEXT_JS})() !== before", arg=before)
        after = page.evaluate(VIEW_TEXT_JS)
        assert "Published 'Paris tonight'" in after, after
        box.screenshot(path=str(shots / "nb08_02_answered.png"))
    except Exception:
        page.screenshot(path=str(shots / "nb08_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[nb08] browser test body {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert not [e for e in errors if e.startswith("pageerror")], errors
