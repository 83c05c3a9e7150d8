"""task_to_dot: exact snapshots, every step status, collapse, determinism and hostile text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    BaseAgentWorker,
    FnAgentWorker,
    StepStatus,
    Task,
    TaskStep,
    TaskStepOutput,
    TokenUsage,
    ToolOutput,
    seed_ids,
)
from nbagent.runner.state import TaskState
from nbagent.viz.dot import STATUS_COLORS, node_names, status_summary, step_numbers, task_to_dot

# ----- shared helpers (also imported by test_viz_html / test_viz_graph) ----------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "</style>",
    '"]; evil [label="',
    "trailing backslash \\",
    "{}|<>",
    "line1\nline2\r\nline3",
    "&lt;already escaped&gt; &amp;",
    "ctrl\x00\x01\x1b[31m\x7f\x85 end",
    "bidi \u202eevil\u202c and surrogate \ud800 x",
    "unicode é 中文 🙂",
    "'single' quotes",
]
HOSTILE_TEXT = " | ".join(HOSTILE)


class PlanWorker(BaseAgentWorker):
    """Runs a fixed plan: entry i describes step i, or is an exception that step raises.

    An entry is a dict with optional keys ``out``, ``thought``, ``tools`` (ToolOutputs),
    ``usage`` ((prompt, completion)), ``last`` (bool) and ``fanout`` (number of next steps).
    """

    def __init__(self, plan: list[Any]) -> None:
        self.plan = plan

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        task.extra_state["i"] = 0
        return TaskStep(task_id=task.task_id, input=task.input)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        i = task.extra_state["i"]
        task.extra_state["i"] = i + 1
        spec = self.plan[i]
        if isinstance(spec, BaseException):
            raise spec
        last = bool(spec.get("last", False))
        usage = spec.get("usage")
        return TaskStepOutput(
            output=AgentChatResponse(response=spec.get("out", "")) if last else spec.get("out"),
            task_step=step,
            next_steps=[] if last else [step.get_next_step() for _ in range(spec.get("fanout", 1))],
            is_last=last,
            reasoning=spec.get("thought"),
            tool_outputs=list(spec.get("tools", [])),
            usage=TokenUsage(prompt_tokens=usage[0], completion_tokens=usage[1]) if usage else None,
        )


def fix_latency(state: TaskState, value: float = 0.25) -> None:
    """Latencies are measured; pin them so snapshots are exact."""
    for out in [*state.outputs.values(), *state.undone_outputs]:
        out.latency_s = value


def run_plan(plan: list[Any], steps: int, input: str = "What is 1+2?", seed: int = 0) -> tuple[AgentRunner, Task]:
    seed_ids(seed)
    runner = AgentRunner(PlanWorker(plan))
    task = runner.create_task(input)
    for _ in range(steps):
        runner.run_step(task)
    fix_latency(runner.state_of(task))
    return runner, task


def hostile_state() -> tuple[AgentRunner, Task]:
    """Hostile text in the task input, model output, reasoning, tool names/args/outputs and errors."""
    tools = [
        ToolOutput(content=HOSTILE_TEXT, tool_name=HOSTILE[0], raw_input={HOSTILE[3]: HOSTILE[1]}),
        ToolOutput(content=HOSTILE[2] + HOSTILE[4], tool_name=HOSTILE[3], raw_input={}, is_error=True),
    ]
    plan: list[Any] = [
        {"out": HOSTILE_TEXT, "thought": HOSTILE[1] + HOSTILE[4], "tools": tools},
        {"out": HOSTILE[5], "tools": [ToolOutput(content=HOSTILE[6], tool_name="{}|<>\\", raw_input={"x": HOSTILE[0]})]},
        ValueError(HOSTILE_TEXT),
    ]
    seed_ids(1)
    runner = AgentRunner(PlanWorker(plan))
    task = runner.create_task(HOSTILE_TEXT)
    runner.run_step(task)
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    state = runner.state_of(task)
    # a step with a hostile id and input, linked by hand (blocked: its previous step is not done)
    queued = state.step_queue[0]
    odd = TaskStep(task_id=task.task_id, step_id='"]; x [label="<b>', input=HOSTILE[2] + HOSTILE[4])
    queued.link_step(odd)
    state.register(odd)
    state.step_queue.append(odd)
    fix_latency(state)
    return runner, task


_ALLOWED_TAG = re.compile(
    r'<B>|</B>|<I>|</I>|<BR ALIGN="LEFT"/>|<FONT COLOR="#[0-9a-f]{6}">|</FONT>'
    r'|<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded">'
    r'<TR><TD ALIGN="LEFT" BALIGN="LEFT">|</TD></TR></TABLE>'
)
_LABEL = re.compile(r"label=<([^<>]*)>")
_ATTR = r'[a-z]+=(?:"[^"\\\n]*"|<>)'
_LINE_PATTERNS = [
    re.compile(r"digraph task \{"),
    re.compile(r"  subgraph cluster_legend \{"),
    re.compile(r'    label="legend"; fontsize="9"; color="#[0-9a-f]{6}"; style="rounded,filled"; fillcolor="#[0-9a-f]{6}"; '
               r'fontcolor="#[0-9a-f]{6}";'),
    re.compile(rf"    legend_[a-z]+ \[{_ATTR}(, {_ATTR})*\];"),
    re.compile(r'    \{ rank="same"; legend_[a-z]+( -> legend_[a-z]+)* \[style="invis"\]; \}'),
    re.compile(r"  \}"),
    re.compile(rf"  (graph|node|edge) \[{_ATTR}(, {_ATTR})*\];"),
    re.compile(rf"  [sc]\d+ \[{_ATTR}(, {_ATTR})*\];"),
    re.compile(rf"  [sc]\d+ -> [sc]\d+( \[{_ATTR}(, {_ATTR})*\])?;"),
    re.compile(r"\}"),
]


def assert_dot_structure(dot: str) -> list[str]:
    """Every line is one we generate; label text holds only our tags; returns the label texts."""
    stripped = _ALLOWED_TAG.sub("", dot.replace('<BR ALIGN="LEFT"/>', " "))
    labels = _LABEL.findall(stripped)
    skeleton = _LABEL.sub("label=<>", stripped)
    for line in skeleton.splitlines():
        assert any(p.fullmatch(line) for p in _LINE_PATTERNS), f"unexpected DOT line: {line!r}"
    for text in labels:
        assert '"' not in text and "\\n" not in text, text
        assert not re.search(r"&(?!(amp|lt|gt|quot|#x27);)", text), f"raw & in label: {text!r}"
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\ud800-\udfff]", text), text
    return labels


def node_count(dot: str) -> int:
    return len(re.findall(r"^  [scu]\d+ \[", dot, flags=re.M))


# graphviz-pure sizes text from built-in font metrics, like Graphviz without Pango, and says so
# for non-ASCII characters: a size estimate, not a problem with the label
_WIDTH_ESTIMATE = re.compile(r"^Warning: (Warning: )?no value for width of non-ASCII character \d+\..*$", re.M)


def run_dot(source: str) -> str:
    """Render with graphviz-pure (what nbagent uses) and, when installed, the system ``dot``;
    fail on any warning (a bad HTML label only warns). Returns graphviz-pure's SVG."""
    from nbagent.viz.graph import pure_dot

    programs = [p for p in (pure_dot(), shutil.which("dot")) if p]
    assert programs, "neither graphviz-pure nor Graphviz's dot is installed"
    svgs = []
    for program in programs:
        proc = subprocess.run([program, "-Tsvg"], input=source.encode(), capture_output=True, timeout=60)
        stderr = _WIDTH_ESTIMATE.sub("", proc.stderr.decode("utf-8", "replace"))
        assert proc.returncode == 0, stderr
        assert "Warning" not in stderr and "Error" not in stderr, (program, stderr)
        svgs.append(proc.stdout.decode("utf-8"))
    return svgs[0]


