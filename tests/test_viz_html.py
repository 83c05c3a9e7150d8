"""HTML views: every core object's _repr_html_, scoped theme-aware CSS, escaping, no secrets."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMemoryBuffer,
    ChatMessage,
    FnAgentWorker,
    FunctionTool,
    MessageRole,
    ScriptedLLM,
    StreamingAgentChatResponse,
    ToolOutput,
    ToolSelection,
)
from nbagent.runner.state import StepStatus
from nbagent.viz import html as H
from nbagent.viz.html.base import _status_badge
from tests.helpers import CountingWorker
from tests.test_viz_dot import HOSTILE, HOSTILE_TEXT, dot_available, hostile_state, run_plan

_HTML_TAGS = {"div", "span", "code", "pre", "style", "details", "summary", "table", "tr", "th", "td", "ol", "li", "b", "br"}
_SVG_TAGS = {"svg", "g", "title", "polygon", "path", "text", "ellipse", "polyline"}
_RAW_HOSTILE = ("<script", "<img", '"]; evil', "\x00", "\x1b", "\u202e", "\ud800")
SECRET = "sk-SECRET-0123456789abcdef"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.styles: list[str] = []
        self._in_style = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)
        else:
            self.text.append(data)


def assert_inert(page: str, *, svg: bool = False) -> str:
    """One scoped card; only our tags; no scripts, handlers or external assets. Returns its text."""
    assert page.startswith('<div class="nbagent ') and page.endswith("</div>"), page[:80]
    p = _Collector()
    p.feed(page)
    p.close()
    allowed = _HTML_TAGS | (_SVG_TAGS if svg else set())
    assert set(p.tags) <= allowed, set(p.tags) - allowed
    names = {name.lower() for name, _ in p.attrs}
    assert not {n for n in names if n.startswith("on")}, names
    assert not names & {"src", "href", "xlink:href", "srcdoc", "action"}, names
    assert not [v for _, v in p.attrs if v and "javascript:" in v.lower()]
    assert "url(" not in page
    assert p.styles == [H.CSS]  # exactly one style block, ours
    for raw in _RAW_HOSTILE:
        assert raw not in page, raw
    return "".join(p.text)


# ----- CSS -----------------------------------------------------------------------------------


def test_css_is_scoped_and_theme_aware() -> None:
    selectors = [rule.split("{", 1)[0].strip() for rule in H.CSS.split("}") if "{" in rule]
    assert len(selectors) > 20
    for sel in selectors:
        for part in sel.split(","):
            assert part.strip().startswith(".nbagent"), sel
    for var in ("--jp-ui-font-color1", "--jp-layout-color1", "--jp-border-color2", "--jp-layout-color2"):
        assert f"var({var}," in H.CSS  # with a fallback for non-Jupyter frontends
    assert "@import" not in H.CSS and "http" not in H.CSS
    # every badge state carries its own background and text colour (readable in dark themes)
    for name in ("s-done", "s-failed", "s-undone", "t-completed", "r-user", "b-answer"):
        assert re.search(rf"\.nbagent \.nb-{name}\{{background:#[0-9a-f]{{6}};color:#[0-9a-f]{{6}};", H.CSS)


# ----- core objects --------------------------------------------------------------------------


def _tool() -> FunctionTool:
    def add(a: int, b: int = 2) -> int:
        """Add two numbers.

        Args:
            a: the first <number>
            b: the second
        """
        return a + b

    return FunctionTool.from_defaults(add, return_direct=True)


def test_every_core_repr_is_a_scoped_card() -> None:
    runner, task = run_plan(
        [
            {"out": "a", "thought": "think", "tools": [ToolOutput(content="3", tool_name="add", raw_input={"a": 1})], "usage": (7, 3)},
            {"out": "final", "last": True},
        ],
        steps=2,
    )
    state = runner.state_of(task)
    response = runner.finalize_response(task)
    out0 = state.completed_steps[0]
    memory = ChatMemoryBuffer()
    memory.put(ChatMessage(role=MessageRole.USER, content="hello"))
    tool = _tool()
    objects: dict[str, Any] = {
        "task": task,
        "step": out0.task_step,
        "step_output": out0,
        "response": response,
        "tool_output": out0.tool_outputs[0],
        "message": ChatMessage(role=MessageRole.ASSISTANT, content="hi there"),
        "memory": memory,
        "tool": tool,
        "runner": runner,
        "worker": runner.agent_worker,
        "llm": ScriptedLLM(["x"]),
    }
    expected = {
        "task": ["What is 1+2?", "final", "finalized", "answer", "eb1167b3"],
        "step": ["e3e70682", "eb1167b3"],  # task id, next step id
        "step_output": ["think", "add(a=1)", "10 tokens (7 prompt + 3 completion)", "0.25 s", "eb1167b3"],
        "response": ["final", "1 source"],
        "tool_output": ["add", "a=1", "3"],
        "message": ["assistant", "hi there"],
        "memory": ["user", "hello", "1 message"],
        "tool": ["add", "Add two numbers.", "the first <number>", '"required"', "return_direct"],
        "runner": ["AgentRunner", "PlanWorker", "finalized", "What is 1+2?"],
        "worker": ["PlanWorker"],
        "llm": ["ScriptedLLM", "scripted", "0 of 1 reply used"],
    }
    for name, obj in objects.items():
        page = obj._repr_html_()
        text = assert_inert(page, svg=name == "task")
        for fact in expected[name]:
            assert fact in text, (name, fact)
        assert obj._repr_html_() == page, name  # deterministic


def test_step_output_html_shows_tools_errors_links_and_answer() -> None:
    runner, task = run_plan(
        [
            {"out": "a", "tools": [ToolOutput(content="Error: boom", tool_name="div", raw_input={"b": 0}, is_error=True)]},
            {"out": "the end", "last": True, "usage": (1, 2)},
        ],
        steps=2,
    )
    first, last = runner.state_of(task).completed_steps
    page = first._repr_html_()
    assert '<span class="nb-badge nb-b-error">error</span>' in page and "1 error" in page
    assert '<div class="nb-error"><pre>Error: boom</pre></div>' in page
    assert f'<code class="nb-id">{last.task_step.step_id[:8]}</code>' in page  # link to the next step
    page = last._repr_html_()
    assert '<span class="nb-badge nb-b-answer">answer</span>' in page and "the end" in page
    assert "3 tokens" in page


def test_task_html_graph_inline_svg_or_timeline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner, task = run_plan([{"out": "a"}, {"out": "b", "last": True}], steps=2)
    if dot_available():
        page = task._repr_html_()
        assert_inert(page, svg=True)
        assert '<div class="nb-graph"><svg' in page and page.count('class="node"') == 2
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all
    page = task._repr_html_()
    assert_inert(page)
    assert "<svg" not in page and '<ol class="nb-timeline">' in page
    assert '<span class="nb-badge nb-s-done">done</span>' in page


def test_a_dot_program_that_fails_gives_the_static_views_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """A ``dot`` that is there but fails (here a real program that exits 1) raises from
    ``render_svg`` and ``save``, while every view falls back to its list and the DOT source."""
    import shutil

    from nbagent.viz.graph import DotDisplay, GraphvizError, StepGraph
    from nbagent.viz.render import render_svg, svg_or_none

    failing = shutil.which("false")
    assert failing is not None
    monkeypatch.setenv("NBAGENT_DOT", failing)
    with pytest.raises(GraphvizError, match="exit code 1"):
        render_svg("digraph { a }")
    assert svg_or_none("digraph { a }") is None
    runner, task = run_plan([{"out": "a"}, {"out": "b", "last": True}], steps=2)
    page = task._repr_html_()
    assert_inert(page)
    assert '<ol class="nb-timeline">' in page and "could not be drawn" not in page
    graph = StepGraph(runner.state_of(task))
    bundle = graph._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"}  # the browser draws it
    assert "not available: steps as a list" in bundle["text/html"] and "DOT source" in bundle["text/html"]
    assert bundle["text/html"] == graph.html()
    with pytest.raises(GraphvizError):
        graph.save(tmp_path / "g.svg")
    assert not (tmp_path / "g.svg").exists()
    shown = DotDisplay("digraph { a -> b }", title="two <b>", fallback=lambda: "<ol><li>a, b</li></ol>")
    page = shown._repr_mimebundle_()["text/html"]
    assert assert_inert(page).startswith("two <b>")
    assert "not available: shown as a list" in page and "<ol><li>a, b</li></ol>" in page and "a -&gt; b" in page
    assert page == shown.html()


def test_task_html_without_or_unknown_to_its_runner() -> None:
    runner, task = run_plan([{"out": "a"}], steps=0, input="x <y>")
    runner.delete_task(task)
    text = assert_inert(task._repr_html_())
    assert "unknown to its runner" in text and "x <y>" in text
    task._runner = None
    text = assert_inert(task._repr_html_())
    assert "not attached to a runner" in text and "detached" in text


def test_runner_html_lists_tasks_and_memory() -> None:
    runner = AgentRunner(CountingWorker(target=2, fail_on={2}))  # type: ignore[arg-type]
    t1 = runner.create_task("one <b>")
    runner.run_step(t1)
    with pytest.raises(ValueError):
        runner.run_step(t1)
    runner.create_task("two")
    page = runner._repr_html_()
    text = assert_inert(page)
    assert "2 tasks" in text and "one <b>" in text and "CountingWorker" in text
    assert "0 messages" in text
    rows = re.findall(r"<tr><td>.*?</tr>", page)
    assert len(rows) == 2
    assert "nb-t-failed" in rows[0] and '<td>1</td><td>1</td><td><span class="nb-error">1</span>' in rows[0]
    assert "nb-t-pending" in rows[1] and "<td>0</td><td>1</td><td>0</td>" in rows[1]
    assert "no tasks yet" in assert_inert(AgentRunner(FnAgentWorker(lambda s: ("x", True)))._repr_html_())


def test_worker_html_from_describe() -> None:
    def search(q: str) -> str:
        """Search."""
        return q

    worker = CountingWorker(tools=[search], llm=ScriptedLLM(["x"], model="tiny-model"))
    text = assert_inert(worker._repr_html_())
    assert "CountingWorker" in text and "tiny-model" in text and "search" in text
    text = assert_inert(FnAgentWorker(lambda s: ("x", True), max_steps=7)._repr_html_())
    assert "FnAgentWorker" in text and "max_steps" in text and "7" in text

    class Broken(FnAgentWorker):
        def describe(self) -> dict[str, Any]:
            raise RuntimeError("no <describe>")

    text = assert_inert(Broken(lambda s: ("x", True))._repr_html_())
    assert "Broken" in text and "RuntimeError: no <describe>" in text


# ----- secrets -------------------------------------------------------------------------------


class _FakeLLM:
    """Not an nbagent LLM: an object that carries its key in every usual place."""

    model = "gpt-test"
    api_key = SECRET
    _api_key = SECRET
    base_url = f"https://user:{SECRET}@llm.example.com:8443/v1?key={SECRET}#{SECRET}"
    masked_key = "sk-…cdef"
    temperature = 0.5


def test_llm_html_never_shows_the_key() -> None:
    page = H.llm_html(_FakeLLM())
    text = assert_inert(page)
    assert "SECRET" not in page
    assert "https://***@llm.example.com:8443/v1?key=***" in text and "sk-…cdef" in text and "gpt-test" in text

    class Leaky(_FakeLLM):
        model = f"model-{SECRET}"  # even a key pasted where it does not belong is redacted

    assert "SECRET" not in H.llm_html(Leaky())


def test_openai_llm_and_its_worker_and_runner_hide_the_key() -> None:
    from nbagent import OpenAILLM

    llm = OpenAILLM(model="gpt-4o-mini", api_key=SECRET, base_url="http://127.0.0.1:9/v1")
    for page in (llm._repr_html_(), CountingWorker(llm=llm)._repr_html_()):
        assert "SECRET" not in page
        assert_inert(page)
    assert "sk-…cdef" in llm._repr_html_() and "http://127.0.0.1:9/v1" in llm._repr_html_()
    runner = AgentRunner(CountingWorker(llm=llm))  # type: ignore[arg-type]
    runner.create_task("q")
    assert "SECRET" not in runner._repr_html_()


# ----- hostile text --------------------------------------------------------------------------


def test_hostile_text_is_inert_in_every_view(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner, task = hostile_state()
    state = runner.state_of(task)
    messages = [
        ChatMessage(role=MessageRole.USER, content=HOSTILE_TEXT),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content=[{"type": "text", "text": HOSTILE[1]}, {"type": "image_url", "image_url": {"url": "javascript:alert(1)"}}],
            tool_calls=[ToolSelection(tool_id=HOSTILE[3], tool_name=HOSTILE[0], tool_kwargs={HOSTILE[3]: HOSTILE[2]})],
        ),
        ChatMessage(role=MessageRole.TOOL, content=HOSTILE[2], name=HOSTILE[0], tool_call_id=HOSTILE[3]),
    ]
    pages = {
        "task": H.task_html(task),
        "runner": H.runner_html(runner),
        "transcript": H.transcript_html(messages),
        "response": H.chat_response_html(AgentChatResponse(response=HOSTILE_TEXT, sources=state.completed_steps[0].tool_outputs)),
        "timeline": H.timeline_html(state),
    }
    for out in state.completed_steps:
        pages[f"out-{out.task_step.step_id}"] = H.step_output_html(out)
        for t in out.tool_outputs:
            pages[f"tool-{t.tool_name}"] = H.tool_output_html(t)
    for step in state.steps.values():
        pages[f"step-{step.step_id}"] = H.step_html(step)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all
    pages["task-no-dot"] = H.task_html(task)
    seen = ""
    for name, page in pages.items():
        text = assert_inert(page, svg=name == "task")
        assert page.count("</style>") == 1, name
        seen += text
    # the hostile strings are shown, as text
    assert "<script>alert(1)</script>" in seen and '"]; evil [label="' in seen
    assert "&lt;already escaped&gt; &amp;" in seen and "trailing backslash \\" in seen
    assert "unicode é 中文 🙂" in seen and "'single' quotes" in seen
    assert "\ufffd" in seen  # control characters replaced, visibly
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["transcript"]
    assert "&quot;]; evil [label=&quot;" in pages["transcript"]


def test_streaming_response_is_shown_without_consuming_it() -> None:
    stream = StreamingAgentChatResponse(iter(["a", "b"]), prefix="so far <b>")
    page = H.chat_response_html(stream)
    assert_inert(page)
    assert "so far &lt;b&gt;" in page and "streaming…" in page
    assert not stream.is_done and stream.response == "so far <b>"


def test_long_timeline_elides_the_middle() -> None:
    plan: list[Any] = [{"out": f"o{i}"} for i in range(499)] + [{"out": "end", "last": True}]
    runner, task = run_plan(plan, steps=500)
    page = H.timeline_html(runner.state_of(task))
    assert_inert(page)
    assert page.count('<li class="nb-l-') == 200 and "… 300 more steps …" in page
    assert "#500" in page and "#1<" in page


def test_views_do_not_raise_on_broken_objects() -> None:
    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    out = ToolOutput(content="x", tool_name="t", raw_input={"w": Weird()})
    text = assert_inert(H.tool_output_html(out))
    assert "unprintable Weird" in text
    page = H.step_html(None)  # type: ignore[arg-type]
    assert "this step could not be drawn" in page and page.startswith('<div class="nbagent')
    assert "AttributeError" in H.task_html(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("status", list(StepStatus), ids=lambda s: s.value)
def test_every_step_status_badge_and_timeline_entry_has_a_style_rule(status: StepStatus) -> None:
    """A status with a space ("awaiting approval") once became two class names that no rule matched."""
    badge_classes = re.search(r'class="nb-badge ([^"]+)"', _status_badge(status.value))
    assert badge_classes is not None
    (badge_class,) = badge_classes.group(1).split()  # one class name, not a sentence of them
    assert f".nbagent .{badge_class}{{" in H.CSS
    assert f"li.nb-l-{badge_class.removeprefix('nb-s-')}{{" in H.CSS


# ----- hostile text, one subject module at a time ----------------------------------------------


def _hostile_approval_step() -> Any:
    """A step whose tool call waits for approval, then one rejected; hostile arguments and reason."""
    from nbagent import FunctionCallingAgent
    from nbagent.llms.scripted import tool_call

    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: the file to delete
        """
        return f"deleted {path}"

    tool = FunctionTool.from_defaults(delete_file, requires_approval=True, description=HOSTILE_TEXT)
    agent = FunctionCallingAgent.from_tools(
        [tool], llm=ScriptedLLM([tool_call("delete_file", path=HOSTILE_TEXT), tool_call("delete_file", path=HOSTILE[1]), "ok"])
    )
    task = agent.create_task(HOSTILE_TEXT)
    agent.run_step(task)
    waiting = H.step_html(agent.get_upcoming_steps(task)[0])
    (pending,) = agent.pending_approvals(task)
    agent.reject(task, pending.call_id, reason=HOSTILE_TEXT, by=HOSTILE[0])
    decided = agent.get_upcoming_steps(task)[0]
    assert "by &lt;script&gt;alert(1)&lt;/script&gt; at" in H.approval_html(decided)  # who rejected it, escaped
    return [waiting, H.step_html(decided), H.tool_html(tool)]


