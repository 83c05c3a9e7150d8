"""Approval of tool calls: a call that needs approval never runs before a person decides; the
decision (who, when, edited arguments, reason) is part of the run: undo, save/load keep it."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    FunctionCallingAgent,
    FunctionTool,
    ParallelAgentRunner,
    PlannerAgentWorker,
    ReActAgent,
    ScriptedLLM,
    StepStatus,
)
from nbagent.approval import decide
from nbagent.llms.scripted import tool_call
from nbagent.runner.approvals import AwaitingApprovalError
from nbagent.runner.base import TaskStateError


class Files:
    """A pretend file system whose changes the tests can see."""

    def __init__(self) -> None:
        self.files = {"a.txt": "A", "b.txt": "B", "notes.md": "N"}
        self.deleted: list[str] = []

    def tools(self, **flags: Any) -> list[FunctionTool]:
        def delete_file(path: str) -> str:
            """Delete a file.

            Args:
                path: the file to delete
            """
            if path not in self.files:
                raise FileNotFoundError(path)
            del self.files[path]
            self.deleted.append(path)
            return f"deleted {path}"

        def list_files() -> list[str]:
            """List the files."""
            return sorted(self.files)

        return [FunctionTool.from_defaults(delete_file, **flags), FunctionTool.from_defaults(list_files)]


def two_calls() -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "delete_file", "arguments": {"path": "a.txt"}},
            {"name": "list_files", "arguments": {}},
            {"name": "delete_file", "arguments": {"path": "notes.md"}},
        ]
    }


def fc_agent(fs: Files, replies: list[Any], **kwargs: Any) -> tuple[FunctionCallingAgent, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    flags = {} if "approve_tools" in kwargs else {"requires_approval": True}
    return FunctionCallingAgent.from_tools(fs.tools(**flags), llm=llm, **kwargs), llm


def test_a_call_needing_approval_waits_and_nothing_of_the_reply_runs() -> None:
    fs = Files()
    agent, llm = fc_agent(fs, [two_calls(), "done"])
    task = agent.create_task("tidy up")
    out = agent.run_step(task)
    assert fs.deleted == [] and not out.is_last and out.tool_outputs == ()
    pending = agent.pending_approvals(task)
    assert [(p.tool_name, p.arguments) for p in pending] == [
        ("delete_file", {"path": "a.txt"}),
        ("delete_file", {"path": "notes.md"}),
    ]
    assert len({p.call_id for p in pending}) == 2
    waiting = agent.get_upcoming_steps(task)[0]
    state = agent.state_of(task)
    assert state.step_status(waiting.step_id) == StepStatus.AWAITING
    assert out.output.metadata["awaiting_approval"] == [p.call_id for p in pending]
    # running now is refused, names the calls, and changes nothing
    before = (len(state.completed_steps), list(state.step_queue), len(llm.requests))
    with pytest.raises(AwaitingApprovalError, match="notes.md"):
        agent.run_step(task)
    assert (len(state.completed_steps), list(state.step_queue), len(llm.requests)) == before
    assert state.failures == []


def test_parallel_calls_are_decided_one_by_one_then_the_next_step_runs_them() -> None:
    fs = Files()
    agent, llm = fc_agent(fs, [two_calls(), "kept the notes"])
    task = agent.create_task("tidy up")
    agent.run_step(task)
    first, second = agent.pending_approvals(task)
    agent.approve(task, first.call_id, by="ana")
    with pytest.raises(AwaitingApprovalError, match=second.call_id):
        agent.run_step(task)
    assert [p.call_id for p in agent.pending_approvals(task)] == [second.call_id]
    agent.reject(task, second.call_id, reason="notes.md is mine", by="ana")
    assert agent.pending_approvals(task) == []
    out = agent.run_step(task)
    assert fs.deleted == ["a.txt"] and "notes.md" in fs.files
    contents = [o.content for o in out.tool_outputs]
    assert contents[0] == "deleted a.txt"
    assert {"b.txt", "notes.md"} <= set(ast.literal_eval(contents[1]))  # the unflagged call ran too (str of its list)
    assert contents[2] == "Rejected by ana: notes.md is mine. The call was not run."
    assert out.tool_outputs[2].is_error
    final = agent.run_step(task)
    assert final.is_last
    # the model saw one reply per call, in call order, with the same ids
    tool_msgs = [m for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == [first.call_id, "call_2", second.call_id]
    assert "notes.md is mine" in tool_msgs[2].content
    assert str(agent.finalize_response(task)) == "kept the notes"


def test_edited_arguments_are_validated_and_used() -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [tool_call("delete_file", path="a.txt"), "ok"])
    task = agent.create_task("delete a")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    with pytest.raises(ValueError, match=r"path: Field required.*filename: Extra inputs"):
        agent.approve(task, p.call_id, {"filename": "b.txt"})
    with pytest.raises(ValueError, match="only an approval"):
        decide(agent.get_upcoming_steps(task)[0], p.call_id, "rejected", arguments={"path": "b.txt"})
    assert agent.pending_approvals(task) == [p]  # the bad edits recorded nothing
    decision = agent.approve(task, p.call_id, {"path": "b.txt"})
    assert decision["decision"] == "approved" and decision["arguments"] == {"path": "b.txt"}
    assert decision["by"] == "user" and decision["at"].endswith("+00:00")
    out = agent.run_step(task)
    assert fs.deleted == ["b.txt"] and out.tool_outputs[0].raw_input == {"path": "b.txt"}


def test_unknown_call_ids_and_bad_input_are_clear_errors() -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [tool_call("delete_file", path="a.txt"), "ok"])
    task = agent.create_task("delete a")
    with pytest.raises(ValueError, match="no call of this task has that id. Calls that can be decided now: none"):
        agent.approve(task, "call_9")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    with pytest.raises(
        ValueError, match=rf"call 'nope' is not waiting.*decided now: \['{p.call_id}'\] \({p.call_id}: delete_file\(path='a.txt'\)\)"
    ):
        agent.reject(task, "nope", reason="x")
    with pytest.raises(TypeError, match="reason must be a str"):
        agent.reject(task, p.call_id, reason=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="by must name who decided"):
        agent.approve(task, p.call_id, by="")
    with pytest.raises(ValueError, match="approve_tools must be None, 'all', a list"):
        agent.approve_tools = "some"


def test_undo_keeps_decisions_and_a_decision_can_be_changed_and_rerun() -> None:
    fs = Files()
    agent, llm = fc_agent(fs, [tool_call("delete_file", path="a.txt"), "kept", "deleted"])
    task = agent.create_task("delete a")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.reject(task, p.call_id, reason="not yet")
    out = agent.run_step(task)
    assert out.tool_outputs[0].is_error and fs.deleted == []
    agent.undo_step(task)  # back to just before the calls ran: the decision is still there
    step = agent.get_upcoming_steps(task)[0]
    assert step.step_state["approval"]["decisions"][p.call_id]["reason"] == "not yet"
    assert agent.pending_approvals(task) == []
    agent.approve(task, p.call_id)  # change of mind: the log keeps both decisions
    log = step.step_state["approval"]["log"]
    assert [e["decision"] for e in log] == ["rejected", "approved"]
    out = agent.run_step(task)
    assert out.tool_outputs[0].content == "deleted a.txt" and fs.deleted == ["a.txt"]
    # undoing the step that asked removes the waiting step and its record from the queue
    agent.undo_step(task)
    agent.undo_step(task)
    assert agent.pending_approvals(task) == [] and len(agent.get_upcoming_steps(task)) == 1


def test_save_and_load_keep_the_decision_record_and_the_run_continues(tmp_path: Path) -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [two_calls(), "done"])
    task = agent.create_task("tidy up")
    agent.run_step(task)
    first, second = agent.pending_approvals(task)
    agent.approve(task, first.call_id, by="bo")
    path = agent.save(tmp_path / "run.json")
    fs2 = Files()
    llm2 = ScriptedLLM(["done"])
    worker = FunctionCallingAgent.from_tools(fs2.tools(requires_approval=True), llm=llm2).agent_worker
    loaded = AgentRunner.load(path, worker)
    assert [p.call_id for p in loaded.pending_approvals(task.task_id)] == [second.call_id]
    loaded.reject(task.task_id, second.call_id, reason="no")
    out = loaded.run_step(task.task_id)
    assert fs2.deleted == ["a.txt"]
    rec = out.task_step.step_state["approval"]
    assert rec["decisions"][first.call_id]["by"] == "bo"
    assert rec["decisions"][second.call_id]["reason"] == "no"


@pytest.mark.parametrize(
    "policy, waits",
    [
        ("all", ["delete_file", "list_files", "delete_file"]),
        (["list_files"], ["list_files"]),
        (lambda name, args: args.get("path") == "notes.md", ["delete_file"]),
        (None, []),
    ],
)
def test_the_runner_wide_policy(policy: Any, waits: list[str]) -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [two_calls(), "done"], approve_tools=policy)
    task = agent.create_task("tidy up")
    out = agent.run_step(task)
    assert [p.tool_name for p in agent.pending_approvals(task)] == waits
    if not waits:  # nothing waits: the calls ran in this step
        assert fs.deleted == ["a.txt", "notes.md"] and len(out.tool_outputs) == 3


def test_streaming_steps_wait_too() -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [tool_call("delete_file", path="a.txt"), "fine"])
    task = agent.create_task("delete a")
    agent.stream_step(task)
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id)
    agent.stream_step(task)
    assert fs.deleted == ["a.txt"]


def test_react_rejection_reaches_the_model_as_an_observation() -> None:
    fs = Files()
    llm = ScriptedLLM(
        [
            'Thought: remove it\nAction: delete_file\nAction Input: {"path": "a.txt"}',
            "Thought: the user said no\nAnswer: I left a.txt alone.",
        ]
    )
    agent = ReActAgent.from_tools(fs.tools(), llm=llm, approve_tools=["delete_file"])
    task = agent.create_task("delete a.txt")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    assert (p.tool_name, p.arguments) == ("delete_file", {"path": "a.txt"})
    agent.reject(task, p.call_id, reason="a.txt is needed for the report")
    obs = agent.run_step(task)
    assert obs.tool_outputs[0].is_error and fs.deleted == []
    assert len(llm.requests) == 1  # running the decision does not call the model
    answer = agent.run_step(task)
    assert answer.is_last
    prompt = llm.requests[-1].prompt
    assert "Rejected by user: a.txt is needed for the report" in prompt
    assert prompt.index("Action: delete_file") < prompt.index("Rejected by user")
    # the record stays on its step only: later steps carry no approval state
    assert "approval" not in answer.task_step.step_state


def test_react_approved_action_runs_with_edited_input() -> None:
    fs = Files()
    llm = ScriptedLLM(
        ['Thought: remove it\nAction: delete_file\nAction Input: {"path": "a.txt"}', "Answer: done"]
    )
    agent = ReActAgent.from_tools(fs.tools(requires_approval=True), llm=llm)
    task = agent.create_task("delete a.txt")
    agent.run_step(task)
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id, {"path": "b.txt"})
    agent.run_step(task)
    assert fs.deleted == ["b.txt"]
    assert str(agent.run_step(task).output) == "done"


PLAN = """Thought: list, then delete.
1. list_files()
2. delete_file(path="a.txt")
3. join()"""


def test_planner_call_waits_under_the_parallel_runner_while_others_run() -> None:
    fs = Files()
    llm = ScriptedLLM([PLAN, "Thought: ok\nAnswer: listed, deletion rejected"])
    worker = PlannerAgentWorker.from_tools(fs.tools(requires_approval=True), llm=llm)
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("tidy")
    with pytest.raises(AwaitingApprovalError, match="delete_file"):
        runner.run_until_done(task)
    state = runner.state_of(task)
    done_tools = [o.tool_outputs[0].tool_name for o in state.completed_steps if o.tool_outputs]
    assert done_tools == ["list_files"] and fs.deleted == []
    (p,) = runner.pending_approvals(task)
    runner.reject(task, p.call_id, reason="keep it")
    final = runner.run_until_done(task)
    assert final.is_last and fs.deleted == []
    assert "Rejected by user: keep it" in llm.requests[-1].prompt


def test_chat_stops_with_a_clear_error_when_a_call_waits() -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [tool_call("delete_file", path="a.txt"), "ok"])
    with pytest.raises(AwaitingApprovalError, match="awaits approval of") as info:
        agent.chat("delete a")
    assert isinstance(info.value, TaskStateError)
    task = agent.list_tasks()[-1]
    (p,) = agent.pending_approvals(task)
    agent.approve(task, p.call_id)
    agent.run_step(task)
    assert agent.run_step(task).is_last and fs.deleted == ["a.txt"]


def test_tool_flag_shows_in_repr_and_metadata() -> None:
    t = Files().tools(requires_approval=True)[0]
    assert t.requires_approval and t.metadata.requires_approval
    assert "requires_approval=True" in repr(t)
    with pytest.raises(TypeError, match="requires_approval must be True or False"):
        FunctionTool.from_defaults(len, name="n", requires_approval="yes")  # type: ignore[arg-type]


def test_the_dag_draws_the_waiting_calls_escaped_and_then_the_decisions() -> None:
    from nbagent.viz.dot import task_to_dot

    fs = Files()
    fs.files['<b>x</b>"'] = "evil"
    agent, _ = fc_agent(fs, [tool_call("delete_file", path='<b>x</b>"'), "done"])
    task = agent.create_task("tidy")
    agent.run_step(task)
    dot = task_to_dot(agent.state_of(task))
    assert "awaiting approval" in dot and "approve? delete_file" in dot
    assert "<b>x" not in dot and "&lt;b&gt;x&lt;/b&gt;" in dot
    (p,) = agent.pending_approvals(task)
    agent.reject(task, p.call_id, reason="<script>no</script>", by="ana")
    dot = task_to_dot(agent.state_of(task))
    assert "awaiting approval" not in dot.split("legend")[0]
    assert "rejected by ana:" in dot and "<script>" not in dot and "&lt;script&gt;no" in dot


def test_step_card_and_report_show_who_decided_what() -> None:
    from nbagent.report import report_html
    from nbagent.viz.html import step_html

    fs = Files()
    agent, _ = fc_agent(fs, [two_calls(), "done"])
    task = agent.create_task("tidy")
    agent.run_step(task)
    step = agent.get_upcoming_steps(task)[0]
    card = step_html(step)
    assert card.count("<b>awaiting approval</b>") == 2 and "runs with the others" in card
    first, second = agent.pending_approvals(task)
    agent.approve(task, first.call_id, {"path": "b.txt"}, by="<ana>")
    agent.reject(task, second.call_id, reason="<i>mine</i>", by="bo")
    card = step_html(step)
    assert "<b>awaiting approval</b>" not in card
    assert "approved</b> by &lt;ana&gt;" in card and "b.txt" in card
    assert "rejected</b> by bo" in card and "&lt;i&gt;mine&lt;/i&gt;" in card and "<i>mine" not in card
    agent.run_step(task)
    report = report_html(agent)
    assert "approved</b> by &lt;ana&gt;" in report and "&lt;i&gt;mine&lt;/i&gt;" in report


def test_panel_rows_approve_edit_and_reject_like_their_python_twins() -> None:
    from nbagent.viz.panel import AgentPanel

    fs = Files()
    agent, llm = fc_agent(fs, [two_calls(), "done"])
    task = agent.create_task("tidy")
    panel = AgentPanel(agent, task, throttle_s=0)
    try:
        assert panel.approvals == []
        panel.press("step")  # what the browser's clicks send: the commands of the rows
        rows = panel.approvals
        assert [json.loads(r["args"]) for r in rows] == [{"path": "a.txt"}, {"path": "notes.md"}]
        assert not panel.buttons["step"]  # nothing can run until both are decided
        assert rows[0]["label"] == 'delete_file(path="a.txt")'
        panel.press("edit", call=rows[0]["call"], arguments='{"path": "b.txt"')  # broken JSON: shown
        assert "must be a JSON object" in panel.status_text() and len(agent.pending_approvals(task)) == 2
        panel.press("edit", call=rows[0]["call"], arguments='{"path": "b.txt"}')
        assert [p.call_id for p in agent.pending_approvals(task)] == [rows[1]["call"]]
        assert [r["call"] for r in panel.approvals] == [rows[1]["call"]]  # the decided row is gone
        panel.press("reject", call=rows[1]["call"], reason="keep my notes")
        assert panel.approvals == [] and panel.buttons["step"]
        rec = agent.get_upcoming_steps(task)[0].step_state["approval"]["decisions"]
        assert [(d["decision"], d["by"], d["arguments"], d["reason"]) for d in rec.values()] == [
            ("approved", "panel", {"path": "b.txt"}, None),
            ("rejected", "panel", None, "keep my notes"),
        ]
        panel.step()
        asyncio_wait(panel)
        assert fs.deleted == ["b.txt"] and "notes.md" in fs.files
    finally:
        panel.close()


def asyncio_wait(panel: Any) -> None:
    from nbagent._sync import run_sync

    run_sync(panel.wait())


@pytest.mark.parametrize("name", ["run.json", "run.db"])
def test_autosave_keeps_a_decision_the_moment_it_is_made(tmp_path: Path, name: str) -> None:
    fs = Files()
    agent, _ = fc_agent(fs, [two_calls(), "done"])
    path = tmp_path / name
    agent.autosave = path
    task = agent.create_task("tidy")
    agent.run_step(task)
    first, second = agent.pending_approvals(task)
    agent.approve(task, first.call_id, by="ana")  # no step runs after this
    agent.autosave = None
    worker = fc_agent(Files(), ["done"])[0].agent_worker
    loaded = AgentRunner.load(path, worker)
    assert [p.call_id for p in loaded.pending_approvals(task.task_id)] == [second.call_id]


def test_function_calling_worker_waits_under_the_parallel_runner_too() -> None:
    fs = Files()
    llm = ScriptedLLM([two_calls(), "done"])
    worker = FunctionCallingAgent.from_tools(fs.tools(requires_approval=True), llm=llm).agent_worker
    runner = ParallelAgentRunner(worker)
    with pytest.raises(AwaitingApprovalError, match="delete_file"):
        runner.chat("tidy")
    task = runner.list_tasks()[-1]
    for p in runner.pending_approvals(task):
        runner.reject(task, p.call_id, reason="no deleting today")
    final = runner.run_until_done(task)
    assert final.is_last and fs.deleted == []
    assert str(runner.finalize_response(task)) == "done"