def dot_available() -> bool:
    """True when a ``dot`` program draws (graphviz-pure, a dependency, or the system one);
    with REQUIRE_DOT=1 a missing one is a failure."""
    from nbagent.viz.graph import find_dot

    if find_dot():
        return True
    if os.environ.get("REQUIRE_DOT") == "1":
        pytest.fail("REQUIRE_DOT=1 but no Graphviz 'dot' program was found (pip install graphviz-pure)")
    return False


# ----- snapshots -----------------------------------------------------------------------------

LINEAR_PLAN: list[Any] = [
    {
        "thought": "I should add",
        "tools": [ToolOutput(content="3", tool_name="add", raw_input={"a": 1, "b": 2})],
        "out": "3",
        "usage": (10, 5),
    },
    {
        "tools": [ToolOutput(content="Error: division by zero", tool_name="div", raw_input={"a": 1, "b": 0}, is_error=True)],
        "out": "oops",
    },
    {"out": "The answer is 3.", "last": True, "usage": (20, 4)},
]

LINEAR_SNAPSHOT = """\
digraph task {
  graph [rankdir="TB", bgcolor="transparent", pad="0.1", fontname="Helvetica", fontsize="11", fontcolor="#374151", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.35", label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT"><B>task e3e70682 · completed</B><BR ALIGN="LEFT"/>input: What is 1+2?<BR ALIGN="LEFT"/><I>3 done</I><BR ALIGN="LEFT"/></TD></TR></TABLE>>];
  node [shape="box", fontname="Helvetica", fontsize="10", margin="0.12,0.06"];
  edge [color="#6b7280", arrowsize="0.7"];
  s0 [label=<<B>#1 done · f728b4fa</B><BR ALIGN="LEFT"/>in: What is 1+2?<BR ALIGN="LEFT"/>thought: I should add<BR ALIGN="LEFT"/>call: add(a=1, b=2)<BR ALIGN="LEFT"/>obs: 3<BR ALIGN="LEFT"/>out: 3<BR ALIGN="LEFT"/><I>0.25 s · 15 tok</I><BR ALIGN="LEFT"/>>, fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16", style="rounded,filled"];
  s1 [label=<<B>#2 done · eb1167b3</B><BR ALIGN="LEFT"/>call: div(a=1, b=0)<BR ALIGN="LEFT"/><FONT COLOR="#991b1b">obs (error): Error: division by zero</FONT><BR ALIGN="LEFT"/>out: oops<BR ALIGN="LEFT"/><I>0.25 s</I><BR ALIGN="LEFT"/>>, fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16", style="rounded,filled"];
  s2 [label=<<B>#3 done · answer · f7c1bd87</B><BR ALIGN="LEFT"/><B>answer: The answer is 3.</B><BR ALIGN="LEFT"/><I>0.25 s · 24 tok</I><BR ALIGN="LEFT"/>>, fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16", style="rounded,filled", peripheries="2"];
  s0 -> s1;
  s1 -> s2;
}
"""

