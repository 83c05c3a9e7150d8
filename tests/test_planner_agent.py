"""StructuredPlannerAgent on nbagent alone: what the oracle cannot show (the reference's own
behaviour is compared in tests/oracle/test_docs_structured_planner.py): ready sub-tasks run at
the same time, sub-tasks are ordinary tasks, the plan's DAG, models without tools, errors."""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

import pytest

from nbagent import (
    ChatMessage,
    FunctionCallingAgentWorker,
    FunctionLLM,
    FunctionTool,
    MessageRole,
    Plan,
    PlannerAgentState,
    ScriptedLLM,
    StructuredPlannerAgent,
    SubTask,
    tool_call,
)
from nbagent.viz.plan_dot import plan_to_dot

EVENTS: list[tuple[str, str]] = []


async def fetch(key: str) -> str:
    """Fetch the value stored under a key."""
    EVENTS.append(("start", key))
    await asyncio.sleep(0.05)
    EVENTS.append(("end", key))
    return f"value of {key}"


def worker_brain(messages: list[ChatMessage], tools: Any) -> Any:
    """Fetches the key a sub-task names, then answers with what came back."""
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"found {last.text}"
    return tool_call("fetch", key=last.text.split()[-1])


def sub(name: str, *deps: str) -> dict[str, Any]:
    return {"name": name, "input": f"fetch {name}", "expected_output": f"{name}'s value", "dependencies": list(deps)}


def planner(script: list[Any], **kwargs: Any) -> StructuredPlannerAgent:
    tools = [FunctionTool.from_defaults(fetch)]
    worker = FunctionCallingAgentWorker.from_tools(tools, llm=FunctionLLM(worker_brain))
    return StructuredPlannerAgent(worker, tools=tools, llm=ScriptedLLM(script), **kwargs)


def test_ready_sub_tasks_run_at_the_same_time_and_the_last_one_answers() -> None:
    EVENTS.clear()
    agent = planner([tool_call("Plan", sub_tasks=[sub("A"), sub("B"), sub("C", "A", "B")]), "ok", "ok"])
    response = agent.chat("fetch A and B, then C")
    assert [kind for kind, _ in EVENTS[:2]] == ["start", "start"]  # A and B overlap
    assert EVENTS[-2:] == [("start", "C"), ("end", "C")]  # C waits for both
    assert str(response) == "found value of C"
    plan_id = next(iter(agent.state.plan_dict))
    assert [s.name for s in agent.state.get_completed_sub_tasks(plan_id)] == ["A", "B", "C"]
    assert set(agent.tasks) == {"A", "B", "C"}
    assert [m.content for m in agent.memory.get_all() if m.role == MessageRole.USER] == ["fetch A", "fetch B", "fetch C"]


def test_a_sub_task_is_an_ordinary_task_of_the_runner() -> None:
    agent = planner([tool_call("Plan", sub_tasks=[sub("A")])])
    plan_id = agent.create_plan("fetch A")
    assert agent.get_next_tasks(plan_id) == ["A"]
    first = agent.run_step("A")
    assert not first.is_last and first.tool_outputs[0].content == "value of A"
    agent.undo_step("A")
    assert agent.get_completed_steps("A") == []
    response = agent.run_task("A")
    assert str(response) == "found value of A" and agent.state_of("A").finalized
    agent.mark_task_complete(plan_id, "A")
    assert agent.get_next_tasks(plan_id) == [] and agent.state.get_remaining_subtasks(plan_id) == []
    assert "A" in agent.graph("A").source


def test_the_plan_is_drawn_as_its_dag() -> None:
    agent = planner([tool_call("Plan", sub_tasks=[sub("A"), sub("B", "A"), sub("C", "A", "Z")])])
    plan_id = agent.create_plan("fetch")
    agent.run_task("A")
    agent.mark_task_complete(plan_id, "A")
    source = agent.draw_plan().source
    assert source == agent.draw_plan(plan_id).source  # the newest plan by default; pure
    assert "p0 -> p1;" in source and "p0 -> p2;" in source and "m0 -> p2;" in source
    assert "not in the plan" in source  # C waits for Z forever: drawn, not hidden
    assert "1 done, 1 ready, 1 waiting for its dependencies" in source
    html = agent.draw_plan().html()
    assert "<svg" in html or "<ol>" in html


def test_plan_labels_are_escaped() -> None:
    hostile = [SubTask(name='<b>x</b>"', input="<script>alert(1)</script>", expected_output="&", dependencies=[])]
    source = plan_to_dot(hostile, {'<b>x</b>"': "ready"})
    assert "<script>" not in source and "&lt;script&gt;" in source and "<b>x" not in source
    with pytest.raises(ValueError, match=r"status of sub-task 'a' must be one of .*got 'later'"):
        plan_to_dot(hostile, {"a": "later"})
    with pytest.raises(ValueError, match="rankdir must be one of"):
        plan_to_dot(hostile, {}, rankdir="up")


