"""The reference pages' AgentRunner surface, ported by changing only imports and the model.

Snippets come from the "Lower-Level Agent API" guide and the core classes reference
(``AgentRunner``, ``AgentState``); see /work/shared/seeds/.
"""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any, cast

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    MessageRole,
    ScriptedLLM,
    Task,
    TaskState,
    TaskStep,
    TaskStepOutput,
    tool_call,
)
from nbagent.agents import FunctionCallingAgent, ReActAgent
from nbagent.runner.agent_state import AgentState
from nbagent.tools import FunctionTool
from nbagent.workers.base import BaseAgentWorker
from nbagent.workers.function_calling import OpenAIAgentWorker
from tests.helpers import CountingWorker


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the result."""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers and return the result."""
    return a + b


tools = [FunctionTool.from_defaults(fn=multiply), FunctionTool.from_defaults(fn=add)]


def _llm() -> ScriptedLLM:
    return ScriptedLLM(
        [tool_call("multiply", a=121, b=3), tool_call("add", a=363, b=42), "(121 * 3) + 42 = 405"]
    )


def test_guide_usage_pattern_runs_and_points_task_methods_to_the_agent(capsys: pytest.CaptureFixture[str]) -> None:
    llm = _llm()
    # --- the guide's snippet, imports and model changed ---
    openai_step_engine = OpenAIAgentWorker.from_tools(tools, llm=llm, verbose=True)
    agent = AgentRunner(openai_step_engine)
    task = agent.create_task("What is (121 * 3) + 42?")
    step_output = agent.run_step(task)
    while not step_output.is_last:  # the guide runs one step; we run to the end
        step_output = agent.run_step(task)
    if step_output.is_last:
        response = agent.finalize_response(task.task_id)
    with pytest.raises(AttributeError, match=r"agent\.list_tasks\(\)"):
        task.list_tasks()
    with pytest.raises(AttributeError, match=r"agent\.get_completed_steps\(task\.task_id\)"):
        task.get_completed_steps(task.task_id)
    print(str(response))
    # --- what the corrected calls give ---
    assert "405" in capsys.readouterr().out
    assert agent.list_tasks() == [task]
    assert len(agent.get_completed_steps(task.task_id)) == 3
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        task.nope  # other missing attributes keep the plain error


def test_state_is_an_agent_state_sharing_the_runners_objects() -> None:
    agent = AgentRunner(CountingWorker(target=2))
    assert isinstance(agent.state, AgentState)
    task = agent.create_task("go")
    ts = agent.state.task_dict[task.task_id]
    assert isinstance(ts, TaskState) and ts is agent.tasks[task.task_id]
    assert ts.task is task and agent.state.get_task(task.task_id) is task
    queue = agent.state.get_step_queue(task.task_id)
    assert isinstance(queue, deque) and [s.step_id for s in queue] == [s.step_id for s in agent.get_upcoming_steps(task.task_id)]
    out = agent.run_step(task.task_id)
    assert agent.state.get_completed_steps(task.task_id) == [out]
    assert agent.state.get_completed_steps(task.task_id) is ts.completed_steps
    agent.delete_task(task.task_id)
    assert task.task_id not in agent.state.task_dict
    agent.create_task("again")
    agent.state.reset()
    assert agent.tasks == {} and agent.list_tasks() == []
    with pytest.raises(KeyError, match="unknown task id 'missing'"):
        agent.state.get_task("missing")


def test_state_argument_is_honoured_and_reset_clears_it() -> None:
    state = AgentState()
    agent = AgentRunner(CountingWorker(target=1), state=state)
    assert agent.state is state
    task = agent.create_task("go")
    assert list(state.task_dict) == [task.task_id]
    # a second runner given the same state sees (and can run) the same tasks
    other = AgentRunner(CountingWorker(target=1), state=state)
    out = other.run_step(task.task_id)
    assert out.is_last and agent.get_task_output(task.task_id) is out
    agent.reset()
    assert state.task_dict == {} and agent.chat_history == []
    with pytest.raises(TypeError, match="state must be an nbagent AgentState, got dict"):
        AgentRunner(CountingWorker(), state={})


def test_from_llm_picks_function_calling_or_react() -> None:
    fc = AgentRunner.from_llm(tools, llm=ScriptedLLM(["hi"]))
    assert isinstance(fc, FunctionCallingAgent)
    react = AgentRunner.from_llm(tools, llm=ScriptedLLM(["Thought: easy.\nAnswer: hi"], function_calling=False), verbose=True)
    assert isinstance(react, ReActAgent) and react.verbose
    assert str(react.chat("hello")) == "hi"
    assert str(fc.chat("hello")) == "hi"


def test_init_task_state_kwargs_each_task_gets_its_own_copy() -> None:
    agent = AgentRunner(CountingWorker(target=1), init_task_state_kwargs={"notes": []})
    t1 = agent.create_task("a")
    t2 = agent.create_task("b")
    t1.extra_state["notes"].append("x")
    assert t2.extra_state["notes"] == []
    with pytest.raises(ValueError, match="extra_state"):
        agent.create_task("c", extra_state={"y": 1})


def test_default_tool_choice_reaches_the_model_on_the_first_step_only() -> None:
    llm = ScriptedLLM([tool_call("add", a=1, b=2), "3"])
    agent = FunctionCallingAgent.from_tools(tools, llm=llm, default_tool_choice="add")
    assert str(agent.chat("1+2?")) == "3"
    choices = [r.tool_choice for r in llm.requests]
    assert choices[0] not in (None, "auto") and choices[1] in (None, "auto")


def test_delete_task_on_finish() -> None:
    agent = AgentRunner(CountingWorker(target=1), delete_task_on_finish=True)
    response = agent.chat("go")
    assert "count=1" in str(response)
    assert agent.list_tasks() == [] and len(agent.chat_history) >= 1


