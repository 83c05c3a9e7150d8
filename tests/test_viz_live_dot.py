"""The incremental live graph draws exactly what a full redraw draws, at every step."""

from __future__ import annotations

import html
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_edits_undo_and_failures_stay_incremental_and_exact() -> None:
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
    assert live.full_renders == 0 and live.restarts <= 1  # once: when the task grew past collapse_after


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


def test_a_branch_added_to_a_settled_step_unsettles_it_and_stays_exact() -> None:
    runner = ParallelAgentRunner(CountingWorker(target=3), max_concurrency=2)  # type: ignore[arg-type]
    task = runner.create_task("go")
    state = runner.state_of(task)
    live = LiveDot(state)
    runner.run_step(task)
    assert live.render() == task_to_dot(state)
    assert live.s == 1  # the first step is done: settled
    first = state.steps[next(iter(state.steps))]
    extra = first.get_next_step(input="side branch")
    first.link_step(extra)
    state.register(extra)
    state.step_queue.append(extra)
    assert live.render() == task_to_dot(state)
    assert live.full_renders == 0 and live.rollbacks == 1
    runner.run_steps_in_queue(task)
    assert live.render() == task_to_dot(state)
    assert live.s == 3 and live.full_renders == 0


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


def _count_node_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the node lines the live text draws (steps, runs and ghosts)."""
    import nbagent.viz.dot.live_text as live_text

    calls = [0]
    real = live_text._node_line

    def counting(node: Any, wrap: int) -> str:
        calls[0] += 1
        return real(node, wrap)

    monkeypatch.setattr(live_text, "_node_line", counting)
    return calls


def test_after_an_undo_and_a_failure_each_step_draws_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node text is drawn once per change: a steady step draws its own node when it is done,
    the next step's node and the growing run's node, and never the settled steps again,
    also after an undo or a failure (no fall back to the whole walk, no rollback)."""
    worker = CountingWorker(target=10_000)
    runner = AgentRunner(worker)  # type: ignore[arg-type]
    task = runner.create_task("go")
    state = runner.state_of(task)
    live = LiveDot(state)
    calls = _count_node_lines(monkeypatch)
    for _ in range(200):
        runner.run_step(task)
        live.render()
    per_step, rolled = [], []
    for event in ["undo", *["step"] * 60, "fail", *["step"] * 60]:
        if event == "undo":
            runner.undo_step(task)
        elif event == "fail":
            worker.fail_on = set(range(100_000))
            with pytest.raises(ValueError):
                runner.run_step(task)
            worker.fail_on = set()
        else:
            runner.run_step(task)
        before, rollbacks = calls[0], live.rollbacks
        assert live.render() == task_to_dot(state)
        per_step.append(calls[0] - before)
        rolled.append(live.rollbacks - rollbacks)
    assert live.full_renders == 0 and live.restarts == 1  # once, when the task grew past collapse_after
    assert rolled == [1] + [0] * 121  # the undo only (the failed step is after the prefix): then one step settles per step
    assert max(per_step) <= 3, per_step  # the step that ran, the one it queued, the growing run
    assert len(state.steps) - live.s <= 4 + 1  # only the last keep_ends steps and the queued one move


def test_the_live_graph_draws_once_per_step_after_an_undo_and_a_failure() -> None:
    worker = CountingWorker(target=500)
    runner = AgentRunner(worker)  # type: ignore[arg-type]
    task = runner.create_task("go")
    graph = runner.live_graph(task, throttle_s=0)
    for _ in range(50):
        runner.run_step(task)
    before = graph.redraws
    runner.undo_step(task)
    assert graph.redraws == before + 1
    for _ in range(3):
        runner.run_step(task)
    worker.fail_on = set(range(100_000))
    with pytest.raises(ValueError):
        runner.run_step(task)
    worker.fail_on = set()
    assert graph.redraws == before + 5  # a fast step is drawn once; so is the failure
    for _ in range(20):
        runner.run_step(task)
    assert graph.redraws == before + 25
    assert graph.source == task_to_dot(runner.state_of(task))
    assert graph._live.full_renders == 0
    graph.close()


def test_the_html_fallback_sends_dot_and_draws_its_picture_only_when_redraws_pause() -> None:
    import html
    import time

    runner = AgentRunner(CountingWorker(target=500))  # type: ignore[arg-type]
    task = runner.create_task("go <b>")
    graph = runner.live_graph(task, throttle_s=0, renderer="html")
    assert not graph.in_browser
    graph.SVG_IDLE_S = 0.3
    for _ in range(30):
        runner.run_step(task)
    assert graph.svg_draws == 0  # no `dot` while the run goes on
    assert html.escape(graph.source) in graph.widget.value  # the DOT text of the last redraw, escaped
    assert "#30 done" in graph.source and "<b>" not in graph.widget.value
    deadline = time.monotonic() + 10
    while graph.svg_draws == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert graph.svg_draws == 1  # the pause: one picture
    assert "<svg" in graph.widget.value or "<pre" in graph.widget.value
    runner.run_step(task)
    assert graph.flush() is False and graph.svg_draws == 2  # flush draws the due picture now
    graph.close()


