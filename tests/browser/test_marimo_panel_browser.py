"""The panel in marimo: ``notebooks/marimo_panel.py`` (``mo.ui.anywidget(agent.panel(task))``
for an offline ScriptedLLM agent) served by ``marimo run`` on 127.0.0.1 and driven in
Debian's Chromium. Run step three times, Undo, then click a node and walk the graph with the
keyboard; every text of the panel keeps 4.5:1 contrast in marimo's light and dark themes; no
request leaves the machine (every non-loopback one is aborted and listed, and must be none).
The same notebook's workflow panel: Start, Step, Run to end, a person's answer in its box.

marimo's own page (fonts, icons, its JavaScript) is served by the marimo server itself: run
with everything but loopback blocked, it asks for nothing outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, free_port  # type: ignore[import-not-found]
from panel_page import (  # type: ignore[import-not-found]
    chromium,  # noqa: F401  (a fixture)
    focused,
    low_contrast,
    nodes,
    run_three_steps_and_undo,
    wait_text,
)

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "notebooks" / "marimo_panel.py"


class MarimoRun:
    """``marimo run APP`` on a free 127.0.0.1 port, with a home and config of its own (the
    theme set there), in its own process group; ``stop()`` ends the group."""

    def __init__(self, app: Path, theme: str) -> None:
        self.app = app
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._tmp = tempfile.TemporaryDirectory(prefix="nbagent-marimo-")
        self.home = Path(self._tmp.name)
        config = self.home / "config" / "marimo"
        config.mkdir(parents=True)
        (config / "marimo.toml").write_text(f'[display]\ntheme = "{theme}"\n')
        self.log_path = self.home / "marimo.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> MarimoRun:
        env = dict(os.environ, HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / "config"),
                   XDG_CACHE_HOME=str(self.home / "cache"), XDG_STATE_HOME=str(self.home / "state"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, "-m", "marimo", "run", str(self.app), "--host", "127.0.0.1",
               "--port", str(self.port), "--headless", "--no-token", "--no-sandbox"]
        self.proc = subprocess.Popen(cmd, cwd=self.home, env=env, stdout=open(self.log_path, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"marimo run exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.base + "/", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"marimo run was not up after {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self._tmp.cleanup()


def _loopback_only(ctx: Any, base: str) -> tuple[list[str], list[str]]:
    """Abort every request that is not to the marimo server (or data:/blob:); list them, and
    list every request the page made at all."""
    offsite: list[str] = []
    seen: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url
        seen.append(url)
        if url.startswith((base + "/", "data:", "blob:")):
            r.continue_()
        else:
            offsite.append(url)
            r.abort()

    ctx.route("**/*", route)
    return offsite, seen


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_marimo_runs_the_panel_offline_steps_undo_click_keys_contrast(request: pytest.FixtureRequest,
                                                                      theme: str) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    import marimo  # noqa: F401  (the dev extra installs it: missing, this fails, never skips)

    browser = request.getfixturevalue("chromium")
    shots: Path = request.getfixturevalue("shots")
    server = MarimoRun(APP, theme).start()
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    offsite, seen = _loopback_only(ctx, server.base)
    sockets: list[str] = []
    errors: list[str] = []
    page = ctx.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    t0 = time.monotonic()
    try:
        page.goto(server.base + "/")
        panel = page.locator(".nbagent-aw").first
        panel.locator(".nbagent-livegraph svg g.node").first.wait_for()
        assert panel.get_attribute("data-nba-theme") == theme  # the panel follows marimo's theme
        print(f"[marimo {theme}] panel drawn {time.monotonic() - t0:.1f}s after loading the page")

        run_three_steps_and_undo(page, panel)
        assert "363 + 42 = 405." in panel.locator(".nbagent-tokens").inner_text() or \
            "363 + 42 = 405." in panel.locator(".nbagent-livegraph").inner_text()
        assert "121 * 3 = 363." in panel.locator(".nbagent-transcript").inner_text()
        panel.screenshot(path=str(shots / f"marimo_{theme}_after_undo.png"))
        if theme == "light":  # the README's picture (docs/panel_marimo.png is a copy of it)
            box = panel.bounding_box() or {"y": 0, "height": 1076}
            page.screenshot(path=str(shots / "readme_panel_marimo.png"),
                            clip={"x": 0, "y": 0, "width": 1500, "height": min(1100, box["y"] + box["height"] + 24)})

        # click the first node: the inspector shows step #1, and the node is marked current
        panel.locator(".nbagent-livegraph svg g.node").first.click()
        inspector = panel.locator(".nbagent-inspector")
        wait_text(page, inspector, "#1 done")
        assert [n["current"] for n in nodes(panel)] == [True, False, False, False, False]
        assert panel.locator("button.nbagent-btn-goto").is_visible()

        # the keyboard: the clicked node holds focus; Right moves to #2, Enter inspects it
        assert (focused(panel) or {}).get("label", "").startswith("Step 1, done"), focused(panel)
        page.keyboard.press("ArrowRight")
        assert (focused(panel) or {}).get("label", "").startswith("Step 2, done"), focused(panel)
        page.keyboard.press("Enter")
        wait_text(page, inspector, "#2 done")
        # "Undo back to here" from the inspector: step #3 is queued again, nothing lost
        panel.locator("button.nbagent-btn-goto").click()
        wait_text(page, panel.locator(".nbagent-status"), "2 done")
        panel.screenshot(path=str(shots / f"marimo_{theme}_inspector.png"))

        found, low = low_contrast(panel)
        print(f"[marimo {theme}] {len(found)} texts, lowest contrast {min(f['ratio'] for f in found)}")
        assert {"svg", "button", "span"} <= {f["where"] for f in found}, found
        assert not low, f"texts below 4.5:1 in marimo's {theme} theme: {low[:12]}"
    except Exception:
        page.screenshot(path=str(shots / f"marimo_{theme}_FAILED.png"), full_page=True)
        print(server.log())
        raise
    finally:
        print(f"[marimo {theme}] {len(seen)} requests, sockets {sockets}; offsite={offsite}; errors={errors}")
        ctx.close()
        server.stop()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert all(s.startswith(server.base.replace("http", "ws", 1)) for s in sockets), sockets
    assert not errors, errors


GRAPH_TEXT_JS = """root => { const svg = root.querySelector('.nbagent-livegraph svg');
  return svg ? [...svg.querySelectorAll('text')].map(t => t.textContent.trim()).join(' ') : null; }"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_marimo_runs_the_workflow_panel_and_a_person_answers(request: pytest.FixtureRequest, theme: str) -> None:
    """The same notebook's workflow panel (``mo.ui.anywidget(writer.panel())``): Start, Step
    three times, Run to end, which waits at the tool's question; an answer typed in the box
    (HTML-ish: it must stay text) and Send; the run ends and its graph shows the answer; every
    text at 4.5:1 in marimo's light and dark themes; no request leaves the machine."""
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    browser = request.getfixturevalue("chromium")
    shots: Path = request.getfixturevalue("shots")
    server = MarimoRun(APP, theme).start()
    ctx = browser.new_context(viewport={"width": 1500, "height": 1400})
    offsite, seen = _loopback_only(ctx, server.base)
    errors: list[str] = []
    page = ctx.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    answer = "yes <b>now</b> & go"
    try:
        page.goto(server.base + "/")
        panel = page.locator(".nbagent-wfpanel").first
        status = panel.locator(".nbagent-status-line")
        panel.wait_for()
        assert panel.get_attribute("data-nba-theme") == theme  # the panel follows marimo's theme
        wait_text(page, status, "No run yet")
        panel.locator("input.nbagent-wf-message").fill("Publish the note")
        panel.locator("button.nbagent-btn-start").click()
        wait_text(page, status, "Run paused; 0 workflow steps taken.")
        before = panel.evaluate(GRAPH_TEXT_JS)
        for n, produced in ((1, "AgentInput"), (2, "AgentSetup"), (3, "AgentOutput")):
            step = panel.locator("button.nbagent-btn-step")
            page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=step.element_handle())
            step.click()
            wait_text(page, status, f"{n} workflow step{'s' if n > 1 else ''} taken")
            assert produced in panel.locator(".nbagent-wf-events").inner_text()
        page.wait_for_function(f"([root, before]) => ({GRAPH_TEXT_JS})(root) !== before",
                               arg=[panel.element_handle(), before])  # the agent's step is drawn

        panel.locator("button.nbagent-btn-run").click()
        question = panel.locator(".nbagent-q")
        wait_text(page, question, "Question: Publish the note?")
        box = panel.locator("input.nbagent-wf-answer")
        page.wait_for_function("el => !el.disabled", arg=box.element_handle())
        box.fill(answer)
        panel.locator("button.nbagent-btn-send").click()
        wait_text(page, status, "Run done")
        page.wait_for_function(f"([root, want]) => (({GRAPH_TEXT_JS})(root) || '').includes(want)",
                               arg=[panel.element_handle(), f"Finished; person said: {answer}"])
        assert panel.locator("b", has_text="now").count() == 0  # the answer stayed text
        panel.screenshot(path=str(shots / f"marimo_wfpanel_{theme}_done.png"), animations="disabled")

        found, low = low_contrast(panel)
        print(f"[marimo wfpanel {theme}] {len(found)} texts, lowest contrast {min(f['ratio'] for f in found)}")
        assert not low, f"texts below 4.5:1 in the marimo workflow panel ({theme}): {low[:12]}"
    except Exception:
        page.screenshot(path=str(shots / f"marimo_wfpanel_{theme}_FAILED.png"), full_page=True)
        print(server.log())
        raise
    finally:
        print(f"[marimo wfpanel] {len(seen)} requests; offsite={offsite}; errors={errors}")
        ctx.close()
        server.stop()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert errors == [], errors
