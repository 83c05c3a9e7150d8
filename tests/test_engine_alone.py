"""The step engine works alone: ``StepEngine`` runs, undoes, skips, holds, approves, chats and
finalizes with nothing above it imported (no store, costs, branches, batch, views or runner
facade): the services and views only ever listen to it. So does the parallel engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import events as ev
from nbagent.engine.errors import TaskStateError
from nbagent.engine.step_engine import StepEngine

ROOT = Path(__file__).resolve().parents[1]

# what must stay unimported while an engine alone works (a prefix covers its submodules)
ABOVE_THE_ENGINE = (
    "nbagent.runner", "nbagent.agents", "nbagent.costs", "nbagent.store", "nbagent.persist", "nbagent.branches",
    "nbagent.batch", "nbagent._batch_ray", "nbagent._batch_store", "nbagent.viz", "nbagent.report",
    "sqlite3", "ipywidgets", "traitlets", "graphviz", "IPython",
)


def scenario() -> dict[str, Any]:
    """Drive one engine through every kind of change; return what happened, as plain data."""
    from nbagent import FunctionTool, ScriptedLLM
    from nbagent.llms.scripted import tool_call
    from nbagent.workers.function_calling import FunctionCallingAgentWorker

    deleted: list[str] = []

    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: the file to delete
        """
        deleted.append(path)
        return f"deleted {path}"

    tool = FunctionTool.from_defaults(delete_file, requires_approval=True)
    replies = [tool_call("delete_file", path="a.txt"), "kept a.txt", "hello there"]
    engine = StepEngine(FunctionCallingAgentWorker.from_tools([tool], llm=ScriptedLLM(replies)))
    seen: list[str] = []
    engine.subscribe(lambda e: seen.append(type(e).__name__))
    out: dict[str, Any] = {}

    task = engine.create_task("delete a.txt")
    first = engine.run_step(task)  # the model asks for the call: it waits for a decision
    (pending,) = engine.pending_approvals(task)
    out["pending"] = pending.tool_name
    out["ran_before_approval"] = list(deleted)
    try:
        engine.run_step(task)
    except TaskStateError as error:
        out["refused"] = type(error).__name__
    engine.approve(task, pending.call_id)
    ran = engine.run_step(task)  # the approved call runs
    out["ran_after_approval"] = [list(deleted), ran.is_last]
    undone = engine.undo_step(task)  # back: its step is queued again, and needs a new decision
    out["undone_is_queued"] = engine.get_upcoming_steps(task)[0].step_id == undone.step_id
    out["completed_after_undo"] = len(engine.get_completed_steps(task))
    out["decide_again"] = [p.call_id for p in engine.pending_approvals(task)] == [pending.call_id]
    skipped = engine.skip_step(task, undone.step_id, reason="not now")
    out["skipped"] = [skipped.is_last, type(skipped.output).__name__]
    (again,) = engine.pending_approvals(task)  # the step after the skip carries the call on
    engine.reject(task, again.call_id, reason="keep it")
    nxt = engine.get_upcoming_steps(task)[0]
    engine.hold_step(task, nxt.step_id)
    try:
        engine.run_step(task)
    except TaskStateError as error:
        out["held"] = "held" in str(error)
    engine.release_step(task, nxt.step_id)
    engine.run_step(task)  # runs the rejected call (not the tool): the model hears why
    out["rejected_ran"] = list(deleted)
    last = engine.run_step(task)
    out["last"] = [last.is_last, str(last.output)]
    response = engine.finalize_response(task)
    out["final"] = str(response)
    out["memory_after_task"] = [m.content for m in engine.memory.get_all() if m.content][:1]
    chat = engine.chat("hi")
    out["chat"] = str(chat)
    out["first_was_last"] = first.is_last
    out["events"] = sorted(set(seen))
    out["repr"] = repr(engine)
    out["parallel"] = _parallel_scenario()
    return out


