"""JupyterLab's dark theme, as a learner sees it (issue 29): no graph sits on a white box, and
a disabled button looks different from an enabled one.

Notebook 05 (outputs cleared) runs with Run All in JupyterLab Dark, with three more cells: the
task's card, a finished batch's grid (its Stop is disabled once the batch is over) and a
workflow's agent drawing. Then:

- every graph drawn on the page (the panel's live graph, the static SVG of ``agent.graph``
  shown as an image, the card's inline SVG, the workflow drawing) is photographed and its
  corners are read: they must show the dark page, not white;
- the coloured buttons (Run to end, Stop, Retry in the panel, Stop in the batch grid) are
  compared by their computed styles: enabled ones are filled with a saturated colour, disabled
  ones are not (no fill, dashed outline), and Run to end differs between its two states;
- every text nbagent draws has a contrast of at least 4.5:1 (``CONTRAST_JS``).
Screenshots: ``dark_panel.png``, ``dark_graph_<n>.png`` (or ``dark_FAILED.png``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]
from test_contrast_browser import (  # type: ignore[import-not-found]
    CONTRAST_JS,
    MIN_CONTRAST,
    THEMES,
    _notebook,
    _run_all_and_wait,
    _set_theme,
)

pytestmark = pytest.mark.timeout(300)

EXTRA_CELLS = [
    # a finished batch: its grid's Stop is disabled
    "from nbagent import FunctionCallingAgent, FunctionLLM\n"
    "grid_agent = FunctionCallingAgent.from_tools([], llm=FunctionLLM(lambda messages, tools: 'ok'))\n"
    "batch = grid_agent.run_batch(['a', 'b', 'c'], progress=False)\n"
    "grid = batch.widget()\n"
    "grid",
    # a workflow drawing: edge labels and a title on the page's background
    "from nbagent.workflow import AgentWorkflow, FunctionAgent\n"
    "helper = FunctionAgent(name='helper', description='Answers questions about the shop.', llm=FunctionLLM(lambda m, t: 'ok'))\n"
    "AgentWorkflow([helper]).draw_agents()",
]

STYLE_JS = """
(sel) => [...document.querySelectorAll(sel)].map(b => {
  const st = getComputedStyle(b);
  const m = st.backgroundColor.match(/rgba?\\(([^)]+)\\)/);
  const p = m ? m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number) : [0, 0, 0, 0];
  const [r, g, bl] = p.map(v => v / 255), a = p.length > 3 ? p[3] : 1;
  const mx = Math.max(r, g, bl), mn = Math.min(r, g, bl), l = (mx + mn) / 2;
  const sat = mx === mn ? 0 : (l > 0.5 ? (mx - mn) / (2 - mx - mn) : (mx - mn) / (mx + mn));
  return {disabled: b.disabled || b.getAttribute('aria-disabled') === 'true', background: st.backgroundColor, alpha: a, saturation: sat,
          border: st.borderTopStyle, color: st.color, opacity: st.opacity};
})
"""


def _corner_luminance(png: bytes) -> list[float]:
    """The relative luminance (0 black .. 1 white) of the four corners of a screenshot."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    found = []
    for x, y in ((2, 2), (w - 3, 2), (2, h - 3), (w - 3, h - 3)):
        r, g, b = (v / 255 for v in img.getpixel((x, y)))  # type: ignore[misc]
        found.append(0.2126 * r + 0.7152 * g + 0.0722 * b)
    return found


def _styles(page: Any, selector: str) -> list[dict[str, Any]]:
    return page.evaluate(STYLE_JS, selector)


def test_dark_theme_graphs_are_not_white_boxes_and_disabled_buttons_look_disabled(
    request: pytest.FixtureRequest,
) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    nb = _notebook("nbagent-nodot")
    nb.cells.extend(nbformat.v4.new_code_cell(src) for src in EXTRA_CELLS)
    name = "nb05_dark_theme.ipynb"
    nbformat.write(nb, lab.root_dir / name)
    _set_theme(lab, THEMES["dark"])
    page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url(f"/lab/workspaces/dark-theme/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes('nbagent-nodot) | Idle'))")
        assert page.evaluate("() => document.body.dataset.jpThemeLight") == "false"
        _run_all_and_wait(page)
        page.wait_for_selector(".nbb-gcell")  # the grid drew its cells
        page.locator(".jp-CodeCell").last.locator(".jp-OutputArea-output img, .jp-OutputArea-output svg").first.wait_for()

        # ----- the panel's buttons: the first panel shows a finalized task (all run buttons off)
        panel = page.locator(".nbagent-panel").first
        panel.scroll_into_view_if_needed()
        off = {k: _styles(page, f".nbagent-panel .nbagent-btn-{k}")[0] for k in ("step", "run", "stop", "retry")}
        assert all(s["disabled"] for s in off.values()), off
        panel.locator("input.nbagent-new-task-text").fill("How much for two breads?")
        panel.locator("button.nbagent-btn-new").click()
        page.wait_for_function("el => el.getAttribute('aria-disabled') === 'false'",
                               arg=panel.locator("button.nbagent-btn-run").element_handle())
        on = {k: _styles(page, f".nbagent-panel .nbagent-btn-{k}")[0] for k in ("step", "run")}
        panel.screenshot(path=str(shots / "dark_panel.png"))
        for key in ("step", "run"):
            assert not on[key]["disabled"] and on[key]["saturation"] > 0.4 and on[key]["alpha"] > 0.9, on[key]
        for key, style in off.items():  # nothing of the enabled colour is left on a disabled button
            assert style["alpha"] < 0.1 or style["saturation"] < 0.15, (key, style)
            assert style["border"] == "dashed", (key, style)
        assert (off["run"]["background"], off["run"]["border"]) != (on["run"]["background"], on["run"]["border"])

        # ----- the batch grid's Stop, disabled once the batch is over: not red
        (grid_stop,) = _styles(page, ".nbagent-batch button.nbb-stop")
        assert grid_stop["disabled"], grid_stop
        assert grid_stop["alpha"] < 0.1 or grid_stop["saturation"] < 0.15, grid_stop
        assert grid_stop["border"] == "dashed", grid_stop

        # ----- every graph: its corners show the dark page, not a white box
        graphs = page.locator(
            ".nbagent-livegraph svg, .jp-OutputArea-output .nb-graph svg, "
            ".jp-RenderedSVG img, .jp-RenderedImage img, .jp-OutputArea-output > .jp-RenderedHTMLCommon svg")
        count = graphs.count()
        assert count >= 4, count  # live graphs (two panel views), agent.graph's SVGs, the card's, the workflow's
        checked = 0
        for i in range(count):
            g = graphs.nth(i)
            box = g.bounding_box() if g.is_visible() else None
            if box is None or box["width"] < 40 or box["height"] < 40:
                continue
            g.scroll_into_view_if_needed()
            png = g.screenshot(path=str(shots / f"dark_graph_{i}.png"))
            corners = _corner_luminance(png)
            assert max(corners) < 0.3, (i, corners)  # white would be 1.0
            checked += 1
        assert checked >= 4, checked

        # ----- and every text is readable
        found: list[dict[str, Any]] = []
        page.mouse.wheel(0, -100000)
        for _ in range(5):
            found += page.evaluate(CONTRAST_JS)
            page.mouse.wheel(0, 2000)
        low = [f for f in found if f["ratio"] < MIN_CONTRAST]
        assert found and not low, low[:12]
    except Exception:
        page.screenshot(path=str(shots / "dark_FAILED.png"), full_page=True)
        raise
    finally:
        page.context.close()
        _set_theme(lab, THEMES["light"])