class _HostileWorker:
    """A worker that describes itself, and shows its prompt, in hostile text."""

    def describe(self) -> dict[str, Any]:
        return {"kind": HOSTILE_TEXT, HOSTILE[0]: HOSTILE_TEXT, "tools": list(HOSTILE)}

    def prompt_preview(self) -> str:
        return HOSTILE_TEXT


def _hostile_pages(module: str) -> list[str]:
    """Every view of one ``viz.html`` subject module, fed hostile text wherever a user, a model,
    a tool or a server can put some."""
    from pydantic import BaseModel

    from nbagent.branches import Branch, BranchComparison, BranchStep
    from nbagent.costs import Cost, StepCost, TaskCost
    from nbagent.viz.dot import task_to_dot

    runner, task = hostile_state()
    state = runner.state_of(task)
    if module == "base":
        return [H.error_html(HOSTILE_TEXT, RuntimeError(HOSTILE_TEXT))]
    if module == "chat":

        class Answer(BaseModel):
            text: str

        message = ChatMessage(role=MessageRole.TOOL, content=HOSTILE_TEXT, name=HOSTILE[1], tool_call_id=HOSTILE[3])
        memory = ChatMemoryBuffer()
        memory.put(message)
        tool_out = ToolOutput(content=HOSTILE_TEXT, tool_name=HOSTILE[0], raw_input={HOSTILE[3]: HOSTILE[2]},
                              tool_call_id=HOSTILE[1], is_error=True)
        typed = AgentChatResponse(response=HOSTILE_TEXT, sources=[tool_out])
        typed.structured_response = Answer(text=HOSTILE_TEXT)  # type: ignore[attr-defined]
        assert "typed answer" in H.chat_response_html(typed)
        return [H.message_html(message), H.memory_html(memory), H.transcript_html([message] * 3, recent=1),
                H.tool_output_html(tool_out), H.chat_response_html(typed)]
    if module == "steps":
        return [H.step_output_html(out) for out in state.completed_steps] + _hostile_approval_step()
    if module == "task":
        return [H.task_html(task), H.timeline_html(state), H.graph_html(state, svg=None, dot_source=task_to_dot(state))]
    if module == "agents":
        return [H.llm_html(ScriptedLLM(["x"], model=HOSTILE_TEXT)), H.worker_html(_HostileWorker()), H.runner_html(runner)]
    if module == "costs":
        step = StepCost(step_id=HOSTILE[0], model=HOSTILE_TEXT, cost=Cost(prompt_tokens=3, currency=HOSTILE[1]))
        return [H.task_cost_html(TaskCost(task_id=HOSTILE[2], steps=[step], total=step.cost))]
    if module == "branches":
        row = BranchStep(step_id=HOSTILE[0], status=HOSTILE[3], input=HOSTILE_TEXT, thought=HOSTILE_TEXT,
                         calls=((HOSTILE_TEXT, HOSTILE_TEXT, True),), output=HOSTILE_TEXT, is_last=True,
                         tokens=3, cost=HOSTILE[1])
        left, right = Branch(0, (HOSTILE[0],), True), Branch(1, (HOSTILE[1],), False)
        return [H.comparison_html(BranchComparison(task_id=HOSTILE[2], left=left, right=right,
                                                   rows=[(row, row), (row, None)], shared=1))]
    raise AssertionError(f"no hostile pages for viz.html.{module}")


