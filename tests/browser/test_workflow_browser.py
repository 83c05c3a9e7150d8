"""A two-agent workflow with a person in the loop, as a user sees it in JupyterLab.

A notebook written here builds an ``AgentWorkflow`` of two offline agents: the root
``researcher`` calls ``lookup_weather`` and hands off to the ``writer``, whose ``ask_editor``
tool asks the person a question (``ask_human``); the writer's last reply quotes the tool's
result, so the final answer carries what the person typed. The notebook shows the run's live
view (``WorkflowLiveView``, drawn in the page by graphviz-anywidget), starts the run in the
background on the kernel's loop, and shows ``handler.input_box()`` and a result widget.

The test runs all cells from the Run menu, waits until the drawn graph shows both agents as
clusters, the tool calls and the waiting question, types an answer in the box and clicks
**Send**, then waits until the graph says the writer answered and the result widget shows the
answer. Every request must stay on loopback. Screenshots go to ``$SCREENSHOT_DIR``:
``workflow_01_waiting_for_human.png``, ``workflow_02_after_answer.png`` (or
``workflow_FAILED.png``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jlab import STEP_TIMEOUT_MS, check_browser_tools, loopback_page  # type: ignore[import-not-found]
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from nbagent.runner.state import StepStatus
from nbagent.viz.dot import STATUS_COLORS

# fills the run graph uses (workflow_dot.py takes them from the step palette)
QUEUED, RUNNING, DONE, WAITING = (
    STATUS_COLORS[s][0].lower() for s in (StepStatus.QUEUED, StepStatus.RUNNING, StepStatus.DONE, StepStatus.BLOCKED)
)

pytestmark = pytest.mark.timeout(300)

KERNEL = "nbagent-dot"  # the live view draws in the browser; Graphviz on PATH does not matter
ANSWER = "add an umbrella <tip> & go"  # what the person types: HTML-ish text must stay text
QUESTION = "Editor, what should change in 'Oslo: rain, 12 C'?"

CELL_SETUP = """\
import html
import ipywidgets as W
from nbagent import FunctionLLM, ScriptedLLM, seed_ids, tool_call
from nbagent.messages import MessageRole
from nbagent.viz.workflow_live import WorkflowLiveView
from nbagent.workflow import AgentWorkflow, Context, FunctionAgent, ask_human

seed_ids(0)"""

CELL_AGENTS = '''\
def lookup_weather(city: str) -> str:
    """Look up today's weather for a city."""
    return {"oslo": "Oslo: light rain, 12 °C."}.get(city.lower(), f"No forecast for {city}.")


async def ask_editor(ctx: Context, draft: str) -> str:
    """Ask the editor (a person) what to change in the draft."""
    answer = await ask_human(ctx, f"Editor, what should change in {draft!r}?")
    return f"editor said: {answer}"


def writer_model(messages, tools):
    """The writer asks the editor, then quotes the editor's answer (the tool's result).

    As on the reference, the handoff's own tool reply is the last message the writer sees
    when it takes over: only the editor's reply ends its turn."""
    last = messages[-1]
    if last.role == MessageRole.TOOL and last.text.startswith("editor said:"):
        return f"Note done; {last.text}"
    return tool_call("ask_editor", draft="Oslo: rain, 12 C")


