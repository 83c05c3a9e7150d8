"""The panel (``runner.panel(task)``, one anywidget) in JupyterLab (light and dark) and
Notebook 7, in Debian's Chromium: the buttons drive the agent, the graph is drawn in the page
by Graphviz compiled to WebAssembly (shipped in nbagent, nothing fetched), a click on a node
inspects that step (in Notebook 7 the inspector then edits a queued step's input and forks
from a step), and the keyboard does everything the mouse does: Tab through the buttons (New
task, then the run buttons in their row's order), Enter and Space press them, arrow keys walk
the graph, Enter inspects; each node is a button whose aria-label says its number, status and
text; the status line is a live region. Every text keeps 4.5:1 contrast. No request leaves
loopback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]
from nbformat.v4 import new_code_cell, new_notebook
from panel_page import (  # type: ignore[import-not-found]
    focused,
    low_contrast,
    nodes,
    press_enabled,
    run_three_steps_and_undo,
    wait_for_statuses,
    wait_text,
)

pytestmark = pytest.mark.timeout(300)

TASK = "What is (121 * 3) + 42? <img src=x onerror=alert(1)>"
CELL_SETUP = """\
import nbagent
from nbagent import (AgentChatResponse, AgentRunner, ChatMessage, CustomSimpleAgentWorker,
                     MessageRole, ScriptedLLM)
nbagent.seed_ids(0)"""

CELL_AGENT = f"""\
class FiveStepAgent(CustomSimpleAgentWorker):
    def _initialize_state(self, task, **kwargs):
        return {{"n": 0}}

    async def _arun_step(self, state, task, input=None):
        state["n"] += 1
        prompt = input or (task.input if state["n"] == 1 else f"continue (step {{state['n']}})")
        state["memory"].put(ChatMessage(role=MessageRole.USER, content=prompt))
        text = ""
        async for chunk in self.llm.astream_chat(state["memory"].get_all()):
            text = chunk.message.text
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        return AgentChatResponse(response=text), state["n"] >= 5

    def _finalize_task(self, state, **kwargs):
        pass


llm = ScriptedLLM(["Plan: work out 121 * 3 first, then add 42.", "121 * 3 = 363.", "363 + 42 = 405.",
                   "Check: 405 - 42 = 363 and 363 / 3 = 121.", "The answer is 405."], repeat_last=True)
runner = AgentRunner(FiveStepAgent(llm=llm))
task = runner.create_task({TASK!r})"""

CELL_PANEL = "panel = runner.panel(task)\npanel"
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
TAB_ORDER = ["New task", "Run step", "Run to end", "Stop", "Undo", "Retry", "Skip", "Abandon", "Release"]


def _notebook(kernel: str) -> nbformat.NotebookNode:
    nb = new_notebook(metadata={
        "kernelspec": {"name": kernel, "display_name": f"nbagent test ({kernel})", "language": "python"}})
    nb.cells = [new_code_cell(CELL_SETUP), new_code_cell(CELL_AGENT), new_code_cell(CELL_PANEL)]
    return nb


def _set_theme(lab: Any, theme: str) -> None:
    d = lab.home / "lab-settings" / "@jupyterlab" / "apputils-extension"
    d.mkdir(parents=True, exist_ok=True)
    (d / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))


def _wait_idle(page: Any, kernel: str) -> None:
    page.wait_for_function(
        "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
        ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=kernel)


def _run_all(page: Any) -> Any:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    panel = page.locator(".nbagent-aw").first
    panel.locator(".nbagent-livegraph svg g.node").first.wait_for()
    panel.scroll_into_view_if_needed()
    return panel


def _check_no_markup_from_text(panel: Any) -> None:
    """The task's text holds an <img onerror>: it is shown as text, never made an element."""
    assert panel.locator("img").count() == 0 and panel.locator("script").count() == 0
    assert TASK in panel.locator(".nbagent-transcript").inner_text()


