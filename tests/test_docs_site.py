"""The documentation site (``make docs``): built offline with warnings as errors, its tutorials
executed, every public name on a reference page, no broken link, nothing loaded from outside.

The site is built once (``tests/docs_site.py``, about a minute: the notebooks run) and read
back as files here; ``tests/browser/test_docs_browser.py`` opens it in Chromium.
"""

from __future__ import annotations

import html
import json
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

from tests.docs_site import DOCS, REPO, build_script, built_site, docs_module

api_pages = docs_module("api_pages", DOCS / "_ext" / "api_pages.py")
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def site() -> Path:
    built = built_site()
    tail = (built.result.stdout + built.result.stderr)[-6000:]
    assert built.result.returncode == 0, f"make docs failed (warnings are errors):\n{tail}"
    return built.html


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_the_build_has_no_warning(site: Path) -> None:
    """Sphinx's own warnings (the build already fails on one: -W); the notebooks' kernels may
    log their own, which are not the site's."""
    warnings = [line for line in built_site().result.stderr.splitlines() if re.search(r"(^|: )(WARNING|ERROR): ", line)]
    assert not warnings, warnings


def test_links_resolve_and_nothing_loads_from_outside(site: Path) -> None:
    assert build_script().check_site(site) == []
    assert (site / ".nojekyll").exists(), "GitHub Pages would hide _static/ and _images/"


def test_the_site_check_catches_what_it_promises(tmp_path: Path) -> None:
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "a.css").write_text("@import url('https://fonts.example/f.css');\nbody{background:url(data:image/png;base64,AA)}")
    (tmp_path / "other.html").write_text('<h1 id="there">x</h1>')
    (tmp_path / "index.html").write_text(textwrap.dedent("""
        <link rel="stylesheet" href="_static/a.css"><link rel="stylesheet" href="https://cdn.example/x.css">
        <link rel="canonical" href="https://example.org/docs/">
        <script src="https://cdn.example/require.js"></script><script src="_static/gone.js"></script>
        <img src="//cdn.example/logo.png"><img src="data:image/png;base64,AA">
        <div style="background: url('https://track.example/p.gif')"></div>
        <a href="other.html#there">ok</a><a href="other.html#nowhere">bad anchor</a>
        <a href="missing.html">bad page</a><a href="#top">bad own anchor</a><a href="https://example.org">fine</a>
        <a href="../outside.html">outside</a>
    """))
    problems = "\n".join(build_script().check_site(tmp_path))
    for expected in ("loads https://cdn.example/x.css", "loads https://cdn.example/require.js",
                     "loads _static/gone.js, which is not in the site", "loads //cdn.example/logo.png",
                     "loads https://track.example/p.gif", "has no id 'nowhere'", "links to missing.html",
                     "has no id 'top'", "links to ../outside.html", "a.css loads https://fonts.example/f.css"):
        assert expected in problems, f"{expected!r} not caught:\n{problems}"
    for fine in ("other.html#there", "example.org/docs", "data:image", "https://example.org\""):
        assert fine not in problems, problems
    assert len(problems.splitlines()) == 10, problems


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_tutorial_is_a_page_executed_with_its_graphs(site: Path, notebook: Path) -> None:
    page = site / "tutorials" / f"{notebook.stem}.html"
    assert page.exists(), f"{notebook.name} has no page"
    text = page.read_text(encoding="utf-8")
    stored = nbformat.read(notebook, as_version=4)
    title = stored.cells[0].source.splitlines()[0].lstrip("# ").replace("`", "").strip()
    assert text_of(title) in text_of(text), f"{page.name}: the notebook's title is not on its page"
    # the build ran every cell: the last printed line the notebook stores (of a cell nbval
    # compares) is on the page too
    printed = [line for c in stored.cells if c.cell_type == "code" and not any("nbval" in t for t in c.metadata.get("tags", []))
               for o in c.outputs if o.output_type == "stream" for line in o.text.splitlines()
               if line.strip() and not re.search(r"\d+(\.\d+)? ?ms|0x|\d\.\d+ ?s\b", line)]
    assert printed, notebook.name
    assert printed[-1].strip() in text_of(text), f"{page.name}: {printed[-1]!r} not shown: did every cell run?"
    svg = sum("image/svg+xml" in o.get("data", {}) for c in stored.cells for o in c.get("outputs", []))
    shown = re.findall(r'<img[^>]+src="\.\./_images/[^"]+\.svg"', text) + re.findall(r"<svg[ >]", text)
    assert len(shown) >= svg, f"{page.name}: {svg} graphs stored, {len(shown)} shown"


