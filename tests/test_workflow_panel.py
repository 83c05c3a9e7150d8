"""WorkflowPanel: a step-wise run driven by the panel's Python twins and by its buttons (clicked
through ipywidgets), with a person answering in the panel; no browser needed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("ipywidgets")

from nbagent import ScriptedLLM, tool_call  # noqa: E402
from nbagent.workflow import AgentWorkflow, Context, FunctionAgent, InputRequiredEvent, ask_human  # noqa: E402


def lookup(city: str) -> str:
    """Look a city up."""
    return f"<b>{city}</b> is sunny"


async def publish(ctx: Context, title: str) -> str:
    """Publish once the person agrees."""
    return f"{title}: {await ask_human(ctx, f'Publish <{title}>?')}"


def workflow(*replies: Any) -> AgentWorkflow:
    agent = FunctionAgent(name="writer", description="writes", tools=[lookup, publish], llm=ScriptedLLM(list(replies)))
    return AgentWorkflow([agent])


def test_twins_step_answer_and_run_to_the_end() -> None:
    async def go() -> None:
        panel = workflow(
            tool_call("lookup", city="Oslo"), tool_call("publish", title="Oslo"), "Done <ok>."
        ).panel(renderer="html", throttle_s=60.0)
        with pytest.raises(RuntimeError, match="click Start"):
            panel.step()
        handler = panel.start("Weather in Oslo?")
        assert handler.stepwise and handler.status == "paused"
        assert panel.start_button.disabled and not panel.step_button.disabled
        events = await panel.step()
        assert [type(e).__name__ for e in events] == ["AgentInput"]
        assert "AgentInput" in panel.events_html.value and panel.steps == 1
        first_drawing = panel.view.source
        for _ in range(4):
            await panel.step()
        assert panel.view.source != first_drawing  # the graph was redrawn after the steps
        while not isinstance((await panel.step() or [None])[0], InputRequiredEvent):
            pass
        assert "Publish &lt;Oslo&gt;?" in panel.question.value  # escaped
        assert not panel.send_button.disabled
        await panel.step()  # a step while the question waits: shown, not raised
        assert "waits for an answer" in panel.status.value
        panel.answer("yes")
        result = await panel.run()
        assert str(result) == "Done <ok>."
        assert handler.status == "done" and panel.step_button.disabled and not panel.start_button.disabled
        assert "Done &lt;ok&gt;." in panel.static_html()
        with pytest.raises(RuntimeError, match="has ended"):
            panel.step()

    asyncio.run(go())


def test_buttons_do_what_their_twins_do_and_stop_keeps_the_run_resumable() -> None:
    async def go() -> None:
        wf = workflow(tool_call("publish", title="x"), "never")
        panel = wf.panel(renderer="html")
        panel.message.value = "Publish x"
        panel.start_button.click()
        assert panel.handler is not None and panel.message.value == ""
        panel.run_button.click()  # runs in the background, waits at the question
        handler = panel.handler
        question = await handler.wait_for_question()
        assert question is not None and panel.running_task is not None and not panel.running_task.done()
        panel.step_button.click()  # busy: a notice, not an exception
        assert "already running" in panel.status.value
        panel.stop_button.click()
        await panel.wait()
        assert handler.status == "cancelled" and "WorkflowCancelledError" in panel.status.value
        assert handler.ctx.has_pending_work and handler.pending_questions  # kept for a resume
        assert panel.send_button.disabled and panel.answer_text.disabled  # but this run takes no answer
        assert "Question:" not in panel.question.value
        panel.send_button.click()  # nothing to answer: a notice
        assert "ended" in panel.status.value or "type an answer" in panel.status.value

    asyncio.run(go())