def test_a_model_without_tools_writes_the_plan_as_json() -> None:
    plan = Plan(sub_tasks=[SubTask(**sub("A"))])
    tools = [FunctionTool.from_defaults(fetch)]
    worker = FunctionCallingAgentWorker.from_tools(tools, llm=FunctionLLM(worker_brain))
    llm = ScriptedLLM([f"Here it is:\n```json\n{plan.model_dump_json()}\n```"], function_calling=False)
    agent = StructuredPlannerAgent(worker, tools=tools, llm=llm)
    plan_id = agent.create_plan("fetch A")
    assert agent.state.plan_dict[plan_id] == plan
    assert llm.requests[0].tools == [] and "JSON" in llm.requests[0].messages[-1].text


def test_verbose_and_streaming() -> None:
    agent = planner([tool_call("Plan", sub_tasks=[sub("A")]), "ok"], verbose=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stream = agent.stream_chat("fetch A")
    assert "".join(stream.response_gen) == "found value of A"
    assert out.getvalue().startswith("=== Initial plan ===\nA:\nfetch A -> A's value\ndeps: []\n\n\n")


def test_errors_name_what_was_wrong() -> None:
    worker = FunctionCallingAgentWorker.from_tools([], llm=FunctionLLM(worker_brain))
    with pytest.raises(TypeError, match="state must be a PlannerAgentState, got AgentState"):
        from nbagent import AgentState

        StructuredPlannerAgent(worker, state=AgentState())
    with pytest.raises(TypeError, match="initial_plan_prompt must be a str or a PromptTemplate, got int"):
        StructuredPlannerAgent(worker, initial_plan_prompt=3)  # type: ignore[arg-type]
    agent = planner([tool_call("Plan", sub_tasks=[sub("A", "missing")])])
    with pytest.raises(KeyError, match="unknown plan id 'nope'; known plan ids: none"):
        agent.state.get_next_sub_tasks("nope")
    with pytest.raises(ValueError, match="no plan yet"):
        agent.draw_plan()
    plan_id = agent.create_plan("fetch A")
    with pytest.raises(KeyError, match=f"plan '{plan_id}' has no sub-task 'B'; it has: A"):
        agent.mark_task_complete(plan_id, "B")
    agent2 = planner([tool_call("Plan", sub_tasks=[sub("A", "missing")])])
    with pytest.raises(ValueError, match="has no sub-task that can run"):
        agent2.chat("fetch A")


def test_the_worker_model_plans_by_default_and_reset_forgets_plans() -> None:
    brain_llm = ScriptedLLM([tool_call("Plan", sub_tasks=[sub("A")])])
    worker = FunctionCallingAgentWorker.from_tools([FunctionTool.from_defaults(fetch)], llm=brain_llm)
    agent = StructuredPlannerAgent(worker)
    assert agent.llm is brain_llm and [t.metadata.name for t in agent.get_tools("x")] == ["fetch"]
    agent.create_plan("fetch A")
    assert isinstance(agent.state, PlannerAgentState) and len(agent.state.plan_dict) == 1
    agent.reset()
    assert agent.state.plan_dict == {} and agent.tasks == {}


def test_a_callback_manager_is_accepted_and_has_no_effect() -> None:
    worker = FunctionCallingAgentWorker.from_tools([], llm=FunctionLLM(worker_brain))
    with pytest.warns(UserWarning, match="StructuredPlannerAgent: callback_manager is accepted for compatibility and has no effect"):
        StructuredPlannerAgent(worker, callback_manager=object())


def test_a_failing_sub_task_loses_no_other_answer_and_can_be_run_again() -> None:
    broken = {"B": True}

    def brain(messages: list[ChatMessage], tools: Any) -> Any:
        last = messages[-1]
        if last.role == MessageRole.USER and last.text == "fetch B" and broken["B"]:
            raise ConnectionError("the model is down")
        return worker_brain(messages, tools)

    tools = [FunctionTool.from_defaults(fetch)]
    worker = FunctionCallingAgentWorker.from_tools(tools, llm=FunctionLLM(brain))
    plan = [sub("A"), sub("B")]
    agent = StructuredPlannerAgent(worker, tools=tools, llm=ScriptedLLM([tool_call("Plan", sub_tasks=plan)]))
    with pytest.raises(ConnectionError, match="the model is down"):
        agent.chat("fetch A and B")
    plan_id = next(iter(agent.state.plan_dict))
    assert [s.name for s in agent.state.get_completed_sub_tasks(plan_id)] == ["A"]
    assert str(agent.state_of("A").final_response) == "found value of A"
    assert agent.get_next_tasks(plan_id) == ["B"] and agent.get_upcoming_steps("B")  # still queued
    broken["B"] = False
    assert str(agent.run_task("B")) == "found value of B"


def test_in_a_notebook_the_agent_shows_its_tasks_and_its_newest_plan() -> None:
    agent = planner([tool_call("Plan", sub_tasks=[sub("A"), {**sub("<b>B</b>", "A")}])])
    before = agent._repr_html_() or ""
    assert "no tasks yet" in before and "sub-task" not in before
    agent.create_plan("fetch")
    html = agent._repr_html_() or ""
    assert "StructuredPlannerAgent · 2 tasks" in html and "StructuredPlannerAgent plan" in html
    assert "<b>B</b>" not in html and "&lt;b&gt;B&lt;/b&gt;" in html  # the plan's text escaped