def test_widgets_show_their_static_fallback_and_load_no_widget_code(site: Path) -> None:
    for name in ("05_control_panel", "11_batch_eval", "08_agent_workflow"):
        text = (site / "tutorials" / f"{name}.html").read_text(encoding="utf-8")
        assert "widget-state+json" not in text and "widget-view+json" not in text, name
        assert not re.search(r"require(\.min)?\.js|html-manager|embed-amd", text), name
    panel = (site / "tutorials" / "05_control_panel.html").read_text(encoding="utf-8")
    assert 'class="nbagent-panel' in panel, "the panel's static HTML is on the page"


def test_every_public_name_has_an_entry_on_its_group_page(site: Path) -> None:
    _, groups = api_pages.load_groups()
    for group in groups:
        text = (site / "reference" / f"{group.slug}.html").read_text(encoding="utf-8")
        for name in [e.name for e in group.entries] + list(group.aliases):
            assert f'id="{name}"' in text, f"{name} has no entry on reference/{group.slug}.html"
    assert (site / "reference-audit.html").exists(), "the LlamaIndex reference audit is a page"


def test_agent_runner_page_shows_run_step_with_its_signature(site: Path) -> None:
    text = (site / "reference" / "runners.html").read_text(encoding="utf-8")
    match = re.search(r'<dt[^>]*id="nbagent\.AgentRunner\.run_step".*?</dt>', text, re.S)
    assert match, "AgentRunner.run_step has no entry"
    signature = " ".join(text_of(match.group(0)).split())
    assert re.search(r"run_step\(task_id: Task \| str, input: str \| None = None, step: TaskStep \| None = None", signature), signature
    assert "TaskStepOutput" in signature


def test_the_search_index_knows_every_method_of_the_runner(site: Path) -> None:
    index = (site / "searchindex.js").read_text(encoding="utf-8")
    data = json.loads(index[index.index("(") + 1 : index.rindex(")")])
    objects = {f"{prefix}.{entry[-1]}" for prefix, entries in data["objects"].items() for entry in entries}
    assert {"nbagent.AgentRunner.run_step", "nbagent.AgentRunner.undo_step", "nbagent.workflow.Context"} <= objects


def test_the_architecture_page_is_in_the_explanations(site: Path) -> None:
    explanations = (site / "explain" / "index.html").read_text(encoding="utf-8")
    page = "architecture.html"
    assert f'href="../{page}"' in explanations and (site / page).exists()


