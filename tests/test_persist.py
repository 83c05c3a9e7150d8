"""Save / load: versioned JSON, faithful round trips, shared objects, clear errors, autosave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    MessageRole,
    ParallelAgentRunner,
    ScriptedLLM,
    TaskStateError,
    ToolOutput,
    seed_ids,
)
from nbagent import persist
from nbagent.llms.scripted import tool_call
from nbagent.persist import PersistError, SavedWorker
from nbagent.runner.snapshot import AppendLog
from nbagent.workers import FunctionCallingAgentWorker, ReActAgentWorker
from tests.helpers import CountingWorker


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def act(a: int, b: int) -> str:
    return f'Thought: I need to add.\nAction: add\nAction Input: {{"a": {a}, "b": {b}}}'


REPLIES = [act(1, 2), act(3, 4), act(7, 10), "Thought: I can answer.\nAnswer: The sum is 17."]


def react(replies: list[Any]) -> ReActAgentWorker:
    return ReActAgentWorker.from_tools([add], llm=ScriptedLLM(replies))


def stable(doc: dict[str, Any]) -> dict[str, Any]:
    """A run document without what is measured (latencies, failure times)."""
    for task in doc["tasks"]:
        for out in task["outputs"]:
            out["latency_s"] = None
        for f in task["failures"]:
            f["at"] = 0
    return doc


def summary(runner: AgentRunner, task_id: str) -> dict[str, Any]:
    """What an observer sees of a task: outputs, ids, memory, state."""
    state = runner.state_of(task_id)
    extra = state.task.extra_state
    return {
        "outputs": [(o.task_step.step_id, str(o.output), o.is_last, [s.step_id for s in o.next_steps])
                    for o in state.completed_steps],
        "memory": [(m.role.value, m.text) for m in runner.memory.get_all()],
        "reasoning": [r.model_dump() for r in extra["reasoning"]],
        "sources": [s.content for s in extra["sources"]],
        "iterations": extra["iterations"],
        "status": state.status.value,
    }


# ----- round trips -------------------------------------------------------------------------------


def test_react_round_trip_is_exact_and_the_file_is_versioned_json(tmp_path: Path) -> None:
    seed_ids(0)
    runner = AgentRunner(react(REPLIES))
    task = runner.create_task("Add 1+2, then 3+4, then 7+10")
    runner.run_step(task)
    runner.run_step(task)
    path = runner.save(tmp_path / "run.json")
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["version"]) == ("nbagent-run", 1)
    assert doc["runner"]["worker"]["kind"] == "ReActAgentWorker"
    loaded = AgentRunner.load(path, react(REPLIES[2:]))
    # saving the loaded runner gives the very same document: nothing lost, sharing kept
    assert stable(persist.runner_to_dict(loaded)) == stable(persist.runner_to_dict(runner))
    state = loaded.state_of(task.task_id)
    extra = state.task.extra_state
    assert isinstance(extra["reasoning"], AppendLog) and len(extra["reasoning"]) == 4
    assert [type(r).__name__ for r in extra["reasoning"]][:2] == ["ActionReasoningStep", "ObservationReasoningStep"]
    # one object, however many places hold it
    assert state.completed_steps[0].tool_outputs[0] is extra["sources"][0]
    assert state.task.memory is loaded.memory
    assert state.history[1].extra_state["reasoning"].value is extra["reasoning"]
    assert state.steps[state.completed_steps[1].task_step.step_id].step_state is state.step_queue[0].step_state


def test_resumed_task_continues_like_an_uninterrupted_one(tmp_path: Path) -> None:
    seed_ids(0)
    straight = AgentRunner(react(REPLIES))
    task = straight.create_task("Add them")
    straight.run_step(task)
    straight.run_step(task)
    path = straight.save(tmp_path / "run.json")
    while not straight.run_step(task).is_last:
        pass
    straight.finalize_response(task)

    resumed = AgentRunner.load(path, react(REPLIES[2:]))  # restores the seeded id sequence
    while not resumed.run_step(task.task_id).is_last:
        pass
    assert str(resumed.finalize_response(task.task_id)) == "The sum is 17."
    assert summary(resumed, task.task_id) == summary(straight, task.task_id)


_CHILD = """
import json, sys
from nbagent import AgentRunner, ScriptedLLM
from nbagent.workers import ReActAgentWorker

