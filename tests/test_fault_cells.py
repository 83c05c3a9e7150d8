"""A fault matrix: every worker kind x every way a step can be stopped, each a cell that must
hold: the task exactly as before the step (a full structural dump, same objects), nothing left
running or claimed, and the retry then gives what an undisturbed step gives, with the tool
run as many times as in an undisturbed step. The one thing a stopped step may leave is its
``tool_journal``: when the fault came after the tool ran, the step keeps the tool's output
and the retry uses it instead of running the tool again.

Faults: an exception from the model, Ctrl-C in the model, a cancelled model call, Ctrl-C in a
tool, Ctrl-C in an event listener after the step's output was recorded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    ChatMessage,
    FunctionLLM,
    FunctionTool,
    ParallelAgentRunner,
    seed_ids,
)
from nbagent import costs
from nbagent import events as ev
from nbagent.runner import txn
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.planner import PlannerAgentWorker
from nbagent.workers.react import ReActAgentWorker
from tests.interrupt_harness import diff, dump

FAULTS = ["model raises", "Ctrl-C in model", "model call cancelled", "Ctrl-C in tool", "Ctrl-C in listener"]
HELD: list[str] = []


class Faults:
    """Which fault to raise on the next model or tool call (once)."""

    def __init__(self) -> None:
        self.model: BaseException | None = None
        self.tool: BaseException | None = None
        self.ran = 0  # tool calls that ran to their end

    def in_model(self) -> None:
        fault, self.model = self.model, None
        if fault is not None:
            raise fault

    def in_tool(self) -> None:
        fault, self.tool = self.tool, None
        if fault is not None:
            raise fault


def _observations(messages: list[ChatMessage]) -> int:
    return sum(m.text.count("Observation:") for m in messages) + sum(1 for m in messages if m.role == "tool")


def build(kind: str, faults: Faults) -> tuple[Any, Any]:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        faults.in_tool()
        faults.ran += 1
        return a + b

    tool = FunctionTool.from_defaults(add)
    if kind == "ReAct":
        def react(messages: list[ChatMessage], tools: Any) -> str:
            faults.in_model()
            if _observations(messages) < 3:
                return 'Thought: add.\nAction: add\nAction Input: {"a": 1, "b": 2}'
            return "Thought: done.\nAnswer: 3"

        return AgentRunner(ReActAgentWorker.from_tools([tool], llm=FunctionLLM(react, function_calling=False))), None
    if kind == "function calling":
        def fc(messages: list[ChatMessage], tools: Any) -> Any:
            faults.in_model()
            if sum(1 for m in messages if m.role == "tool") < 2:
                n = sum(1 for m in messages if m.role == "tool")
                # a fixed id: the retry asks the same, so its output compares equal
                return {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": f"call-{n}"}]}
            return "3"

        return AgentRunner(FunctionCallingAgentWorker.from_tools([tool], llm=FunctionLLM(fc))), None
    if kind == "planner (parallel)":
        def plan(messages: list[ChatMessage], tools: Any) -> str:
            faults.in_model()
            text = messages[-1].text if messages else ""
            if "join" in text.lower() and "result" in text.lower():
                return "Thought: done.\nAnswer: 3"
            return "1. add(a=1, b=2)\n2. add(a=$1, b=0)\n3. join()"

        return ParallelAgentRunner(PlannerAgentWorker([tool], FunctionLLM(plan))), None
    raise AssertionError(kind)


KINDS = ["ReAct", "function calling", "planner (parallel)"]


def _fault(name: str, faults: Faults, runner: Any) -> None:
    if name == "model raises":
        faults.model = ValueError("the model server answered 500")
    elif name == "Ctrl-C in model":
        faults.model = KeyboardInterrupt()
    elif name == "model call cancelled":
        faults.model = asyncio.CancelledError()
    elif name == "Ctrl-C in tool":
        faults.tool = KeyboardInterrupt()
    elif name == "Ctrl-C in listener":
        fired: list[bool] = []

        def listener(event: Any) -> None:
            if not fired:
                fired.append(True)
                raise KeyboardInterrupt()

        runner.subscribe(listener, ev.StepCompleted)


def _setup(kind: str, fault: str) -> tuple[Any, Any, Faults]:
    seed_ids(7)
    costs._RUNNERS.clear()
    faults = Faults()
    runner, _ = build(kind, faults)
    task = runner.create_task("add 1 and 2")
    # one step done, the fault hits the second; the planner calls its model in its first
    # step (the plan) and the tools in the next ones
    if kind != "planner (parallel)" or "model" not in fault:
        runner.run_step(task)
    return runner, task, faults


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_fault_cell_holds(kind: str, fault: str) -> None:
    ref, ref_task, ref_faults = _setup(kind, fault)
    ran = ref_faults.ran
    ref.run_step(ref_task)
    want, want_runs = dump(ref, ref_task.task_id), ref_faults.ran - ran

    runner, task, faults = _setup(kind, fault)
    state = runner.state_of(task)
    before = dump(runner, task.task_id, identity=True)
    n_failures, ran = len(state.failures), faults.ran
    _fault(fault, faults, runner)
    with pytest.raises((ValueError, KeyboardInterrupt, asyncio.CancelledError)):
        runner.run_step(task)
    now = dump(runner, task.task_id, identity=True)
    now.pop("status")
    journals = [st["state"].pop("tool_journal") for st in now["steps"].values() if "tool_journal" in st["state"]]
    if faults.ran > ran:  # the tool ran before the fault: its output is kept, on that step only
        assert len(journals) == 1 and [o[1]["content"] for o in journals[0]["outputs"].values()] == ["3"]
    else:
        assert journals == []
    assert now == {k: v for k, v in before.items() if k != "status"}, diff(before, now)
    assert not state.running and not txn.claims(runner)
    assert len(state.failures) == n_failures + 1
    runner.run_step(task)  # the retry works and does what an undisturbed step does
    assert dump(runner, task.task_id) == want, diff(want, dump(runner, task.task_id))
    assert faults.ran - ran == want_runs, "the tool ran again on the retry"
    HELD.append(f"{kind} x {fault}")


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    print(f"\nfault cells held: {len(HELD)}/{len(KINDS) * len(FAULTS)}")