researcher = FunctionAgent(
    name="researcher",
    description="Looks the weather up.",
    system_prompt="Look the weather up, then hand off to the writer.",
    tools=[lookup_weather],
    llm=ScriptedLLM([
        tool_call("lookup_weather", city="Oslo"),
        tool_call("handoff", to_agent="writer", reason="facts found"),
    ]),
    can_handoff_to=["writer"],
)
writer = FunctionAgent(
    name="writer",
    description="Writes the note; asks the editor first.",
    system_prompt="Write the note.",
    tools=[ask_editor],
    llm=FunctionLLM(writer_model),
)
workflow = AgentWorkflow([researcher, writer], root_agent="researcher")'''

CELL_VIEW = """\
view = WorkflowLiveView(workflow)
view"""

CELL_RUN = """\
# the run goes on in the background on the kernel's loop: the notebook stays responsive
handler = view.run(user_msg="Write a weather note for Oslo.")
result_box = W.HTML(value="<i>the run is going…</i>")
result_box.add_class("wf-result")


def show_result(h):
    err = h.exception()
    text = f"failed: {err!r}" if err is not None else f"{h.result().current_agent_name} answered: {h.result()}"
    result_box.value = f"<b>{html.escape(text)}</b>"


handler.add_done_callback(show_result)
print("run started:", handler.status)"""

CELL_BOX = """\
box = handler.input_box()
box"""

CELL_RESULT = """\
result_box"""


def build_notebook() -> nbformat.NotebookNode:
    nb = new_notebook(metadata={
        "kernelspec": {"name": KERNEL, "display_name": f"nbagent test ({KERNEL})", "language": "python"},
    })
    nb.cells = [
        new_markdown_cell("# Two agents and a person: browser test"),
        new_code_cell(CELL_SETUP),
        new_code_cell(CELL_AGENTS),
        new_code_cell(CELL_VIEW),
        # its source is hidden: the box and the result then sit right under the live view
        new_code_cell(CELL_RUN, metadata={"jupyter": {"source_hidden": True}}),
        new_code_cell(CELL_BOX),
        new_code_cell(CELL_RESULT),
    ]
    return nb


# what graphviz-anywidget drew: the graph's title, each cluster and each node (its DOT name,
# its text lines joined, the fill of its shape)
GRAPH_JS = """
() => {
  const svg = document.querySelector('.nbagent-livegraph svg');
  if (!svg) return null;
  const read = g => {
    const shape = g.querySelector('path, polygon, ellipse');
    // graphviz-anywidget moves a node's <title> into data-name; clusters keep theirs
    return {name: g.getAttribute('data-name') || (g.querySelector(':scope > title') || {}).textContent || '',
            text: [...g.querySelectorAll('text')].map(t => t.textContent.trim()).join(' '),
            fill: shape ? (shape.getAttribute('fill') || '').toLowerCase() : null};
  };
  const graph = svg.querySelector('g.graph');
  const title = graph ? [...graph.querySelectorAll(':scope > text')].map(t => t.textContent.trim()).join(' ') : '';
  return {title,
          clusters: [...svg.querySelectorAll('g.cluster')].map(read),
          nodes: [...svg.querySelectorAll('g.node')].map(read)};
}
"""

# wait until the graph's title holds every string of `want`
WAIT_TITLE_JS = """
(want) => {
  const graph = document.querySelector('.nbagent-livegraph svg g.graph');
  if (!graph) return false;
  const title = [...graph.querySelectorAll(':scope > text')].map(t => t.textContent.trim()).join(' ');
  return want.every(w => title.includes(w));
}
"""


def read_graph(page: Any) -> dict[str, Any]:
    graph = page.evaluate(GRAPH_JS)
    assert graph is not None, "the live view drew no SVG"
    return dict(graph)


def wait_for_title(page: Any, want: list[str], what: str) -> dict[str, Any]:
    try:
        page.wait_for_function(WAIT_TITLE_JS, arg=want, timeout=STEP_TIMEOUT_MS)
    except Exception as err:
        raise AssertionError(f"{what}: graph title never held {want}; page has {page.evaluate(GRAPH_JS)}") from err
    return read_graph(page)


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def test_workflow_handoff_and_human_answer_in_the_browser(request: pytest.FixtureRequest) -> None:
    check_browser_tools()  # FAILS under REQUIRE_BROWSER=1, skips otherwise
    lab = request.getfixturevalue("lab")
    browser = request.getfixturevalue("browser")
    shots: Path = request.getfixturevalue("shots")
    t0 = time.monotonic()
    name = "workflow.ipynb"
    nbformat.write(build_notebook(), lab.root_dir / name)

    ctx, page, offsite, errors = loopback_page(
        browser, lab, width=1400, height=1500, timeout_ms=STEP_TIMEOUT_MS, console_errors=True
    )

    view_out = page.locator(".jp-OutputArea-output", has=page.locator(".nbagent-livegraph"))
    hitl = page.locator(".nbagent-hitl")
    result = page.locator(".wf-result")

    def shot(label: str) -> None:
        """The notebook from the live view down to the result widget, in one picture (the
        notebook scrolls inside its own panel, so the picture is clipped to that panel)."""
        view_out.evaluate("el => el.scrollIntoView({block: 'start'})")
        panel = page.locator(".jp-NotebookPanel .jp-WindowedPanel-outer, .jp-NotebookPanel .jp-Notebook").first
        area, top, bottom = panel.bounding_box(), view_out.bounding_box(), result.bounding_box()
        assert area and top and bottom, "notebook, live view or result widget not on the page"
        y0 = max(top["y"] - 4, area["y"])
        y1 = min(bottom["y"] + bottom["height"] + 8, area["y"] + area["height"])
        # animations="disabled" finishes the fade-in of new nodes first: no half-drawn picture
        page.screenshot(path=str(shots / f"workflow_{label}.png"), animations="disabled",
                        clip={"x": area["x"], "y": y0, "width": area["width"], "height": y1 - y0})

    try:
        page.goto(lab.url(f"/lab/workspaces/workflow/tree/{name}?reset"))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
        page.wait_for_function(  # this notebook's kernel connected and idle
            "kernel => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
            ".some(e => e.textContent.includes(kernel + ') | Idle'))", arg=KERNEL)
        if page.locator("#jp-left-stack").is_visible():
            page.keyboard.press("Control+b")  # hide the file browser: more room for the graph
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

        # ---- phase 1: the run waits for the person --------------------------------------
        page.locator(".jp-OutputArea-output", has_text="run started:").wait_for()
        graph = wait_for_title(page, ["run · waiting", "active: writer"], "waiting for the person")
        clusters = by_name(graph["clusters"])
        assert sorted(clusters) == ["cluster_0", "cluster_1"], graph["clusters"]
        assert clusters["cluster_0"]["text"] == "researcher · root", clusters
        assert clusters["cluster_1"]["text"] == "writer · active", clusters
        assert clusters["cluster_0"]["fill"] == QUEUED, clusters  # done with its part
        assert clusters["cluster_1"]["fill"] == RUNNING, clusters  # the active agent
        nodes = by_name(graph["nodes"])
        assert {"user", "t0", "t0c0", "t1", "t2", "t2c0"} <= set(nodes), sorted(nodes)
        assert "answer" not in nodes, nodes["answer"]
        assert nodes["t0c0"]["text"].startswith('lookup_weather(city="Oslo")'), nodes["t0c0"]
        assert "→ Oslo: light rain, 12 °C." in nodes["t0c0"]["text"], nodes["t0c0"]
        assert nodes["t0c0"]["fill"] == DONE, nodes["t0c0"]
        assert "hands off to writer" in nodes["t1"]["text"], nodes["t1"]
        asking = nodes["t2c0"]
        assert asking["text"].startswith("ask_editor("), asking
        assert "asks: Editor, what should change in" in asking["text"], asking
        assert "waiting for an answer…" in asking["text"], asking
        assert asking["fill"] == WAITING, asking
        # the handoff is drawn as an edge from the researcher's step to the writer's
        assert page.locator(".nbagent-livegraph svg g.edge", has_text="handoff: facts found").count() == 1

        # the same question in the input box; its text box and Send button are enabled
        hitl.locator(".nbagent-q").wait_for()
        assert hitl.locator(".nbagent-q").inner_text().strip() == f"Question: {QUESTION}"
        text_box = hitl.locator("input[type=text]")
        send = hitl.locator("button", has_text="Send")
        assert text_box.is_enabled() and send.is_enabled()
        assert "the run is going…" in result.inner_text()
        shot("01_waiting_for_human")

        # ---- phase 2: the person answers in the page ------------------------------------
        text_box.fill(ANSWER)
        send.click()
        graph = wait_for_title(page, ["run · done", "answered by writer"], "after Send")
        clusters = by_name(graph["clusters"])
        assert clusters["cluster_0"]["text"] == "researcher · root", clusters
        assert clusters["cluster_1"]["text"] == "writer · answered", clusters
        assert clusters["cluster_1"]["fill"] == DONE, clusters
        assert "active:" not in graph["title"], graph["title"]
        nodes = by_name(graph["nodes"])
        asked = nodes["t2c0"]
        assert f"person: {ANSWER}" in asked["text"], asked  # typed text, shown as text
        assert f"→ editor said: {ANSWER}" in asked["text"], asked
        assert asked["fill"] == DONE, asked
        assert "answer" in nodes and nodes["answer"]["text"].startswith("answer · writer"), nodes.get("answer")
        assert f"Note done; editor said: {ANSWER}" in nodes["answer"]["text"], nodes["answer"]

        # the result widget (set by the run's done callback) carries the person's answer
        page.wait_for_function(
            "([el, want]) => el.textContent.includes(want)",
            arg=[result.element_handle(), f"writer answered: Note done; editor said: {ANSWER}"])
        assert result.locator("b").count() == 1 and result.locator("tip").count() == 0  # text, not tags
        # the box knows the run ended and no longer takes answers
        page.wait_for_function(
            "el => el.textContent.includes('The run has ended.')", arg=hitl.element_handle())
        page.wait_for_function("b => b.disabled", arg=send.element_handle())
        assert text_box.is_disabled() and text_box.input_value() == ""
        assert page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
        shot("02_after_answer")
    except Exception:
        page.screenshot(path=str(shots / "workflow_FAILED.png"), full_page=True)
        print(lab.log())
        raise
    finally:
        print(f"[workflow] browser test body {time.monotonic() - t0:.1f}s; offsite={offsite}; errors={errors}")
        ctx.close()

    assert offsite == [], f"the page tried to reach beyond loopback: {offsite}"
    assert not [e for e in errors if e.startswith("pageerror")], errors