def _keyboard(page: Any, panel: Any) -> None:
    """Tab through the controls, press buttons with Enter and Space, walk the graph."""
    box = panel.locator("input.nbagent-new-task-text")
    box.focus()
    order = []
    for _ in TAB_ORDER:
        page.keyboard.press("Tab")
        order.append((focused(panel) or {}).get("text"))
    assert order == TAB_ORDER, order
    page.keyboard.press("Tab")
    assert "nbagent-inject" in (focused(panel) or {}).get("cls", ""), focused(panel)
    page.keyboard.press("Tab")  # into the graph: one node is in the Tab order
    node = focused(panel) or {}
    assert node.get("label", "").startswith("Step ") and node.get("step"), node

    # Enter on Run step runs a step, and the focus stays on the button while it runs
    status = panel.locator(".nbagent-status")
    done = int(status.inner_text().split(" done")[0].split()[-1])
    step = panel.locator("button.nbagent-btn-step")
    page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=step.element_handle())
    step.focus()
    page.keyboard.press("Enter")
    wait_text(page, status, f"{done + 1} done")
    assert (focused(panel) or {}).get("text") == "Run step"
    page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=step.element_handle())
    page.keyboard.press(" ")
    wait_text(page, status, f"{done + 2} done")
    assert status.get_attribute("role") == "status" and status.get_attribute("aria-live") == "polite"

    # arrows walk the nodes in order; Home and End jump; Enter and Space inspect
    panel.locator(".nbagent-livegraph svg g.node").first.click()
    labels = [n["label"] for n in nodes(panel)]
    assert (focused(panel) or {}).get("label") == labels[0]
    for i in range(1, len(labels)):
        page.keyboard.press("ArrowRight" if i % 2 else "ArrowDown")
        assert (focused(panel) or {}).get("label") == labels[i], (i, focused(panel))
    page.keyboard.press("ArrowRight")  # past the last node: it stays
    assert (focused(panel) or {}).get("label") == labels[-1]
    page.keyboard.press("Home")
    assert (focused(panel) or {}).get("label") == labels[0]
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    wait_text(page, panel.locator(".nbagent-inspector"), "#2 done")
    page.keyboard.press("End")
    page.keyboard.press("ArrowUp")
    page.keyboard.press(" ")
    want = nodes(panel)[-2]
    page.wait_for_function("([root, step]) => root.querySelector('g.node[aria-current=true]')"
                           "?.getAttribute('data-nba-step') === step", arg=[panel.element_handle(), want["step"]])
    # the notebook's own shortcuts did not take the keys: the panel is still there, one cell ran
    assert panel.is_visible()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_jupyterlab_panel_widget_click_keyboard_and_contrast(request: pytest.FixtureRequest, theme: str) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    name = f"panel_widget_{theme}.ipynb"
    nbformat.write(_notebook("nbagent-nodot"), lab.root_dir / name)
    _set_theme(lab, THEMES[theme])
    ctx, page, offsite, errors = loopback_page(browser, lab, width=1500, height=1100, timeout_ms=STEP_TIMEOUT_MS,
                                               console_errors=True)
    t0 = time.monotonic()
    try:
        page.goto(lab.url(f"/lab/workspaces/w-{theme}/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        _wait_idle(page, "nbagent-nodot")
        if page.locator("#jp-left-stack").is_visible():
            page.keyboard.press("Control+b")
        panel = _run_all(page)
        assert panel.get_attribute("data-nba-theme") == theme
        run_three_steps_and_undo(page, panel)
        assert "121 * 3 = 363." in panel.locator(".nbagent-transcript").inner_text()
        panel.screenshot(path=str(shots / f"panel_widget_{theme}_after_undo.png"))

        # a click on a node inspects that step; it is marked current
        panel.locator(".nbagent-livegraph svg g.node").nth(1).click()
        wait_text(page, panel.locator(".nbagent-inspector"), "#2 done")
        assert [n["current"] for n in nodes(panel)] == [False, True, False, False, False]
        panel.locator(".nbagent-livegraph svg g.node").first.click()
        wait_text(page, panel.locator(".nbagent-inspector"), "#1 done")
        _check_no_markup_from_text(panel)
        # "Undo back to here" (step #1): the runs of #2 and #3 are taken back and drawn dashed,
        # #2 is queued again, the #4 that #3 had queued never ran (in the live DOT's order)
        panel.locator("button.nbagent-btn-goto").click()
        wait_for_statuses(page, panel, ["done", "queued", "undone run", "undone", "undone run"], "after goto #1",
                          numbers=[1, 2, 2, 4, 3])

        _keyboard(page, panel)
        panel.screenshot(path=str(shots / f"panel_widget_{theme}_keyboard.png"))

        found, low = low_contrast(panel)
        print(f"[lab {theme}] {len(found)} texts, lowest contrast {min(f['ratio'] for f in found)}")
        assert {"svg", "button", "span"} <= {f["where"] for f in found}
        assert not low, f"texts below 4.5:1 in JupyterLab {theme}: {low[:12]}"
    except Exception:
        page.screenshot(path=str(shots / f"panel_widget_{theme}_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[lab {theme}] {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()
        _set_theme(lab, THEMES["light"])
    assert offsite == [], offsite
    assert not [e for e in errors if e.startswith("pageerror")], errors


def test_notebook7_panel_widget_steps_and_a_clicked_node(request: pytest.FixtureRequest) -> None:
    check_browser_tools()
    import notebook  # noqa: F401  (the dev extra installs Notebook 7)

    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    name = "panel_widget_nb7.ipynb"
    nbformat.write(_notebook("nbagent-nodot"), lab.root_dir / name)
    ctx, page, offsite, errors = loopback_page(browser, lab, width=1400, height=1100, timeout_ms=STEP_TIMEOUT_MS)
    stacks: list[str] = []
    page.on("pageerror", lambda e: stacks.append(e.stack or ""))
    try:
        page.goto(lab.url(f"/notebooks/{name}"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        assert "/notebooks/" in page.url
        page.get_by_text("nbagent test (nbagent-nodot)").first.wait_for()
        deadline = time.monotonic() + 90
        panel = None
        while panel is None and time.monotonic() < deadline:
            try:  # Run All before the kernel is connected is lost: try again
                panel = _run_all(page)
            except Exception:  # noqa: BLE001
                continue
        assert panel is not None, "the panel never appeared"
        wait_for_statuses(page, panel, ["queued"], "at start")
        for n in (1, 2):
            press_enabled(page, panel, "nbagent-btn-step")
            wait_for_statuses(page, panel, ["done"] * n + ["queued"], f"after Run step #{n}")
        panel.locator(".nbagent-livegraph svg g.node").first.click()
        wait_text(page, panel.locator(".nbagent-inspector"), "#1 done")
        page.keyboard.press("ArrowRight")
        page.keyboard.press("Enter")
        wait_text(page, panel.locator(".nbagent-inspector"), "#2 done")
        _check_no_markup_from_text(panel)
        panel.screenshot(path=str(shots / "panel_widget_notebook7.png"))

        # from the inspector: edit the queued step's input, then fork from step #1 with a new one
        inspector = panel.locator(".nbagent-inspector")
        panel.locator(".nbagent-livegraph svg g.node").nth(2).click()
        wait_text(page, inspector, "#3 queued")
        inspector.locator("input.nbagent-edit-input").fill("take the other road")
        inspector.locator("button.nbagent-btn-edit-input").click()
        wait_text(page, inspector, "take the other road")  # the step's input field, from the kernel
        panel.locator(".nbagent-livegraph svg g.node").first.click()
        wait_text(page, inspector, "#1 done")
        inspector.locator("input.nbagent-fork-input").fill("start again, differently")
        inspector.locator("button.nbagent-btn-fork").click()
        wait_text(page, panel.locator(".nbagent-status"), "0 done")
        wait_text(page, inspector, "start again, differently")  # the new step, selected
        press_enabled(page, panel, "nbagent-btn-step")
        wait_text(page, panel.locator(".nbagent-status"), "1 done")
        wait_text(page, panel.locator(".nbagent-transcript"), "start again, differently")
        panel.screenshot(path=str(shots / "panel_widget_notebook7_fork.png"))
    except Exception:
        page.screenshot(path=str(shots / "panel_widget_notebook7_FAILED.png"), full_page=True)
        raise
    finally:
        ctx.close()
    assert offsite == [], offsite
    print("Notebook 7 page errors:", errors, stacks)
    # Notebook 7 itself may log an error of its own (its settings); none may come from a widget's
    # module (anywidget runs each from a blob: URL)
    assert not [s for s in stacks if "blob:" in s], stacks


CELL_APPROVAL = """\
from nbagent import FunctionCallingAgent, FunctionTool, ScriptedLLM
deleted = []

def delete_file(path: str) -> str:
    \"\"\"Delete a file.

    Args:
        path: the file to delete
    \"\"\"
    deleted.append(path)
    return f"deleted {path}"

calls = {"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}},
                        {"name": "delete_file", "arguments": {"path": "notes.md"}}]}
agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(delete_file, requires_approval=True)],
                                        llm=ScriptedLLM([calls, "done"]))
agent.panel(agent.create_task("tidy up"))"""


def test_jupyterlab_panel_widget_approves_and_rejects_calls(request: pytest.FixtureRequest) -> None:
    check_browser_tools()
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    nb = _notebook("nbagent-nodot")
    nb.cells = [new_code_cell(CELL_APPROVAL)]
    nbformat.write(nb, lab.root_dir / "panel_widget_approval.ipynb")
    ctx, page, offsite, errors = loopback_page(browser, lab, width=1500, height=1100, timeout_ms=STEP_TIMEOUT_MS)
    try:
        page.goto(lab.url("/lab/workspaces/w-approval/tree/panel_widget_approval.ipynb?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        _wait_idle(page, "nbagent-nodot")
        panel = _run_all(page)
        press_enabled(page, panel, "nbagent-btn-step")
        rows = panel.locator(".nbagent-approvals .nbagent-approval-row")
        rows.nth(1).wait_for()
        assert "delete_file(path=\"a.txt\")" in rows.nth(0).inner_text()
        # click the waiting step: its calls are in the inspector too, with their own buttons
        panel.locator(".nbagent-livegraph svg g.node").nth(1).click()
        wait_text(page, panel.locator(".nbagent-inspector"), "#2 awaiting approval")
        assert panel.locator(".nbagent-inspector .nbagent-approval-row").count() == 2
        rows.nth(1).locator("input.nbagent-approval-reason").fill("notes.md is mine")
        rows.nth(1).locator("button.nbagent-btn-reject").click()
        page.wait_for_function("root => root.querySelectorAll('.nbagent-approvals .nbagent-approval-row').length === 1",
                               arg=panel.element_handle())
        panel.locator(".nbagent-inspector button.nbagent-btn-approve").click()
        page.wait_for_function("root => !root.querySelector('.nbagent-approvals .nbagent-approval-row')",
                               arg=panel.element_handle())
        press_enabled(page, panel, "nbagent-btn-step")  # runs the approved call, not the rejected one
        panel.locator(".nbagent-livegraph svg g.node").nth(1).click()
        wait_text(page, panel.locator(".nbagent-inspector"), "deleted a.txt")
        wait_text(page, panel.locator(".nbagent-inspector"), "notes.md is mine")
        panel.screenshot(path=str(shots / "panel_widget_approvals.png"))
    except Exception:
        page.screenshot(path=str(shots / "panel_widget_approvals_FAILED.png"), full_page=True)
        raise
    finally:
        ctx.close()
    assert offsite == [], offsite
    assert not errors, errors
