"""Notebook 12's control panel after Run All in JupyterLab: the approval rows, used by hand.

The stored notebook is opened with its outputs cleared and run with Run All. The panel under
*In the control panel* shows one row per waiting deletion. Each row must be whole: its
Reject button on the line of its reason box, no button whose label is cut. The test types a
reason and clicks Reject on the first row, Approve on the second, then Run step, and waits
for the model to adapt (it archives the file it may not delete, as the notebook says).
Screenshots: ``nb12_01_rows.png``, ``nb12_02_decided.png`` (or ``nb12_FAILED.png``).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "12_approval_typed_answers.ipynb"
KERNEL = "nbagent-nodot"
ROWS = ".nbagent-panel .nbagent-approvals .nbagent-approval-row"  # the panel's rows (not the inspector's)

ROW_JS = """
(row) => {
  const box = el => el.getBoundingClientRect();
  const reason = row.querySelector('input.nbagent-approval-reason'), reject = row.querySelector('.nbagent-btn-reject');
  const buttons = [...row.querySelectorAll('button')].map(b => ({text: b.textContent.trim(),
    cut: b.scrollWidth > b.clientWidth + 1 || b.textContent.includes('…')}));
  const r = box(reason), j = box(reject);
  return {buttons, sameLine: Math.abs((r.top + r.bottom) / 2 - (j.top + j.bottom) / 2) < 6};
}
"""


def _cleared() -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": f"nbagent test ({KERNEL})", "language": "python"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


@pytest.mark.parametrize("width", [1300, 900])
def test_notebook_12_panel_rows_are_whole_and_decide_the_calls(request: pytest.FixtureRequest, width: int) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    t0 = time.monotonic()
    name = f"nb12_{width}.ipynb"
    nbformat.write(_cleared(), lab.root_dir / name)
    ctx, page, offsite, errors = loopback_page(browser, lab, width=width, height=1100, timeout_ms=STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url(f"/lab/workspaces/nb12-{width}/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        rows = page.locator(".nbagent-panel .nbagent-approvals .nbagent-approval-row")
        rows.first.wait_for(timeout=120_000)
        panel = page.locator(".nbagent-panel").first
        panel.scroll_into_view_if_needed()
        page.wait_for_function(f"() => document.querySelectorAll('{ROWS}').length === 2")
        for i in range(2):
            found = page.evaluate(ROW_JS, rows.nth(i).element_handle())
            assert found["sameLine"], (i, found)  # Reject stays by its reason box
            assert [b["text"] for b in found["buttons"]] == ["Approve", "Edit", "Reject"], found
            assert not any(b["cut"] for b in found["buttons"]), (i, found)
        panel.screenshot(path=str(shots / f"nb12_01_rows_{width}.png"))

        first, second = rows.nth(0), rows.nth(1)
        assert "old_report.docx" in first.inner_text() and "tmp.log" in second.inner_text()
        first.locator("input.nbagent-approval-reason").fill("it is the only copy; archive it instead")
        first.locator("button.nbagent-btn-reject").click()
        page.wait_for_function(f"() => document.querySelectorAll('{ROWS}').length === 1")
        page.locator(f"{ROWS} button.nbagent-btn-approve").click()
        page.wait_for_function(f"() => document.querySelectorAll('{ROWS}').length === 0")
        run = panel.locator("button.nbagent-btn-run")
        page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=run.element_handle())
        run.click()
        status = panel.locator(".nbagent-status")
        page.wait_for_function("el => el.textContent.includes('finalized')", arg=status.element_handle(), timeout=60_000)
        assert "old_report.docx was not deleted" in status.inner_text() and "archived" in status.inner_text()
        panel.screenshot(path=str(shots / f"nb12_02_decided_{width}.png"))
    except Exception:
        page.screenshot(path=str(shots / "nb12_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[nb12 {width}] browser test body {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()
    assert offsite == [], offsite
    assert not [e for e in errors if e.startswith("pageerror")], errors
