"""The workflow panel in JupyterLab: a step-wise run driven by its buttons, a person answering.

A notebook written here shows ``agent.panel()`` for one offline FunctionAgent whose ``publish``
tool asks the person before it acts. The test types a message and clicks **Start**, clicks
**Step** three times (after each, the "Last step produced" list names the step's events; after
the agent's step the run graph drawn in the page changes), then **Run to end**: the run stops at the question, which the
panel shows with its answer box enabled; the test types an answer (HTML-ish, it must stay text)
and clicks **Send**; the run goes on to its end and the status line says so. Every request must
stay on loopback. Screenshots: ``wfpanel_01_question.png``, ``wfpanel_02_done.png`` (or
``wfpanel_FAILED.png``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.timeout(300)

KERNEL = "nbagent-dot"
ANSWER = "yes <b>now</b> & go"

CELL_SETUP = '''\
from nbagent import FunctionLLM, seed_ids, tool_call
from nbagent.messages import MessageRole
from nbagent.workflow import Context, FunctionAgent, ask_human

seed_ids(0)


async def publish(ctx: Context, title: str) -> str:
    """Publish once the person agrees."""
    return f"person said: {await ask_human(ctx, f'Publish {title}?')}"


def model(messages, tools):
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"Finished; {last.text}"
    return tool_call("publish", title="the note")


agent = FunctionAgent(name="writer", description="Publishes notes.", tools=[publish], llm=FunctionLLM(model))
panel = agent.panel()
panel'''


def build_notebook() -> nbformat.NotebookNode:
    nb = new_notebook(metadata={
        "kernelspec": {"name": KERNEL, "display_name": f"nbagent test ({KERNEL})", "language": "python"},
    })
    nb.cells = [new_code_cell(CELL_SETUP)]
    return nb


GRAPH_TEXT_JS = """
() => {
  const svg = document.querySelector('.nbagent-wfpanel .nbagent-livegraph svg');
  return svg ? [...svg.querySelectorAll('text')].map(t => t.textContent.trim()).join(' ') : null;
}
"""


def test_workflow_panel_steps_and_a_person_answers_in_the_browser(request: pytest.FixtureRequest) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    t0 = time.monotonic()
    name = "wfpanel.ipynb"
    nbformat.write(build_notebook(), lab.root_dir / name)

    ctx, page, offsite, errors = loopback_page(
        browser, lab, width=1300, height=1400, timeout_ms=STEP_TIMEOUT_MS
    )

    panel = page.locator(".nbagent-wfpanel")

    def button(text: str) -> Any:
        return panel.locator("button", has_text=text).first

    def wait_text(selector: str, want: str) -> None:
        """Wait until the element ``selector`` names holds ``want`` (queried afresh each time: a
        widget's HTML is replaced, not edited, when its value changes)."""
        page.wait_for_function(
            "([sel, want]) => { const el = document.querySelector(sel); return !!el && el.textContent.includes(want); }",
            arg=[selector, want],
        )

    try:
        page.goto(lab.url(f"/lab/workspaces/wfpanel/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        panel.wait_for()
        wait_text(".nbagent-wfpanel .nbagent-status-line", "No run yet")
        assert button("Step").is_disabled() and button("Start").is_enabled()

        panel.locator("input[placeholder='Your message to the agents']").fill("Publish the note")
        button("Start").click()
        wait_text(".nbagent-wfpanel .nbagent-status-line", "Run paused; 0 workflow steps taken.")
        before = page.evaluate(GRAPH_TEXT_JS)

        button("Step").click()
        wait_text(".nbagent-wfpanel .nbagent-status-line", "1 workflow step taken")
        wait_text(".nbagent-wfpanel", "Last step produced:")
        assert "AgentInput" in panel.locator("ol").inner_text()
        button("Step").click()
        wait_text(".nbagent-wfpanel .nbagent-status-line", "2 workflow steps taken")
        assert "AgentSetup" in panel.locator("ol").inner_text()
        button("Step").click()  # the agent's step: the model replies, the graph shows it
        wait_text(".nbagent-wfpanel .nbagent-status-line", "3 workflow steps taken")
        assert "AgentOutput" in panel.locator("ol").inner_text()
        page.wait_for_function(f"(before) => {{ const now = ({GRAPH_TEXT_JS})(); return !!now && now !== before; }}",
                               arg=before)

        button("Run to end").click()
        question = panel.locator(".nbagent-q")
        question.wait_for()
        assert question.inner_text().strip() == "Question: Publish the note?"
        answer_box = panel.locator("input[placeholder='Your answer']")
        page.wait_for_function("el => !el.disabled", arg=answer_box.element_handle())
        assert button("Step").is_disabled()  # Run to end is going, waiting for the answer
        page.screenshot(path=str(shots / "wfpanel_01_question.png"), animations="disabled")

        answer_box.fill(ANSWER)
        button("Send").click()
        wait_text(".nbagent-wfpanel .nbagent-status-line", "Run done")
        graph = page.evaluate(GRAPH_TEXT_JS) or ""
        assert f"Finished; person said: {ANSWER}" in graph, graph
        assert panel.locator("b", has_text="now").count() == 0  # the answer stayed text
        assert button("Start").is_enabled() and button("Step").is_disabled()
        page.screenshot(path=str(shots / "wfpanel_02_done.png"), animations="disabled")
    except Exception:
        page.screenshot(path=str(shots / "wfpanel_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[wfpanel] browser test body {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert not [e for e in errors if e.startswith("pageerror")], errors
