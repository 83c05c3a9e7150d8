"""PlannerAgentWorker and its plan parser: plans become DAGs, independent calls run together,
malformed plans go back to the model, the join answers or asks for a new plan."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from nbagent import (
    AgentRunner,
    FunctionTool,
    ParallelAgentRunner,
    PlannerAgentWorker,
    ScriptedLLM,
    StepStatus,
)
from nbagent.tools import tools_by_name
from nbagent.workers.planner import PlannerError, parse_join
from nbagent.workers.planner_parser import PlanError, find_refs, parse_plan, resolve_refs

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # run from inside tests/
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]

POPULATIONS = {"Paris": 2_100_000, "Berlin": 3_700_000}
live = {"now": 0, "max": 0}


async def population(city: str) -> int:
    """The population of a city."""
    live["now"] += 1
    live["max"] = max(live["max"], live["now"])
    await asyncio.sleep(0.01)
    live["now"] -= 1
    return POPULATIONS[city]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


TOOLS = [FunctionTool.from_defaults(population), FunctionTool.from_defaults(add), FunctionTool.from_defaults(search)]
BY_NAME = tools_by_name(TOOLS)

PLAN = """Thought: both populations are independent, then add them.
1. population(city="Paris")
2. population(city="Berlin")
3. add(a=$1, b=$2)
4. join()"""
ANSWER = "Thought: I have the sum.\nAnswer: Together they have 5,800,000 people."


@pytest.fixture(autouse=True)
def _reset_live() -> Iterator[None]:
    live.update(now=0, max=0)
    yield


def make(replies: list[object], runner_cls: type = ParallelAgentRunner, **kw: object) -> tuple[AgentRunner, ScriptedLLM]:
    llm = ScriptedLLM(replies)  # type: ignore[arg-type]
    worker = PlannerAgentWorker(TOOLS, llm, **kw)  # type: ignore[arg-type]
    return runner_cls(worker), llm


# ----- the parser ------------------------------------------------------------------------


def test_parse_plan_reads_calls_refs_and_the_thought() -> None:
    plan = parse_plan(PLAN, BY_NAME)
    assert plan.thought == "both populations are independent, then add them."
    assert [(c.index, c.tool, c.args, c.deps) for c in plan.calls] == [
        (1, "population", {"city": "Paris"}, ()),
        (2, "population", {"city": "Berlin"}, ()),
        (3, "add", {"a": {"$ref": 1}, "b": {"$ref": 2}}, (1, 2)),
    ]
    assert plan.joined


def test_parse_plan_accepts_other_spellings() -> None:
    text = (
        "Here is my plan:\n1. I will first look things up\n"  # numbered prose is not a call
        '$1 = search("cheap $5 flights")\n'  # $5 is no call of the plan: it stays text
        "2: add(1, b=-2)\n"
        '- 3. search(query="about ${2} and $1", )\n'
        "4. join"
    )
    plan = parse_plan(text, BY_NAME)
    assert [(c.index, c.args, c.deps) for c in plan.calls] == [
        (1, {"query": "cheap $5 flights"}, ()),
        (2, {"a": 1, "b": -2}, ()),
        (3, {"query": "about ${2} and $1"}, (1, 2)),
    ]
    assert resolve_refs(plan.calls[2].args, {1: "R1", 2: -1}) == {"query": "about -1 and R1"}
    assert find_refs({"x": [{"$ref": 4}, "see $9"]}, known=[9]) == {4, 9}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("I would search for it.", "no plan found"),
        ('1. serch(query="x")\n2. join()', "unknown tool 'serch'; the tools are: add, population, search"),
        ('1. search(q="x")', "has no argument 'q'; its arguments are ['query']"),
        ("1. add(a=1)", "missing required argument(s) ['b']"),
        ("1. add(a=1, b=$3)\n2. join()", "refers to $3, but the plan has no such call"),
        ("1. add(a=$2, b=1)\n2. add(a=$1, b=1)", "cycle ($1 -> $2 -> $1)"),
        ("1. add(a=$1, b=1)", "cycle ($1 -> $1)"),
        ('1. search(query="x")\n1. search(query="y")', "call number 1 is used twice"),
        ("1. add(a=1+1, b=2)", "not expressions like '1 + 1'"),
        ("1. add(a=os, b=2)", "'os' is not a value"),
        ('1. search(query="x"\n2. join()', "not closed"),
        ("1. add(1, 2, 3)", "3 positional arguments given, the tool takes 2"),
    ],
)
def test_malformed_plans_are_plan_errors_with_a_message_for_the_model(text: str, message: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_plan(text, BY_NAME)
    assert message in str(err.value)


def test_parse_join_reads_answer_replan_or_plain_text() -> None:
    assert parse_join(ANSWER) == ("answer", "Together they have 5,800,000 people.", "I have the sum.")
    assert parse_join("Thought: no Berlin\nReplan: find Berlin") == ("replan", "find Berlin", "no Berlin")
    assert parse_join("It is 42.") == ("answer", "It is 42.", None)


# ----- the worker ------------------------------------------------------------------------


def test_independent_calls_run_in_parallel_and_the_join_answers() -> None:
    runner, llm = make([PLAN, ANSWER])
    response = runner.chat("How many people live in Paris and Berlin together?")
    assert str(response) == "Together they have 5,800,000 people."
    assert live["max"] == 2  # both population calls were in flight at once
    assert len(llm.requests) == 2  # one plan, one join: the tools needed no model call
    join_prompt = llm.requests[1].messages[-1].text
    assert '$1 = population(city="Paris"): 2100000' in join_prompt
    assert "$3 = add(a=$1, b=$2): 5800000" in join_prompt
    assert [s.tool_name for s in response.sources] == ["population", "population", "add"]
    assert [m.role.value for m in runner.chat_history] == ["user", "assistant"]
    # the planner saw the tools and the format
    system = llm.requests[0].messages[0].text
    assert "- population: The population of a city." in system and "join()" in system


def test_the_plan_becomes_a_dag_with_blocked_steps() -> None:
    runner, _ = make([PLAN, ANSWER])
    task = runner.create_task("Paris + Berlin?")
    (plan_out,) = runner.run_steps_in_queue(task)
    assert plan_out.reasoning == "both populations are independent, then add them."
    state = runner.state_of(task)
    steps = {s.step_state.get("index", s.step_state["kind"]): s for s in state.steps.values()}
    assert sorted(steps[3].prev_steps) == sorted([steps[1].step_id, steps[2].step_id])
    assert list(steps["join"].prev_steps) == [steps[3].step_id]  # the last call leads to the join
    assert [state.step_status(steps[k].step_id) for k in (1, 2, 3, "join")] == [
        StepStatus.QUEUED, StepStatus.QUEUED, StepStatus.BLOCKED, StepStatus.BLOCKED,
    ]
    assert steps[1].input == 'population(city="Paris")'
    outs = runner.run_steps_in_queue(task)
    assert [o.output for o in outs] == ["2100000", "3700000"]
    assert [o.output for o in runner.run_steps_in_queue(task)] == ["5800000"]
    (last,) = runner.run_steps_in_queue(task)
    assert last.is_last and last.reasoning == "I have the sum."


def test_malformed_plans_go_back_to_the_model_until_one_runs() -> None:
    bad_tool = '1. serch(query="Paris")\n2. join()'
    cycle = "1. add(a=$2, b=1)\n2. add(a=$1, b=1)\n3. join()"
    missing = "1. add(a=$7, b=1)\n2. join()"
    runner, llm = make([bad_tool, cycle, missing, PLAN, ANSWER])
    assert "5,800,000" in str(runner.chat("Paris + Berlin?"))
    feedback = [r.messages[-1].text for r in llm.requests[1:4]]
    assert "unknown tool 'serch'" in feedback[0]
    assert "cycle ($1 -> $2 -> $1)" in feedback[1]
    assert "refers to $7" in feedback[2]
    assert all(f.startswith("Your plan could not be run:") for f in feedback)
    # the model sees its earlier attempts, in order
    assert [m.text for m in llm.requests[3].messages[-6::2]] == [bad_tool, cycle, missing]
    task = runner.list_tasks()[0]
    outs = runner.get_completed_steps(task)
    assert [str(o.output).split(":")[0] for o in outs[:3]] == ["plan error"] * 3
    assert task.extra_state["plan_errors"] == 0  # reset by the plan that ran


def test_too_many_bad_plans_stop_with_a_clear_error_and_can_be_resumed() -> None:
    bad = '1. nope(x=1)\n2. join()'
    runner, llm = make([bad, bad, bad, PLAN, ANSWER], max_plan_errors=2)
    task = runner.create_task("q")
    for _ in range(3):  # the first plan and two corrections
        runner.run_steps_in_queue(task)
    with pytest.raises(PlannerError, match="3 plans in a row that could not run"):
        runner.run_steps_in_queue(task)
    assert len(llm.requests) == 3  # the limit is checked before asking the model again
    runner.agent_worker.max_plan_errors = 3  # type: ignore[attr-defined]
    assert runner.run_until_done(task).is_last


def test_the_join_can_ask_for_a_new_plan() -> None:
    first = '1. population(city="Paris")\n2. join()'
    replan = "Thought: Berlin is missing.\nReplan: find the population of Berlin"
    second = '1. population(city="Berlin")\n2. join()'
    runner, llm = make([first, replan, second, ANSWER])
    assert "5,800,000" in str(runner.chat("Paris + Berlin?"))
    second_plan = llm.requests[2].messages
    assert "This is not enough yet: find the population of Berlin" in second_plan[-1].text
    assert second_plan[-2].text == first
    final_join = llm.requests[3].messages[-1].text
    assert "Plan 1:" in final_join and "$1 = population(city=\"Paris\"): 2100000" in final_join
    assert "Plan 2:" in final_join and "$1 = population(city=\"Berlin\"): 3700000" in final_join
    task = runner.list_tasks()[0]
    assert task.extra_state["replans"] == 1


def test_replans_are_bounded() -> None:
    plan = '1. population(city="Paris")\n2. join()'
    replan = "Replan: more"
    runner, llm = make([plan, replan, plan, replan], max_replans=1)
    with pytest.raises(PlannerError, match="max_replans=1"):
        runner.chat("q")
    assert "No more plans can be made" in llm.requests[-1].messages[-1].text


def test_a_failing_tool_is_an_observation_and_its_dependents_are_skipped() -> None:
    plan = '1. population(city="Atlantis")\n2. add(a=$1, b=1)\n3. search(query="Atlantis")\n4. join()'
    runner, llm = make([plan, "Answer: unknown"])
    assert str(runner.chat("q")) == "unknown"
    prompt = llm.requests[1].messages[-1].text
    assert '$1 = population(city="Atlantis") (error):' in prompt and "KeyError" in prompt
    assert "$2 = add(a=$1, b=1) (error): Error: not run, because $1 failed" in prompt
    assert '$3 = search(query="Atlantis"): results for Atlantis' in prompt


def test_no_tools_needed_goes_straight_to_the_join() -> None:
    runner, llm = make(["1. join()", "Answer: hello"])
    assert str(runner.chat("hi")) == "hello"
    assert "(no tool calls)" in llm.requests[1].messages[-1].text


def test_text_references_are_filled_in() -> None:
    plan = '1. add(a=40, b=2)\n2. search(query="the number $1")\n3. join()'
    runner, llm = make([plan, "Answer: ok"])
    runner.chat("q")
    assert "$2 = search(query=\"the number $1\"): results for the number 42" in llm.requests[1].messages[-1].text


def test_the_same_worker_runs_step_by_step_under_agent_runner() -> None:
    runner, _ = make([PLAN, ANSWER], runner_cls=AgentRunner)
    assert "5,800,000" in str(runner.chat("q"))
    assert live["max"] == 1  # one step at a time


def test_a_failing_call_step_is_retried_without_losing_its_sibling() -> None:
    calls = {"n": 0}

    def flaky(query: str) -> str:
        """Flaky search."""
        return f"found {query}"

    worker = PlannerAgentWorker([*TOOLS, FunctionTool.from_defaults(flaky)], ScriptedLLM(
        ['1. population(city="Paris")\n2. flaky(query="x")\n3. join()', "Answer: done"]
    ))
    original = worker._run_call

    async def run_call(step, task):  # type: ignore[no-untyped-def]
        if step.step_state["tool"] == "flaky" and calls["n"] == 0:
            calls["n"] += 1
            raise ConnectionError("network blip")
        return await original(step, task)

    worker._run_call = run_call  # type: ignore[method-assign]
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("q")
    with pytest.raises(ConnectionError, match="network blip"):
        runner.run_until_done(task)
    state = runner.state_of(task)
    assert [str(o.output) for o in state.completed_steps][1:] == ["2100000"]
    assert runner.run_until_done(task).is_last
    assert str(runner.finalize_response(task)) == "done"


def test_worker_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="needs a model"):
        PlannerAgentWorker(TOOLS, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an nbagent LLM"):
        PlannerAgentWorker(TOOLS, "gpt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_replans must be an int >= 0"):
        PlannerAgentWorker(TOOLS, ScriptedLLM([]), max_replans=-1)
    worker = PlannerAgentWorker.from_tools(TOOLS, llm=ScriptedLLM([]), max_replans=0)
    assert worker.max_replans == 0 and "population" in repr(worker)


def test_planner_over_http_with_the_openai_client() -> None:
    from nbagent.llms.openai import OpenAILLM

    server: FakeOpenAIServer
    with serve() as server:
        server.add(PLAN, ANSWER)
        llm = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=10)
        runner = ParallelAgentRunner(PlannerAgentWorker(TOOLS, llm))
        assert str(runner.chat("Paris + Berlin?")) == "Together they have 5,800,000 people."
        assert len(server.requests) == 2
        assert server.requests[0]["messages"][0]["role"] == "system"
        assert "5800000" in server.requests[1]["messages"][-1]["content"]


def test_independent_sync_tool_calls_of_a_plan_overlap() -> None:
    import time as _time

    from nbagent import ParallelAgentRunner, PlannerAgentWorker, ScriptedLLM

    def fetch(name: str) -> str:
        """Fetch a page (blocking)."""
        _time.sleep(0.2)
        return f"page {name}"

    plan = '1. fetch(name="a")\n2. fetch(name="b")\n3. fetch(name="c")\n4. join()'
    llm = ScriptedLLM([plan, "Thought: all fetched.\nAnswer: a, b and c fetched"])
    runner = ParallelAgentRunner(PlannerAgentWorker.from_tools([fetch], llm=llm))
    start = _time.perf_counter()
    response = runner.chat("fetch a, b and c")
    elapsed = _time.perf_counter() - start
    assert "fetched" in str(response)
    assert elapsed < 0.45, f"three 0.2 s sync calls took {elapsed:.2f} s: they did not overlap"


# ----- model-written text never crashes a step ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1. add(a={$1: 0}, b=1)\n2. join()", "key must be text or a number"),  # was TypeError
        ("1. add(a=" + "+".join(["1"] * 20_000) + ", b=1)", "nested too deeply"),  # was RecursionError
        ("1. add(a=" + "[" * 300 + "]" * 300 + ", b=1)", "not valid"),
        ("1. add(a=" + "-" * 5000 + "1, b=1)", "nested too deeply"),
    ],
)
def test_hostile_plans_are_plan_errors(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(text, BY_NAME)


def test_a_long_chain_of_calls_parses_and_a_long_cycle_is_found() -> None:
    n = 3000
    chain = "\n".join(["1. add(a=1, b=2)"] + [f"{i}. add(a=${i - 1}, b=1)" for i in range(2, n + 1)])
    plan = parse_plan(chain + f"\n{n + 1}. join()", BY_NAME)
    assert len(plan) == n and plan.calls[-1].deps == (n - 1,)
    cycle = "\n".join([f"1. add(a=${n}, b=1)"] + [f"{i}. add(a=${i - 1}, b=1)" for i in range(2, n + 1)])
    with pytest.raises(PlanError, match="cycle"):  # a recursive search overflowed the stack
        parse_plan(cycle, BY_NAME)


def test_a_numbered_line_inside_a_call_is_not_another_call() -> None:
    plan = parse_plan('1. search(query="""a list:\n2. add(a=1, b=2)""")\n3. join()', BY_NAME)
    assert [c.tool for c in plan.calls] == ["search"]