BRANCHY_SNAPSHOT = """\
digraph task {
  graph [rankdir="LR", bgcolor="transparent", pad="0.1", fontname="Helvetica", fontsize="11", fontcolor="#374151", labelloc="t", labeljust="l", nodesep="0.3", ranksep="0.35", label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="5" BGCOLOR="#f8fafc" STYLE="rounded"><TR><TD ALIGN="LEFT" BALIGN="LEFT"><B>task e3e70682 · failed</B><BR ALIGN="LEFT"/>input: go<BR ALIGN="LEFT"/><I>1 queued, 1 done, 1 failed, 1 undone</I><BR ALIGN="LEFT"/></TD></TR></TABLE>>];
  node [shape="box", fontname="Helvetica", fontsize="10", margin="0.12,0.06"];
  edge [color="#6b7280", arrowsize="0.7"];
  s0 [label=<<B>#1 done · f728b4fa</B><BR ALIGN="LEFT"/>in: go<BR ALIGN="LEFT"/>out: a<BR ALIGN="LEFT"/><I>0.25 s</I><BR ALIGN="LEFT"/>>, fillcolor="#dcfce7", color="#15803d", fontcolor="#052e16", style="rounded,filled"];
  s1 [label=<<B>#2 failed · eb1167b3</B><BR ALIGN="LEFT"/><FONT COLOR="#991b1b">error: RuntimeError: model down</FONT><BR ALIGN="LEFT"/><I>ran before; its undone run is dashed</I><BR ALIGN="LEFT"/>>, fillcolor="#fee2e2", color="#b91c1c", fontcolor="#450a0a", style="rounded,filled,bold"];
  s2 [label=<<B>#3 queued · f7c1bd87</B><BR ALIGN="LEFT"/>>, fillcolor="#f1f5f9", color="#64748b", fontcolor="#1e293b", style="rounded,filled"];
  s3 [label=<<B>#3 undone · never ran · e443df78</B><BR ALIGN="LEFT"/>>, fillcolor="#f3f4f6", color="#6b7280", fontcolor="#374151", style="rounded,filled,dashed"];
  u0 [label=<<B>#2 undone run · eb1167b3</B><BR ALIGN="LEFT"/>out: b<BR ALIGN="LEFT"/><I>0.25 s</I><BR ALIGN="LEFT"/>>, fillcolor="#f3f4f6", color="#6b7280", fontcolor="#374151", style="rounded,filled,dashed"];
  s0 -> s1;
  s0 -> s2;
  s0 -> u0 [style="dashed", color="#6b7280"];
  u0 -> s3 [style="dashed", color="#6b7280"];
}
"""


