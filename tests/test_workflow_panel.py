"""WorkflowPanel: a step-wise run driven by the panel's Python twins and by the commands its
browser side sends, with a person answering in the panel; no browser needed. The panel is one
anywidget (no ipywidgets inside) whose state crosses as small traitlets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbagent import ScriptedLLM, tool_call
from nbagent.workflow import AgentWorkflow, Context, FunctionAgent, InputRequiredEvent, ask_human

ROOT = Path(__file__).resolve().parents[1]


def lookup(city: str) -> str:
    """Look a city up."""
    return f"<b>{city}</b> is sunny"


async def publish(ctx: Context, title: str) -> str:
    """Publish once the person agrees."""
    return f"{title}: {await ask_human(ctx, f'Publish <{title}>?')}"


def workflow(*replies: Any) -> AgentWorkflow:
    agent = FunctionAgent(name="writer", description="writes", tools=[lookup, publish], llm=ScriptedLLM(list(replies)))
    return AgentWorkflow([agent])


def send(panel: Any, **content: Any) -> None:
    """What the browser does on a click: a custom message, through ipywidgets' dispatch."""
    panel._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def on(panel: Any) -> set[str]:
    return {name for name, enabled in panel.buttons.items() if enabled}


def test_twins_step_answer_and_run_to_the_end() -> None:
    async def go() -> None:
        panel = workflow(
            tool_call("lookup", city="Oslo"), tool_call("publish", title="Oslo"), "Done <ok>."
        ).panel(throttle_s=60.0)
        assert panel.kind == "workflow" and on(panel) == {"start"}
        with pytest.raises(RuntimeError, match="click Start"):
            panel.step()
        handler = panel.start("Weather in Oslo?")
        assert handler.stepwise and handler.status == "paused"
        assert on(panel) == {"step", "run", "stop"}
        assert panel.status["text"] == "Run paused; 0 workflow steps taken."
        events = await panel.step()
        assert [type(e).__name__ for e in events] == ["AgentInput"]
        assert [e["name"] for e in panel.events] == ["AgentInput"] and panel.steps == 1
        first_drawing = panel.dot
        for _ in range(4):
            await panel.step()
        assert panel.dot != first_drawing  # the graph was redrawn after the steps
        while not isinstance((await panel.step() or [None])[0], InputRequiredEvent):
            pass
        assert panel.question == "Publish <Oslo>?"  # as text: the browser puts it in as text
        assert "Publish &lt;Oslo&gt;?" in panel.static_html()  # escaped in the picture
        assert on(panel) == {"step", "run", "stop", "send"}
        await panel.step()  # a step while the question waits: shown, not raised
        assert "waits for an answer" in panel.status["error"]
        panel.answer("yes")
        result = await panel.run()
        assert str(result) == "Done <ok>."
        assert handler.status == "done" and on(panel) == {"start"}
        assert "Done &lt;ok&gt;." in panel.static_html() and "<ok>" not in panel.static_html()
        with pytest.raises(RuntimeError, match="has ended"):
            panel.step()

    asyncio.run(go())


def test_commands_do_what_their_twins_do_and_stop_keeps_the_run_resumable() -> None:
    async def go() -> None:
        wf = workflow(tool_call("publish", title="x"), "never")
        panel = wf.panel()
        send(panel, cmd="start", text="Publish x")
        assert panel.handler is not None and panel.handler.status == "paused"
        send(panel, cmd="run")  # runs in the background, waits at the question
        handler = panel.handler
        question = await handler.wait_for_question()
        assert question is not None and panel.running_task is not None and not panel.running_task.done()
        send(panel, cmd="step")  # busy: a notice, not an exception
        assert "already running" in panel.status["notice"]
        send(panel, cmd="stop")
        await panel.wait()
        assert handler.status == "cancelled" and "WorkflowCancelledError" in panel.status["error"]
        assert handler.ctx.has_pending_work and handler.pending_questions  # kept for a resume
        assert panel.question == "" and "send" not in on(panel)  # but this run takes no answer
        send(panel, cmd="answer", text="yes")  # nothing to answer: a notice
        assert "ended" in panel.status["notice"]
        send(panel, cmd="launch")
        assert "unknown workflow panel command" in panel.status["notice"]

    asyncio.run(go())


def test_the_panel_is_one_widget_and_its_picture_stays_for_frontends_without_widgets() -> None:
    async def go() -> None:
        panel = workflow(tool_call("lookup", city="Oslo"), "Sunny.").panel()
        panel.start("Weather?")
        await panel.run()
        bundle = panel._repr_mimebundle_()
        assert bundle["text/plain"] == "WorkflowPanel(AgentWorkflow: Run done; 9 workflow steps taken, 2 of them agent steps.)"
        assert "Last step produced:" in bundle["text/html"] and "nbagent-wfpanel" in bundle["text/html"]
        assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.model_id
        assert "<b>" not in str(panel.events) and panel.dot.startswith("digraph")
        with pytest.raises(TypeError, match="no renderer="):
            workflow("x").panel(renderer="html")

    asyncio.run(go())


def test_the_workflow_control_runs_with_no_widget_library_imported() -> None:
    script = '''
import asyncio, sys
from nbagent import ScriptedLLM, tool_call
from nbagent.workflow import AgentWorkflow, FunctionAgent
from nbagent.viz.workflow_control import WorkflowControl

def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city} is sunny"

async def go():
    agent = FunctionAgent(name="w", description="w", tools=[lookup],
                          llm=ScriptedLLM([tool_call("lookup", city="Oslo"), "Sunny."]))
    kinds = []
    c = WorkflowControl(AgentWorkflow([agent]), on_change=kinds.append)
    c.start("Weather?")
    await c.step()
    result = await c.run()
    assert str(result) == "Sunny." and c.steps > 1 and "state" in kinds
    assert "Oslo is sunny" in c.dot()
asyncio.run(go())
print([m for m in ("ipywidgets", "anywidget", "traitlets", "comm", "IPython") if m in sys.modules])
'''
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NBAGENT_BLOCK_NETWORK": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_static_picture_is_a_pure_function_that_escapes_every_text() -> None:
    from nbagent.viz.workflow_html import workflow_panel_html

    page = workflow_panel_html("Run <i>paused</i>.", ["ValueError: <script>x</script>", "no & go"],
                               "Publish <b>it</b>?", [("AgentInput", "input=<img src=x>")], "<div>run card</div>")
    assert "<script>" not in page and "<img" not in page and "<i>" not in page and "<b>it" not in page
    assert "Run &lt;i&gt;paused&lt;/i&gt;." in page and "no &amp; go" in page
    assert "Question: Publish &lt;b&gt;it&lt;/b&gt;?" in page and "<b>AgentInput</b>" in page
    assert page.endswith("<div>run card</div></div>")  # the run card is HTML already: kept as it is
    quiet = workflow_panel_html("No run yet.", [], "", [], "")
    assert "Question:" not in quiet and "Last step produced:" not in quiet and 'class="nbagent-err"' not in quiet
