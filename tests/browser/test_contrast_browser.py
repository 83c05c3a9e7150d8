"""Notebook 05 in a real browser: every text nbagent draws is readable (contrast >= 4.5:1) in
JupyterLab's light and dark themes, and the notebook runs in Jupyter Notebook 7 too.

The contrast of each text is measured in the page: its colour (``color``, or ``fill`` for SVG
text) against what is really behind it: the shape it sits in (a graph node, the graph's
background) or the first ancestor with a background colour, up to the page's. Screenshots go
to ``$SCREENSHOT_DIR``. Run under ``flock /tmp/browser.lock``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jlab import STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "05_control_panel.ipynb"
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
MIN_CONTRAST = 4.5

CONTRAST_JS = r"""() => {
  const parse = c => { const m = c && c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const probe = document.createElement('div'); document.body.appendChild(probe);
  const rgb = c => { if (!c || c === 'none' || c === 'transparent') return null;
    probe.style.color = ''; probe.style.color = c; return parse(getComputedStyle(probe).color); };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const htmlBg = el => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; }
    return parse(getComputedStyle(document.body).backgroundColor) || {r: 255, g: 255, b: 255, a: 1}; };
  const svgBg = t => { // the node/cluster shape the text sits in, else the graph's background polygon
    const tb = t.getBoundingClientRect(); const cx = tb.x + tb.width / 2, cy = tb.y + tb.height / 2;
    const svg = t.ownerSVGElement; let best = null, area = Infinity;
    svg.querySelectorAll('path, polygon, ellipse, rect').forEach(s => {
      const f = rgb(s.getAttribute('fill') || getComputedStyle(s).fill); if (!f || f.a < 0.5) return;
      const b = s.getBoundingClientRect(); if (cx < b.x || cx > b.x + b.width || cy < b.y || cy > b.y + b.height) return;
      if (b.width * b.height < area && b.width * b.height > tb.width * tb.height * 0.9) { best = f; area = b.width * b.height; } });
    return best || htmlBg(svg.parentElement); };
  const out = [];
  const roots = document.querySelectorAll('.nbagent-panel, .nbagent, .jp-OutputArea-output svg, .nbagent-livegraph');
  const seen = new Set();
  roots.forEach(root => root.querySelectorAll('*').forEach(el => {
    if (seen.has(el)) return; seen.add(el);
    const isSvgText = el.tagName.toLowerCase() === 'text';
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) return;
    const r = el.getBoundingClientRect(); if (r.width < 1 || r.height < 1) return;
    const st = getComputedStyle(el); if (st.visibility === 'hidden' || st.display === 'none') return;
    if (el.closest('button[disabled], input[disabled], select[disabled]')) return; // WCAG: inactive controls
    const fg = isSvgText ? rgb(el.getAttribute('fill') || st.fill) : parse(st.color);
    if (!fg) return;
    const bg = isSvgText ? svgBg(el) : htmlBg(el);
    out.push({text: el.textContent.trim().slice(0, 50), where: isSvgText ? 'svg' : (el.closest('.nbagent-panel') ? 'panel' : 'card'),
              ratio: Math.round(ratio(fg, bg) * 100) / 100});
  }));
  probe.remove();
  return out;
}"""


def _notebook(kernel: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": f"nbagent test ({kernel})", "language": "python"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # the cards too (task, step output), not only the panel and the graphs
    nb.cells.append(nbformat.v4.new_code_cell(
        "from IPython.display import display\n"
        "display(task)\n"
        "display(agent.get_completed_steps(task)[-1])"))
    return nb


def _set_theme(lab: Any, theme: str) -> None:
    d = lab.home / "lab-settings" / "@jupyterlab" / "apputils-extension"
    d.mkdir(parents=True, exist_ok=True)
    (d / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))


def _run_all_and_wait(page: Any) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_selector(".nbagent-panel")
    # the notebook's last code cell ran: the new task it creates is finalized, in the panel
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
        ".some(e => e.textContent.includes('3 apple, 1 cheese: 5.5 euros.'))",
        timeout=120_000,
    )
    page.wait_for_timeout(1500)  # the live graph's last redraw and transition


def _press_when_enabled(page: Any, button: Any) -> None:
    """Click a panel button once the kernel has turned it on (it says so with aria-disabled)."""
    page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=button.element_handle())
    button.click()


def _low(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if f["ratio"] < MIN_CONTRAST]


def _summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for f in found:
        by.setdefault(f["where"], []).append(f["ratio"])
    return {k: (len(v), min(v)) for k, v in sorted(by.items())}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_of_notebook_05_is_readable_in_jupyterlab(request: pytest.FixtureRequest, theme: str) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    name = f"nb05_{theme}.ipynb"
    nbformat.write(_notebook("nbagent-nodot"), lab.root_dir / name)
    _set_theme(lab, THEMES[theme])
    page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url(f"/lab/workspaces/c-{theme}/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg="nbagent-nodot")
        assert page.evaluate("() => document.body.dataset.jpThemeLight") == ("true" if theme == "light" else "false")
        _run_all_and_wait(page)
        # play after Run All, as a workshop does: New task, then Run step (the shop assistant)
        panel = page.locator(".nbagent-panel").first
        panel.scroll_into_view_if_needed()
        panel.locator("input.nbagent-new-task-text").fill("How much for two breads?")
        panel.locator("button.nbagent-btn-new").click()
        _press_when_enabled(page, panel.locator("button.nbagent-btn-step"))
        page.wait_for_function(
            "el => el.textContent.includes('1 done')", arg=panel.locator(".nbagent-status").element_handle())
        status_text = panel.locator(".nbagent-status").inner_text()
        assert "failed" not in status_text, status_text
        panel.screenshot(path=str(shots / f"contrast_{theme}_panel.png"))
        found: list[dict[str, Any]] = []
        for _ in range(3):  # measure the page top to bottom, one screenful at a time
            found += page.evaluate(CONTRAST_JS)
            page.mouse.wheel(0, 2000)
        found += page.evaluate(CONTRAST_JS)
        page.screenshot(path=str(shots / f"contrast_{theme}_page.png"))
        print(f"contrast ({theme}): {_summary(found)}")
        print("lowest:", sorted(found, key=lambda f: f["ratio"])[:15])
        assert {"svg", "panel", "card"} <= {f["where"] for f in found}, _summary(found)
        assert not _low(found), f"texts below {MIN_CONTRAST}:1 in the {theme} theme: {_low(found)[:12]}"
    except Exception:
        page.screenshot(path=str(shots / f"contrast_{theme}_FAILED.png"), full_page=True)
        raise
    finally:
        page.context.close()
        _set_theme(lab, THEMES["light"])


def test_notebook_05_runs_in_jupyter_notebook_7(request: pytest.FixtureRequest) -> None:
    check_browser_tools()
    import notebook  # noqa: F401  (the dev extra installs Notebook 7: missing, this fails, never skips)
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    name = "nb05_notebook7.ipynb"
    nbformat.write(_notebook("nbagent-nodot"), lab.root_dir / name)
    page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url(f"/notebooks/{name}"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        assert "/notebooks/" in page.url  # Notebook 7's own page, not JupyterLab's
        page.wait_for_function(
            "() => document.querySelector('#jp-top-panel, #top-panel') !== null")
        # Notebook 7 shows the kernel's name once it is connected; Run All before that is lost
        page.get_by_text("nbagent test (nbagent-nodot)").first.wait_for()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            try:
                page.wait_for_selector(".nbagent-panel", timeout=20_000)
                break
            except Exception:  # noqa: BLE001 - the kernel was not ready yet: Run All again
                continue
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(e => e.textContent.includes('3 apple, 1 cheese: 5.5 euros.'))",
            timeout=120_000,
        )
        page.wait_for_timeout(1500)
        panel = page.locator(".nbagent-panel").last  # the second view, near the bottom
        panel.scroll_into_view_if_needed()
        status = panel.locator(".nbagent-status")
        page.wait_for_function("el => el.textContent.includes('finalized')", arg=status.element_handle())
        # the buttons work here too: a new task from the box, one step (the shop assistant)
        panel.locator("input.nbagent-new-task-text").fill("How much for a cheese?")
        panel.locator("button.nbagent-btn-new").click()
        _press_when_enabled(page, panel.locator("button.nbagent-btn-step"))
        page.wait_for_function("el => el.textContent.includes('1 done')", arg=status.element_handle())
        assert "failed" not in status.inner_text(), status.inner_text()
        page.wait_for_function(  # the live graph drew the step and the next one
            "el => el.querySelectorAll('.nbagent-livegraph svg g.node').length === 2",
            arg=panel.element_handle())
        page.wait_for_timeout(800)
        panel.screenshot(path=str(shots / "notebook7_panel.png"))
        page.screenshot(path=str(shots / "notebook7_page.png"))
    except Exception:
        page.screenshot(path=str(shots / "notebook7_FAILED.png"), full_page=True)
        raise
    finally:
        page.context.close()
