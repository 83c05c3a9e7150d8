"""The JupyterLite site (``make lite``) in Debian's Chromium, with nothing but the site reachable.

The test builds the site (``lite/build_site.py``: Pyodide from npm, nbagent's wheels from PyPI,
nothing fetched at run time) into a temporary folder, serves it on 127.0.0.1 and opens notebook
01. Every request that is not for the site is aborted and fails the test; Chromium also gets a
proxy that goes nowhere, for anything the page's routes would not see. In the notebook, the Run
menu runs the cells that build the agent and its task (importing nbagent loads it from the
site's Pyodide lock), then a new cell runs ``await agent.arun_step(task)``: the tool call and
its observation come back, with the step's HTML card; then ``agent.live_graph(task)`` draws
the step graph in the page (Graphviz as WebAssembly in graphviz-anywidget's front end). The
figures it prints are the time to a ready kernel and to that first step's result.

``run_all_and_collect_errors`` (lite_page.py) is checked on a notebook the test adds, whose
second cell raises on purpose. Notebooks 01 and 05 then run end to end from the Run menu, their
sync calls included (issue 24's browser runtime: JSPI in Chromium), ``agent.graph(task)`` drawn
as SVG in the page, and in 05 the panel's Run step and Undo buttons clicked; the test prints
the time from opening each notebook to its first step's result.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jlab import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]
from lite_page import LitePage, lite_page  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

KERNEL_TIMEOUT_MS = max(STEP_TIMEOUT_MS, 180_000)  # Pyodide and the wheels load on first use
#: nothing listens on port 9: any request Chromium would send beyond loopback fails there
NOWHERE_PROXY = "--proxy-server=http://127.0.0.1:9"
STEP_CELL = (
    "step = await agent.arun_step(task)\n"
    "print('observation:', step.tool_outputs[0].content, '| is_last:', step.is_last)\n"
    "step"
)
SELFTEST = "lite_selftest.ipynb"

pytestmark = pytest.mark.timeout(900)


def selftest_notebook(folder: Path) -> Path:
    nb = new_notebook(cells=[
        new_code_cell("import nbagent\nprint('imported', nbagent.__name__)"),
        new_code_cell("raise ValueError('on purpose')"),
        new_code_cell("print('not reached')"),
    ])
    nb.metadata["kernelspec"] = {"name": "python", "display_name": "Python (Pyodide)", "language": "python"}
    path = folder / SELFTEST
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    check_browser_tools()
    from lite.build_site import build

    sys.path.insert(0, str(REPO / "tests" / "pyodide"))
    from pyodide_harness import node_problem

    problem = node_problem()
    if problem:  # npm installs the site's Pyodide
        pytest.fail(problem) if os.environ.get("REQUIRE_BROWSER") == "1" else pytest.skip(problem)
    folder = tmp_path_factory.mktemp("lite")
    start = time.monotonic()
    site = build(folder / "site", extra_files=[selftest_notebook(folder)], expose_app=True, quiet=True)
    print(f"\nJupyterLite site built in {time.monotonic() - start:.1f} s")
    return site


@pytest.fixture(scope="module")
def site(built: Path) -> Iterator[str]:
    from lite.serve import serve_in_thread

    server, base = serve_in_thread(built)
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(site: str) -> Iterator[Any]:
    import playwright.sync_api as api

    with api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, NOWHERE_PROXY], timeout=STEP_TIMEOUT_MS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def lite(browser: Any, site: str, shots: Path, request: pytest.FixtureRequest) -> Iterator[LitePage]:
    ctx, page = lite_page(browser, site, timeout_ms=KERNEL_TIMEOUT_MS)
    try:
        yield page
    finally:
        try:  # what the page showed at the end, passed or failed
            page.page.screenshot(path=str(shots / f"lite_{request.node.name}.png"))
        except Exception:  # noqa: BLE001 - a screenshot is a bonus, never the failure
            pass
        ctx.close()


def test_the_site_holds_its_own_pyodide_and_exactly_nbagents_wheels(built: Path) -> None:
    from lite.build_site import NOTEBOOKS, check_site
    from lite.collect_wheels import read_pins

    facts = check_site(built)  # raises if anything would be fetched from elsewhere
    assert facts["pyodide_lock"] == sorted([*read_pins(), "nbagent"])
    assert facts["contents"] == sorted([*(f"{n}.ipynb" for n in NOTEBOOKS), "cassettes", SELFTEST])
    assert (built / "static" / "pyodide" / "pyodide.asm.wasm").is_file()
    assert "cdn.jsdelivr" not in (built / "jupyter-lite.json").read_text(encoding="utf-8")


def test_quick_start_first_step_in_the_browser_offline(lite: LitePage) -> None:
    lite.open_notebook("01_quickstart.ipynb")
    ready_s = lite.wait_kernel_idle(KERNEL_TIMEOUT_MS)
    # a stored output as the file holds it: one text, not lines joined by commas (the site's
    # copies hold each output in one piece: jupyterlite/jupyterlite#1105)
    schema = lite.code_cell("tool = FunctionTool.from_defaults").locator("details pre").first.text_content() or ""
    assert schema.startswith('{\n  "additionalProperties": false,\n') and "\n," not in schema, schema[:200]

    # the notebook's own cells, up to the agent and its task, from the Run menu (outputs
    # cleared first: the file holds those of the build, which must not pass for this run's)
    lite.clear_outputs()
    lite.code_cell("live = agent.live_graph(task)").locator(".jp-InputArea-editor").click()
    lite.run_menu("Run All Above Selected Cell")
    task_cell = lite.wait_cell_done(
        next(c["source"] for c in lite.cells() if "agent.create_task" in c["source"]), KERNEL_TIMEOUT_MS
    )
    ran = [c for c in lite.cells() if c["execution_count"] is not None]
    errors = [o for c in ran for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"the notebook's first cells failed in the browser: {errors}"
    assert [c["source"].splitlines()[0] for c in ran][:2] == [
        "from nbagent.runtime import browser_note", "from nbagent import FunctionTool, ReActAgent, ScriptedLLM, seed_ids",
    ]
    note = "".join(o.get("text", "") for o in ran[0]["outputs"] if o["output_type"] == "stream")
    assert note.startswith("This notebook runs in your browser (Pyodide)"), note
    printed = "".join(o.get("text", "") for o in task_cell["outputs"] if o["output_type"] == "stream")
    assert "queued steps: 1" in printed
    lite.code_cell("agent.create_task").locator(".nbagent.nb-task").wait_for()  # the task's card

    lite.add_cell_below("agent.create_task", STEP_CELL)
    step_cell = lite.wait_cell_done(STEP_CELL, KERNEL_TIMEOUT_MS)
    first_result_s = time.monotonic() - lite.started
    assert [o for o in step_cell["outputs"] if o["output_type"] == "error"] == []
    printed = "".join(o.get("text", "") for o in step_cell["outputs"] if o["output_type"] == "stream")
    assert printed == "observation: 363 | is_last: False\n"
    card = lite.code_cell("step = await agent.arun_step(task)").locator(".nbagent.nb-step-output")
    card.wait_for()
    assert "multiply" in card.inner_text()

    # the live graph: an anywidget whose front end draws the DOT with Graphviz compiled to
    # WebAssembly, in the page (no Graphviz program in Pyodide, nothing fetched)
    lite.add_cell_below("step = await agent.arun_step(task)", "agent.live_graph(task)")
    nodes = lite.page.locator(".nbagent-livegraph svg g.node")
    nodes.nth(1).wait_for()
    assert nodes.count() == 2  # the step that ran and the one queued after it
    assert "done" in (nodes.nth(0).text_content() or "") and "queued" in (nodes.nth(1).text_content() or "")

    print(f"\nJupyterLite: kernel ready {ready_s:.1f} s, first step's result {first_result_s:.1f} s after opening")
    assert lite.offsite == [], f"requests left the site: {lite.offsite}"
    assert lite.errors == []


def test_run_all_helper_reports_the_failing_cell_and_stops(lite: LitePage) -> None:
    lite.open_notebook(SELFTEST)
    lite.wait_kernel_idle(KERNEL_TIMEOUT_MS)
    errors = lite.run_all_and_collect_errors(KERNEL_TIMEOUT_MS)
    assert errors == [{"index": 1, "ename": "ValueError", "evalue": "on purpose"}]
    cells = lite.cells()
    assert cells[0]["outputs"][0]["text"] == "imported nbagent\n"
    assert cells[2]["execution_count"] is None  # Run All stopped at the error
    assert lite.offsite == [], f"requests left the site: {lite.offsite}"
    assert lite.errors == []


#: per notebook: the first cell that gives a result (a step run by the sync API)
FIRST_RESULT = {"01_quickstart.ipynb": "step = agent.run_step(task)", "05_control_panel.ipynb": "panel.step()"}


@pytest.mark.parametrize("notebook", ["01_quickstart.ipynb", "05_control_panel.ipynb"])
def test_notebook_runs_end_to_end_with_the_sync_api(lite: LitePage, notebook: str) -> None:
    """Run All: every cell of the tutorial, its sync calls (``run_step``, ``undo``, ``chat``,
    ``panel.step()``...) included, runs in the browser without an error; its step graphs are
    drawn as SVG in the page (graphviz-anywidget's WASM Graphviz). Prints the time to the
    first step's result after opening the notebook (Pyodide, the wheels and the kernel load)."""
    lite.open_notebook(notebook)
    ready_s = lite.wait_kernel_idle(KERNEL_TIMEOUT_MS)
    lite.clear_outputs()
    lite.run_menu("Run All Cells")
    first = next(c["source"] for c in lite.cells() if c["source"].startswith(FIRST_RESULT[notebook]))
    lite.wait_cell_done(first, KERNEL_TIMEOUT_MS)
    first_result_s = time.monotonic() - lite.started
    errors = lite.wait_run_all(KERNEL_TIMEOUT_MS)
    done_s = time.monotonic() - lite.started
    assert errors == [], f"{notebook} failed in the browser: {errors}"
    code = [c for c in lite.cells() if c["source"].strip() and c["execution_count"] is None and "outputs" in c]
    assert code == [], f"cells not run: {[c['source'][:40] for c in code]}"
    nodes = lite.page.locator("svg g.node")
    nodes.first.wait_for()
    # agent.graph(task): no dot program in Pyodide, so the browser draws it (graphviz-anywidget)
    drawn = lite.code_cell("agent.graph(task)").locator("svg g.node")
    drawn.first.wait_for()
    assert drawn.count() >= 2
    print(f"\n{notebook} in JupyterLite: kernel ready {ready_s:.1f} s, first step's result {first_result_s:.1f} s, "
          f"every cell run {done_s:.1f} s after opening; {nodes.count()} graph nodes drawn")
    if notebook.startswith("05"):
        _the_panels_run_step_button_runs_a_step(lite)
    assert lite.offsite == [], f"requests left the site: {lite.offsite}"
    assert lite.errors == []


def _the_panels_run_step_button_runs_a_step(lite: LitePage) -> None:
    """A new task from a cell, then the panel's Run step button, clicked: the step runs in the
    browser's kernel (a task of its loop) and the panel's graph shows it done."""
    from panel_page import press_enabled, wait_for_statuses  # type: ignore[import-not-found]

    lite.add_cell_below("print(agent.state_of(panel.task_id).final_response)", 'panel.new_task("How much for two breads?")')
    lite.wait_cell_done('panel.new_task("How much for two breads?")', KERNEL_TIMEOUT_MS)
    panel = lite.page.locator(".nbagent-panel").first
    wait_for_statuses(lite.page, panel, ["queued"], "the new task")
    press_enabled(lite.page, panel, "nbagent-btn-step")
    wait_for_statuses(lite.page, panel, ["done", "queued"], "after Run step")
    press_enabled(lite.page, panel, "nbagent-btn-undo")
    # the step is queued again; its run is the dashed "#1 undone run", the step it queued never ran
    found = wait_for_statuses(lite.page, panel, ["queued", "undone", "undone run"], "after Undo", numbers=[1, 2, 1])
    assert "never ran" in found[1]["head"], found


KEY = "sk-test-browser-0123456789abcdef"


@pytest.mark.parametrize("cors", ["*", None])
def test_openai_llm_reaches_a_cors_server_over_the_browsers_fetch(browser: Any, site: str, shots: Path, cors: str | None) -> None:
    """OpenAILLM in the page's kernel against the scripted OpenAI server on another port of
    127.0.0.1 (another origin): with CORS allowed the async and the sync (JSPI) chat come back;
    without, the browser keeps the answer from the page and the error says the connection
    failed, without the key. (With routing on, Playwright answers CORS preflights itself, so
    the server sees none; the answer's own CORS header is what Chromium checks here.)"""
    sys.path.insert(0, str(REPO / "tests"))
    from openai_server import serve  # type: ignore[import-not-found]

    with serve(["Hello over fetch.", "And synchronously."], cors=cors) as server:
        origin = server.base_url.rsplit("/v1", 1)[0]
        ctx, lite = lite_page(browser, site, timeout_ms=KERNEL_TIMEOUT_MS, allow=(origin,))
        try:
            lite.open_notebook(SELFTEST)
            lite.wait_kernel_idle(KERNEL_TIMEOUT_MS)
            make = f"from nbagent import ChatMessage, OpenAILLM\nllm = OpenAILLM(model='fake-model', base_url='{server.base_url}', api_key='{KEY}', max_retries=0)"
            lite.add_cell_below("import nbagent", make)
            lite.wait_cell_done(make, KERNEL_TIMEOUT_MS)
            ask = "reply = await llm.achat([ChatMessage(role='user', content='Hi')])\nprint('async:', reply.message.text)"
            lite.add_cell_below("from nbagent import ChatMessage", ask)
            asked = lite.wait_cell_done(ask, KERNEL_TIMEOUT_MS)
            printed = "".join(o.get("text", "") for o in asked["outputs"] if o["output_type"] == "stream")  # no warning either
            errors = [o for o in asked["outputs"] if o["output_type"] == "error"]
            if cors is None:
                assert printed == "" and [lite_error(e) for e in errors] == ["APIConnectionError"]
                assert KEY not in str(errors)
                # the request went out, but without Access-Control-Allow-Origin the browser
                # keeps its answer from the page (the preflight Playwright's routing answers)
                assert len(server.requests) == 1
            else:
                assert errors == [] and printed == "async: Hello over fetch.\n"
                sync = "print('sync:', llm.chat([ChatMessage(role='user', content='Again')]).message.text)"
                lite.add_cell_below("reply = await llm.achat", sync)
                done = lite.wait_cell_done(sync, KERNEL_TIMEOUT_MS)
                assert "".join(o.get("text", "") for o in done["outputs"] if o["output_type"] == "stream") == "sync: And synchronously.\n"
                assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {KEY}"] * 2
                assert server.requests[0].headers["origin"] == site
            assert lite.offsite == [], f"requests left the site: {lite.offsite}"
        finally:
            try:
                lite.page.screenshot(path=str(shots / f"lite_openai_cors_{cors is not None}.png"))
            except Exception:  # noqa: BLE001 - a screenshot is a bonus, never the failure
                pass
            ctx.close()


def lite_error(output: dict[str, Any]) -> str | None:
    from lite_page import error_name  # type: ignore[import-not-found]

    return error_name(output.get("ename"))


#: the site's other tutorials (01 and 05 are run above, with their own checks)
OTHER_NOTEBOOKS = [
    f"{name}.ipynb" for name in (
        "02_react_step_by_step", "03_function_calling", "04_custom_workers", "06_memory_abandon_chat",
        "07_parallel_dag", "08_agent_workflow", "09_save_resume_fork", "11_batch_eval", "12_approval_typed_answers",
    )
]


@pytest.mark.parametrize("notebook", OTHER_NOTEBOOKS)
def test_every_tutorial_of_the_site_runs_in_the_browser(lite: LitePage, notebook: str) -> None:
    """Run All on each tutorial of the site: no cell fails; the cell after the title says the
    notebook runs in the browser and what differs there; what a browser cannot do (pandas, in
    11) is skipped, saying why."""
    lite.open_notebook(notebook)
    lite.wait_kernel_idle(KERNEL_TIMEOUT_MS)
    lite.clear_outputs()
    lite.run_menu("Run All Cells")
    errors = lite.wait_run_all(KERNEL_TIMEOUT_MS)
    assert errors == [], f"{notebook} failed in the browser: {errors}"
    printed = {c["source"]: "".join(o.get("text", "") for o in c["outputs"] if o["output_type"] == "stream") for c in lite.cells()}
    note = next(text for source, text in printed.items() if "browser_note(" in source)
    assert note.startswith("This notebook runs in your browser (Pyodide)"), note
    assert "Sync calls such as agent.run_step(task) wait as in Jupyter" in note  # Chromium has JSPI
    switch = next(text for source, text in printed.items() if "NBAGENT_LOCAL_MODEL" in source)
    assert "staying offline" in switch
    if notebook.startswith("11"):
        assert "Not in this site's packages: pandas" in note
        table = next(text for source, text in printed.items() if "batch.to_pandas()" in source)
        assert table.startswith("No pandas here (the browser site ships none): batch.rows() instead")
        assert table.count("'status': ") == 12, table  # a row per question, as the DataFrame has
    assert lite.offsite == [], f"requests left the site: {lite.offsite}"
    assert lite.errors == []
