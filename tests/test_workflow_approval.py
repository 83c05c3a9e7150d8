"""Workflow agents: tool calls that wait for a person (an event streamed, a response sent
back), and typed answers (output_cls) on agents and on AgentWorkflow."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from nbagent import FunctionTool, ScriptedLLM, tool_call
from nbagent.structured import FINAL_TOOL, StructuredOutputError
from nbagent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from nbagent.workflow.approval import APPROVALS_KEY, ToolApprovalRequired, ToolApprovalResponse
from nbagent.workflow.typed import StructuredOutputRetry


class Form(BaseModel):
    name: str
    age: int = Field(ge=0)


def file_tools(deleted: list[str], **flags: Any) -> list[FunctionTool]:
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    def list_files() -> str:
        """List the files."""
        return "a.txt, b.txt"

    return [FunctionTool.from_defaults(delete_file, **flags), FunctionTool.from_defaults(list_files)]


def drive(start: Any, decide: Any) -> tuple[Any, list[Any], Any]:
    """Start a run, read its stream, answer every approval question with ``decide``; returns
    the result, the events and the handler."""

    async def main() -> tuple[Any, list[Any], Any]:
        handler = start()
        seen = []
        async for ev in handler.stream_events():
            seen.append(ev)
            if isinstance(ev, ToolApprovalRequired):
                decide(handler, ev)
        return await handler, seen, handler

    return asyncio.run(main())


def test_a_rejected_call_does_not_run_and_the_model_gets_the_reason() -> None:
    deleted: list[str] = []
    llm = ScriptedLLM(
        [{"tool_calls": [{"name": "list_files", "arguments": {}}, {"name": "delete_file", "arguments": {"path": "a.txt"}}]},
         "I left a.txt alone."]
    )
    agent = FunctionAgent(name="tidy", llm=llm, tools=file_tools(deleted, requires_approval=True))

    def decide(h: Any, ev: ToolApprovalRequired) -> None:
        assert (ev.tool_name, ev.tool_kwargs, ev.agent_name) == ("delete_file", {"path": "a.txt"}, "tidy")
        assert h.pending_questions == [ev]
        h.ctx.send_event(ToolApprovalResponse.reject(ev, reason="a.txt is needed", by="ana"))

    result, seen, _ = drive(lambda: agent.run(user_msg="tidy up"), decide)
    assert deleted == [] and str(result) == "I left a.txt alone."
    questions = [e for e in seen if isinstance(e, ToolApprovalRequired)]
    assert len(questions) == 1  # list_files needed no approval
    tool_msgs = [m for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert tool_msgs[1].content == "Rejected by ana: a.txt is needed. The call was not run."
    assert tool_msgs[0].content == "a.txt, b.txt"


def test_approval_with_edited_arguments_and_the_record_in_the_run_state() -> None:
    deleted: list[str] = []
    llm = ScriptedLLM([tool_call("delete_file", path="a.txt"), "done"])
    wf = AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=file_tools(deleted))], approve_tools=["delete_file"])
    def decide(h: Any, ev: ToolApprovalRequired) -> None:
        h.ctx.send_event(ToolApprovalResponse.approve(ev, arguments={"path": "b.txt"}))

    _, _, handler = drive(lambda: wf.run(user_msg="delete a"), decide)
    assert deleted == ["b.txt"]
    (record,) = asyncio.run(handler.ctx.get(APPROVALS_KEY))
    assert record["decision"] == "approved" and record["edited_arguments"] == {"path": "b.txt"}
    assert record["arguments"] == {"path": "a.txt"} and record["by"] == "user" and record["at"]
    assert APPROVALS_KEY in json.dumps(handler.ctx.to_dict())  # a checkpoint keeps the decisions


@pytest.mark.parametrize(
    "answer, ran, told",
    [("yes", ["a.txt"], "deleted a.txt"), ("no: keep it", [], "Rejected by user: keep it."), ("no", [], "no reason given")],
)
def test_a_typed_answer_decides_too(answer: str, ran: list[str], told: str) -> None:
    deleted: list[str] = []
    llm = ScriptedLLM([tool_call("delete_file", path="a.txt"), "ok"])
    wf = AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=file_tools(deleted))], approve_tools="all")
    drive(lambda: wf.run(user_msg="delete a"), lambda h, ev: h.respond(answer))
    assert deleted == ran
    assert told in llm.requests[-1].messages[-1].content


def test_agent_output_cls_uses_a_valid_json_answer_without_another_call() -> None:
    llm = ScriptedLLM(['{"name": "Ada", "age": 36}'])
    agent = FunctionAgent(name="f", llm=llm, output_cls=Form)
    result, _, _ = drive(lambda: agent.run(user_msg="fill"), None)
    assert result.structured_response == Form(name="Ada", age=36)
    assert result.get_pydantic_model(Form) is result.structured_response
    assert len(llm.requests) == 1


def test_workflow_output_cls_asks_again_with_the_errors_each_retry_an_event() -> None:
    llm = ScriptedLLM(["Ada is 36.", tool_call(FINAL_TOOL, name="Ada", age=-1), tool_call(FINAL_TOOL, name="Ada", age=36)])
    wf = AgentWorkflow([FunctionAgent(name="f", llm=llm)], output_cls=Form)
    result, seen, _ = drive(lambda: wf.run(user_msg="fill"), None)
    assert result.structured_response == Form(name="Ada", age=36) and str(result) == "Ada is 36."
    retries = [e for e in seen if isinstance(e, StructuredOutputRetry)]
    assert [(r.attempt, r.current_agent_name) for r in retries] == [(1, "f")]
    assert "age: Input should be greater than or equal to 0" in retries[0].error
    ask = llm.requests[1]
    assert ask.tool_choice == {"type": "function", "function": {"name": FINAL_TOOL}}
    assert [t.name for t in ask.tools] == [FINAL_TOOL]
    assert "greater than or equal to 0" in llm.requests[2].messages[-1].content


def test_workflow_output_cls_gives_up_after_the_retries() -> None:
    llm2 = ScriptedLLM(["Thought: done\nAnswer: Ada, 36", "prose", "prose again"])
    wf = AgentWorkflow([ReActAgent(name="r", llm=llm2)], output_cls=Form)
    wf.max_output_retries = 1
    with pytest.raises(StructuredOutputError, match="after 1 retries"):
        drive(lambda: wf.run(user_msg="fill"), None)


def test_bad_output_cls_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="output_cls must be a pydantic BaseModel subclass"):
        AgentWorkflow([FunctionAgent(name="f", llm=ScriptedLLM([]))], output_cls=int)
    with pytest.raises(TypeError, match="output_cls must be a pydantic BaseModel"):
        FunctionAgent(name="f", llm=ScriptedLLM([]), output_cls="Form")
    with pytest.raises(ValueError, match="approve_tools must be None, 'all'"):
        AgentWorkflow([FunctionAgent(name="f", llm=ScriptedLLM([]))], approve_tools=3)


def test_the_workflow_input_box_decides_an_approval() -> None:
    from nbagent.viz.workflow_live import HumanInputBox

    deleted: list[str] = []
    llm = ScriptedLLM([tool_call("delete_file", path="a.txt"), "ok"])
    agent = FunctionAgent(name="a", llm=llm, tools=file_tools(deleted, requires_approval=True))
    asked: list[str] = []

    def decide(h: Any, ev: ToolApprovalRequired) -> None:
        box = HumanInputBox(h)
        asked.append(str(box.question.prefix))
        box.answer("no: not today")

    drive(lambda: agent.run(user_msg="delete a"), decide)
    assert asked == ["Agent a wants to call delete_file(path='a.txt'). Approve?"]
    assert deleted == [] and "Rejected by user: not today." in llm.requests[-1].messages[-1].content


def test_the_run_view_puts_each_approval_question_on_its_call_and_shows_the_typed_answer() -> None:
    from nbagent.workflow.trace import RunTrace

    deleted: list[str] = []
    llm = ScriptedLLM([
        {"tool_calls": [{"name": "delete_file", "arguments": {"path": "a.txt"}},
                        {"name": "delete_file", "arguments": {"path": "b.txt"}}]},
        '{"name": "Ada", "age": 36}',
    ])
    wf = AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=file_tools(deleted, requires_approval=True))],
                       output_cls=Form)

    def decide(h: Any, ev: ToolApprovalRequired) -> None:
        if ev.tool_kwargs["path"] == "a.txt":
            h.ctx.send_event(ToolApprovalResponse.reject(ev, reason="keep a"))
        else:
            h.ctx.send_event(ToolApprovalResponse.approve(ev))

    _, seen, _ = drive(lambda: wf.run(user_msg="delete both"), decide)
    trace = RunTrace()
    for ev in seen:
        trace.add(ev)
    calls = {c.kwargs["path"]: c for t in trace.turns for c in t.tool_calls}
    assert "delete_file(path='a.txt')" in str(calls["a.txt"].question)
    assert "delete_file(path='b.txt')" in str(calls["b.txt"].question)
    assert calls["a.txt"].answer == "reject: keep a" and calls["b.txt"].answer == "approve"
    assert trace.answer == "Form(name='Ada', age=36)" and deleted == ["b.txt"]


def test_a_run_waiting_for_approval_is_saved_and_decided_after_resuming() -> None:
    from nbagent.workflow import Context

    deleted: list[str] = []
    tools = file_tools(deleted, requires_approval=True)

    def make() -> AgentWorkflow:
        llm = ScriptedLLM([tool_call("delete_file", path="a.txt"), "Kept it."])
        return AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=tools)])

    wf = make()

    async def first() -> str:
        handler = wf.run(user_msg="delete a")
        await handler.wait_for_question()
        text = json.dumps(handler.ctx.to_dict())
        await handler.cancel_run()
        return text

    saved = asyncio.run(first())
    assert deleted == []

    async def second() -> tuple[Any, list[Any]]:
        ctx = Context.from_dict(wf, json.loads(saved))
        (question,) = ctx.pending_questions
        assert isinstance(question, ToolApprovalRequired) and question.tool_kwargs == {"path": "a.txt"}
        handler = wf.run(ctx=ctx)
        asked = await handler.wait_for_question()
        handler.ctx.send_event(ToolApprovalResponse.reject(asked, reason="resumed, still no", by="bo"))
        return await handler, await handler.ctx.get(APPROVALS_KEY)

    result, records = asyncio.run(second())
    assert str(result) == "Kept it." and deleted == []
    assert [(r["decision"], r["by"], r["reason"]) for r in records] == [("rejected", "bo", "resumed, still no")]