def test_snapshot_linear_run_with_tools_error_and_answer() -> None:
    runner, task = run_plan([dict(p) for p in LINEAR_PLAN], steps=3)
    assert task_to_dot(runner.state_of(task)) == LINEAR_SNAPSHOT


def test_snapshot_fanout_failure_and_undo() -> None:
    # step 1 fans out to two steps; step 2 runs, is undone (its next step greyed), then fails;
    # step 3 waits in the queue
    plan: list[Any] = [{"out": "a", "fanout": 2}, {"out": "b"}]
    runner, task = run_plan(plan, steps=2, input="go")
    runner.undo_step(task)
    plan[1] = RuntimeError("model down")
    with pytest.raises(RuntimeError):
        runner.run_step(task)
    state = runner.state_of(task)
    fix_latency(state)
    assert task_to_dot(state, rankdir="LR") == BRANCHY_SNAPSHOT


# ----- statuses ------------------------------------------------------------------------------


def _node_line(dot: str, name: str) -> str:
    return next(line for line in dot.splitlines() if line.startswith(f"  {name} ["))


def _fill(status: StepStatus) -> str:
    return f'fillcolor="{STATUS_COLORS[status][0]}"'


def test_queued_step_of_a_new_task() -> None:
    runner, task = run_plan([{"out": "x"}], steps=0, input="hello")
    dot = task_to_dot(runner.state_of(task))
    line = _node_line(dot, "s0")
    assert "#1 queued" in line and "in: hello" in line and _fill(StepStatus.QUEUED) in line
    assert status_summary(runner.state_of(task)) == {
        "queued": 1, "awaiting approval": 0, "held": 0, "blocked": 0, "running": 0, "done": 0, "failed": 0, "undone": 0,
    }


def test_blocked_step_linked_after_a_step_not_done() -> None:
    runner, task = run_plan([{"out": "x"}], steps=0)
    state = runner.state_of(task)
    first = state.step_queue[0]
    later = TaskStep(task_id=task.task_id, input="later")
    first.link_step(later)
    state.register(later)
    state.step_queue.append(later)
    dot = task_to_dot(state)
    line = _node_line(dot, "s1")
    assert "#2 blocked" in line and "in: later" in line
    assert _fill(StepStatus.BLOCKED) in line and 'style="rounded,filled,dotted"' in line
    assert "  s0 -> s1;" in dot
    assert status_summary(state)["blocked"] == 1


def test_running_step() -> None:
    runner, task = run_plan([{"out": "x"}], steps=0)
    state = runner.state_of(task)
    state.running.add(state.step_queue[0].step_id)
    line = _node_line(task_to_dot(state), "s0")
    assert "#1 running" in line and _fill(StepStatus.RUNNING) in line and "bold" in line
    assert "task e3e70682 · running" in task_to_dot(state)


def test_failed_step_is_red_with_error_and_attempt() -> None:
    plan: list[Any] = [{"out": "a"}, KeyError("missing 'k'")]
    runner, task = run_plan(plan, steps=1)
    for _ in range(2):
        with pytest.raises(KeyError):
            runner.run_step(task)
    line = _node_line(task_to_dot(runner.state_of(task)), "s1")
    assert "#2 failed" in line and _fill(StepStatus.FAILED) in line
    assert "error: KeyError: &quot;missing &#x27;k&#x27;&quot;" in line
    assert "attempt 2" in line
    # once it succeeds, it is done and remembers the failures
    runner.agent_worker.plan[1] = {"out": "ok", "last": True}  # type: ignore[attr-defined]
    runner.run_step(task)
    line = _node_line(task_to_dot(runner.state_of(task)), "s1")
    assert "#2 done · answer" in line and "failed 2× before (KeyError)" in line


