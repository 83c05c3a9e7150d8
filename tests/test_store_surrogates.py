"""Lone surrogates (half of an emoji whose two halves arrived in separate stream chunks) are
text like any other: the run store keeps them exactly, wherever text can live.

SQLite takes only valid UTF-8 text, so before, every autosave of such a task failed, the
store ended without the task or its answer, ``save("run.db")`` raised and a batch re-ran
finished tasks on resume. The model here emits them in its tool-call arguments, its answer and
its error messages; the tool, the task's input and its state hold them too.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, ChatMessage, FunctionCallingAgent, FunctionLLM, FunctionTool, MessageRole, tool_call
from nbagent.store import RunStore
from tests.test_store import comparable


def same(a: AgentRunner, b: AgentRunner) -> None:
    """The same tasks and conversation (a loaded run is a plain AgentRunner)."""
    da, db = comparable(a), comparable(b)
    assert da["tasks"] == db["tasks"] and da["runner"]["memory"] == db["runner"]["memory"]

HIGH, LOW = "\ud83d", "\ude00"  # the two halves of U+1F600, each alone
SPLIT = "a" + HIGH + "b" + LOW + "c" + LOW + HIGH  # lone halves, and a pair in the wrong order


def shout(text: str) -> str:
    """Say it louder."""
    return text.upper() + HIGH


def lone_model(fail_first: bool = True) -> FunctionLLM:
    calls = {"n": 0}

    def fn(messages: list[ChatMessage], tools: Any) -> Any:
        calls["n"] += 1
        if fail_first and calls["n"] == 1:
            raise ValueError("the server sent " + LOW + " alone")  # a failure record holds it
        last = messages[-1]
        if last.role == MessageRole.TOOL:
            return "the answer is " + last.text + SPLIT
        return tool_call("shout", text="hi " + SPLIT)

    return FunctionLLM(fn, model="m1")


def agent(fail_first: bool = True) -> FunctionCallingAgent:
    return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(shout)], llm=lone_model(fail_first))


def run_one(runner: AgentRunner) -> str:
    task = runner.create_task("question " + SPLIT, extra_state={"note": LOW + "state", "nested": [HIGH]})
    with pytest.raises(ValueError, match="alone"):
        runner.run_step(task)
    while not runner.run_step(task).is_last:
        pass
    runner.finalize_response(task)
    return task.task_id


def texts(runner: AgentRunner, task_id: str) -> dict[str, Any]:
    state = runner.state_of(task_id)
    return {
        "input": state.task.input,
        "answer": state.final_response.response,
        "tool": [o.content for out in state.completed_steps for o in out.tool_outputs],
        "failure": [f.message for f in state.failures],
        "state": (state.task.extra_state["note"], state.task.extra_state["nested"]),
        "memory": [m.content for m in runner.memory.get_all()],
    }


def test_autosave_keeps_every_lone_surrogate_exactly(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = agent()
    runner.autosave = db
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an autosave that fails warns: none may
        task_id = run_one(runner)
    live = texts(runner, task_id)
    assert live["input"] == "question " + SPLIT and live["answer"].endswith(SPLIT)
    assert live["tool"] == [("HI " + SPLIT).upper() + HIGH] and LOW in live["failure"][0]
    with RunStore(db) as store:
        [info] = store.tasks()
        assert (info.status, info.input, info.response) == ("finalized", live["input"], live["answer"])
        loaded = store.load()
    assert texts(loaded, task_id) == live
    same(runner, loaded)


def test_save_into_a_store_and_labels_round_trip(tmp_path: Path) -> None:
    runner = agent()
    task_id = run_one(runner)
    path = runner.save(tmp_path / "run.db")  # raised UnicodeEncodeError before
    loaded = AgentRunner.load(path)
    assert texts(loaded, task_id) == texts(runner, task_id)
    with RunStore(path) as store:
        store.save_task(runner, task_id, key="k" + HIGH, tag="t" + LOW)
        found = store.task(key="k" + HIGH, tag="t" + LOW)
        assert found is not None and found.task_id == task_id and found.key == "k" + HIGH
        assert store.task(key="k", tag="t" + LOW) is None
    # any other SQLite reader sees valid data: such a text is a BLOB of its UTF-8-with-surrogates bytes
    con = sqlite3.connect(path)
    kind, raw = con.execute("SELECT typeof(input), input FROM tasks").fetchone()
    con.close()
    assert kind == "blob" and raw.decode("utf-8", "surrogatepass") == "question " + SPLIT


def test_a_task_id_holding_a_lone_surrogate_is_stored_too(tmp_path: Path) -> None:
    runner = agent(fail_first=False)
    runner.autosave = tmp_path / "runs.db"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task = runner.create_task("x", task_id="id-" + HIGH)
        runner.chat("plain")  # another task, after it
    loaded = AgentRunner.load(tmp_path / "runs.db")
    assert "id-" + HIGH in loaded.tasks
    same(runner, loaded)
    assert task.task_id in [t.task_id for t in RunStore(tmp_path / "runs.db").tasks()]


def test_the_run_file_and_the_store_hold_the_same(tmp_path: Path) -> None:
    runner = agent()
    task_id = run_one(runner)
    from_file = AgentRunner.load(runner.save(tmp_path / "run.json"))
    from_store = AgentRunner.load(runner.save(tmp_path / "run.db"))
    assert texts(from_file, task_id) == texts(from_store, task_id) == texts(runner, task_id)


def test_a_batch_resumes_finished_tasks_holding_lone_surrogates_instead_of_running_them_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "batch.db"
    inputs = ["one " + HIGH, "two " + LOW, "three " + SPLIT]

    def make(counter: list[int]) -> FunctionCallingAgent:
        def fn(messages: list[ChatMessage], tools: Any) -> Any:
            counter.append(1)
            last = messages[-1]
            if last.role == MessageRole.TOOL:
                return "done: " + last.text
            return tool_call("shout", text=last.text)

        return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(shout)], llm=FunctionLLM(fn, model="m1"))

    first_calls: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b1 = make(first_calls).run_batch(inputs, store=db, progress=False)
    assert not b1.failed and len(first_calls) == 6
    with RunStore(db) as store:
        assert sorted(t.input for t in store.tasks(tag="batch", status="finalized")) == sorted(inputs)
    again: list[int] = []
    b2 = make(again).run_batch(inputs, store=db, progress=False)
    assert again == [] and all(it.resumed for it in b2)  # nothing ran twice
    assert [r.response for r in b2.results] == [r.response for r in b1.results]
    assert b2.results[2].response == "done: " + ("three " + SPLIT).upper() + HIGH
