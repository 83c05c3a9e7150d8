"""What keeps a step's retained memory small must not change what undo restores.

Snapshots share what did not change since the previous step (a memory or source log that
did not grow, a value equal to its last copy), and steps, outputs and snapshots keep their
fields in key-sharing dicts. These tests drive a task through random runs, failures, undos
and injected input, and compare it at every point with a fresh run of only the steps that
survived; and check that the key-sharing dicts behave as plain dicts.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    CustomSimpleAgentWorker,
    MessageRole,
    Task,
    TaskStep,
    TaskStepOutput,
    ToolOutput,
)
from nbagent._dicts import shared_keys
from nbagent.runner.snapshot import _Saved


class Sometimes(CustomSimpleAgentWorker):
    """Writes memory and a source on most steps, not all (so snapshots share), keeps a list
    that changes only now and then (so its copy is shared), and fails when told to."""

    fail_at: int = 0

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0, "inputs": [], "marks": ["start"]}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        n = state["count"]
        state["inputs"].append(input)
        if n % 3:
            state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"step {n} ({input})"))
        if n % 2:
            state["sources"].append(ToolOutput(content=str(n), tool_name="count"))
        if n % 5 == 0:
            state["marks"].append(f"mark {n}")
        if n == self.fail_at:  # after it changed memory, sources and state: all must go back
            raise ValueError(f"boom at {n}")
        return AgentChatResponse(response=f"count={n} input={input}"), False

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def view(runner: AgentRunner, task: Task) -> dict[str, Any]:
    """Everything a step may change, without ids (two runs have different step ids)."""
    state = runner.state_of(task)
    extra = state.task.extra_state
    return {
        "memory": [(m.role, m.content) for m in state.task.scratch_memory.get_all()],
        "sources": [s.content for s in extra.get("sources", [])],
        "extra": {k: copy.deepcopy(v) for k, v in extra.items() if k not in ("memory", "sources")},
        "queue": [s.input for s in state.step_queue],
        "outputs": [str(o.output) for o in state.completed_steps],
        "undo_depth": len(state.history),
    }


def fresh(inputs: list[str | None]) -> dict[str, Any]:
    runner = AgentRunner(Sometimes())
    task = runner.create_task("go")
    for text in inputs:
        runner.run_step(task, input=text)
    return view(runner, task)


@pytest.mark.parametrize("seed", range(6))
def test_undo_after_shared_snapshots_matches_a_fresh_run(seed: int) -> None:
    rng = random.Random(seed)
    worker = Sometimes()
    runner = AgentRunner(worker)
    task = runner.create_task("go")
    done: list[str | None] = []  # the input of each step that stands
    pending: str | None = "go"  # the input the queued step will run with (the first: the task's)
    for i in range(70):
        roll = rng.random()
        if roll < 0.55 or not done:
            if rng.random() < 0.15:  # a failed attempt first: it must leave no trace
                worker.fail_at = len(done) + 1
                before = view(runner, task)
                with pytest.raises(ValueError, match="boom"):
                    runner.run_step(task)
                worker.fail_at = 0
                assert view(runner, task) == before
            runner.run_step(task)
            done.append(pending)
            pending = None
        else:
            text = f"injected {i}" if rng.random() < 0.5 else None
            for _ in range(rng.randint(1, min(4, len(done)))):
                ran_with = done.pop()
                runner.undo_step(task, input=text)
                pending = text if text is not None else ran_with
        expected = fresh(done)
        expected["queue"] = [pending]
        assert view(runner, task) == expected, f"after op {i}"


def test_consecutive_snapshots_share_what_did_not_change() -> None:
    runner = AgentRunner(Sometimes())
    task = runner.create_task("go")
    for _ in range(7):
        runner.run_step(task)
    history = runner.state_of(task).history
    # history[k] was taken before step k + 1. Step 3 wrote no message (3 % 3 == 0): the
    # snapshots before steps 3 and 4 hold the same memory marker, one object
    assert isinstance(history[2].extra_state["memory"], _Saved)
    assert history[2].extra_state["memory"] is history[3].extra_state["memory"]
    assert history[1].extra_state["memory"] is not history[2].extra_state["memory"]
    # step 2 added no source: before steps 2 and 3 the source log had the same length
    assert history[1].extra_state["sources"] is history[2].extra_state["sources"]
    assert history[1].extra_state["sources"].token == 1
    # "marks" changed only at step 5: its copy is shared until then
    assert history[1].extra_state["marks"] is history[4].extra_state["marks"]
    assert history[5].extra_state["marks"] is not history[4].extra_state["marks"]
    for _ in range(7):
        runner.undo_step(task)
    assert view(runner, task) == fresh([])


def test_a_saved_run_undoes_like_the_original(tmp_path: Path) -> None:
    runner = AgentRunner(Sometimes())
    task = runner.create_task("go")
    for i in range(9):
        runner.run_step(task, input=f"in {i}" if i % 4 == 0 else None)
    runner.undo_step(task, input="again")
    runner.run_step(task)
    loaded = AgentRunner.load(runner.save(tmp_path / "run.json"), Sometimes())
    assert view(loaded, task) == view(runner, task)
    while runner.state_of(task).history:
        runner.undo_step(task)
        loaded.undo_step(task)
        assert view(loaded, task) == view(runner, task)
    assert view(loaded, task) == fresh([])


# ----- key-sharing dicts -----------------------------------------------------------------------


def test_shared_keys_is_a_plain_dict_with_the_same_items_in_order() -> None:
    a = shared_keys({"b": 1, "a": [2], "c": None})
    b = shared_keys({"b": 3, "a": [4], "c": "x"})
    assert type(a) is dict and list(a.items()) == [("b", 1), ("a", [2]), ("c", None)]
    assert list(b.items()) == [("b", 3), ("a", [4]), ("c", "x")]
    a["b"] = 10
    a["new"] = 5  # a key of its own: that dict only
    del a["c"]
    assert list(a.items()) == [("b", 10), ("a", [2]), ("new", 5)]
    assert list(b.items()) == [("b", 3), ("a", [4]), ("c", "x")]
    reordered = shared_keys({"a": 1, "b": 2})
    assert list(reordered) == ["a", "b"]
    assert shared_keys({1: "x"}) == {1: "x"} and shared_keys({}) == {}


def test_models_with_shared_key_dicts_behave_as_before() -> None:
    step = TaskStep(task_id="t", input="hi")
    nxt = step.get_next_step()
    step.link_step(nxt)
    assert list(step.__dict__) == list(TaskStep.model_fields)
    assert step.model_dump()["next_steps"] == [nxt.step_id]
    copied = step.model_copy(update={"input": "changed"})
    assert (copied.input, step.input) == ("changed", "hi")
    step.is_ready = False
    assert not step.is_ready and nxt.is_ready and step.model_fields_set >= {"is_ready"}
    assert "is_ready" not in nxt.model_fields_set
    out = TaskStepOutput(output=AgentChatResponse(response="a"), task_step=step, next_steps=[nxt])
    again = TaskStepOutput.model_validate(out.model_dump() | {"output": out.output, "task_step": step, "next_steps": [nxt]})
    assert again.model_dump() == out.model_dump()
    response = AgentChatResponse(response="x")
    response.metadata["k"] = 1
    assert AgentChatResponse(response="y").metadata == {}  # nothing shared between instances
    assert dict(response) == {
        "response": "x", "sources": [], "metadata": {"k": 1}, "is_dummy_stream": False, "structured_response": None,
    }