def test_every_subject_module_has_a_hostile_text_test() -> None:
    import pkgutil

    import nbagent.viz.html as package

    assert {m.name for m in pkgutil.iter_modules(package.__path__)} == set(SUBJECTS)


SUBJECTS = ("base", "chat", "steps", "task", "agents", "costs", "branches")


@pytest.mark.parametrize("module", SUBJECTS)
def test_hostile_text_is_inert_in_each_subject_module(module: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # no dot at all: the timeline, all of it text
    pages = _hostile_pages(module)
    assert pages
    for page in pages:
        assert "could not be drawn" not in page or module == "base", page[:300]
        text = assert_inert(page)
        assert "<script>alert(1)</script>" in text or "<img src=x onerror=alert(1)>" in text, (module, text[:300])
        assert "&lt;script&gt;" in page or "&lt;img src=x" in page


def test_the_pure_views_import_no_widget_or_notebook_library() -> None:
    """The HTML views, the static graph and its renderer work in a plain Python process: drawing
    a task, a batch summary and a workflow loads no widget, IPython or progress-bar module."""
    import os
    import subprocess
    import sys

    code = """
import sys
from tests.test_viz_dot import hostile_state
from nbagent.viz import html, graph, render, mcp_html, workflow_html, escape
from nbagent.viz.batch import summary
from tests.test_workflow_viz import handoff_workflow
runner, task = hostile_state()
html.task_html(task); graph.StepGraph(runner.state_of(task))._repr_mimebundle_()
workflow_html.workflow_html(handoff_workflow())
from tests.test_batch import make_agent
batch = make_agent().run_batch(["what is 1 + 2 ?"], progress=False)
assert "1 done" in summary.batch_summary_html(batch) and "The answer is 3" in summary.batch_static_html(batch, 0)
print(sorted(m for m in sys.modules if m.split(".")[0] in
      {"ipywidgets", "IPython", "anywidget", "traitlets", "tqdm", "ipykernel", "comm", "graphviz"}))
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_view_table_names_each_view_by_the_module_that_defines_it() -> None:
    """``_wiring`` names a view by the file it lives in, not a package that re-exports it, so a
    reader goes straight to it (and a view moved without its line fails here, not later)."""
    import importlib

    from nbagent._wiring import VIEWS

    for _, _, provider in VIEWS:
        module, name = provider.split(":")
        view = getattr(importlib.import_module(module), name)
        assert view.__module__ == module, (provider, view.__module__)
