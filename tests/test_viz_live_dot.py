"""The incremental live graph draws exactly what a full redraw draws, at every step."""

from __future__ import annotations

from typing import Any

import pytest

from nbagent import AgentRunner, FunctionCallingAgentWorker, ParallelAgentRunner, ScriptedLLM
from nbagent.events import StepStarted
from nbagent.llms.scripted import tool_call
from nbagent.viz.dot import task_to_dot
from nbagent.viz.dot_live import LiveDot
from tests.helpers import CountingWorker

OPTIONS = [
    {},
    {"collapse_after": 6, "keep_ends": 1},
    {"collapse_after": 6, "keep_ends": 0, "legend": True, "rankdir": "LR", "wrap": 20, "max_label": 12},
    {"collapse_after": None},
]


def check_each_step(runner: AgentRunner, task: Any, steps: int, options: dict[str, Any]) -> LiveDot:
    state = runner.state_of(task)
    live = LiveDot(state, **options)
    seen_running = []

    def on_start(event: Any) -> None:  # mid-step: the step is running
        if isinstance(event, StepStarted):
            seen_running.append(live.render() == task_to_dot(state, **options))

    runner.subscribe(on_start)
    assert live.render() == task_to_dot(state, **options)
    for _ in range(steps):
        if not state.step_queue:
            break
        runner.run_step(task)
        assert live.render() == task_to_dot(state, **options)
    assert seen_running and all(seen_running)
    return live


@pytest.mark.parametrize("options", OPTIONS)
def test_a_long_chain_is_drawn_exactly_as_a_full_redraw_at_every_step(options: dict[str, Any]) -> None:
    runner = AgentRunner(CountingWorker(target=60))  # type: ignore[arg-type]
    task = runner.create_task("go")
    live = check_each_step(runner, task, 59, options)
    runner.run_step(task)  # the answer
    assert live.render() == task_to_dot(runner.state_of(task), **options)
    runner.finalize_response(task)
    assert live.render() == task_to_dot(runner.state_of(task), **options)
    assert live.full_renders == 0  # never needed the whole walk


def test_edits_undo_and_failures_fall_back_to_a_full_redraw_and_stay_exact() -> None:
    runner = AgentRunner(CountingWorker(target=40, fail_on={11}))  # type: ignore[arg-type]
    task = runner.create_task("go")
    options = {"collapse_after": 5, "keep_ends": 1}
    live = check_each_step(runner, task, 8, options)
    state = runner.state_of(task)
    runner.edit_step(task, state.step_queue[0].step_id, input="edited")
    assert live.render() == task_to_dot(state, **options)
    runner.undo_step(task)
    assert live.render() == task_to_dot(state, **options)
    for _ in range(3):
        runner.run_step(task)
        assert live.render() == task_to_dot(state, **options)
    with pytest.raises(ValueError):
        runner.run_step(task)
    assert live.render() == task_to_dot(state, **options)
    assert live.full_renders >= 5


def test_tool_errors_split_the_collapsed_runs_exactly_as_a_full_redraw() -> None:
    def divide(a: int, b: int) -> float:
        """Divide a by b."""
        return a / b

    replies: list[Any] = []
    for i in range(30):
        replies.append(tool_call("divide", a=i, b=0 if i % 4 == 2 else 1))
    replies.append("done")
    runner = AgentRunner(FunctionCallingAgentWorker.from_tools([divide], llm=ScriptedLLM(replies)))
    task = runner.create_task("divide things")
    live = check_each_step(runner, task, 100, {"collapse_after": 5, "keep_ends": 1})
    assert len(runner.state_of(task).completed_steps) > 8 and "error" in live.render()


def test_a_branching_dag_is_drawn_by_the_full_renderer() -> None:
    runner = ParallelAgentRunner(CountingWorker(target=3), max_concurrency=2)  # type: ignore[arg-type]
    task = runner.create_task("go")
    state = runner.state_of(task)
    live = LiveDot(state)
    runner.run_step(task)
    first = state.steps[next(iter(state.steps))]
    extra = first.get_next_step(input="side branch")
    first.link_step(extra)
    state.register(extra)
    state.step_queue.append(extra)
    assert live.render() == task_to_dot(state)
    assert live.full_renders == 1


def test_the_live_graph_redraws_once_per_fast_step_and_shows_the_full_redraw_text() -> None:
    runner = AgentRunner(CountingWorker(target=200))  # type: ignore[arg-type]
    task = runner.create_task("go")
    graph = runner.live_graph(task, throttle_s=0)
    before = graph.redraws
    for _ in range(100):
        runner.run_step(task)
    # the first step's start is drawn (steps may be slow), then a fast step is drawn once
    assert graph.redraws - before == 101
    assert graph.source == task_to_dot(runner.state_of(task))
    graph.close()
