"""Property-based tests (hypothesis) of what models, tools and people write: the ReAct parser,
the plan parser, tool-argument parsing and the DOT renderer.

Bounded for CI: a fixed number of examples each (``derandomize``: the same examples on every
run, so a failure reproduces), no deadline (the machine is shared). The examples run are
counted and printed at the end of the module.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent import FunctionTool, ToolSelection
from nbagent.llms.openai import parse_arguments
from nbagent.tools import acall_tool
from nbagent.workers.planner_parser import PlanError, parse_plan
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ResponseReasoningStep,
    unfence,
)

EXAMPLES: Counter[str] = Counter()
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
FEW = settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

# any text, surrogates and control characters included
anything = st.text(st.characters(blacklist_categories=()), max_size=300)
# text made of the pieces the parsers care about, so examples hit their branches
PIECES = [
    "Thought:", "Action:", "Action Input:", "Answer:", "Final Answer:", "Observation:", "**", "__",
    "```", "```json", "\n", " ", "\t", "{", "}", "[", "]", "(", ")", "'", '"', "\\", ",", ":", "$1",
    "$2", "${3}", "None", "null", "true", "add", "search", "join()", "1.", "2)", "3:", "-", "=",
    "a=1", "b=$1", "x", "é", "\u202e", "\x00",
]
pieces = st.lists(st.sampled_from(PIECES) | st.text(string.printable, max_size=5), max_size=60).map("".join)
text = st.one_of(anything, pieces)


# ----- the ReAct parser ---------------------------------------------------------------------------


@FUZZ
@given(text)
def test_react_parse_returns_a_step_or_a_react_parse_error(reply: str) -> None:
    EXAMPLES["ReAct parse"] += 1
    try:
        step = ReActOutputParser().parse(reply)
    except ReActParseError as err:
        assert str(err)
        return
    assert isinstance(step, (ActionReasoningStep, ResponseReasoningStep))
    if isinstance(step, ActionReasoningStep):
        assert step.action and isinstance(step.action_input, dict)
    else:
        assert step.response.strip()


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8
)
thoughts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=80).filter(
    lambda t: ":" not in t and "`" not in t
)


@FUZZ
@given(thoughts, names, st.dictionaries(st.text(max_size=10), json_values, max_size=4))
def test_react_a_written_action_parses_back(thought: str, name: str, args: dict[str, Any]) -> None:
    """What the formatter shows the model as its own action reads back as the same action."""
    EXAMPLES["ReAct round trip"] += 1
    step = ActionReasoningStep(thought=thought.strip(), action=name, action_input=args)
    parsed = ReActOutputParser().parse(step.content)
    assert isinstance(parsed, ActionReasoningStep)
    assert parsed.action == name and parsed.action_input == args


@FUZZ
@given(text, st.lists(st.integers(1, 9), min_size=1, max_size=30))
def test_react_stream_scanner_agrees_with_the_whole_text_rules(reply: str, cuts: list[int]) -> None:
    """Fed in any chunks, the linear scanner finds the same answer start as find_answer on
    the whole reply (unless an Action line came first)."""
    EXAMPLES["ReAct stream scanner"] += 1
    p = ReActOutputParser()
    scan = p.stream_scanner()
    pos = 0
    found = None
    i = 0
    while pos < len(reply) and found is None and not scan.is_action:
        n = cuts[i % len(cuts)]
        found = scan.feed(reply[pos : pos + n])
        pos += n
        i += 1
    seen = reply[: max(pos, 0)]
    if scan.is_action:
        assert p.has_action(seen)
        return
    want = p.find_answer(seen)
    if found is None:
        assert want is None or p.has_action(seen[: want[0]])
    else:
        assert want is not None and found[0] == want[0]


@FEW
@given(st.text(" \t\n`", max_size=5000))
def test_unfence_never_backtracks(blanks: str) -> None:
    EXAMPLES["unfence"] += 1
    unfence("```\n" + blanks + "x")
    unfence("```" + blanks + "```")


# ----- the plan parser ----------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def search(query: str) -> str:
    """Search."""
    return query


TOOLS = {"add": FunctionTool.from_defaults(add), "search": FunctionTool.from_defaults(search)}


@FUZZ
@given(text)
def test_any_plan_text_is_a_plan_or_a_plan_error(reply: str) -> None:
    EXAMPLES["plan parse"] += 1
    try:
        plan = parse_plan(reply, TOOLS)
    except PlanError as err:
        assert str(err)
        return
    for call in plan.calls:
        assert call.tool in TOOLS
        assert all(d in {c.index for c in plan.calls} for d in call.deps)


@st.composite
def plans(draw: Any) -> tuple[str, list[tuple[int, str, dict[str, Any], tuple[int, ...]]]]:
    n = draw(st.integers(1, 8))
    calls = []
    lines = []
    for i in range(1, n + 1):
        if draw(st.booleans()):
            query = draw(st.text(string.ascii_letters + " $", max_size=12))
            lines.append(f"{i}. search(query={json.dumps(query)})")
            calls.append((i, "search", {"query": query}, ()))
        else:
            args: dict[str, Any] = {}
            deps = []
            for name in ("a", "b"):
                if i > 1 and draw(st.booleans()):
                    ref = draw(st.integers(1, i - 1))
                    args[name] = {"$ref": ref}
                    deps.append(ref)
                else:
                    args[name] = draw(st.integers(-1000, 1000))
            shown = ", ".join(f"{k}=${v['$ref']}" if isinstance(v, dict) else f"{k}={v}" for k, v in args.items())
            lines.append(f"{i}. add({shown})")
            calls.append((i, "add", args, tuple(sorted(set(deps)))))
    lines.append(f"{n + 1}. join()")
    return "\n".join(lines), calls


@FUZZ
@given(plans())
def test_a_written_plan_parses_to_its_calls(case: tuple[str, list[Any]]) -> None:
    EXAMPLES["plan round trip"] += 1
    source, calls = case
    plan = parse_plan(source, TOOLS)
    assert [(c.index, c.tool, c.args, c.deps) for c in plan.calls] == calls
    assert plan.joined


# ----- tool arguments -----------------------------------------------------------------------------


@FUZZ
@given(text | st.builds(json.dumps, json_values))
def test_any_argument_text_becomes_a_tool_output_never_an_exception(raw: str) -> None:
    EXAMPLES["tool arguments"] += 1
    kwargs = parse_arguments(raw)
    assert isinstance(kwargs, dict)
    out = asyncio.run(acall_tool(TOOLS, ToolSelection(tool_id="c", tool_name="add", tool_kwargs=kwargs)))
    if out.is_error:
        assert "__raw_arguments__" not in out.content
        assert "add" in out.content
    else:
        assert out.content == str(kwargs["a"] + kwargs["b"])


@FUZZ
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=4))
def test_any_argument_object_is_validated_or_explained(kwargs: dict[str, Any]) -> None:
    EXAMPLES["tool argument objects"] += 1
    out = asyncio.run(acall_tool(TOOLS, ToolSelection(tool_id="c", tool_name="add", tool_kwargs=kwargs)))
    if out.is_error:
        assert "invalid arguments for tool 'add'" in out.content and "Expected arguments" in out.content
    else:
        assert set(kwargs) == {"a", "b"}


# ----- the DOT renderer ---------------------------------------------------------------------------


@FEW
@given(st.lists(anything, min_size=6, max_size=6))
def test_any_text_in_a_task_renders_as_inert_dot(texts: list[str]) -> None:
    """Hostile text anywhere a model, tool or person writes: the DOT stays well formed (every
    label an HTML-like label of escaped text) and graphviz itself renders it."""
    from nbagent import AgentRunner, TaskStep, ToolOutput
    from nbagent.viz.dot import task_to_dot
    from tests.test_viz_dot import PlanWorker, assert_dot_structure, dot_available, run_dot

    EXAMPLES["DOT render"] += 1
    tools = [ToolOutput(content=texts[0], tool_name=texts[1] or "t", raw_input={texts[2]: texts[3]})]
    plan: list[Any] = [{"out": texts[4], "thought": texts[5], "tools": tools}, ValueError(texts[0])]
    runner = AgentRunner(PlanWorker(plan))
    task = runner.create_task(texts[2])
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    state = runner.state_of(task)
    odd = TaskStep(task_id=task.task_id, step_id=texts[3] or "x", input=texts[5])
    state.step_queue[0].link_step(odd)
    state.register(odd)
    state.step_queue.append(odd)
    dot = task_to_dot(state, max_label=400)
    assert_dot_structure(dot)
    for raw in texts:
        if len(raw) > 3 and any(c in raw for c in '<>"&'):
            assert raw not in dot
    if dot_available():
        assert "<svg" in run_dot(dot)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    if EXAMPLES:
        print("\nfuzz examples run: " + ", ".join(f"{k} {v}" for k, v in EXAMPLES.items()) + f"; total {sum(EXAMPLES.values())}")