def test_undone_step_and_edge_are_kept_grey_and_dashed() -> None:
    seed_ids(0)
    runner = AgentRunner(FnAgentWorker(lambda s: (f"out {s['step']}", s["step"] >= 3)))
    task = runner.create_task("count")
    runner.run_step(task)
    runner.run_step(task)
    runner.undo_step(task)
    state = runner.state_of(task)
    dot = task_to_dot(state)
    names = node_names(state)
    undone_id = state.undone_edges[0][1]
    assert state.step_status(undone_id) == StepStatus.UNDONE
    n = names[undone_id]
    # the run that was taken back is its own dashed node, with what it said, under step #1
    ghost = _node_line(dot, "u0")
    assert "#2 undone run" in ghost and "out: out 1" in ghost and "dashed" in ghost
    assert _fill(StepStatus.UNDONE) in ghost
    assert '  s0 -> u0 [style="dashed", color="#6b7280"];' in dot
    # the step it had queued never ran: cut, dashed, hanging under the undone run
    assert "#3 undone · never ran" in _node_line(dot, n) and "dashed" in _node_line(dot, n)
    assert f'  u0 -> {n} [style="dashed", color="#6b7280"];' in dot
    assert "#2 queued" in _node_line(dot, "s1")
    assert "ran before; its undone run is dashed" in _node_line(dot, "s1")  # queued, not "undone"
    # re-running forks: a new live edge, the undone branch stays, numbering does not shift
    runner.run_step(task)
    dot = task_to_dot(state)
    assert f'  u0 -> {n} [style="dashed", color="#6b7280"];' in dot
    assert "  s1 -> s3;" in dot and node_count(dot) == 5
    assert "ran again; its undone run is dashed" in _node_line(dot, "s1")
    assert "#3 queued" in _node_line(dot, "s3")


def test_undo_twice_draws_both_runs_as_a_dashed_branch_with_their_content() -> None:
    # the Fahrenheit mistake of notebook 02: thought, call and observation stay visible
    plan: list[Any] = [
        {"out": "a"},
        {"thought": "convert to Fahrenheit", "tools": [ToolOutput(
            content="77", tool_name="c_to_f", raw_input={"c": 25}, raw_output=77)], "out": "77 F"},
        {"out": "done", "last": True},
    ]
    runner, task = run_plan(plan, steps=3)
    runner.undo_step(task)  # the answer
    runner.undo_step(task)  # the Fahrenheit step
    state = runner.state_of(task)
    dot = task_to_dot(state)
    first, second = _node_line(dot, "u0"), _node_line(dot, "u1")
    assert "#3 undone run" in first and "answer: done" in first
    assert "#2 undone run" in second and "thought: convert to Fahrenheit" in second
    assert "call: c_to_f(c=25)" in second and "obs: 77" in second
    # #2's undone run hangs under #1, #3's undone run under #2's undone run
    assert '  s0 -> u1 [style="dashed"' in dot and '  u1 -> u0 [style="dashed"' in dot
    assert "  s2 [" not in dot  # the cut step that ran is drawn as its undone run only
    assert list(step_numbers(state).values()) == [1, 2, 3]
    # the same mistake twice: two numbered runs of #2
    runner.agent_worker.plan[1] = {"out": "again"}  # type: ignore[attr-defined]
    runner.run_step(task)
    runner.undo_step(task)
    dot = task_to_dot(state)
    assert "#2 undone run 1/2" in dot and "#2 undone run 2/2" in dot
    assert "out: again" in _node_line(dot, "u2")


