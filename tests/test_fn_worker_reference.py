"""FnAgentWorker under the reference's contract: ``fn(state) -> (state, is_done)``, the answer
in ``state["__output__"]``, the Task in ``state["__task__"]``, ``initial_state``, ``async_fn``.

The first test is the reference docs' FnAgentWorker example (a multiply agent), ported by
changing only the imports; it gives the same answer (5 * 2**5 = 160).
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Tuple

import pytest

from nbagent import FnAgentWorker, TaskStatus


def multiply_agent_fn(state: dict) -> Tuple[Dict[str, Any], bool]:
    """Mock agent input function."""
    if "max_count" not in state:
        raise ValueError("max_count must be specified.")

    # __output__ is a special key indicating the final output of the agent
    # __task__ is a special key representing the Task object passed by the agent to the function.
    # `task.input` is the input string passed
    if "__output__" not in state:
        state["__output__"] = int(state["__task__"].input)
        state["count"] = 0
    else:
        state["__output__"] = state["__output__"] * 2
        state["count"] += 1

    is_done = state["count"] >= state["max_count"]

    # the output of this function should be a tuple of the state variable and is_done
    return state, is_done


def test_reference_multiply_agent_gives_the_same_answer() -> None:
    agent = FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 5}).as_agent()
    response = agent.query("5")
    assert str(response) == "160"


def test_step_wise_state_output_and_extra_state() -> None:
    agent = FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 2}).as_agent()
    task = agent.create_task("3")
    outs = [agent.run_step(task.task_id) for _ in range(3)]
    assert [str(o.output) for o in outs] == ["3", "6", "12"]
    assert [o.is_last for o in outs] == [False, False, True]
    # state carried from step to step, and copied into the task's extra_state
    assert task.extra_state["count"] == 2 and task.extra_state["__output__"] == 12
    assert "__task__" not in task.extra_state  # the Task is lent to fn, not stored
    assert str(agent.finalize_response(task.task_id)) == "12"


def test_exception_in_fn_propagates_and_the_step_is_kept() -> None:
    agent = FnAgentWorker(fn=multiply_agent_fn).as_agent()  # no max_count: fn raises
    task = agent.create_task("5")
    step = agent.get_upcoming_steps(task.task_id)[0]
    with pytest.raises(ValueError, match="max_count must be specified"):
        agent.run_step(task.task_id)
    state = agent.state_of(task)
    assert agent.get_upcoming_steps(task.task_id) == [step]
    assert state.status == TaskStatus.FAILED and step.step_state == {}
    step.step_state["max_count"] = 1  # fix the state, run again
    agent.run_step(task.task_id)
    assert str(agent.run_step(task.task_id).output) == "10"


def test_async_fn_and_custom_keys() -> None:
    async def afn(state: dict) -> tuple[dict, bool]:
        await asyncio.sleep(0)
        state["n"] = state.get("n", 0) + 1
        state["answer"] = f"{state['job'].input} x{state['n']}"
        return state, state["n"] == 2

    worker = FnAgentWorker(fn=lambda s: (s, True), async_fn=afn, task_input_key="job", output_key="answer")
    assert str(worker.as_agent().chat("go")) == "go x2"


def test_a_new_state_dict_is_carried_forward() -> None:
    def fresh(state: dict) -> tuple[dict, bool]:
        n = state.get("n", 0) + 1
        return {"n": n, "__output__": f"n={n}"}, n == 3

    agent = FnAgentWorker(fresh).as_agent()
    assert str(agent.chat("go")) == "n=3"


def test_undo_puts_the_state_back() -> None:
    agent = FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 3}).as_agent()
    task = agent.create_task("1")
    agent.run_step(task.task_id)
    agent.run_step(task.task_id)
    agent.undo_step(task.task_id)
    assert str(agent.run_step(task.task_id).output) == "2"
    assert task.extra_state["count"] == 1