@pytest.mark.parametrize("renderer", ["anywidget", "html"])
def test_the_widget_sends_each_redraw_as_ipywidgets_would_and_observers_still_hear_it(renderer: str) -> None:
    """Each redraw is one trait assignment: one comm message, the one ipywidgets' own trait
    path sends, and observers of the trait (or of every trait) hear it once."""
    from nbagent.viz.live import live_view_available

    if renderer == "anywidget" and not live_view_available():
        pytest.skip("graphviz-anywidget is not installed")
    runner = AgentRunner(CountingWorker(target=50))  # type: ignore[arg-type]
    task = runner.create_task("go")
    graph = runner.live_graph(task, throttle_s=0, renderer=renderer)
    widget, name = graph.widget, "dot_source" if renderer == "anywidget" else "value"
    sent: list[tuple[Any, Any]] = []
    widget.comm.send = lambda data=None, buffers=None, **kw: sent.append((data, buffers))
    runner.run_step(task)  # the first step's start is drawn too (steps may be slow)
    sent.clear()
    runner.run_step(task)  # a fast step: one redraw, one message
    assert sent == [({"method": "update", "state": {name: getattr(widget, name)}, "buffer_paths": []}, [])]
    assert graph.source == task_to_dot(runner.state_of(task)) and graph.source in html.unescape(getattr(widget, name))
    ours = sent.pop()
    setattr(widget, name, "x")  # ipywidgets' own path, for comparison
    setattr(widget, name, ours[0]["state"][name])
    assert sent[-1] == ours
    sent.clear()
    heard: list[str] = []
    widget.observe(lambda change: heard.append(change["new"]), names=name)
    runner.run_step(task)
    assert heard == [getattr(widget, name)] and len(sent) == 1 and sent[0][0]["state"] == {name: heard[0]}
    assert graph.source == task_to_dot(runner.state_of(task))
    graph.close()
    other = runner.live_graph(task, throttle_s=0, renderer=renderer)
    everything: list[str] = []
    other.widget.observe(lambda change: everything.append(change["name"]))  # every trait (traitlets.All)
    runner.run_step(task)  # its first step: the start is drawn too
    everything.clear()
    runner.run_step(task)
    assert everything.count(name) == 1 and other.source == task_to_dot(runner.state_of(task))
    other.close()


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=0x2070)) | st.text(alphabet=" ab\t\n\r\x00~&<\u202e"),
       limit=st.none() | st.integers(0, 12))
def test_the_quick_preview_of_a_node_line_is_the_preview(text: str, limit: int | None) -> None:
    """Node lines preview plain ASCII text without cleaning it: the same text as preview()."""
    from nbagent.viz.dot.labels import _preview
    from nbagent.viz.escape import preview

    assert _preview(text, limit) == preview(text, limit)


def test_the_live_graph_and_the_store_make_no_step_start_while_steps_are_fast(tmp_path: Any) -> None:
    """A fast step's start is not drawn, so with only the live graph and the run store
    listening the engine builds no StepStarted; a slow step makes the graph ask for them
    again (its start is drawn), a fast one stops it; closed, it asks for nothing."""
    import nbagent.events as events

    runner = AgentRunner(CountingWorker(target=200), autosave=tmp_path / "runs.db")  # type: ignore[arg-type]
    task = runner.create_task("go")
    graph = runner.live_graph(task, throttle_s=0)
    assert runner.events.wants(events.StepStarted)  # steps may be slow until one is not
    runner.run_step(task)
    assert not runner.events.wants(events.StepStarted)
    assert not runner.events.wants(events.TokenStreamed)
    before = graph.redraws
    for _ in range(5):
        runner.run_step(task)
    assert graph.redraws - before == 5 and graph.source == task_to_dot(runner.state_of(task))
    graph._on_event(events.StepCompleted(graph.task_id, step_id="x", is_last=False, next_step_ids=(), latency_s=1.0))
    assert runner.events.wants(events.StepStarted)  # a slow step: the next start is drawn
    runner.run_step(task)  # fast again
    assert not runner.events.wants(events.StepStarted)
    graph._set_slow(True)
    graph.close()
    assert not runner.events.wants(events.StepStarted)  # closed: no longer listening at all
    graph._set_slow(False)
    graph._set_slow(True)
    assert not runner.events.wants(events.StepStarted)
