"""What the panel tells a learner after a failure, a skip and an undo (notebook 05's play time)."""

from __future__ import annotations

import re

from nbagent import ReActAgent, ScriptedLLM, ScriptExhaustedError
from tests.test_panel import counting_runner, tokens_text


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_after_a_failure_the_status_counts_the_failed_step_as_queued_and_offers_skip() -> None:
    runner = counting_runner(3, fail_once_at=2)
    task = runner.create_task("count")
    panel = runner.panel(task)
    panel.step()
    result = panel.step()
    assert isinstance(result, ValueError)
    status = panel.status_text()
    upcoming = runner.get_upcoming_steps(task)
    assert len(upcoming) == 1 and f"{len(upcoming)} queued" in status
    assert "step #2 failed: ValueError: boom at step 2 (Retry runs it again; Skip goes on without it)" in status
    assert panel.buttons["skip"] and panel.buttons["retry"]
    # Skip: the failed step is done without running; the next step runs and answers
    panel.press("skip")
    state = runner.state_of(task)
    assert state.failed_step_id() is None and "failed" not in panel.status_text()
    assert not panel.buttons["skip"]  # nothing failed any more
    out = panel.step()
    assert getattr(out, "is_last", False) is False  # counting: the skip did not count as a step
    while not state.status.value in ("completed", "finalized"):
        panel.step()
    assert "the answer is 3" in str(state.final_response)
    # Skip when nothing failed: a notice, not an exception into the kernel
    panel.press("skip")
    assert "nothing to skip" in panel.status_text() or "finalized" in panel.status_text()


def _streaming_panel(replies: list) -> tuple:
    llm = ScriptedLLM(replies)
    agent = ReActAgent.from_tools([], llm=llm)
    task = agent.create_task("hi")
    return agent, task, agent.panel(task)


def test_the_streaming_box_says_how_a_failed_step_ended_and_undo_clears_its_text() -> None:
    agent, task, panel = _streaming_panel([
        "Thought: I will think.\nAction: nothing\nAction Input: {}",
        "Thought: done.\nAnswer: hello there",
    ])
    panel.step()
    assert "Thought: I will think." in panel.streamed_text
    note = tokens_text(panel)
    assert "step #1 · done" in note and "streaming" not in note
    panel.undo()
    assert panel.streamed_text == "" and "I will think" not in tokens_text(panel)
    assert "step #1 · queued" in tokens_text(panel)
    # a step that fails mid-way: the note says failed, not "streaming…"
    agent.agent_worker.llm.replies.insert(0, RuntimeError("server went away"))  # type: ignore[attr-defined]
    agent.agent_worker.llm.position = 0  # type: ignore[attr-defined]
    result = panel.step()
    assert isinstance(result, RuntimeError)
    note = tokens_text(panel)
    assert "streaming" not in note and "failed" in note


def test_a_used_up_script_says_retry_would_fail_again() -> None:
    agent, task, panel = _streaming_panel(["Thought: hm.\nAction: nothing\nAction Input: {}"])
    panel.step()
    result = panel.step()
    assert isinstance(result, ScriptExhaustedError)
    status = panel.status_text()
    assert "the scripted model has no replies left, so Retry would fail the same way" in status
    assert "press Retry" not in status
