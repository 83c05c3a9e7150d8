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
from nbagent.runner.snapshot import OneChange, _Saved, plain_snapshot
from nbagent.store import RunStore


class Sometimes(CustomSimpleAgentWorker):
    """Counts every step; writes a message, a source, a mark only on some steps and records
    only the inputs it was given, so a step's snapshot shares much with the one before (and
    often differs from it in the count alone); fails when told to."""

    fail_at: int = 0

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0, "inputs": [], "marks": ["start"]}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        n = state["count"]
        if input is not None:
            state["inputs"].append(input)
        if n % 3 == 0:
            state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"step {n} ({input})"))
        if n % 4 == 0:
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
    for _ in range(9):
        runner.run_step(task, input="three" if runner.state_of(task).task.extra_state.get("count") == 2 else None)
    history = runner.state_of(task).history
    # history[k] was taken before step k + 1. Steps 1 and 2 wrote no message: the snapshots
    # before steps 2 and 3 hold the same memory marker, one object; step 3 wrote one
    extra = [h.extra_state for h in history]
    assert isinstance(extra[1]["memory"], _Saved)
    assert extra[1]["memory"] is extra[2]["memory"]
    assert extra[2]["memory"] is not extra[3]["memory"]
    # the source log grew at step 4 only (of 1-7): one marker before steps 2-4
    assert extra[1]["sources"] is extra[3]["sources"] and extra[1]["sources"].token == 0
    assert extra[4]["sources"] is not extra[3]["sources"] and extra[4]["sources"].token == 1
    # "marks" changed only at step 5: its copy is shared until then
    assert extra[1]["marks"] is extra[4]["marks"]
    assert extra[5]["marks"] is not extra[4]["marks"]
    # before step 3 only the count had changed since the full snapshot before step 2: kept
    # as that one value and a reference. Steps 3-6 changed more than the count (memory and
    # inputs, sources, marks, memory): full snapshots; step 7 the count alone again
    assert type(extra[1]) is dict and type(extra[2]) is OneChange and extra[2].base is extra[1]
    assert (extra[2].key, extra[2]["count"], extra[1]["count"]) == ("count", 2, 1)
    assert [type(e) for e in extra[3:9]] == [dict, dict, dict, dict, OneChange, dict]
    assert extra[7].base is extra[6] and extra[7]["sources"] is extra[6]["sources"]
    assert plain_snapshot(extra[2]) == {**extra[1], "count": 2}
    assert list(plain_snapshot(extra[2])) == list(extra[1]) == list(extra[2])
    for _ in range(9):
        runner.undo_step(task)
    assert view(runner, task) == fresh([])


def norm(snap: Any) -> Any:
    """A state snapshot as comparable values (a memory marker by its length)."""
    def one(v: Any) -> Any:
        if not isinstance(v, _Saved):
            return v
        if v.is_copy:
            return ("copy", v.value)
        return ("marker", v.token if isinstance(v.token, int) else v.token[2])

    return {k: one(v) for k, v in plain_snapshot(snap).items()}


@pytest.mark.parametrize("kind", ["run file", "run store"])
def test_a_saved_run_undoes_like_the_original(tmp_path: Path, kind: str) -> None:
    store = RunStore(tmp_path / "runs.db") if kind == "run store" else None
    runner = AgentRunner(Sometimes(), store=store)
    task = runner.create_task("go")
    for i in range(9):
        runner.run_step(task, input=f"in {i}" if i % 4 == 0 else None)
    runner.undo_step(task, input="again")
    runner.run_step(task)
    assert any(type(h.extra_state) is OneChange for h in runner.state_of(task).history)
    path = tmp_path / "runs.db" if store is not None else runner.save(tmp_path / "run.json")
    loaded = AgentRunner.load(path, Sometimes())
    assert view(loaded, task) == view(runner, task)
    assert [norm(h.extra_state) for h in loaded.state_of(task).history] == [
        norm(h.extra_state) for h in runner.state_of(task).history
    ]
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
    assert response.metadata is None  # as on the reference: no dict per answer until one is set
    response.metadata = {"k": 1}
    response.sources.append(ToolOutput(content="s", tool_name="t"))
    assert AgentChatResponse(response="y").sources == []  # nothing shared between instances
    assert dict(response) == {
        "response": "x", "sources": response.sources, "metadata": {"k": 1}, "is_dummy_stream": False,
        "structured_response": None,
    }
    assert response.model_fields_set == {"response", "metadata"}


def test_messages_and_tool_outputs_keep_exact_fields_sets() -> None:
    a = ChatMessage(role=MessageRole.USER, content="hi")
    b = ChatMessage(role=MessageRole.USER, content="there")
    assert a.model_fields_set == {"role", "content"} == b.model_fields_set
    a.name = "x"  # a moves to the fields-set that has "name"; b's unchanged
    assert a.model_fields_set == {"role", "content", "name"}
    assert b.model_fields_set == {"role", "content"}
    c = ChatMessage(role=MessageRole.USER, content="again")
    c.name = "y"
    assert c.__pydantic_fields_set__ is a.__pydantic_fields_set__  # still one set for both
    c.name = "z"  # already set: nothing changes
    assert c.model_fields_set == {"role", "content", "name"} and b.model_fields_set == {"role", "content"}
    with pytest.raises(ValueError):
        c.nonsense = 1  # type: ignore[attr-defined]
    assert c.model_fields_set == {"role", "content", "name"} == a.model_fields_set
    assert b.model_dump(exclude_unset=True) == {"role": MessageRole.USER, "content": "there"}
    assert ChatMessage(content="there").model_dump(exclude_unset=True) == {"content": "there"}
    assert b == ChatMessage(role=MessageRole.USER, content="there") and a != b
    b.additional_kwargs["k"] = 1  # per-instance defaults: nothing shared
    assert ChatMessage(content="z").additional_kwargs == {}
    out = ToolOutput(content="3", tool_name="add", raw_input={"a": 1})
    copied = out.model_copy(update={"content": "4"})
    assert (out.content, copied.content, copied.raw_input) == ("3", "4", {"a": 1})
    assert list(out.__dict__) == list(ToolOutput.model_fields)
    assert ToolOutput.model_validate(out.model_dump()) == out


def test_an_answer_without_metadata_says_none_as_the_reference_does() -> None:
    import warnings

    with warnings.catch_warnings():  # the reference is a dev dependency: a missing one fails
        warnings.simplefilter("ignore")
        import llama_index.core.chat_engine.types as types
    reference = types.AgentChatResponse(response="x")
    ours = AgentChatResponse(response="x")
    assert (ours.metadata, ours.sources) == (reference.metadata, reference.sources) == (None, [])


def test_shared_keys_gives_up_past_its_layout_budget() -> None:
    import nbagent._dicts as dicts

    fresh_layouts = [{f"key {i} {j}": j for j in range(3)} for i in range(dicts._MAX_LAYOUTS + 5)]
    results = [shared_keys(d) for d in fresh_layouts]
    assert results == fresh_layouts  # same items either way
    assert len(dicts._layouts) <= dicts._MAX_LAYOUTS
    assert results[-1] is fresh_layouts[-1]  # past the budget: the dict as it is
