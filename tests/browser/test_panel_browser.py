"""The control panel as a user sees it: JupyterLab + Debian's Chromium, driven by Playwright.

A notebook built here imports nbagent, builds a runner with an offline streaming worker and
displays ``runner.panel(task)`` (one anywidget). The test runs all cells from the Run menu,
clicks "Run step" three times and "Undo" once, and after each click reads the step DAG that
the panel drew in the page with Graphviz compiled to WebAssembly (``g.node`` elements: the
status word in each node's first line and the node's fill colour). Every request must stay on
loopback. It runs twice: with Graphviz's ``dot`` on the kernel's PATH and without it (the
panel draws in the browser, so it must not care). Screenshots go to ``$SCREENSHOT_DIR`` (default ``artifacts/screenshots``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from nbagent.runner.state import StepStatus
from nbagent.viz.dot import STATUS_COLORS

pytestmark = pytest.mark.timeout(300)

CELL_SETUP = """\
import shutil
import nbagent
from nbagent import (AgentChatResponse, AgentRunner, ChatMessage, CustomSimpleAgentWorker,
                     MessageRole, ScriptedLLM)
nbagent.seed_ids(0)
print("dot on kernel PATH:", shutil.which("dot"))"""

CELL_AGENT = """\
class FiveStepAgent(CustomSimpleAgentWorker):
    \"\"\"Asks the (scripted, streaming) model once per step; done after five steps.\"\"\"

    def _initialize_state(self, task, **kwargs):
        return {"n": 0}

    async def _arun_step(self, state, task, input=None):
        state["n"] += 1
        prompt = input or (task.input if state["n"] == 1 else f"continue (step {state['n']})")
        state["memory"].put(ChatMessage(role=MessageRole.USER, content=prompt))
        text = ""
        async for chunk in self.llm.astream_chat(state["memory"].get_all()):
            text = chunk.message.text
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        return AgentChatResponse(response=text), state["n"] >= 5

    def _finalize_task(self, state, **kwargs):
        pass


