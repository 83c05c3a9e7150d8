"""The panels where no widget front end runs: notebooks 05 and 08 as nbconvert's HTML (what
GitHub, the docs site and an editor without the widget renderer show), in Debian's Chromium,
in the light and the dark theme.

The stored outputs of the panels carry a widget view and a static picture (``text/html``);
with no widget state saved in the notebook the page shows the picture. The test checks that
picture is there and readable: the agent panel's status line, its step graph as an inline SVG
whose nodes say their number and status, its transcript; the workflow panel's status line and
run; no script or event handler inside either; every text at 4.5:1 contrast or better; and the
panels ask for nothing beyond what nbconvert's own page asks for (measured on an empty
notebook exported the same way). Screenshots: ``static_{theme}_panel.png``, ``static_{theme}_wfpanel.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import check_browser_tools  # type: ignore[import-not-found]
from nbformat.v4 import new_notebook
from panel_page import chromium, low_contrast  # type: ignore[import-not-found]  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

UNSAFE_JS = """root => [...root.querySelectorAll('*')].filter(e => e.tagName.toLowerCase() === 'script'
  || [...e.attributes].some(a => a.name.startsWith('on'))).map(e => e.outerHTML.slice(0, 80))"""


def export(nb: nbformat.NotebookNode, theme: str, into: Path) -> Path:
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter(template_name="lab", theme=theme).from_notebook_node(nb)
    into.write_text(html, encoding="utf-8")
    return into


def open_page(browser: Any, path: Path) -> tuple[Any, Any, list[str], list[str]]:
    """The page at ``path``; every request that is not for a local file is aborted and listed."""
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000})
    offsite: list[str] = []
    errors: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url
        if url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            offsite.append(url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return ctx, page, offsite, errors


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_static_pictures_of_both_panels_are_there_and_readable(request: pytest.FixtureRequest,
                                                                   tmp_path: Path, theme: str) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    browser = request.getfixturevalue("chromium")
    shots: Path = request.getfixturevalue("shots")

    ctx, page, baseline, _ = open_page(browser, export(new_notebook(), theme, tmp_path / "empty.html"))
    ctx.close()

    nb05 = nbformat.read(NOTEBOOKS / "05_control_panel.ipynb", as_version=4)
    nb08 = nbformat.read(NOTEBOOKS / "08_agent_workflow.ipynb", as_version=4)
    assert "widgets" not in nb05.metadata and "widgets" not in nb08.metadata  # no state: the picture shows
    for name, nb in (("panel", nb05), ("wfpanel", nb08)):
        ctx, page, offsite, _errors = open_page(browser, export(nb, theme, tmp_path / f"{name}.html"))
        try:
            if name == "panel":
                pictures = page.locator(".jp-OutputArea-output .nbagent-panel")
                assert pictures.count() == 2, pictures.count()  # the panel, and its second view at the end
                panel = pictures.last
                status = panel.locator(".nbagent-status-line").inner_text()
                assert "done" in status and "task" in status, status
                texts = panel.locator("svg g.node").evaluate_all("gs => gs.map(g => g.textContent)")
                assert any("#1 done" in t for t in texts), texts
                assert "user" in panel.inner_text() and "assistant" in panel.inner_text()
            else:
                panel = page.locator(".jp-OutputArea-output .nbagent-wfpanel").last
                status = panel.locator(".nbagent-status-line").inner_text()  # shown before its run
                assert status == "No run yet: type a message and click Start.", status
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=str(shots / f"static_{theme}_{name}.png"))
            assert page.evaluate(UNSAFE_JS, panel.element_handle()) == []
            found, low = low_contrast(panel)
            print(f"[static {theme} {name}] {len(found)} texts, lowest contrast {min(f['ratio'] for f in found)}")
            if name == "panel":
                assert {"svg", "span"} <= {f["where"] for f in found}, found
            assert not low, f"texts below 4.5:1 in the {theme} static picture: {low[:12]}"
            assert sorted(set(offsite)) == sorted(set(baseline)), set(offsite) ^ set(baseline)
        finally:
            ctx.close()
