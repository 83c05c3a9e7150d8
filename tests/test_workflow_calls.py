"""Workflow agents: an approval names the call it approves, and a resumed run does not run a
call again (issue 28, items 2 and 3, in nbagent.workflow).

A run resumed from an earlier checkpoint asks the model again; a scripted model gives its new
call the same id (``call_1``) and the question the same waiter id, so an answer built from
the question the person saw (``delete scratch.txt``) approved the new call (``delete
thesis.docx``). And a call whose thread was still running when the run was interrupted ran
again when the run resumed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from nbagent import FunctionTool, ScriptedLLM
from nbagent.workflow import AgentWorkflow, Context, FunctionAgent
from nbagent.workflow.approval import ToolApprovalRequired, ToolApprovalResponse
from nbagent.workflow.errors import WorkflowCancelledError, WorkflowRuntimeError


def test_an_answer_for_the_call_seen_before_going_back_is_refused(tmp_path: Path) -> None:
    for name in ("scratch.txt", "thesis.docx"):
        (tmp_path / name).write_text(name)

    def delete(path: str) -> str:
        """Delete a file."""
        (tmp_path / path).unlink()
        return f"deleted {path}"

    llm = ScriptedLLM([
        {"tool_calls": [{"id": "call_1", "name": "delete", "arguments": {"path": "scratch.txt"}}]},
        {"tool_calls": [{"id": "call_1", "name": "delete", "arguments": {"path": "thesis.docx"}}]},
        "done",
    ])
    agent = FunctionAgent(name="a", llm=llm, tools=[FunctionTool.from_defaults(delete, requires_approval=True)])
    wf = AgentWorkflow([agent])
    checkpoints: list[Any] = []

    async def main() -> Any:
        first = wf.run(user_msg="tidy up", checkpoint_callback=checkpoints.append)
        seen = await first.wait_for_question()
        assert isinstance(seen, ToolApprovalRequired) and seen.call == "delete(path='scratch.txt')"
        await first.cancel_run()
        back = [c for c in checkpoints if c.last_completed_step == "setup_agent"][-1]
        again = wf.run_from(back)  # the model is asked again: same id, same question id
        now = await again.wait_for_question()
        assert (now.tool_id, now.waiter_id) == (seen.tool_id, seen.waiter_id)
        assert now.call == "delete(path='thesis.docx')"
        with pytest.raises(WorkflowRuntimeError) as info:
            again.ctx.send_event(ToolApprovalResponse.approve(seen))
        message = str(info.value)
        assert f"does not answer question {seen.waiter_id!r}" in message
        assert "the answer says \"delete(path='scratch.txt')\"" in message
        assert "asks about \"delete(path='thesis.docx')\"" in message
        assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch.txt", "thesis.docx"]
        assert again.pending_questions == [now]  # still waiting, nothing decided
        again.ctx.send_event(ToolApprovalResponse.reject(now, reason="my thesis"))
        return await again

    assert str(asyncio.run(main())) == "done"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch.txt", "thesis.docx"]


def test_typed_answers_still_decide_the_question_they_answer(tmp_path: Path) -> None:
    ran: list[str] = []

    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "ok"

    llm = ScriptedLLM([{"tool_calls": [{"name": "delete", "arguments": {"path": "a"}}]}, "done"])
    wf = AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=[FunctionTool.from_defaults(delete)])], approve_tools="all")

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        handler.respond("yes")
        return await handler

    assert str(asyncio.run(main())) == "done" and ran == ["a"]


class Crash(BaseException):
    """Raised past a tool (as KeyboardInterrupt or SystemExit would be)."""


def _crashing_run(tmp_path: Path) -> tuple[Any, Any, Path, threading.Event, threading.Event]:
    log = tmp_path / "effects.log"
    log.write_text("")
    started, release, ended = threading.Event(), threading.Event(), threading.Event()
    crashes = [1]

    def side_effect(text: str) -> str:
        """Append a line, slowly."""
        started.set()
        release.wait(10)
        with log.open("a") as f:
            f.write(text + "\n")
        ended.set()
        return f"appended {text}"

    def crash_once() -> str:
        """Crashes (past the tool) while side_effect runs, the first time."""
        if crashes:
            crashes.pop()
            started.wait(10)
            raise Crash("crashed")
        return "fine"

    llm = ScriptedLLM([
        {"tool_calls": [{"name": "side_effect", "arguments": {"text": "one"}}, {"name": "crash_once", "arguments": {}}]},
        "done",
    ])
    tools = [FunctionTool.from_defaults(side_effect, requires_approval=True), FunctionTool.from_defaults(crash_once)]
    return AgentWorkflow([FunctionAgent(name="a", llm=llm, tools=tools)]), llm, log, release, ended


async def _approve_all(handler: Any) -> Any:
    async for ev in handler.stream_events():
        if isinstance(ev, ToolApprovalRequired):
            handler.ctx.send_event(ToolApprovalResponse.approve(ev))
    return await handler


def test_an_approved_call_is_not_run_again_when_the_run_resumes(tmp_path: Path) -> None:
    wf, llm, log, release, ended = _crashing_run(tmp_path)

    async def main() -> Any:
        first = wf.run(user_msg="go")
        with pytest.raises(WorkflowCancelledError, match="interrupted"):
            await _approve_all(first)
        release.set()  # side_effect's thread was still running: it ends now
        await asyncio.to_thread(ended.wait, 10)
        assert log.read_text().splitlines() == ["one"]
        return await _approve_all(wf.run(ctx=first.ctx))

    assert str(asyncio.run(main())) == "done"
    assert log.read_text().splitlines() == ["one"]
    tool_replies = [m.content for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert tool_replies == ["appended one", "fine"]


def test_a_checkpoint_keeps_what_an_interrupted_execution_ran(tmp_path: Path) -> None:
    wf, _, log, release, ended = _crashing_run(tmp_path)

    async def first_run() -> dict[str, Any]:
        first = wf.run(user_msg="go")
        with pytest.raises(WorkflowCancelledError):
            await _approve_all(first)
        release.set()
        await asyncio.to_thread(ended.wait, 10)
        return json.loads(json.dumps(first.ctx.to_dict()))

    saved = asyncio.run(first_run())
    assert [o["fields"]["content"] for j in saved["ran"].values() for o in j["outputs"].values()] == ["appended one"]

    async def resumed() -> Any:
        return await _approve_all(wf.run(ctx=Context.from_dict(wf, saved)))

    assert str(asyncio.run(resumed())) == "done"
    assert log.read_text().splitlines() == ["one"]