def test_verbose_prints_each_step_as_the_reference_does(capsys: pytest.CaptureFixture[str]) -> None:
    agent = AgentRunner(CountingWorker(target=2), verbose=True)
    task = agent.create_task("go")
    first = agent.get_upcoming_steps(task.task_id)[0]
    agent.run_step(task.task_id)
    out = capsys.readouterr().out
    assert f"> Running step {first.step_id}. Step input: go\n" in out
    agent.run_step(task.task_id)
    assert "Step input: None" in capsys.readouterr().out


def test_callback_manager_is_accepted_with_a_warning_naming_subscribe() -> None:
    with pytest.warns(UserWarning, match=r"no effect.*subscribe"):
        agent = AgentRunner(CountingWorker(target=1), callback_manager=object())
    with pytest.warns(UserWarning, match="subscribe"):
        OpenAIAgentWorker.from_tools(tools, llm=_llm(), callback_manager=object())
    seen: list[str] = []
    agent.subscribe(lambda e: seen.append(type(e).__name__))
    agent.chat("go")
    assert "StepCompleted" in seen


def test_chat_history_and_memory_as_on_the_page() -> None:
    history = [ChatMessage(role=MessageRole.USER, content="earlier")]
    agent = AgentRunner(CountingWorker(target=1), chat_history=history)
    assert [m.content for m in agent.chat_history] == ["earlier"]


# ----- the reference's own runner tests (llama_index tests/agent/runner/test_base.py), ported --


class MockAgentWorker(BaseAgentWorker):
    """Mock agent agent worker."""

    def __init__(self, limit: int = 2):
        self.limit = limit

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        counter = 0
        task.extra_state["counter"] = counter
        return TaskStep(task_id=task.task_id, step_id=str(uuid.uuid4()), input=task.input, memory=task.memory)

    def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        counter = task.extra_state["counter"] + 1
        task.extra_state["counter"] = counter
        is_done = counter >= self.limit
        new_steps = [step.get_next_step(step_id=str(uuid.uuid4()))]
        return TaskStepOutput(
            output=AgentChatResponse(response=f"counter: {counter}"),
            task_step=step,
            is_last=is_done,
            next_steps=new_steps,
        )

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        return self.run_step(step=step, task=task, **kwargs)

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        """Finalize task, after all the steps are completed."""


class MockAgentWorkerWithMemory(MockAgentWorker):
    """Mock agent worker with memory."""

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        if len(task.memory.get_all()) > 0:
            start = int(cast(Any, task.memory.get_all()[-1].content))
        else:
            start = 0
        task.extra_state["counter"] = 0
        task.extra_state["start"] = start
        return TaskStep(task_id=task.task_id, step_id=str(uuid.uuid4()), input=task.input, memory=task.memory)

    def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        task.extra_state["counter"] += 1
        counter = task.extra_state["counter"] + task.extra_state["start"]
        is_done = task.extra_state["counter"] >= self.limit
        new_steps = [step.get_next_step(step_id=str(uuid.uuid4()))]
        if is_done:
            task.memory.put(ChatMessage(role=MessageRole.USER, content=str(counter)))
        return TaskStepOutput(
            output=AgentChatResponse(response=f"counter: {counter}"),
            task_step=step,
            is_last=is_done,
            next_steps=new_steps,
        )


def test_agent() -> None:
    agent_runner = AgentRunner(agent_worker=MockAgentWorker(limit=2))
    task = agent_runner.create_task("hello world")
    assert task.input == "hello world"
    assert task.task_id in agent_runner.state.task_dict
    step_output = agent_runner.run_step(task.task_id)
    assert task.extra_state["counter"] == 1
    assert str(step_output.output) == "counter: 1"
    assert step_output.is_last is False
    assert len(agent_runner.list_tasks()) == 1
    assert agent_runner.get_task(task_id=task.task_id) == task
    step_output = agent_runner.run_step(task.task_id)
    assert task.extra_state["counter"] == 2
    assert str(step_output.output) == "counter: 2"
    assert step_output.is_last is True
    assert len(agent_runner.state.task_dict[task.task_id].completed_steps) == 2
    agent_runner = AgentRunner(agent_worker=MockAgentWorker(limit=10))
    response = agent_runner.chat("hello world")
    assert str(response) == "counter: 10"
    assert len(agent_runner.state.task_dict) == 1


def test_agent_with_reset() -> None:
    agent_runner = AgentRunner(agent_worker=MockAgentWorkerWithMemory(limit=10))
    for idx in range(4):
        if idx % 2 == 0:
            agent_runner.reset()
        response = agent_runner.chat("hello world")
        if idx % 2 == 0:
            assert str(response) == "counter: 10"
            assert len(agent_runner.state.task_dict) == 1
            assert len(agent_runner.memory.get_all()) == 1
        elif idx % 2 == 1:
            assert str(response) == "counter: 20"
            assert len(agent_runner.state.task_dict) == 2
            assert len(agent_runner.memory.get_all()) == 2


def test_agent_from_llm() -> None:
    llm = ScriptedLLM(["Thought: done.\nAnswer: ok"], function_calling=False)  # MockLLM takes no tools
    agent_runner = AgentRunner.from_llm(llm=llm)
    assert isinstance(agent_runner, ReActAgent)


def test_callback_manager_on_task_and_custom_worker_warns() -> None:
    with pytest.warns(UserWarning, match="Task: callback_manager .* no effect"):
        Task(input="x", callback_manager=object())
    with pytest.warns(UserWarning, match="CountingWorker: callback_manager"):
        CountingWorker(tools=[], llm=None, callback_manager=object())