def _parallel_scenario() -> list[Any]:
    """The parallel engine alone: a plan of two branches and a join, the branches together."""
    from nbagent.engine.parallel import ParallelStepEngine
    from nbagent.schema import AgentChatResponse, TaskStep, TaskStepOutput
    from nbagent.workers.base import BaseAgentWorker

    joins: dict[str, TaskStep] = {}

    class Fan(BaseAgentWorker):
        def initialize_step(self, task: Any, **kwargs: Any) -> TaskStep:
            return TaskStep(task_id=task.task_id, input="plan", step_state={"role": "plan"})

        async def arun_step(self, step: TaskStep, task: Any, **kwargs: Any) -> TaskStepOutput:
            role = step.step_state["role"]
            if role == "plan":
                a, b = (TaskStep(task_id=task.task_id, input=x, step_state={"role": "branch"}) for x in "ab")
                joins[task.task_id] = TaskStep(task_id=task.task_id, input="join", step_state={"role": "join"})
                return TaskStepOutput(output="planned", task_step=step, next_steps=[a, b], is_last=False)
            if role == "branch":
                join = joins[task.task_id]  # both branches return it: it runs once, after both
                return TaskStepOutput(output=step.input, task_step=step, next_steps=[join], is_last=False)
            return TaskStepOutput(output=AgentChatResponse(response="joined"), task_step=step, next_steps=[], is_last=True)

    engine = ParallelStepEngine(Fan(), max_concurrency=2)
    answer = engine.chat("go")
    (state,) = engine.tasks.values()
    return [str(answer), sorted(str(o.output) for o in state.completed_steps), engine.max_concurrency]


def _check(out: dict[str, Any]) -> None:
    assert out["pending"] == "delete_file" and out["ran_before_approval"] == []
    assert out["refused"] == "AwaitingApprovalError"
    assert out["ran_after_approval"] == [["a.txt"], False]
    assert out["undone_is_queued"] and out["completed_after_undo"] == 1 and out["decide_again"]
    assert out["skipped"] == [False, "SkippedOutput"]
    assert out["held"] is True and out["rejected_ran"] == ["a.txt"]
    assert out["last"] == [True, "kept a.txt"] and out["final"] == "kept a.txt"
    assert out["memory_after_task"] == ["delete a.txt"]
    assert out["chat"] == "hello there" and out["first_was_last"] is False
    assert {"TaskCreated", "StepStarted", "StepCompleted", "StepUndone", "StepEdited", "TaskFinalized"} <= set(
        out["events"]
    )
    assert out["repr"].startswith("StepEngine(worker=FunctionCallingAgentWorker, tasks=2")
    assert out["parallel"] == ["joined", ["a", "b", "joined", "planned"], 2]


def test_the_engine_alone_runs_undoes_skips_holds_approves_and_finalizes() -> None:
    _check(scenario())


def test_the_engine_alone_imports_nothing_above_it() -> None:
    code = (
        "import json, sys\n"
        "from tests.test_engine_alone import scenario, ABOVE_THE_ENGINE\n"
        "out = scenario()\n"
        "out['loaded_above'] = sorted(m for m in sys.modules if m.startswith(ABOVE_THE_ENGINE))\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("loaded_above") == []
    _check(out)  # and it did everything while nothing above it was there


def test_an_engine_is_shown_by_the_runner_view_and_a_runner_is_an_engine() -> None:
    from nbagent import AgentRunner, ParallelAgentRunner
    from tests.helpers import CountingWorker

    engine = StepEngine(CountingWorker(target=1))
    engine.create_task("go")
    html = engine._repr_html_()
    assert html is not None and "StepEngine" in html and "1 task" in html
    assert issubclass(AgentRunner, StepEngine) and issubclass(ParallelAgentRunner, StepEngine)


def test_the_engine_takes_no_service_arguments() -> None:
    from tests.helpers import CountingWorker

    with pytest.raises(TypeError, match="autosave"):
        StepEngine(CountingWorker(target=1), autosave="run.json")  # type: ignore[call-arg]
    seen: list[ev.Event] = []
    engine = StepEngine(CountingWorker(target=1))
    engine.subscribe(seen.append)
    engine.chat("go")
    assert [type(e).__name__ for e in seen][-1] == "TaskFinalized"
