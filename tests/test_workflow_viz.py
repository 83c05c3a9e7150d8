"""Drawings of workflows and runs: exact DOT snapshots, escaping of hostile text, Graphviz and
no-Graphviz displays, the live view and the answer box (no browser), and import hygiene."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nbagent import ChatMessage, MessageRole, ScriptedLLM, ToolOutput, ToolSelection, tool_call
from nbagent.viz.workflow_dot import HANDOFF_COLOR, agents_to_dot, run_to_dot, workflow_to_dot
from nbagent.viz.workflow_html import DotDisplay, agent_html, event_html, run_html, workflow_html
from nbagent.viz.workflow_live import HumanInputBox, WorkflowLiveView
from nbagent.workflow import (
    AgentInput,
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    Context,
    Event,
    FunctionAgent,
    HumanResponseEvent,
    InputRequiredEvent,
    RunTrace,
    StartEvent,
    StopEvent,
    WorkflowCancelledError,
    ToolCall,
    ToolCallResult,
    Workflow,
    ask_human,
    step,
)
from tests.test_viz_dot import HOSTILE, HOSTILE_TEXT, dot_available, run_dot

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class Ping(Event):
    n: int


class Tiny(Workflow):
    @step
    async def start(self, ev: StartEvent) -> Ping:
        """Begin."""
        return Ping(n=1)

    @step(num_workers=2)
    async def finish(self, ev: Ping) -> StopEvent:
        return StopEvent(result=ev.n)


def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


async def approve(ctx: Context, action: str) -> str:
    """Ask the person to approve."""
    return "the person said " + await ask_human(ctx, f"Approve {action}?")


def handoff_workflow(extra: list[Any] | None = None) -> AgentWorkflow:
    triage = FunctionAgent(
        name="triage", description="Routes requests", can_handoff_to=["weather"],
        llm=ScriptedLLM([tool_call("handoff", to_agent="weather", reason="weather")]),
    )
    weather = FunctionAgent(
        name="weather", description="Knows the weather", tools=[lookup, approve],
        llm=ScriptedLLM([tool_call("lookup", city="Paris"), *(extra or []), "Sunny."]),
    )
    return AgentWorkflow([triage, weather], root_agent="triage")


def traced_run(wf: AgentWorkflow, text: str = "Weather in Paris?") -> tuple[RunTrace, Any]:
    async def main() -> tuple[RunTrace, Any]:
        handler = wf.run(user_msg=text)
        trace = RunTrace.for_workflow(wf)
        handler.subscribe(trace.add)
        return trace, await handler

    return asyncio.run(main())


TINY_SNAPSHOT = """\
digraph workflow {
  graph [rankdir="TB", bgcolor="transparent", pad="0.1", fontname="Helvetica", fontsize="11", fontcolor="#374151", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.4", compound="true", label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT"><B>Tiny · 2 steps · 3 event types</B><BR ALIGN="LEFT"/><I>boxes are steps, ellipses the events they take and return</I><BR ALIGN="LEFT"/></TD></TR></TABLE>>];
  node [shape="box", fontname="Helvetica", fontsize="10", margin="0.12,0.06"];
  edge [color="#6b7280", arrowsize="0.7", fontname="Helvetica", fontsize="9"];
  e0 [label=<<B>StartEvent</B><BR ALIGN="LEFT"/>>, shape="ellipse", style="filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16"];
  e1 [label=<<B>Ping</B><BR ALIGN="LEFT"/>>, shape="ellipse", style="filled", fillcolor="#f1f5f9", color="#64748b", fontcolor="#1e293b"];
  e2 [label=<<B>StopEvent</B><BR ALIGN="LEFT"/>>, shape="ellipse", style="filled", fillcolor="#e0e7ff", color="#4338ca", fontcolor="#1e1b4b", peripheries="2"];
  s0 [label=<<B>start</B><BR ALIGN="LEFT"/>Begin.<BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#f8fafc", color="#334155", fontcolor="#0f172a"];
  s1 [label=<<B>finish</B><BR ALIGN="LEFT"/><I>2 at a time</I><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#f8fafc", color="#334155", fontcolor="#0f172a"];
  e0 -> s0;
  s0 -> e1;
  e1 -> s1;
  s1 -> e2;
}
"""

RUN_SNAPSHOT = """\
digraph run {
  graph [rankdir="TB", bgcolor="transparent", pad="0.1", fontname="Helvetica", fontsize="11", fontcolor="#374151", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.4", compound="true", label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT"><B>run · done · 3 agent steps · answered by weather</B><BR ALIGN="LEFT"/></TD></TR></TABLE>>];
  node [shape="box", fontname="Helvetica", fontsize="10", margin="0.12,0.06"];
  edge [color="#6b7280", arrowsize="0.7", fontname="Helvetica", fontsize="9"];
  user [label=<<B>user: Weather in Paris?</B><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#dbeafe", color="#1d4ed8", fontcolor="#172554"];
  subgraph cluster_0 {
    graph [label=<<B>triage · root</B><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#f1f5f9", color="#64748b", fontcolor="#1e293b", penwidth="1"];
    t0 [label=<<B>step 1</B><BR ALIGN="LEFT"/><I>hands off to weather</I><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16"];
  }
  subgraph cluster_1 {
    graph [label=<<B>weather · answered</B><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16", penwidth="1"];
    t1 [label=<<B>step 2</B><BR ALIGN="LEFT"/><I>calls lookup</I><BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16"];
    t1c0 [label=<<B>lookup(city=&quot;Paris&quot;)</B><BR ALIGN="LEFT"/>→ sunny in Paris<BR ALIGN="LEFT"/>>, style="filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16"];
    t2 [label=<<B>step 3</B><BR ALIGN="LEFT"/>Sunny.<BR ALIGN="LEFT"/>>, style="rounded,filled", fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16"];
  }
  user -> t0;
  t0 -> t1 [color="#7c3aed", fontcolor="#7c3aed", penwidth="2.2", label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD WIDTH="10"></TD><TD ALIGN="LEFT" BALIGN="LEFT" BGCOLOR="#f8fafc">handoff: weather<BR ALIGN="LEFT"/></TD></TR></TABLE>>];
  t1 -> t1c0;
  t1c0 -> t2;
  answer [label=<<B>answer · weather</B><BR ALIGN="LEFT"/>Sunny.<BR ALIGN="LEFT"/>>, style="rounded,filled", peripheries="2", fillcolor="#e0e7ff", color="#4338ca", fontcolor="#1e1b4b"];
  t2 -> answer;
}
"""

# ----- structure checks ----------------------------------------------------------------------

_LABEL = re.compile(r"label=<(.*?)>(?=[,\]])")
_TAGS = re.compile(
    r'</?B>|</?I>|<FONT COLOR="#[0-9a-f]{6}">|</FONT>|<BR ALIGN="LEFT"/>'
    # the handoff label's table: a gap column, then the text (our constants only)
    r'|<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD WIDTH="10"></TD>'
    r'<TD ALIGN="LEFT" BALIGN="LEFT" BGCOLOR="#f8fafc">|</TD></TR></TABLE>'
    # the title's light box, and a short edge label's
    r'|<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded">'
    r'<TR><TD ALIGN="LEFT" BALIGN="LEFT">'
    r'|<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2" BGCOLOR="#f8fafc"><TR><TD>'
)
_LINE = [
    re.compile(r"digraph (workflow|agents|run) \{"),
    re.compile(r"  (graph|node|edge) \[.*\];"),
    re.compile(r"  +([a-z]+\d*(_idle|c\d+)?|user|answer|error) \[.*\];"),
    re.compile(r"  +graph \[.*\];"),
    re.compile(r"  subgraph cluster_\d+ \{"),
    re.compile(r"  \}"),
    re.compile(r"  ([a-z]\d+(c\d+|_idle)?|user) -> ([a-z]\d+(c\d+|_idle)?|answer|error)( \[.*\])?;"),
    re.compile(r"\}"),
]


def assert_structure(dot: str) -> list[str]:
    """Every line is one the renderers write; label text has only our tags; returns labels."""
    labels = [_TAGS.sub(" ", m) for m in _LABEL.findall(dot)]
    skeleton = _LABEL.sub("label=<>", dot)
    for line in skeleton.splitlines():
        assert any(p.fullmatch(line) for p in _LINE), f"unexpected DOT line: {line!r}"
    for text in labels:
        assert "<" not in text and ">" not in text and '"' not in text, text
        assert not re.search(r"&(?!(amp|lt|gt|quot|#x27);)", text), text
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\ud800-\udfff]", text), text
    return labels


# ----- DOT -----------------------------------------------------------------------------------


def test_workflow_drawing_snapshot() -> None:
    assert workflow_to_dot(Tiny()) == TINY_SNAPSHOT
    assert_structure(TINY_SNAPSHOT)


def test_run_drawing_snapshot_and_determinism() -> None:
    trace, _ = traced_run(handoff_workflow())
    assert run_to_dot(trace) == RUN_SNAPSHOT
    again, _ = traced_run(handoff_workflow())
    assert run_to_dot(again) == RUN_SNAPSHOT
    assert_structure(RUN_SNAPSHOT)


def test_agent_workflow_steps_drawing_has_every_step_and_event_type() -> None:
    dot = workflow_to_dot(handoff_workflow())
    for name in ("init_run", "setup_agent", "run_agent_step", "parse_agent_output", "call_tool",
                 "aggregate_tool_results", "AgentWorkflowStartEvent", "AgentInput", "ToolCallResult", "StopEvent"):
        assert f"<B>{name}</B>" in dot
    assert "4 at a time" in dot
    assert_structure(dot)


def test_agents_drawing_marks_the_root_and_follows_can_handoff_to() -> None:
    dot = agents_to_dot(handoff_workflow())
    assert "triage · root" in dot and "user -> a0" in dot
    handoffs = re.findall(rf'(a\d) -> (a\d) \[color="{HANDOFF_COLOR}"', dot)
    assert handoffs == [("a0", "a1"), ("a1", "a0")]  # weather may hand off to anyone
    assert_structure(dot)


def test_waiting_run_highlights_the_active_agent_and_the_question() -> None:
    wf = handoff_workflow([tool_call("approve", action="send")])

    async def main() -> str:
        handler = wf.run(user_msg="Weather?")
        trace = RunTrace.for_workflow(wf)
        handler.subscribe(trace.add)
        await handler.wait_for_question()
        dot = run_to_dot(trace)
        handler.respond("yes")
        await handler
        assert trace.status == "done" and trace.answered_by == "weather"
        return dot

    dot = asyncio.run(main())
    assert "run · waiting" in dot and "active: weather" in dot
    cluster = re.search(r"subgraph cluster_1 \{\n    graph \[(.*?)\];", dot)
    assert cluster is not None and 'penwidth="2.5"' in cluster.group(1) and "weather · active" in cluster.group(1)
    assert "asks: Approve send?" in dot and "waiting for an answer…" in dot
    assert 'fillcolor="#fef3c7"' in dot  # the waiting tool call is amber
    assert_structure(dot)


def test_a_failed_run_and_an_idle_view_draw() -> None:
    trace = RunTrace(["a", "b"], "a")
    idle = run_to_dot(trace)
    assert "not called yet" in idle and "run · idle" in idle
    trace.add(AgentInput(input=[ChatMessage(role=MessageRole.USER, content="q")], current_agent_name="a"))
    trace.fail(ValueError("model down"))
    dot = run_to_dot(trace)
    assert "ValueError: model down" in dot and "-> error" in dot
    assert_structure(idle)
    assert_structure(dot)


def test_long_runs_keep_the_newest_steps() -> None:
    trace = RunTrace(["a"], "a")
    for i in range(40):
        trace.add(AgentInput(input=[], current_agent_name="a"))
        trace.add(AgentOutput(response=ChatMessage(role=MessageRole.ASSISTANT, content=f"r{i}"), current_agent_name="a"))
    dot = run_to_dot(trace, max_turns=10)
    assert "30 earlier agent steps not shown" in dot
    assert dot.count("[label=<<B>step ") == 10 and "step 40" in dot and "step 30<" not in dot
    assert_structure(dot)
    with pytest.raises(ValueError, match="max_turns"):
        run_to_dot(trace, max_turns=1)
    with pytest.raises(TypeError, match="unknown drawing option"):
        WorkflowLiveView(None, colour="red")


def hostile_trace() -> RunTrace:
    agent = HOSTILE[3]
    trace = RunTrace([agent, HOSTILE[0]], agent)
    trace.add(AgentInput(input=[ChatMessage(role=MessageRole.USER, content=HOSTILE_TEXT)], current_agent_name=agent))
    trace.add(AgentStream(delta="x", response=HOSTILE[1], current_agent_name=agent))
    calls = [ToolSelection(tool_id=HOSTILE[2], tool_name=HOSTILE[0], tool_kwargs={HOSTILE[3]: HOSTILE[4]}),
             ToolSelection(tool_id="h", tool_name="handoff", tool_kwargs={"to_agent": HOSTILE[0], "reason": HOSTILE[6]})]
    trace.add(AgentOutput(response=ChatMessage(role=MessageRole.ASSISTANT, content=HOSTILE_TEXT), tool_calls=calls,
                          current_agent_name=agent))
    trace.add(ToolCall(tool_name=HOSTILE[0], tool_kwargs={}, tool_id=HOSTILE[2]))
    trace.add(InputRequiredEvent(prefix=HOSTILE[8]))
    trace.add(HumanResponseEvent(response=HOSTILE[9]))
    trace.add(ToolCallResult(tool_name=HOSTILE[0], tool_kwargs={}, tool_id=HOSTILE[2],
                             tool_output=ToolOutput(content=HOSTILE_TEXT, tool_name=HOSTILE[0], is_error=True)))
    trace.add(ToolCallResult(tool_name="handoff", tool_kwargs=calls[1].tool_kwargs, tool_id="h",
                             tool_output=ToolOutput(content="ok", tool_name="handoff"), return_direct=True))
    trace.add(AgentInput(input=[], current_agent_name=HOSTILE[0]))
    trace.add(StopEvent(result=AgentOutput(response=ChatMessage(content=HOSTILE[10]), current_agent_name=HOSTILE[0])))
    return trace


def test_hostile_text_is_inert_in_every_drawing() -> None:
    trace = hostile_trace()
    assert trace.turns[1].via == "handoff"
    dot = run_to_dot(trace, max_label=400)
    labels = assert_structure(dot)
    joined = "\n".join(labels)
    for raw in ("<script", "<img", "</style", '"]; evil', "\x00", "\x1b", "\u202e", "\ud800"):
        assert raw not in dot
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in joined and "&quot;]; evil [label=&quot;" in joined
    assert "&amp;lt;already escaped&amp;gt;" in joined
    wf = AgentWorkflow([FunctionAgent(name=HOSTILE[0], description=HOSTILE_TEXT, llm=ScriptedLLM(["x"]),
                                      system_prompt=HOSTILE_TEXT, tools=[lookup])])
    for source in (dot, agents_to_dot(wf, max_label=400), workflow_to_dot(wf)):
        assert_structure(source)
        if dot_available():
            svg = run_dot(source)
            root = ET.fromstring(svg)
            assert "<script" not in svg and not [a for el in root.iter() for a in el.attrib if a.lower().startswith("on")]
    if dot_available():
        texts = "".join(el.text or "" for el in ET.fromstring(run_dot(dot)).iter() if el.tag.endswith("text"))
        assert "<script>alert(1)</script>" in texts


def test_hostile_text_is_escaped_in_html_views(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide_dot(monkeypatch, tmp_path)
    agent = FunctionAgent(name=HOSTILE[0], description=HOSTILE_TEXT, llm=ScriptedLLM(["x"]), system_prompt=HOSTILE[1])
    wf = AgentWorkflow([agent])
    views = [
        agent_html(agent),
        workflow_html(wf),
        event_html(ToolCallResult(tool_name=HOSTILE[0], tool_kwargs={HOSTILE[3]: HOSTILE[1]}, tool_id="x",
                                  tool_output=ToolOutput(content=HOSTILE_TEXT, tool_name=HOSTILE[0], is_error=True))),
        event_html(AgentInput(input=[ChatMessage(content=HOSTILE_TEXT)], current_agent_name=HOSTILE[2])),
        event_html(StartEvent(user_msg=HOSTILE_TEXT)),
        run_html(hostile_trace()),
    ]
    for view in views:
        assert "<script>" not in view and "<img src" not in view and "\x00" not in view and "\u202e" not in view
        assert view.count("</style>") == 1  # only our own style element
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view


# ----- displays with and without Graphviz ----------------------------------------------------


def _hide_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all


def test_draw_is_svg_with_dot_and_a_list_with_the_source_without(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wf = handoff_workflow()
    if dot_available():
        bundle = wf.draw_agents()._repr_mimebundle_()
        assert set(bundle) == {"text/plain", "image/svg+xml"} and bundle["image/svg+xml"].startswith("<svg")
        assert "<svg" in workflow_html(wf)
    _hide_dot(monkeypatch, tmp_path)
    bundle = wf.draw_agents()._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"}  # the browser draws it
    page = bundle["text/html"]
    assert "not available" in page and "<td><code>triage</code>" in page and "DOT source" in page
    steps = wf.draw()._repr_mimebundle_()["text/html"]
    assert "<td><code>aggregate_tool_results</code></td>" in steps and "digraph workflow" in steps
    html = workflow_html(wf)
    assert "<svg" not in html and "hands off to" in html


def test_dot_display_save_and_options(tmp_path: Path) -> None:
    display = Tiny().draw()
    assert Path(display.save(tmp_path / "w.dot")).read_text() == TINY_SNAPSHOT
    with pytest.raises(ValueError, match="use .dot"):
        display.save(tmp_path / "w.txt")
    if dot_available():
        assert Path(display.save(tmp_path / "w.svg")).read_bytes().lstrip().startswith(b"<")
    forced = DotDisplay(TINY_SNAPSHOT, title="t", renderer="html")._repr_mimebundle_()
    assert set(forced) == {"text/plain", "text/html"}
    assert forced == DotDisplay(TINY_SNAPSHOT, title="t", renderer="html")._repr_mimebundle_()
    assert "text/html" not in DotDisplay(TINY_SNAPSHOT, renderer="html")._repr_mimebundle_(exclude=["text/html"])


def test_draw_takes_the_graph_options_by_name_on_a_workflow_and_on_an_agent() -> None:
    """``draw``'s options are named (rankdir, max_label, wrap); those not given are the view's
    defaults; an agent draws the one-agent workflow it runs in with the same options."""
    wf = handoff_workflow()
    assert wf.draw().source == workflow_to_dot(wf)
    assert wf.draw(rankdir="LR", max_label=12, wrap=20).source == workflow_to_dot(wf, rankdir="LR", max_label=12, wrap=20)
    assert 'rankdir="LR"' in wf.draw(rankdir="LR").source
    with pytest.raises(ValueError, match="rankdir"):
        wf.draw(rankdir="sideways")
    with pytest.raises(TypeError):
        wf.draw(colour="red")  # type: ignore[call-arg]
    agent = wf.agents["weather"]
    one = agent._as_workflow()
    assert agent.draw(rankdir="BT").source == workflow_to_dot(one, rankdir="BT")
    assert agent.draw().source == workflow_to_dot(one)


def test_repr_html_of_workflow_agents_and_events() -> None:
    wf = handoff_workflow()
    assert "AgentWorkflow · 2 agents" in wf._repr_html_()
    card = wf.agents["weather"]._repr_html_()
    assert "FunctionAgent" in card and "<code>lookup</code>" in card and "any other agent" in card
    out = AgentOutput(response=ChatMessage(role=MessageRole.ASSISTANT, content="Hello"), current_agent_name="weather",
                      tool_calls=[ToolSelection(tool_id="1", tool_name="lookup", tool_kwargs={"city": "Oslo"})])
    html = out._repr_html_()
    assert "Event · AgentOutput" in html and "<code>weather</code>" in html and "lookup(city=&quot;Oslo&quot;)" in html
    assert "Workflow · Tiny" in Tiny()._repr_html_()


# ----- the live view and the answer box ------------------------------------------------------


def test_live_view_redraws_as_events_stream_and_ends_with_the_answer() -> None:
    wf = handoff_workflow([tool_call("approve", action="send")])

    async def main() -> tuple[WorkflowLiveView, list[str]]:
        view = WorkflowLiveView(wf, throttle_s=0)
        assert "run · idle" in view.source and "not called yet" in view.source
        handler = view.run("Weather?")
        await handler.wait_for_question()
        view.flush()
        waiting = view.source
        box = HumanInputBox(handler)
        assert not box.button.disabled and "Approve send?" in box.prompt.value
        box.answer("yes")
        assert box.button.disabled and box.history == [("Approve send?", "yes")]
        await handler
        return view, [waiting]

    view, (waiting,) = asyncio.run(main())
    assert "active: weather" in waiting
    assert view.in_browser  # graphviz-anywidget is installed for the tests
    assert view.widget.dot_source == view.source == run_to_dot(view.trace)
    assert "run · done" in view.source and "answer · weather" in view.source
    assert view.redraws >= 4
    bundle = view._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and bundle["text/plain"].startswith("WorkflowLiveView(AgentWorkflow")
    assert ("image/svg+xml" in bundle) == dot_available() and ("text/html" in bundle) != dot_available()
    snap = view.snapshot()._repr_mimebundle_()
    assert WIDGET_VIEW not in snap


def test_live_view_throttles_and_never_drops_the_last_change() -> None:
    wf = handoff_workflow()

    async def main() -> WorkflowLiveView:
        view = WorkflowLiveView(wf, throttle_s=10)
        handler = view.run("Weather?")
        await handler
        return view

    view = asyncio.run(main())
    assert "run · done" in view.source  # the end is drawn at once, throttle or not
    assert view.redraws <= 3


def test_live_view_shows_a_failure_and_falls_back_to_html_without_anywidget() -> None:
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=ScriptedLLM([RuntimeError("model down")]))])

    async def main() -> WorkflowLiveView:
        view = WorkflowLiveView(wf, renderer="html")
        handler = view.run("hi")
        with pytest.raises(RuntimeError):
            await handler
        return view

    view = asyncio.run(main())
    assert not view.in_browser
    assert "run · failed" in view.source and "RuntimeError: model down" in view.source
    assert "RuntimeError: model down" in view.widget.value
    with pytest.raises(ValueError, match="renderer"):
        WorkflowLiveView(wf, renderer="svg")


def test_answer_box_without_a_question_explains_instead_of_raising() -> None:
    wf = handoff_workflow()

    async def main() -> HumanInputBox:
        handler = wf.run(user_msg="Weather?")
        box = handler.input_box()
        with pytest.raises(RuntimeError, match="no question"):
            box.answer("x")
        await handler
        box._click()  # a click when nothing waits shows why, never raises
        return box

    box = asyncio.run(main())
    assert box.error is not None and "no question" in box.error
    assert "The run has ended." in box.static_html() and "no question" in box.prompt.value
    bundle = box._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and "The run has ended." in bundle["text/html"]


def test_run_trace_from_a_react_retry_and_parallel_calls() -> None:
    trace = RunTrace(["a"], "a")
    trace.add(AgentInput(input=[], current_agent_name="a"))
    trace.add(AgentOutput(response=ChatMessage(content="bad"), current_agent_name="a",
                          retry_messages=[ChatMessage(content="again")]))
    trace.add(AgentInput(input=[], current_agent_name="a"))
    calls = [ToolSelection(tool_id="call_1", tool_name="x"), ToolSelection(tool_id="call_2", tool_name="y")]
    trace.add(AgentOutput(response=ChatMessage(content=""), tool_calls=calls, current_agent_name="a"))
    assert [t.status for t in trace.turns] == ["retry", "done"] and trace.turns[1].via == "retry"
    assert [c.status for c in trace.turns[1].tool_calls] == ["queued", "queued"]
    dot = run_to_dot(trace)
    assert 't0 -> t1 [style="dashed"]' in dot and "t1 -> t1c0" in dot and "t1 -> t1c1" in dot


def test_importing_the_workflow_package_loads_no_ui_or_openai_code() -> None:
    code = (
        "import sys, nbagent.workflow, nbagent.workflow.trace;"
        "bad = [m for m in ('ipywidgets', 'graphviz', 'openai', 'IPython', 'anywidget', 'graphviz_anywidget')"
        " if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_resumed_run_is_drawn_from_a_placeholder_step_with_its_question() -> None:
    import json

    wf = handoff_workflow([tool_call("approve", action="send")])

    async def main() -> WorkflowLiveView:
        handler = wf.run(user_msg="Weather?")
        await handler.wait_for_question()
        saved = json.dumps(handler.ctx.to_dict())
        await handler.cancel_run()
        view = WorkflowLiveView(wf, throttle_s=0)
        handler = view.run(ctx=Context.from_dict(wf, json.loads(saved)))
        assert handler.resumed
        await handler.wait_for_question()
        handler.respond("yes")  # answered before the interrupted tool call runs again
        await handler
        return view

    view = asyncio.run(main())
    first = view.trace.turns[0]
    assert first.text == "(resumed from a checkpoint)" and first.agent == "weather"
    call = first.tool_calls[0]
    assert (call.tool_name, call.question, call.answer, call.status) == ("approve", "Approve send?", "yes", "done")
    assert "user: Weather?" in view.source and "asks: Approve send?" in view.source and "person: yes" in view.source


def test_answer_box_of_a_cancelled_run_no_longer_looks_live() -> None:
    """Cancelled while asking: the question is kept for a resume, but this box takes no answer."""
    wf = handoff_workflow([tool_call("approve", action="send")])

    async def main() -> HumanInputBox:
        handler = wf.run(user_msg="Weather?")
        await handler.wait_for_question()
        box = HumanInputBox(handler)
        assert not box.button.disabled and not box.text.disabled
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledError):
            await handler
        assert handler.pending_questions  # still there for run(ctx=...)
        return box

    box = asyncio.run(main())
    assert box.question is None and box.button.disabled and box.text.disabled
    assert "stopped before this question was answered (Approve send?)" in box.prompt.value
    assert "nbagent-q" not in box.prompt.value and "Answer it with" not in box.static_html()
    with pytest.raises(RuntimeError, match="no question"):
        box.answer("yes")