def test_an_undone_run_shows_the_input_it_ran_with_even_after_an_undo_with_new_input(tmp_path: Any) -> None:
    """Notebook 02's Fahrenheit step: undone with new input, its dashed run still shows the
    input it had; the step, queued again, shows the new one (live and static DOT alike)."""
    plan: list[Any] = [{"out": "a"}, {"out": "77 F"}, {"out": "done", "last": True}]
    runner, task = run_plan(plan, steps=1)
    runner.run_step(task, input="Please give me Fahrenheit.")
    live = runner.live_graph(task)
    runner.undo_step(task, input="Actually, keep Celsius.")
    state = runner.state_of(task)
    live.flush()
    for dot in (task_to_dot(state), live.source):
        ghost = _node_line(dot, "u0")
        assert "#2 undone run" in ghost and "in: Please give me Fahrenheit." in ghost and "Celsius" not in ghost
        assert "#2 queued" in _node_line(dot, "s1") and "in: Actually, keep Celsius." in _node_line(dot, "s1")
    undone = state.undone_outputs[0]
    assert undone.input == "Please give me Fahrenheit." and undone.task_step.input == "Actually, keep Celsius."
    # kept in a run file and in a run store too
    for path in (tmp_path / "run.json", tmp_path / "runs.db"):
        runner.save(path)
        loaded = AgentRunner.load(path, runner.agent_worker)
        assert task_to_dot(loaded.state_of(task.task_id)) == task_to_dot(state)


def test_answer_node_is_marked() -> None:
    runner, task = run_plan([{"out": "x"}, {"out": "final words", "last": True}], steps=2)
    dot = task_to_dot(runner.state_of(task))
    line = _node_line(dot, "s1")
    assert 'peripheries="2"' in line and "answer: final words" in line and "· answer ·" in line
    assert 'peripheries="2"' not in _node_line(dot, "s0")


# ----- collapse, limits, determinism ---------------------------------------------------------


def _long_run(n: int, plan: list[Any] | None = None) -> TaskState:
    seed_ids(0)
    plan = plan or [{"out": f"o{i}", "usage": (1, 1)} for i in range(n - 1)] + [{"out": "end", "last": True}]
    runner = AgentRunner(PlanWorker(plan))
    task = runner.create_task("long")
    for _ in range(n):
        runner.run_step(task)
    state = runner.state_of(task)
    fix_latency(state, 0.01)
    return state


def test_500_steps_collapse_into_a_readable_graph() -> None:
    state = _long_run(500)
    dot = task_to_dot(state)
    assert node_count(dot) == 4 + 1 + 4  # first 4, one collapsed run, last 4
    assert "… 492 steps …" in dot and "#5–#496" in dot and "4.92 s · 984 tok" in dot
    assert "  s3 -> c0;" in dot and "  c0 -> s496;" in dot
    assert "answer: end" in _node_line(dot, "s499")
    assert_dot_structure(dot)
    assert node_count(task_to_dot(state, collapse_after=None)) == 500
    assert node_count(task_to_dot(state, collapse_after=1000)) == 500
    assert node_count(task_to_dot(state, keep_ends=1)) == 3


def test_collapse_keeps_interesting_steps_visible() -> None:
    plan: list[Any] = [{"out": f"o{i}"} for i in range(59)] + [{"out": "end", "last": True}]
    plan[30] = {"out": "bad", "tools": [ToolOutput(content="Error: x", tool_name="t", is_error=True)]}
    dot = task_to_dot(_long_run(60, plan))
    assert "obs (error): Error: x" in _node_line(dot, "s30")
    assert "… 26 steps …" in dot and "… 25 steps …" in dot  # #5-#30 and #32-#56
    assert node_count(dot) == 4 + 1 + 1 + 1 + 4
    assert "  c0 -> s30;" in dot and "  s30 -> c1;" in dot


def test_same_state_same_text_and_same_run_same_text() -> None:
    r1, t1 = run_plan([dict(p) for p in LINEAR_PLAN], steps=3)
    r2, t2 = run_plan([dict(p) for p in LINEAR_PLAN], steps=3)
    s1 = r1.state_of(t1)
    assert task_to_dot(s1) == task_to_dot(s1)
    assert task_to_dot(s1) == task_to_dot(r2.state_of(t2))
    big = _long_run(100)
    assert task_to_dot(big) == task_to_dot(big)


def test_long_text_is_truncated_with_an_ellipsis_and_wrapped() -> None:
    long = "word " * 100
    runner, task = run_plan([{"out": "x" * 500, "last": True}], steps=1, input=long)
    state = runner.state_of(task)
    dot = task_to_dot(state, max_label=30)
    assert "answer: " + "x" * 29 + "…</B>" in dot and "x" * 30 not in dot  # the value is capped
    label = _node_line(dot, "s0").split("label=<", 1)[1].split(">, ", 1)[0]
    pieces = re.sub("<[^>]*>", "\n", label).splitlines()
    assert max(len(piece) for piece in pieces) <= 44  # the default wrap width
    assert "in: word word word word word word…<BR" in label
    assert len(task_to_dot(state, max_label=200)) > len(dot)


