"""A call id names one call for the task's whole life (issue 28, item 2).

The hole: ReAct numbered its calls per step, so after an undo and a re-run ``react_1`` named a
new call, and approving ``react_1`` (seen as ``delete scratch.txt``) deleted ``thesis.docx``.
Each test makes the person approve the id they saw after the task moved on (undo and re-run,
load from a run file or a run store, fork, goto, an edited step), and checks that the stale
id is refused with an error naming it, what it was and what waits now, that nothing was
deleted, and that the id that waits now is new.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, FunctionCallingAgent, FunctionTool, ParallelAgentRunner, ReActAgent, ScriptedLLM
from nbagent.calls import issue_call_id, scan_call_ids
from nbagent.runner.base import TaskStateError
from nbagent.workers.planner import PlannerAgentWorker


class Disk:
    """Files a tool deletes for real (in a temporary directory)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("scratch.txt", "thesis.docx"):
            (root / name).write_text(name)

    def tool(self) -> FunctionTool:
        def delete(path: str) -> str:
            """Delete a file.

            Args:
                path: the file's name
            """
            (self.root / path).unlink()
            return f"deleted {path}"

        return FunctionTool.from_defaults(delete, requires_approval=True)

    def left(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir())


def react_reply(path: str) -> str:
    return f'Thought: clean up.\nAction: delete\nAction Input: {{"path": "{path}"}}'


def fc_reply(path: str, call_id: str = "call_1") -> dict[str, Any]:
    """A function-calling reply that reuses the model id ``call_1`` (as a scripted or replayed
    model, or a server numbering calls per reply, does)."""
    return {"tool_calls": [{"id": call_id, "name": "delete", "arguments": {"path": path}}]}


def make(kind: str, disk: Disk, replies: list[Any], **runner: Any) -> AgentRunner:
    if kind == "react":
        return ReActAgent.from_tools([disk.tool()], llm=ScriptedLLM(replies), **runner)
    return FunctionCallingAgent.from_tools([disk.tool()], llm=ScriptedLLM(replies), **runner)


def replies_for(kind: str) -> list[Any]:
    if kind == "react":
        return [react_reply("scratch.txt"), react_reply("thesis.docx"), "Thought: ok\nAnswer: done"]
    return [fc_reply("scratch.txt"), fc_reply("thesis.docx"), "done"]


def the_stale_id_is_refused(agent: AgentRunner, task: Any, stale: str, disk: Disk) -> str:
    """``stale`` (seen as delete scratch.txt) is refused; the id that waits now is new and
    names delete thesis.docx; nothing was deleted. Returns the new id."""
    (now,) = agent.pending_approvals(task)
    assert now.call_id != stale and now.arguments == {"path": "thesis.docx"}
    for decide in (lambda: agent.approve(task, stale), lambda: agent.reject(task, stale, reason="no")):
        with pytest.raises(ValueError) as info:
            decide()
        message = str(info.value)
        assert f"call {stale!r} is not waiting for a decision" in message
        assert "delete(path='scratch.txt')" in message  # what the person saw under that id
        assert f"decided now: [{now.call_id!r}] ({now.call_id}: delete(path='thesis.docx'))" in message
    assert agent.pending_approvals(task) == [now]  # nothing was decided
    assert disk.left() == ["scratch.txt", "thesis.docx"]
    return now.call_id