llm = ScriptedLLM([
    "Plan: work out 121 * 3 first, then add 42.",
    "121 * 3 = 363.",
    "363 + 42 = 405.",
    "Check: 405 - 42 = 363 and 363 / 3 = 121.",
    "The answer is 405.",
], repeat_last=True)
runner = AgentRunner(FiveStepAgent(llm=llm))
task = runner.create_task("What is (121 * 3) + 42?")"""

CELL_PANEL = """\
panel = runner.panel(task)
panel"""

NODES_JS = """
() => [...document.querySelectorAll('.nbagent-livegraph svg g.node')].map(g => {
  const texts = [...g.querySelectorAll('text')].map(t => t.textContent.trim());
  const shape = g.querySelector('path, polygon, ellipse');
  const m = /^#(\\d+) (\\w+)/.exec(texts[0] || '');
  return {index: m ? +m[1] : null, status: m ? m[2] : null,
          fill: shape ? (shape.getAttribute('fill') || '').toLowerCase() : null};
})
"""

WAIT_STATUSES_JS = """
(expected) => {
  const got = [...document.querySelectorAll('.nbagent-livegraph svg g.node')].map(g => {
    const t = g.querySelector('text');
    const m = /^#(\\d+) (\\w+)/.exec(t ? t.textContent.trim() : '');
    return m ? m[2] : '?';
  });
  return JSON.stringify(got) === JSON.stringify(expected);
}
"""

FILL = {s.value: STATUS_COLORS[s][0].lower() for s in StepStatus}
# the panel's buttons stay focusable when they cannot be pressed: aria-disabled, not disabled
ENABLED_JS = "b => b.getAttribute('aria-disabled') === 'false'"


def build_notebook(kernel: str) -> nbformat.NotebookNode:
    nb = new_notebook(metadata={
        "kernelspec": {"name": kernel, "display_name": f"nbagent test ({kernel})", "language": "python"},
    })
    nb.cells = [
        new_markdown_cell("# nbagent panel: browser test\nRun step ×3, Undo ×1, checked in the DOM."),
        new_code_cell(CELL_SETUP),
        new_code_cell(CELL_AGENT),
        new_code_cell(CELL_PANEL),
    ]
    return nb


MARK_NODES_JS = """() => document.querySelectorAll('.nbagent-livegraph svg g.node')
    .forEach(g => { g.__nbagentSeen = true; })"""
MARKED_NODES_JS = """() => [...document.querySelectorAll('.nbagent-livegraph svg g.node')]
    .map(g => g.__nbagentSeen === true)"""
ANIMATION_JS = """() => {
  const g = document.querySelector('.nbagent-livegraph svg g.node');
  const shape = g.querySelector('path, polygon, ellipse');
  return {appear: getComputedStyle(g).animationName,
          fill: getComputedStyle(shape).transitionProperty};
}"""


def read_nodes(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(NODES_JS))


def wait_for_statuses(page: Any, expected: list[str], what: str,
                      numbers: list[int] | None = None) -> list[dict[str, Any]]:
    """Wait until the drawn DAG has exactly these node statuses (in order); check colours."""
    try:
        page.wait_for_function(WAIT_STATUSES_JS, arg=expected, timeout=STEP_TIMEOUT_MS)
    except Exception as err:
        raise AssertionError(f"{what}: expected node statuses {expected}, page has {read_nodes(page)}") from err
    nodes = read_nodes(page)
    assert [n["index"] for n in nodes] == (numbers or list(range(1, len(expected) + 1))), nodes
    for node in nodes:  # each node is painted in its status's colour
        assert node["fill"] == FILL[node["status"]], (what, node)
    return nodes


@pytest.mark.parametrize("variant", ["dot", "nodot"])
def test_panel_buttons_drive_the_live_graph(request: pytest.FixtureRequest, variant: str) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    t0 = time.monotonic()
    name = f"panel_{variant}.ipynb"
    nbformat.write(build_notebook(f"nbagent-{variant}"), lab.root_dir / name)

    ctx, page, offsite, errors = loopback_page(
        browser, lab, width=1500, height=1100, timeout_ms=STEP_TIMEOUT_MS, console_errors=True
    )

    def shot(label: str) -> None:
        page.locator(".nbagent-panel").first.screenshot(path=str(shots / f"{variant}_{label}.png"))

    try:
        # a workspace of its own, reset: no tab or layout restored from the other variant
        page.goto(lab.url(f"/lab/workspaces/{variant}/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(  # this notebook's kernel connected and idle
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=f"nbagent-{variant}")
        if page.locator("#jp-left-stack").is_visible():
            page.keyboard.press("Control+b")  # hide the file browser: more room for the panel
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

        page.wait_for_selector(".nbagent-panel")
        output = page.locator(".jp-OutputArea-output", has_text="dot on kernel PATH:")
        output.wait_for()
        if variant == "nodot":
            assert "dot on kernel PATH: None" in output.inner_text()
        elif shutil.which("dot"):
            assert "dot on kernel PATH: None" not in output.inner_text()
        wait_for_statuses(page, ["queued"], "after Run All")
        status = page.locator(".nbagent-status")
        step_button = page.locator("button.nbagent-btn-step")
        undo_button = page.locator("button.nbagent-btn-undo")
        page.locator(".nbagent-panel").first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{variant}_01_after_run_all.png"))

        for n in (1, 2, 3):
            page.wait_for_function(ENABLED_JS, arg=step_button.element_handle())
            # mark the drawn nodes: a redraw must update them in place (so CSS can animate the
            # change of status), not throw them away and draw new ones
            page.evaluate(MARK_NODES_JS)
            step_button.click()
            wait_for_statuses(page, ["done"] * n + ["queued"], f"after Run step #{n}")
            kept = page.evaluate(MARKED_NODES_JS)
            assert kept == [True] * n + [False], f"after Run step #{n}: nodes kept in place {kept}"
            animation = page.evaluate(ANIMATION_JS)
            assert animation == {"appear": "nbagent-appear", "fill": "fill, stroke"}, animation
            page.wait_for_function(
                "([el, n]) => el.textContent.includes(n + ' done')", arg=[status.element_handle(), n])
            shot(f"0{n + 1}_after_step_{n}")
        # what the steps streamed and said reached the token view and the transcript
        assert "363 + 42 = 405." in page.locator(".nbagent-tokens").inner_text()
        assert "121 * 3 = 363." in page.locator(".nbagent-transcript").inner_text()

        page.wait_for_function(ENABLED_JS, arg=undo_button.element_handle())
        undo_button.click()
        # #3 is queued again; what its run did is the dashed "#3 undone run" node, and the
        # step that run had queued (#4) is drawn as cut, never ran
        nodes = wait_for_statuses(page, ["done", "done", "queued", "undone", "undone"], "after Undo",
                                  numbers=[1, 2, 3, 3, 4])
        texts = page.evaluate("() => [...document.querySelectorAll('.nbagent-livegraph svg g.node')]"
                              ".map(g => g.textContent)")
        assert "undone run" in texts[3] and "never ran" in texts[4], (nodes, texts)
        page.wait_for_function(
            "el => el.textContent.includes('2 done') && el.textContent.includes('1 undone')",
            arg=status.element_handle())
        shot("05_after_undo")
        page.screenshot(path=str(shots / f"{variant}_06_full_page.png"))
        if variant == "dot":  # the README's picture (docs/panel.png is a copy of it)
            page.screenshot(path=str(shots / "readme_panel_jupyterlab.png"))
    except Exception:
        page.screenshot(path=str(shots / f"{variant}_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[{variant}] browser test body {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert not [e for e in errors if e.startswith("pageerror")], errors