def test_bad_options_are_clear_errors() -> None:
    runner, task = run_plan([{"out": "x"}], steps=0)
    state = runner.state_of(task)
    with pytest.raises(ValueError, match="rankdir must be one of"):
        task_to_dot(state, rankdir="sideways")
    with pytest.raises(ValueError, match="max_label"):
        task_to_dot(state, max_label=2)
    with pytest.raises(ValueError, match="collapse_after"):
        task_to_dot(state, collapse_after=0)


def test_legend_lists_every_status() -> None:
    runner, task = run_plan([{"out": "x"}], steps=0)
    dot = task_to_dot(runner.state_of(task), legend=True)
    for status in StepStatus:
        assert f"legend_{status.name.lower()} [" in dot


def test_odd_state_still_draws() -> None:
    # a link to a step missing from the registry, an undone edge to an unknown id, a weird output
    runner, task = run_plan([{"out": "x"}], steps=1)
    state = runner.state_of(task)
    ghost = TaskStep(task_id=task.task_id, step_id="ghost", input="not registered")
    state.steps[next(iter(state.steps))].link_step(ghost)
    state.undone_edges.append(("nowhere", "ghost"))

    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    next(iter(state.outputs.values())).output = Weird()
    dot = task_to_dot(state)
    assert "ghost" in dot and "nowhere" in dot and "unprintable Weird" in dot
    assert_dot_structure(dot)


# ----- hostile text --------------------------------------------------------------------------


def test_hostile_text_is_inert_in_dot() -> None:
    runner, task = hostile_state()
    dot = task_to_dot(runner.state_of(task), max_label=400)
    labels = assert_dot_structure(dot)
    joined = "\n".join(labels)
    for raw in ("<script", "<img", "</style", '"]; evil', "\x00", "\x1b", "\u202e", "\ud800"):
        assert raw not in dot
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in joined
    assert "&lt;img src=x onerror=alert(1)&gt;" in joined
    assert "&quot;]; evil [label=&quot;" in joined
    assert "&amp;lt;already escaped&amp;gt; &amp;amp;" in joined
    assert "trailing backslash \\" in joined and "{}|&lt;&gt;" in joined
    assert "unicode é 中文 🙂" in joined and "&#x27;single&#x27;" in joined
    assert "call: &lt;script&gt;alert(1)&lt;/script&gt;(&quot;]; evil" in joined  # tool name and args
    assert "#4 blocked · &quot;]; x [l" in joined  # a hostile step id is only ever label text


def test_hostile_dot_renders_with_graphviz_and_stays_text() -> None:
    runner, task = hostile_state()
    dot = task_to_dot(runner.state_of(task), max_label=400, legend=True)
    assert_dot_structure(dot)
    if not dot_available():
        return  # the string-level checks above and in test_hostile_text_is_inert_in_dot still ran
    svg = run_dot(dot)
    root = ET.fromstring(svg)  # well-formed XML
    tags = {el.tag.split("}")[-1] for el in root.iter()}
    assert tags <= {"svg", "g", "title", "polygon", "path", "text", "ellipse", "polyline"}, tags
    assert "<script" not in svg and "<img" not in svg
    assert not [a for el in root.iter() for a in el.attrib if a.lower().startswith("on")]
    texts = "".join(el.text or "" for el in root.iter() if el.tag.endswith("text"))
    assert "<script>alert(1)</script>" in texts and '"]; evil [label="' in texts
    assert "trailing backslash \\" in texts and "{}|<>" in texts


def test_every_snapshot_renders_with_graphviz() -> None:
    if not dot_available():
        assert_dot_structure(LINEAR_SNAPSHOT)
        assert_dot_structure(BRANCHY_SNAPSHOT)
        return
    for source in (LINEAR_SNAPSHOT, BRANCHY_SNAPSHOT, task_to_dot(_long_run(120), legend=True)):
        svg = run_dot(source)
        assert svg.count('class="node"') >= 3
