"""The panel's live graph after a streamed answer (issue 29, item 3), without a browser.

A streamed answer's text grows after its step is done: the live graph used to keep the node
line it drew when the step completed (``answer:`` with nothing, or ``answer: Two``) while
``agent.graph()`` showed the whole answer. These tests run the panel as Jupyter does (on a
running event loop, at the default throttle) and compare the DOT the view holds with the DOT
drawn afresh from the task's state.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    FunctionCallingAgentWorker,
    ReActAgent,
    ScriptedLLM,
    TaskStatus,
    tool_call,
)
from nbagent.viz.dot import task_to_dot
from nbagent.viz.panel import AgentPanel
from tests.test_panel import SlowStreamLLM

ANSWER = "Two plus two is four, as everybody who counts on fingers knows."


def _answer_line(dot: str) -> str:
    """The text of the answer node's label (tags dropped, wrapped lines joined)."""
    for line in dot.splitlines():
        if "· answer ·" in line:
            return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", line))
    raise AssertionError(f"no answer node in:\n{dot}")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _react(delay: float) -> AgentRunner:
    llm = SlowStreamLLM([
        'Thought: I add.\nAction: add\nAction Input: {"a": 2, "b": 2}',
        f"Thought: I can answer.\nAnswer: {ANSWER}",
    ])
    llm.delay = delay
    return ReActAgent.from_tools([add], llm=llm)


def _function_calling(delay: float) -> AgentRunner:
    llm = SlowStreamLLM([tool_call("add", a=2, b=2), ANSWER])
    llm.delay = delay
    return AgentRunner(FunctionCallingAgentWorker.from_tools([add], llm=llm))


@pytest.mark.parametrize("make", [_react, _function_calling], ids=["react", "function-calling"])
@pytest.mark.parametrize("delay", [0.0, 0.01], ids=["instant", "slow-tokens"])
def test_the_last_redraw_after_a_streamed_answer_shows_the_whole_answer(make: Any, delay: float) -> None:
    async def main() -> None:
        runner = make(delay)
        task = runner.create_task("What is 2 + 2?")
        panel = AgentPanel(runner, task)  # the default throttle, as in a notebook
        assert panel.controller.throttle_s == 0.1
        for _ in range(2):  # Run step twice: the tool call, then the streamed answer
            running = panel.step()
            assert isinstance(running, asyncio.Task)  # in the background, as in Jupyter
            out = await running
            assert not isinstance(out, BaseException), out
        state = runner.state_of(task)
        assert state.status == TaskStatus.FINALIZED
        # at once when the run ends: no hand-made redraw, no waiting for a timer
        assert ANSWER in _answer_line(panel.dot)
        assert panel.dot == task_to_dot(state)
        await asyncio.sleep(0.25)  # and no later redraw brings a stale text back
        assert panel.dot == task_to_dot(state)
        assert ANSWER in panel.status_text()

    asyncio.run(main())


def test_a_one_step_streamed_answer_read_after_the_step_is_redrawn_whole() -> None:
    """Outside the panel: stream_step on a live graph, the stream read by hand afterwards."""

    async def main() -> None:
        llm = SlowStreamLLM([ANSWER])
        llm.delay = 0.01
        runner = AgentRunner(FunctionCallingAgentWorker.from_tools([add], llm=llm))
        task = runner.create_task("What is 2 + 2?")
        graph = runner.live_graph(task)
        out = await runner.astream_step(task)
        assert out.is_last  # so far: text, no tool call
        graph.flush()
        # the stream has not been read to its end: the step is still running (its reply may
        # yet end with tool calls, issue 29), so there is no answer node to draw yet
        assert "running" in graph.source and "answer:" not in graph.source
        async for _ in out.output.async_response_gen():
            pass
        await asyncio.sleep(graph.throttle_s + 0.1)  # the redraw the stream's end asked for
        assert ANSWER in _answer_line(graph.source)
        assert graph.source == task_to_dot(runner.state_of(task))

    asyncio.run(main())


def test_without_an_event_loop_the_panel_also_draws_the_whole_answer() -> None:
    runner = _react(0.005)
    task = runner.create_task("What is 2 + 2?")
    panel = AgentPanel(runner, task)
    panel.step()
    panel.step()
    state = runner.state_of(task)
    assert ANSWER in _answer_line(panel.dot)
    assert panel.dot == task_to_dot(state)


def test_scripted_stream_without_delay_still_matches_the_static_graph() -> None:
    llm = ScriptedLLM([ANSWER])
    runner = AgentRunner(FunctionCallingAgentWorker.from_tools([add], llm=llm))
    task = runner.create_task("What is 2 + 2?")
    panel = AgentPanel(runner, task)
    panel.step()
    assert panel.dot == task_to_dot(runner.state_of(task))