def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

replies = json.loads(sys.argv[2])
runner = AgentRunner.load(sys.argv[1], ReActAgentWorker.from_tools([add], llm=ScriptedLLM(replies)))
(task_id,) = list(runner.tasks)
while not runner.run_step(task_id).is_last:
    pass
runner.finalize_response(task_id)
state = runner.state_of(task_id)
extra = state.task.extra_state
print(json.dumps({
    "outputs": [(o.task_step.step_id, str(o.output), o.is_last, [s.step_id for s in o.next_steps])
                for o in state.completed_steps],
    "memory": [(m.role.value, m.text) for m in runner.memory.get_all()],
    "reasoning": [r.model_dump() for r in extra["reasoning"]],
    "sources": [s.content for s in extra["sources"]],
    "iterations": extra["iterations"],
    "status": state.status.value,
}))
"""


def test_a_fresh_process_continues_exactly_where_the_task_stopped(tmp_path: Path) -> None:
    seed_ids(0)
    straight = AgentRunner(react(REPLIES))
    task = straight.create_task("Add them")
    straight.run_step(task)
    straight.run_step(task)
    path = straight.save(tmp_path / "run.json")
    while not straight.run_step(task).is_last:
        pass
    straight.finalize_response(task)

    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "NBAGENT_BLOCK_NETWORK": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(path), json.dumps(REPLIES[2:])],
        capture_output=True, text=True, timeout=120, env=env, cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    expected = json.loads(json.dumps(summary(straight, task.task_id)))  # tuples -> lists
    assert child == expected
    assert child["outputs"][-1][1] == "The sum is 17." and len(child["outputs"]) == 4


def test_undo_history_survives_a_reload(tmp_path: Path) -> None:
    runner = AgentRunner(CountingWorker(target=5))  # type: ignore[arg-type]
    task = runner.create_task("count")
    first = runner.run_step(task)
    after_one = (dict(task.extra_state), [m.text for m in task.scratch_memory.get_all()])
    runner.run_step(task)
    runner.run_step(task)
    loaded = AgentRunner.load(runner.save(tmp_path / "run.json"), CountingWorker(target=5))  # type: ignore[arg-type]
    tid = task.task_id
    loaded.undo_step(tid)
    loaded.undo_step(tid)
    state = loaded.state_of(tid)
    extra = state.task.extra_state
    assert extra["count"] == after_one[0]["count"] == 1
    assert extra["seen_inputs"] == ["count"]
    assert [m.text for m in state.task.scratch_memory.get_all()] == after_one[1] == ["step 1"]
    assert [s.content for s in extra["sources"]] == ["1"]
    # the custom worker's state dict holds the task's scratch memory itself, as before saving
    step = state.step_queue[0]
    assert step.step_state["memory"] is state.task.scratch_memory
    assert [o.task_step.step_id for o in state.completed_steps] == [first.task_step.step_id]
    assert len(state.undone_outputs) == 2 and state.undone_ids
    out = loaded.run_step(tid, input="again")  # and running on from there works
    assert str(out) == "count=2 input=again"


def test_failures_final_response_and_flags_survive(tmp_path: Path) -> None:
    runner = AgentRunner(CountingWorker(target=2, fail_on={2}))  # type: ignore[arg-type]
    task = runner.create_task("x")
    runner.run_step(task)
    with pytest.raises(ValueError, match="boom at 2"):
        runner.run_step(task)
    other = runner.create_task("y")
    runner.abandon_task(other)
    loaded = AgentRunner.load(runner.save(tmp_path / "r.json"))
    state = loaded.state_of(task.task_id)
    assert state.status.value == "failed"
    (failure,) = state.failures
    assert failure.error_type == "ValueError" and "boom at 2" in failure.traceback
    assert loaded.state_of(other.task_id).status.value == "abandoned"

    done = AgentRunner(CountingWorker(target=1))  # type: ignore[arg-type]
    response = done.chat("hello")
    again = AgentRunner.load(done.save(tmp_path / "d.json"))
    (st,) = again.tasks.values()
    assert st.finalized and isinstance(st.final_response, AgentChatResponse)
    assert st.final_response.response == response.response
    assert st.final_response is st.completed_steps[-1].output
    assert [m.text for m in again.memory.get_all()] == [m.text for m in done.memory.get_all()]


def test_function_calling_sources_and_memory_round_trip(tmp_path: Path) -> None:
    seed_ids(1)
    worker = FunctionCallingAgentWorker.from_tools([add], llm=ScriptedLLM([tool_call("add", a=2, b=3), "5"]))
    runner = AgentRunner(worker)
    task = runner.create_task("2+3?")
    runner.run_step(task)
    loaded = AgentRunner.load(
        runner.save(tmp_path / "fc.json"),
        FunctionCallingAgentWorker.from_tools([add], llm=ScriptedLLM(["It is 5."])),
    )
    state = loaded.state_of(task.task_id)
    assert state.completed_steps[0].tool_outputs[0] is state.task.extra_state["sources"][0]
    roles = [m.role for m in state.task.scratch_memory.get_all()]
    assert roles == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    assert state.task.scratch_memory.get_all()[1].tool_calls[0].tool_kwargs == {"a": 2, "b": 3}
    out = loaded.run_step(task.task_id)
    assert out.is_last and str(loaded.finalize_response(task.task_id)) == "It is 5."


def test_values_of_many_kinds_round_trip(tmp_path: Path) -> None:
    shared = {"n": 1}
    weird: dict[Any, Any] = {1: "int key", "$dollar": "kept", ("t", 1): frozenset({1, 2})}
    values = {
        "tuple": (1, "a", None),
        "set": {3, 1, 2},
        "bytes": b"\x00\xff",
        "floats": [float("inf"), float("-inf"), 1.5],
        "weird": weird,
        "a": shared,
        "b": shared,
        "role": MessageRole.TOOL,
        "msg": ChatMessage(role=MessageRole.USER, content=[{"type": "text", "text": "hi"}]),
        "nested": [[1, [2, [3]]]],
        "text": "naïve 🚀 \ud800 \x00 </script>",
    }
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    task = runner.create_task("go", extra_state=dict(values))
    loaded = AgentRunner.load(runner.save(tmp_path / "v.json"))
    extra = loaded.state_of(task.task_id).task.extra_state
    for key in ("tuple", "set", "bytes", "weird", "role", "msg", "nested", "text"):
        assert extra[key] == values[key], key
        assert type(extra[key]) is type(values[key]), key
    assert extra["floats"][:2] == [float("inf"), float("-inf")]
    assert extra["a"] is extra["b"]
    assert type(extra["role"]) is MessageRole


# ----- errors ------------------------------------------------------------------------------------


class Point(BaseModel):
    x: int


class Colour(Enum):
    RED = "red"


def test_unsaveable_value_names_its_key_and_type_and_leaves_the_old_file(tmp_path: Path) -> None:
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    task = runner.create_task("go")
    path = runner.save(tmp_path / "run.json")
    before = path.read_bytes()
    task.extra_state["conn"] = [1, {"socket": object()}]
    with pytest.raises(PersistError) as err:
        runner.save(path)
    text = str(err.value)
    assert "extra_state['conn'][1]['socket']" in text and "builtins.object" in text
    assert path.read_bytes() == before  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary left


def test_foreign_classes_need_allow_type_and_are_never_imported_otherwise(tmp_path: Path) -> None:
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    task = runner.create_task("go", extra_state={"p": Point(x=3), "c": Colour.RED})
    with pytest.raises(PersistError, match="allow_type"):
        runner.save(tmp_path / "run.json")
    try:
        persist.allow_type(Point)
        persist.allow_type(Colour)
        loaded = AgentRunner.load(runner.save(tmp_path / "run.json"))
        extra = loaded.state_of(task.task_id).task.extra_state
        assert extra["p"] == Point(x=3) and extra["c"] is Colour.RED
    finally:
        persist._ALLOWED.clear()
    # a file naming any other class is refused before anything is imported
    doc = json.loads((tmp_path / "run.json").read_text())
    doc["tasks"][0]["extra_state"]["p"]["class"] = "os:system"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(PersistError, match="not an nbagent class"):
        AgentRunner.load(bad)


def test_corrupt_truncated_and_future_files_are_clear_errors(tmp_path: Path) -> None:
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    runner.run_step(runner.create_task("go"))
    good = runner.save(tmp_path / "run.json").read_text()

    def load(text: str) -> str:
        p = tmp_path / "x.json"
        p.write_text(text)
        with pytest.raises(PersistError) as err:
            AgentRunner.load(p)
        return str(err.value)

    assert "truncated or corrupt" in load(good[: len(good) // 2])
    assert "empty" in load("")
    assert "not an nbagent run file" in load('{"hello": 1}')
    future = json.loads(good)
    future["version"] = 99
    assert "newer nbagent" in load(json.dumps(future)) and "version 99" in load(json.dumps(future))
    broken = json.loads(good)
    del broken["tasks"][0]["queue"]
    assert "lacks 'queue'" in load(json.dumps(broken))
    broken = json.loads(good)
    broken["tasks"][0]["queue"] = ["no-such-step"]
    assert "unknown step id 'no-such-step'" in load(json.dumps(broken))
    with pytest.raises(PersistError, match="no such run file"):
        AgentRunner.load(tmp_path / "missing.json")


# ----- loading without a worker, autosave, parallel ------------------------------------------------


def test_a_run_loaded_without_worker_shows_but_does_not_step(tmp_path: Path) -> None:
    seed_ids(0)
    runner = AgentRunner(react(REPLIES))
    task = runner.create_task("Add")
    runner.run_step(task)
    loaded = AgentRunner.load(runner.save(tmp_path / "run.json"))
    assert isinstance(loaded.agent_worker, SavedWorker)
    assert loaded.agent_worker.describe()["model"] == "scripted"
    assert "step graph" in loaded.get_task(task.task_id)._repr_html_()
    with pytest.raises(TaskStateError, match="without a worker"):
        loaded.run_step(task.task_id)


def test_autosave_keeps_the_file_current_and_a_crash_loses_only_the_running_step(tmp_path: Path) -> None:
    seed_ids(0)
    path = tmp_path / "auto.json"
    runner = AgentRunner(react(REPLIES))
    runner.autosave = path
    assert runner.autosave == path.absolute() and path.exists()
    task = runner.create_task("Add")
    counts = []
    for _ in range(2):
        runner.run_step(task)
        counts.append(len(json.loads(path.read_text())["tasks"][0]["completed"]))
    assert counts == [1, 2]
    # the "crash": this process stops using the runner; the file has both steps
    resumed = AgentRunner.load(path, react(REPLIES[2:]), autosave=True)
    while not resumed.run_step(task.task_id).is_last:
        pass
    assert json.loads(path.read_text())["tasks"][0]["status"] == "completed"
    resumed.undo_step(task.task_id)  # every change is saved, not only steps
    assert json.loads(path.read_text())["tasks"][0]["status"] == "active"
    runner.autosave = None
    assert runner.autosave is None


def test_a_failing_autosave_warns_and_keeps_the_last_good_file(tmp_path: Path) -> None:
    path = tmp_path / "auto.json"
    runner = AgentRunner(CountingWorker(target=5))  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.autosave = path
    runner.run_step(task)
    good = path.read_text()
    task.extra_state["bad"] = object()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run_step(task)  # the step itself succeeds
    assert any(issubclass(w.category, persist.AutosaveWarning) and "extra_state['bad']" in str(w.message) for w in caught)
    assert path.read_text() == good


def test_parallel_runner_round_trip_keeps_its_class_and_settings(tmp_path: Path) -> None:
    runner = ParallelAgentRunner(CountingWorker(target=3), max_concurrency=3)  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    runner.run_step(task)
    loaded = ParallelAgentRunner.load(runner.save(tmp_path / "p.json"), CountingWorker(target=3))  # type: ignore[arg-type]
    assert type(loaded) is ParallelAgentRunner and loaded.max_concurrency == 3
    assert type(loaded.state_of(task.task_id).history[-1]).__name__ == type(runner.state_of(task).history[-1]).__name__
    loaded.undo_step(task.task_id)
    assert loaded.state_of(task.task_id).task.extra_state["count"] == 1
    assert loaded.run_until_done(task.task_id).is_last
    # and the same file opens in a plain AgentRunner (max_concurrency is not forced on it)
    assert type(AgentRunner.load(tmp_path / "p.json")) is AgentRunner


def test_saved_ids_continue_only_when_asked(tmp_path: Path) -> None:
    from nbagent import ids, new_id

    seed_ids(5)
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    runner.create_task("go")
    path = runner.save(tmp_path / "s.json")
    expected = new_id()
    seed_ids(None)
    AgentRunner.load(path, restore_ids=False)
    assert ids._rng is None
    AgentRunner.load(path)
    assert new_id() == expected


def test_tool_output_values_stay_typed() -> None:
    runner = AgentRunner(CountingWorker(target=3))  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    doc = persist.runner_to_dict(runner)
    loaded = persist.runner_from_dict(json.loads(json.dumps(doc)))
    (src,) = loaded.state_of(task.task_id).task.extra_state["sources"]
    assert isinstance(src, ToolOutput) and src.content == "1"


def population(city: str) -> int:
    """The population of a city."""
    return {"Paris": 2_100_000, "Berlin": 3_700_000}[city]


PLAN = """Thought: both populations are independent, then add them.
1. population(city="Paris")
2. population(city="Berlin")
3. add(a=$1, b=$2)
4. join()"""
PLAN_ANSWER = "Thought: I have the sum.\nAnswer: Together 5,800,000 people."


def test_a_planned_parallel_dag_resumes_like_an_uninterrupted_one(tmp_path: Path) -> None:
    from nbagent import PlannerAgentWorker

    def planner(replies: list[str]) -> PlannerAgentWorker:
        return PlannerAgentWorker([population, add], ScriptedLLM(replies))

    seed_ids(3)
    straight = ParallelAgentRunner(planner([PLAN, PLAN_ANSWER]))
    task = straight.create_task("Paris + Berlin?")
    straight.run_steps_in_queue(task)  # the plan
    straight.run_steps_in_queue(task)  # both populations, together
    path = straight.save(tmp_path / "dag.json")
    final = straight.run_until_done(task)

    resumed = ParallelAgentRunner.load(path, planner([PLAN_ANSWER]))
    assert stable(persist.runner_to_dict(resumed))["tasks"] == stable(
        persist.runner_to_dict(AgentRunner.load(path, restore_ids=False))
    )["tasks"]
    again = resumed.run_until_done(task.task_id)
    assert str(again.output) == str(final.output) == "Together 5,800,000 people."
    mine, theirs = resumed.state_of(task.task_id), straight.state_of(task)
    assert [o.task_step.step_id for o in mine.completed_steps] == [o.task_step.step_id for o in theirs.completed_steps]
    assert [str(o.output) for o in mine.completed_steps] == [str(o.output) for o in theirs.completed_steps]
    resumed.undo_step(task.task_id)  # the join's snapshot came through the file
    assert resumed.state_of(task.task_id).status.value == "active"


def test_autosave_as_a_constructor_option(tmp_path: Path) -> None:
    from nbagent import AgentRunner, FnAgentWorker, ParallelAgentRunner

    path = tmp_path / "auto.json"
    runner = AgentRunner(FnAgentWorker(lambda s: ("x", s["step"] >= 1)), autosave=path)
    task = runner.create_task("go")
    runner.run_step(task)
    first = path.read_text()
    runner.run_step(task)
    assert path.read_text() != first  # saved again after the second step
    loaded = AgentRunner.load(path, FnAgentWorker(lambda s: ("x", True)))
    assert len(loaded.get_completed_steps(task.task_id)) == 2
    par = ParallelAgentRunner(FnAgentWorker(lambda s: ("x", True)), autosave=tmp_path / "p.json")
    par.create_task("go")
    assert (tmp_path / "p.json").exists()


def test_saved_files_get_the_usual_permissions(tmp_path: Path) -> None:
    from nbagent.persist import atomic_write_text

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "x.json", "{}")
    finally:
        os.umask(mask)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