@pytest.mark.parametrize("kind", ["react", "function calling"])
def test_the_issue_scenario_undo_and_rerun(kind: str, tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    agent = make(kind, disk, replies_for(kind))
    task = agent.create_task("tidy up")
    agent.run_step(task)
    (seen,) = agent.pending_approvals(task)
    assert seen.arguments == {"path": "scratch.txt"}
    agent.undo_step(task)  # the person takes the step back and runs it again
    agent.run_step(task)
    new = the_stale_id_is_refused(agent, task, seen.call_id, disk)
    assert re.fullmatch(re.escape(seen.call_id) + r"#2", new)
    agent.approve(task, new)
    out = agent.run_step(task)
    assert disk.left() == ["scratch.txt"] and out.tool_outputs[0].content == "deleted thesis.docx"


def test_function_calling_keeps_the_model_id_in_the_transcript(tmp_path: Path) -> None:
    """The approval id differs from the model's reused id; the model still sees its own id on
    the tool reply (an OpenAI transcript pairs them), and the step's output carries it."""
    disk = Disk(tmp_path)
    llm = ScriptedLLM(replies_for("function calling"))
    agent = FunctionCallingAgent.from_tools([disk.tool()], llm=llm)
    task = agent.create_task("tidy up")
    agent.run_step(task)
    agent.undo_step(task)
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    assert p.call_id == "call_1#2"
    agent.approve(task, p.call_id)
    out = agent.run_step(task)
    assert out.tool_outputs[0].tool_call_id == "call_1"
    agent.run_step(task)
    sent = llm.requests[-1].messages
    asked = [c.tool_id for m in sent for c in m.tool_calls]
    replied = [m.tool_call_id for m in sent if m.role.value == "tool"]
    assert asked == replied == ["call_1"]
    rec = agent.state_of(task).steps[out.task_step.step_id].step_state["approval"]
    assert [(c["call_id"], c["tool_id"]) for c in rec["calls"]] == [("call_1#2", "call_1")]


def test_two_calls_of_one_reply_with_the_same_model_id_get_two_ids(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    reply = {"tool_calls": [
        {"id": "x", "name": "delete", "arguments": {"path": "scratch.txt"}},
        {"id": "x", "name": "delete", "arguments": {"path": "thesis.docx"}},
    ]}
    agent = FunctionCallingAgent.from_tools([disk.tool()], llm=ScriptedLLM([reply, "done"]))
    task = agent.create_task("tidy up")
    agent.run_step(task)
    first, second = agent.pending_approvals(task)
    assert (first.call_id, second.call_id) == ("x", "x#2")
    agent.approve(task, first.call_id)
    agent.reject(task, second.call_id, reason="my thesis")
    out = agent.run_step(task)
    assert disk.left() == ["thesis.docx"]
    assert [o.content for o in out.tool_outputs] == ["deleted scratch.txt", "Rejected by user: my thesis. The call was not run."]


@pytest.mark.parametrize("where", ["run.json", "runs.db"])
@pytest.mark.parametrize("kind", ["react", "function calling"])
def test_ids_stay_used_after_a_load(kind: str, where: str, tmp_path: Path) -> None:
    """Saved while ``react_1`` (or ``call_1``) waited; loaded with a fresh model whose reply
    reuses the id: the loaded run knows the id was used."""
    (tmp_path / "files").mkdir()
    disk = Disk(tmp_path / "files")
    path = tmp_path / where
    agent = make(kind, disk, replies_for(kind)[:1], autosave=path)
    task = agent.create_task("tidy up")
    agent.run_step(task)
    (seen,) = agent.pending_approvals(task)
    agent.autosave = None
    worker = make(kind, disk, replies_for(kind)[1:]).agent_worker
    loaded = AgentRunner.load(path, worker)
    loaded.undo_step(task.task_id)
    loaded.run_step(task.task_id)
    the_stale_id_is_refused(loaded, task.task_id, seen.call_id, disk)


@pytest.mark.parametrize("kind", ["react", "function calling"])
def test_fork_goto_and_edit_never_reuse_an_id(kind: str, tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    paths = ["scratch.txt", "thesis.docx", "thesis.docx", "thesis.docx"]
    replies = [react_reply(p) if kind == "react" else fc_reply(p) for p in paths]
    agent = make(kind, disk, replies)
    task = agent.create_task("tidy up")
    first_step = agent.get_upcoming_steps(task)[0]
    agent.run_step(task)
    (seen,) = agent.pending_approvals(task)
    ids = {seen.call_id}
    # fork: a new step in place of the first; it asks the model again
    agent.fork(task, first_step.step_id)
    agent.run_step(task)
    ids.add(the_stale_id_is_refused(agent, task, seen.call_id, disk))
    # goto: back to just before the forked step ran
    asking = agent.get_completed_steps(task)[-1].task_step
    agent.goto_step(task, asking.step_id, before=True)
    agent.run_step(task)
    ids.add(the_stale_id_is_refused(agent, task, seen.call_id, disk))
    # an edited step (undo with new input, then edit_step) runs again: a new id again
    asking = agent.undo_step(task, input="only the thesis")
    agent.edit_step(task, asking.step_id, input="only the thesis, please")
    agent.run_step(task)
    ids.add(the_stale_id_is_refused(agent, task, seen.call_id, disk))
    assert len(ids) == 4, ids


def test_a_call_that_ran_or_was_undone_is_named_when_refused(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    agent = make("react", disk, [react_reply("scratch.txt"), "Answer: done"])
    task = agent.create_task("tidy up")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id)
    agent.run_step(task)
    assert disk.left() == ["thesis.docx"]
    with pytest.raises(ValueError, match=rf"call '{p.call_id}' .*delete\(path='scratch.txt'\) in step .*, which already ran.*decided now: none"):
        agent.approve(task, p.call_id)
    with pytest.raises(ValueError, match="'nope'.*no call of this task has that id"):
        agent.reject(task, "nope")


def test_planner_call_ids_are_new_after_a_replan(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    plan_a = "1. delete(path=\"scratch.txt\")\n2. join()"
    plan_b = "1. delete(path=\"thesis.docx\")\n2. join()"
    llm = ScriptedLLM([plan_a, plan_b, "Thought: ok\nAnswer: done"])
    runner = ParallelAgentRunner(PlannerAgentWorker.from_tools([disk.tool()], llm=llm))
    task = runner.create_task("tidy up")
    runner.run_step(task)  # the plan
    (seen,) = runner.pending_approvals(task)
    assert seen.call_id == "plan1_1"
    runner.undo_step(task)
    runner.run_step(task)  # a new plan in the same round
    new = the_stale_id_is_refused(runner, task, seen.call_id, disk)
    assert new == "plan1_1#2"
    runner.approve(task, new)
    runner.run_until_done(task)
    assert disk.left() == ["scratch.txt"]
    out = [o for o in runner.get_completed_steps(task) if o.tool_outputs][0]
    assert out.tool_outputs[0].tool_call_id == new


def test_issue_release_and_scan() -> None:
    from nbagent.calls import release_ids
    from nbagent.schema import Task, TaskStep

    task = Task(input="x")
    assert [issue_call_id(task, w) for w in ("a", "a", "a", None, "")] == ["a", "a#2", "a#3", "call", "call#2"]
    # an attempt that issued a#4 and a#5 failed before either ran: the retry gets a#4 again
    attempt = [issue_call_id(task, "a"), issue_call_id(task, "a")]
    assert attempt == ["a#4", "a#5"]
    release_ids(TaskStep(task_id=task.task_id), task, attempt, None)
    assert issue_call_id(task, "a") == "a#4"
    # ids a journal keeps (a call of that reply ran) stay used
    release_ids(TaskStep(task_id=task.task_id), task, ["a#4"], {"ids": ["a#4"], "outputs": {"a#4": object()}})
    assert issue_call_id(task, "a") == "a#5"
    assert scan_call_ids([], []) == set()


def test_a_failed_attempt_frees_the_ids_nobody_saw(tmp_path: Path) -> None:
    """The retry after a failure before any call ran gets the id a first attempt would have."""
    disk = Disk(tmp_path)
    llm = ScriptedLLM([RuntimeError("model down"), react_reply("scratch.txt")])
    agent = ReActAgent.from_tools([disk.tool()], llm=llm)
    task = agent.create_task("tidy up")
    with pytest.raises(RuntimeError):
        agent.run_step(task)
    agent.run_step(task)
    assert [p.call_id for p in agent.pending_approvals(task)] == ["react_1"]


def test_deciding_while_the_step_runs_is_refused(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    agent = make("react", disk, [react_reply("scratch.txt")])
    task = agent.create_task("tidy up")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    state = agent.state_of(task)
    waiting = agent.get_upcoming_steps(task)[0]
    state.running.add(waiting.step_id)
    try:
        with pytest.raises(TaskStateError, match="is running; decide before it runs"):
            agent.approve(task, p.call_id)
    finally:
        state.running.discard(waiting.step_id)
