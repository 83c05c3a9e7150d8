"""The documentation site in Debian's Chromium, served on 127.0.0.1, with nothing else reachable.

The site is built as ``make docs`` builds it (``tests/docs_site.py``, once per test run). The
test opens the index, the runners' API page and two tutorials, as a newcomer would: every
request that is not for the site is aborted and fails the test, and so does any error the
pages raise or log. On the API page, ``AgentRunner.run_step`` shows its signature; a tutorial's
graphs are images that loaded; the control panel shows its static HTML (no widget code is
loaded). Then the search box on the index, typed into and submitted, finds ``run_step`` on the
runners' page: Sphinx's search index, offline. Last, a newcomer's clicks from the index to a
class's or function's signature and on to its first example, for names added late (the
planner agent, tracing, the panel).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jlab import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lite.serve import serve_in_thread  # noqa: E402
from tests.docs_site import built_site  # noqa: E402

#: nothing listens on port 9: any request Chromium would send beyond loopback fails there
NOWHERE_PROXY = "--proxy-server=http://127.0.0.1:9"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    check_browser_tools()
    built = built_site()
    assert built.result.returncode == 0, f"make docs failed:\n{built.result.stderr[-4000:]}"
    server, url = serve_in_thread(built.html)
    try:
        yield url + "/"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def page(base_url: str, shots: Path) -> Iterator[Any]:
    import playwright.sync_api as api

    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, NOWHERE_PROXY], timeout=STEP_TIMEOUT_MS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(STEP_TIMEOUT_MS)
        blocked: list[str] = []

        def route(r: Any) -> None:
            url = r.request.url
            if url.startswith(base_url) or url.startswith(("data:", "blob:")):
                r.continue_()
            else:
                blocked.append(url)
                r.abort()

        context.route("**/*", route)
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        tab.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        def failed(r: Any) -> None:
            # a request the page itself gave up (ERR_ABORTED: a link's page fetched ahead, or a
            # load cut short by the next click) is not a failure of the site; any other is
            if r.url.startswith(base_url) and r.failure != "net::ERR_ABORTED":
                errors.append(f"request failed: {r.url} ({r.resource_type}: {r.failure})")

        tab.on("requestfailed", failed)
        tab.blocked, tab.errors = blocked, errors
        try:
            yield tab
        finally:
            context.close()
            browser.close()


def visit(page: Any, url: str, shots: Path, name: str) -> None:
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(shots / f"docs_{name}.png"))
    assert page.blocked == [], f"{name}: requests that left the machine: {page.blocked}"
    assert page.errors == [], f"{name}: {page.errors}"


def test_index(page: Any, base_url: str, shots: Path) -> None:
    visit(page, base_url + "index.html", shots, "01_index")
    assert "nbagent" in page.title()
    for section in ("Tutorials", "How-to guides", "Explanations", "API reference"):
        assert page.get_by_role("link", name=section).first.is_visible(), section


def test_agent_runner_page_shows_run_step_signature(page: Any, base_url: str, shots: Path) -> None:
    visit(page, base_url + "reference/runners.html#nbagent.AgentRunner.run_step", shots, "02_runners")
    entry = page.locator('[id="nbagent.AgentRunner.run_step"]')
    assert entry.is_visible()
    signature = " ".join(entry.inner_text().split())
    assert signature.startswith("run_step(task_id: Task | str, input: str | None = None"), signature
    assert "TaskStepOutput" in signature
    assert page.locator('[id="nbagent.AgentRunner"]').is_visible() or page.locator('[id="nbagent.AgentRunner"]').count() == 1


def test_tutorials_show_their_graphs_and_the_panel_fallback(page: Any, base_url: str, shots: Path) -> None:
    visit(page, base_url + "tutorials/01_quickstart.html", shots, "03_tutorial_01")
    images = page.evaluate("""() => Array.from(document.querySelectorAll('img[src$=".svg"]')).map(
        i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))""")
    assert len(images) >= 2 and all(i["ok"] for i in images), images
    visit(page, base_url + "tutorials/05_control_panel.html", shots, "04_tutorial_05")
    panel = page.locator(".nbagent-panel").first
    panel.scroll_into_view_if_needed()
    assert panel.is_visible() and "task" in panel.inner_text()
    page.screenshot(path=str(shots / "docs_05_panel_fallback.png"))


def test_search_from_the_index_finds_run_step(page: Any, base_url: str, shots: Path) -> None:
    visit(page, base_url + "index.html", shots, "06_before_search")
    box = page.locator("input[name=q]").first
    box.fill("run_step")
    box.press("Enter")
    page.wait_for_url("**/search.html?q=run_step*")
    hit = page.locator('#search-results a[href*="reference/runners.html#nbagent.AgentRunner.run_step"]').first
    hit.wait_for(state="visible")
    page.screenshot(path=str(shots / "docs_07_search.png"))
    assert page.blocked == [] and page.errors == [], (page.blocked, page.errors)
    hit.click()
    page.wait_for_url("**/reference/runners.html#nbagent.AgentRunner.run_step")
    assert page.locator('[id="nbagent.AgentRunner.run_step"]').is_visible()


@pytest.mark.parametrize(("group", "entry", "example"), [
    ("Runners and agents", "nbagent.StructuredPlannerAgent", "howto/port-from-llamaindex.html"),
    ("Tracing (OpenTelemetry)", "nbagent.tracing.instrument", "tutorials/14_tracing.html"),
    ("Views and widgets", "nbagent.AgentPanel", "tutorials/05_control_panel.html"),
])
def test_a_newcomer_clicks_from_the_index_to_a_signature_and_an_example(
    page: Any, base_url: str, shots: Path, group: str, entry: str, example: str
) -> None:
    """Issue 27's "done means", by clicks only: index, API reference, the concept's page, the
    entry's signature, its first example (a page whose code ran when the site was built)."""
    visit(page, base_url + "index.html", shots, "08_newcomer")
    page.locator("article").get_by_role("link", name="API reference").first.click()
    page.wait_for_url("**/reference/index.html")
    page.locator("article").get_by_role("link", name=group, exact=True).first.click()
    signature = page.locator(f'[id="{entry}"]')
    signature.wait_for(state="visible")
    assert entry.rpartition(".")[2] + "(" in " ".join(signature.inner_text().split()), signature.inner_text()
    link = page.locator(f'[id="{entry}"] + dd > p:has-text("Examples:") a').first
    assert link.get_attribute("href").split("#")[0].endswith(example), link.get_attribute("href")
    link.click()
    page.wait_for_url(f"**/{example}*")
    page.wait_for_load_state("networkidle")
    assert page.locator(".cell_output").count() > 0, "the example's code ran when the site was built"
    page.screenshot(path=str(shots / f"docs_09_example_{entry.rpartition('.')[2]}.png"))
    assert page.blocked == [] and page.errors == [], (page.blocked, page.errors)