def test_a_failing_cell_fails_the_build(tmp_path: Path) -> None:
    """The site's own notebook settings (docs/conf.py), on a project of one notebook whose
    second cell raises: Sphinx exits non-zero and names the notebook and the error."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(textwrap.dedent(f"""
        import runpy
        _site = runpy.run_path({str(DOCS / "conf.py")!r})
        globals().update({{k: v for k, v in _site.items() if k.startswith(("nb_", "myst_"))}})
        extensions = ["myst_nb"]
    """))
    (src / "index.md").write_text("# Index\n\n```{toctree}\nbroken\n```\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Broken"),
        nbformat.v4.new_code_cell("print('first cell ran')"),
        nbformat.v4.new_code_cell("raise ValueError('this cell fails on purpose')"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "broken.ipynb")
    done = build_script().build(tmp_path / "out", src=src)
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "broken.ipynb" in done.stderr, done.stderr[-3000:]
    assert "raise ValueError('this cell fails on purpose')" in done.stderr, "the failing cell is shown"
    assert "ValueError: this cell fails on purpose" in done.stderr, "and its error"


HOWTOS = sorted((DOCS / "howto").glob("*.md"))


@pytest.mark.parametrize("source", [p for p in HOWTOS if "{code-cell}" in p.read_text(encoding="utf-8")], ids=lambda p: p.stem)
def test_how_to_examples_ran_when_the_site_was_built(site: Path, source: Path) -> None:
    """Every executed block of a how-to printed something, and nothing is an error."""
    cells = source.read_text(encoding="utf-8").count("```{code-cell}")
    text = (site / "howto" / f"{source.stem}.html").read_text(encoding="utf-8")
    outputs = text.count('class="cell_output')
    assert outputs == cells, f"{source.name}: {cells} code cells, {outputs} outputs"
    assert "Traceback" not in text_of(text) and 'class="output traceback' not in text


def test_the_how_to_guides_are_all_in_the_index(site: Path) -> None:
    index = (DOCS / "howto" / "index.md").read_text(encoding="utf-8")
    assert {p.stem for p in HOWTOS} - {"index"} == set(re.findall(r"^([a-z-]+)$", index, re.M))


def test_the_tracing_page_shows_a_traced_run(site: Path) -> None:
    """The how-to ran: its first example printed the span tree of a traced run, the second the
    captured arguments and result; it says how to reach an OTLP collector."""
    text = text_of((site / "howto" / "trace-a-run.html").read_text(encoding="utf-8"))
    assert "not built yet" not in text and "instrument(" in text
    assert "invoke_agent FunctionCallingAgent [AGENT]" in text and "execute_tool add [TOOL]" in text
    assert '{"a": 2, "b": 3} -> 5' in text
    assert "OTLPSpanExporter" in text and "/v1/traces" in text


#: what the README's table teaches: each must lead to code that uses it
CORE = [
    "nbagent.AgentRunner.create_task", "nbagent.AgentRunner.run_step", "nbagent.AgentRunner.undo_step",
    "nbagent.AgentRunner.finalize_response", "nbagent.AgentRunner.chat", "nbagent.AgentRunner.fork",
    "nbagent.AgentRunner.save", "nbagent.AgentRunner.load", "nbagent.AgentRunner.run_batch",
    "nbagent.AgentRunner.approve", "nbagent.AgentRunner.reject", "nbagent.AgentRunner.pending_approvals",
    "nbagent.AgentRunner.graph", "nbagent.AgentRunner.panel", "nbagent.AgentRunner.abandon_task",
    "nbagent.ReActAgent.from_tools", "nbagent.FunctionTool.from_defaults", "nbagent.FnAgentWorker",
    "nbagent.CustomSimpleAgentWorker", "nbagent.ScriptedLLM", "nbagent.OpenAILLM", "nbagent.BasicMCPClient",
    "nbagent.AgentWorkflow", "nbagent.workflow.FunctionAgent",
]


def entries_with_examples(site: Path, kinds: tuple[str, ...] = ()) -> dict[str, bool]:
    """Every documented object (its id; only those of ``kinds``: "method", "function", ...)
    -> whether its entry has an example: a link to a page whose code uses it, or a ``>>>``
    example in its docstring."""
    found: dict[str, bool] = {}
    for page in (site / "reference").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r'<dl class="py (\w+)">\s*<dt class="sig[^"]*" id="([^"]+)">', text):
            if kinds and match.group(1) not in kinds:
                continue
            body = text[text.index("<dd>", match.end()):]
            own = re.split(r"<dl class=\"py|</dd>", body, maxsplit=1)[0]  # not its members' text
            found[match.group(2)] = "Examples:" in own or 'class="doctest' in own
    return found


def test_the_core_api_links_to_an_example_of_it(site: Path) -> None:
    found = entries_with_examples(site)
    missing = [name for name in CORE if not found.get(name)]
    assert not missing, f"no example linked from: {missing}"
    share = sum(found.values()) / len(found)
    print(f"\n{sum(found.values())} of {len(found)} reference entries have an example ({share:.0%})")
    assert share > 0.2, "the example links stopped working for most entries"
    calls = entries_with_examples(site, ("method", "function"))
    print(f"{sum(calls.values())} of {len(calls)} methods and functions have an example")


#: names added with tracing, the browser runtime and issue 23's LlamaIndex parity: each leads to
#: code that uses it, as the README's do
ADDED = [
    "nbagent.tracing.instrument", "nbagent.tracing.uninstrument", "nbagent.tracing.SpanTree",
    "nbagent.StructuredPlannerAgent", "nbagent.Memory", "nbagent.Memory.from_defaults",
    "nbagent.llms.ChatStream", "nbagent.workflow.Context", "nbagent.AgentWorkflow.run",
    # classes no code names, made by a method the code calls (agent.panel(task), workflow.run(...))
    "nbagent.AgentPanel", "nbagent.LiveGraph", "nbagent.workflow.WorkflowHandler", "nbagent.BatchRun",
]


def test_the_names_added_since_link_to_an_example_too(site: Path) -> None:
    found = entries_with_examples(site)
    missing = [name for name in ADDED if not found.get(name)]
    assert not missing, f"no example linked from: {missing}"


#: what a user calls beyond the README's table (issue 27's "one example of any public method"):
#: each has an example, on a page (the how-tos that drive a run by hand, MCP, batches, tracing,
#: workflows) or as a ``>>>`` example in its docstring (tests/test_docs_reference.py runs them)
CALLED = [
    *(f"nbagent.AgentRunner.{m}" for m in (
        "get_task", "get_task_output", "get_upcoming_steps", "get_completed_steps", "get_completed_tasks", "astream_step",
        "edit_step", "hold_step", "release_step", "goto_step", "skip_step", "stream_step", "arun_step",
        "arun_task", "aquery", "delete_task", "subscribe", "arun_batch")),
    *(f"nbagent.BatchRun.{m}" for m in ("counts", "statuses", "rows", "get_task", "state")),
    *(f"nbagent.BasicMCPClient.{m}" for m in (
        "list_tools", "list_tools_sync", "call_tool", "call_tool_sync", "list_resources", "list_prompts")),
    "nbagent.McpToolSpec.to_tool_list_async",
    "nbagent.tracing.trace_runner", "nbagent.tracing.untrace_runner", "nbagent.tracing.SpanTree.lines",
    "nbagent.tracing.SpanNode.walk",
    "nbagent.Workflow.run_sync", "nbagent.workflow.WorkflowHandler.on_step", "nbagent.workflow.WorkflowHandler.done",
    "nbagent.workflow.WorkflowHandler.result", "nbagent.workflow.Context.write_event_to_stream",
    "nbagent.workflow.ContextStore.edit_state", "nbagent.workflow.ContextStore.get_state", "nbagent.workflow.workflow_tool",
    *(f"nbagent.workflow.WorkflowHandler.{m}" for m in ("is_done", "exception", "checkpoint", "stop")),
    *(f"nbagent.store.{f}" for f in ("save_runner", "load_runner", "read_run_file", "set_autosave", "autosave_path",
                                      "is_store_path")),
    *(f"nbagent.store.RunStore.{m}" for m in ("runs", "tasks", "task", "label")),
    *(f"nbagent.AgentPanel.{m}" for m in ("step", "edit_input", "press", "goto", "abandon", "static_html",
                                           "transcript_messages")),
    # >>> examples in their docstrings
    "nbagent.allow_type", "nbagent.block_network", "nbagent.new_id", "nbagent.seeded_ids", "nbagent.set_pricing",
    "nbagent.Pricing.price_of", "nbagent.PromptTemplate.format", "nbagent.PromptTemplate.partial_format",
    "nbagent.PromptTemplate.format_messages", "nbagent.ToolMetadata.to_openai_tool",
    "nbagent.ToolMetadata.get_parameters_dict", "nbagent.FunctionTool.ainvoke", "nbagent.viz.task_to_dot",
    "nbagent.viz.status_summary", "nbagent.store.runner_to_dict", "nbagent.ChatMemoryBuffer.put_messages",
    "nbagent.LLM.complete", "nbagent.LLM.get_tool_calls_from_response", "nbagent.LLM.chat_with_tools",
    "nbagent.StreamingAgentChatResponse.get_response", "nbagent.StreamingAgentChatResponse.add_token_callback",
    "nbagent.StreamingAgentChatResponse.print_response_stream", "nbagent.StreamingAgentChatResponse.async_response_gen",
    "nbagent.workflow.AgentOutput.get_pydantic_model",
    *(f"nbagent.StructuredPlannerAgent.{m}" for m in ("create_plan", "get_next_tasks", "run_task", "mark_task_complete",
                                                      "refine_plan", "draw_plan")),
    *(f"nbagent.LiveGraph.{m}" for m in ("show", "dot", "request_redraw", "flush", "static_bundle")),
    "nbagent.BatchItem.row", "nbagent.BatchRun.summary_html",
    "nbagent.AgentRunner.get_prompts", "nbagent.AgentRunner.from_llm", "nbagent.BaseAgentWorker.describe",
    "nbagent.FunctionCallingAgentWorker.describe",  # the docstring (and its example) a subclass inherits
    "nbagent.PromptTemplate.get_template", "nbagent.TaskStep.link_step", "nbagent.TaskStep.get_next_step",
    "nbagent.workflow.Event.fields", "nbagent.runtime.in_browser", "nbagent.llms.network_blocked",
    "nbagent.LLM.achat_with_tools", "nbagent.Memory.aput_messages",
    "nbagent.ReplayLLM.rewind", "nbagent.ParallelAgentRunner.arun_until_done", "nbagent.ParallelAgentRunner.arun_steps_in_queue",
    *(f"nbagent.mcp.{f}" for f in ("get_tools_from_mcp_url", "aget_tools_from_mcp_url", "tool_server", "to_tool_result")),
    *(f"nbagent.workflow.Context.{m}" for m in ("collect_events", "wait_for_event", "send_event")),
    "nbagent.workflow.current_context", "nbagent.workflow.ContextStore.set_state", "nbagent.Workflow.step_specs",
    "nbagent.workflow.WorkflowHandler.add_done_callback", "nbagent.workflow.WorkflowHandler.send_event",
    "nbagent.tracing.trace_workflow",
    *(f"nbagent.query_pipeline.QueryPipeline.{m}" for m in (
        "add_modules", "add_link", "add_links", "add_chain", "get_root_keys", "get_leaf_keys", "arun",
        "run_with_intermediates", "reset_state", "update_state")),
    *(f"nbagent.AgentPanel.{m}" for m in ("release", "select", "stop")),
    "nbagent.Memory.put_messages", "nbagent.Memory.areset", "nbagent.Pricing.coerce", "nbagent.LLM.stream_chat_with_tools",
    "nbagent.StepGraph.html", "nbagent.store.runner_from_dict",
    "nbagent.AgentRunner.adopt_task", "nbagent.register_view", "nbagent.StepGraph.svg", "nbagent.StepGraph.pipe",
    *(f"nbagent.Memory.{m}" for m in ("aput", "aset", "aget", "aget_all", "settings", "restore")),
    "nbagent.StreamingAgentChatResponse.aget_response", "nbagent.StreamingAgentChatResponse.add_error_callback",
    "nbagent.LLM.astream_chat_with_tools", "nbagent.runtime.can_wait", "nbagent.runtime.missing",
    *(f"nbagent.store.{f}" for f in ("parse_run_text", "check_header", "skipped_tasks", "atomic_write_text")),
    # cells of the how-tos: MCP resources and prompts, the panel's Edit and Skip, pipelines with several roots
    "nbagent.BasicMCPClient.read_resource", "nbagent.BasicMCPClient.get_prompt", "nbagent.BasicMCPClient.aclose",
    "nbagent.McpToolSpec.fetch_resources", "nbagent.McpToolSpec.fetch_tools", "nbagent.AgentPanel.edit",
    "nbagent.AgentPanel.skip", "nbagent.LiveGraph.redraw", "nbagent.PromptTemplate.as_query_component",
    *(f"nbagent.query_pipeline.QueryPipeline.{m}" for m in (
        "run_multi", "arun_multi", "run_multi_with_intermediates", "arun_multi_with_intermediates", "arun_with_intermediates")),
    "nbagent.query_pipeline.QueryComponent.partial", "nbagent.query_pipeline.QueryComponent.run_component",
    # the hooks the runner calls, defined and called in the how-tos (write a worker, run a workflow)
    *(f"nbagent.BaseAgentWorker.{m}" for m in ("initialize_step", "finalize_task", "prompt_preview")),
    *(f"nbagent.workflow.BaseWorkflowAgent.{m}" for m in ("take_step", "handle_tool_call_results", "finalize")),
    "nbagent.StructuredPlannerAgent.acreate_plan", "nbagent.StructuredPlannerAgent.arefine_plan",
    *(f"nbagent.PlannerAgentState.{m}" for m in ("add_completed_sub_task", "get_next_sub_tasks", "get_remaining_subtasks")),
    *(f"nbagent.workflow.WorkflowCheckpointer.{m}" for m in ("enable_checkpoint", "disable_checkpoint", "filter_checkpoints")),
    "nbagent.workflow.Checkpoint.context", "nbagent.query_pipeline.InputKeys.from_keys",
    "nbagent.query_pipeline.OutputKeys.from_keys", "nbagent.query_pipeline.get_parameters",
    "nbagent.query_pipeline.QueryComponent.arun_component", "nbagent.query_pipeline.QueryComponent.validate_component_inputs",
    *(f"nbagent.ImageDocument.{m}" for m in ("data", "mimetype", "url", "describe")),
    *(f"nbagent.EventDispatcher.{m}" for m in ("emit", "wants", "unsubscribe")),
    "nbagent.ToolMetadata.parameters", "nbagent.workflow.AgentStreamStructuredOutput.get_pydantic_model",
    *(f"nbagent.store.RunStore.{m}" for m in ("attach", "save_task", "checksums_everywhere")),
    "nbagent.AgentWorkflow.from_tools_or_functions", "nbagent.FunctionCallingAgentWorker.aget_tools",
    "nbagent.workflow.BaseWorkflowAgent.retrieve_tools", "nbagent.workflow.BaseWorkflowAgent.describe",
    "nbagent.workflow.ReActAgent.system_message", "nbagent.PlannerAgentWorker.system_message",
    "nbagent.McpTool.argument_problems", "nbagent.McpTool.ainvoke", "nbagent.mcp.close_tool_sessions",
    *(f"nbagent.workflow.RunTrace.{m}" for m in ("from_events", "agent_turns", "for_workflow")),
    "nbagent.ChatMemoryBuffer.restore", "nbagent.mcp.McpToolMetadata.parameters", "nbagent.mcp.McpToolResult.image_documents",
    *(f"nbagent.AgentWorkflow.{m}" for m in (
        "init_run", "setup_agent", "run_agent_step", "parse_agent_output", "aggregate_tool_results", "handoff_targets")),
    # the state a learner reads between steps, and what the port guide says of callback managers
    *(f"nbagent.TaskState.{m}" for m in (
        "step_status", "is_known", "failed_step_id", "scan_call_ids", "held_steps", "is_step_ready")),
    "nbagent.AgentState.get_step_queue", "nbagent.BaseAgentWorker.set_callback_manager",
    *(f"nbagent.AppendLog.{m}" for m in ("view", "restore", "sort", "insert")), "nbagent.workflow.StepSpec.takes",
    "nbagent.workflow.StepSpec.invoke", "nbagent.workflow.BaseWorkflowAgent.validate_tools",
    "nbagent.workflow.RunTrace.fail", "nbagent.workflow.RunTrace.resume", "nbagent.workflow.Context.run_tool_once",
]


def test_what_a_user_calls_has_an_example(site: Path) -> None:
    found = entries_with_examples(site)
    missing = [name for name in CALLED if not found.get(name)]
    assert not missing, f"no example for: {missing}"


def test_the_port_guide_runs_the_planner_memory_store_and_stream(site: Path) -> None:
    """Issue 23's parity, as the how-to shows it: each example printed what LlamaIndex's does."""
    text = text_of((site / "howto" / "port-from-llamaindex.html").read_text(encoding="utf-8"))
    assert "Both face competition; Lyft driver supply, Uber regulation." in text  # the planner's answer
    assert "{'name': 'Logan'}" in text  # ctx.store after the run
    assert "['user', 'assistant', 'tool', 'assistant']" in text  # what the Memory kept
    assert "True ['Hello ', 'there, ', 'friend.']" in text  # a ChatStream, streamed


def test_the_browser_notes_say_sync_calls_run_there() -> None:
    """The runtime seam landed: no page may still say the sync calls fail in the browser."""
    tutorial_pages = docs_module("tutorial_pages", DOCS / "_ext" / "tutorial_pages.py")
    pages = [tutorial_pages.launch_cell("01_quickstart")["source"], (DOCS / "howto" / "teach-a-workshop.md").read_text(encoding="utf-8")]
    for text in pages:
        flat = " ".join(text.split())
        assert "do not work yet" not in flat and "JSPI" in flat, flat[:300]


def test_each_tutorial_the_browser_site_holds_launches_its_notebook_there(site: Path) -> None:
    """``make docs-lite``: the browser site is in ``lite/``, loads nothing from elsewhere, and
    each tutorial it holds links to a file of the site that is that tutorial's notebook."""
    built = built_site()
    if built.no_lite:
        pytest.skip(f"the docs are built without the browser site here: {built.no_lite}")
    from lite.build_site import NOTEBOOKS as IN_LITE
    from lite.build_site import check_site as check_lite

    check_lite(site / "lite")  # raises if the site would fetch anything from elsewhere
    assert not (site / "lite-stage").exists(), "the browser site's staging folder is not published"
    launched = []
    for notebook in NOTEBOOKS:
        page = site / "tutorials" / f"{notebook.stem}.html"
        links = re.findall(r'<p class="nbagent-launch"><a href="([^"]+)"', page.read_text(encoding="utf-8"))
        if notebook.stem not in IN_LITE:
            assert not links, f"{page.name} links to the browser site, which does not hold it"
            continue
        assert links == [f"../lite/lab/index.html?path={notebook.stem}.ipynb"], (page.name, links)
        app = (page.parent / links[0].split("?")[0]).resolve()
        assert app.is_file() and app.is_relative_to(site / "lite"), app
        served = site / "lite" / "files" / f"{notebook.stem}.ipynb"  # what ?path= opens
        assert served.is_file(), f"{served.relative_to(site)} is not in the site"
        code = [c.source for c in nbformat.read(served, as_version=4).cells if c.cell_type == "code"]
        assert code == [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
        launched.append(notebook.stem)
    assert sorted(launched) == sorted(IN_LITE)