def test_a_tutorials_launch_link_opens_it_in_the_browser_site(page: Any, base_url: str, shots: Path) -> None:
    """``make docs-lite``: from a tutorial's page, its launch link opens the same notebook in
    the JupyterLite site beside the docs, and its Pyodide kernel starts; every file comes from
    the docs' own server (the rest is aborted and fails the test)."""
    built = built_site()
    if built.no_lite:
        pytest.skip(f"the docs are built without the browser site here: {built.no_lite}")
    from lite_page import KERNEL_IDLE_JS, lite_page  # type: ignore[import-not-found]

    ctx, lite = lite_page(page.context.browser, base_url.rstrip("/"), timeout_ms=max(STEP_TIMEOUT_MS, 180_000))
    try:
        tab = lite.page
        tab.goto(base_url + "tutorials/01_quickstart.html", wait_until="load")
        tab.locator("p.nbagent-launch a").first.click()
        tab.wait_for_url("**/lite/lab/index.html?path=01_quickstart.ipynb")
        tab.wait_for_selector(".jp-Notebook .jp-Cell")
        tab.locator(".jp-Notebook .jp-Cell", has_text="Quick start: an agent, one step at a time").first.wait_for()
        tab.locator(".jp-Notebook .jp-CodeCell", has_text="browser_note()").first.wait_for()  # its cells, drawn
        tab.wait_for_function(KERNEL_IDLE_JS)  # Pyodide and the kernel loaded from the site
        tab.screenshot(path=str(shots / "docs_10_launch_in_lite.png"))
        assert lite.offsite == [], f"requests that left the docs' server: {lite.offsite}"
        assert lite.errors == [], lite.errors
    finally:
        ctx.close()
