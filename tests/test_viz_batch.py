"""The batch views without a browser: the grid's Python twins (click a cell, Stop), what its
widgets hold while a batch runs and after, the static summary table, the tqdm bar."""

from __future__ import annotations

import io
import re
import time
from typing import Any

from nbagent import ChatMessage, MessageRole
from nbagent.viz.batch import BatchGrid, TqdmProgress, batch_summary_html, start_progress
from tests.test_batch import SlowLLM, brain, make_agent, questions

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def finished_batch(inputs: list[str]) -> Any:
    return make_agent().run_batch(inputs, max_concurrency=3, progress=False)


def test_cells_follow_the_items_and_a_click_opens_that_task() -> None:
    batch = finished_batch(["what is 1 + 2 ?", "boom 1 1", "what is 3 + 4 ?"])
    grid = BatchGrid(batch, throttle_s=0)
    assert grid.cells.statuses == "dfd"
    assert "2 done" in grid.status.value and "1 failed" in grid.status.value
    assert grid.cells.labels == ["what is 1 + 2 ?", "boom 1 1", "what is 3 + 4 ?"]

    grid.click(2)
    assert grid.selected == 2 and grid.cells.selected == 2
    assert grid.graph.task_id == batch[2].task_id  # the DAG shown is that task's
    assert grid.graph.source == batch.runner.graph(batch[2].task_id).source
    assert "The answer is 7" in grid.detail.value
    assert "what is 3 + 4 ?" in grid.transcript.value and "The answer is 7" in grid.transcript.value

    grid.cells.selected = 1  # what the browser does when cell 1 is clicked
    assert grid.selected == 1 and grid.graph.task_id == batch[1].task_id
    assert "ValueError" in grid.detail.value and "failed" in grid.detail.value
    assert grid.stop_button.disabled  # the batch is over


def test_the_grid_follows_a_running_batch_and_its_stop_button_stops_it() -> None:
    agent = make_agent(SlowLLM(brain, delay=0.02, model="m1"))
    batch = agent.run_batch(questions(30), max_concurrency=3, progress=False, background=True)
    grid = BatchGrid(batch, throttle_s=0)
    seen: set[str] = set()
    deadline = time.monotonic() + 20
    while batch.counts()["done"] < 4 and time.monotonic() < deadline:
        seen.update(grid.cells.statuses)
        time.sleep(0.005)
    grid.click(0)
    assert grid.graph.task_id == batch[0].task_id
    grid.stop_button.click()  # ipywidgets runs the on_click handlers: what a click does
    batch.wait()
    grid.finish()
    assert batch.stopped
    assert "r" in seen  # running cells were drawn while it ran
    final = grid.cells.statuses
    assert final == batch.statuses() and set(final) <= {"d", "s"} and "s" in final
    assert grid.stop_button.disabled
    assert re.search(r"\d+ stopped", grid.status.value)


def test_the_open_task_redraws_while_it_runs() -> None:
    agent = make_agent(SlowLLM(brain, delay=0.05, model="m1"))
    batch = agent.run_batch(questions(2), max_concurrency=1, progress=False, background=True)
    grid = BatchGrid(batch, throttle_s=0)
    while batch[1].task_id is None:
        time.sleep(0.005)
    grid.click(1)
    first = grid.detail.value
    batch.wait()
    grid.finish()
    assert "running" in first or "queued" in first
    assert "The answer is 11" in grid.detail.value and "done" in grid.detail.value
    assert "The answer is 11" in grid.transcript.value


def test_user_text_is_escaped_in_every_batch_view() -> None:
    evil = '<img src=x onerror="alert(1)"> what is 1 + 2 ?'
    batch = finished_batch([evil, "boom <script>alert(2)</script>"])
    grid = BatchGrid(batch, throttle_s=0)
    grid.click(0)
    grid.click(1)
    for html in (batch_summary_html(batch), grid.detail.value, grid.transcript.value, grid.status.value):
        assert "<img" not in html and "<script>" not in html
    assert "&lt;img src=x" in batch_summary_html(batch)


def test_static_summary_is_a_table_that_puts_failures_first_when_long() -> None:
    inputs = questions(40)
    inputs[33] = "boom 1 1"
    batch = finished_batch(inputs)
    html = batch_summary_html(batch)
    assert html.count("<tr>") == 1 + 30  # header + 30 rows
    assert "boom 1 1" in html  # the failure made it into the table though it is row 33
    assert "10 more rows" in html
    assert "39 done" in html and "1 failed" in html
    assert html.count('class="nbb-cell"') == 40
    bundle = BatchGrid(batch)._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and "39 done" in bundle["text/html"]
    assert bundle["text/plain"].startswith("BatchRun(40 tasks, finished: 39 done, 1 failed")


def test_tqdm_bar_counts_finished_tasks_outside_jupyter() -> None:
    agent = make_agent()
    from nbagent.batch import BatchRun

    batch = BatchRun(agent, questions(5) + ["boom 1 1"])
    out = io.StringIO()
    bar = TqdmProgress(batch, file=out)
    import asyncio

    asyncio.run(batch._arun())
    bar.finish()
    assert bar.bar.n == 6
    text = out.getvalue()
    assert "6/6" in text and "failed=1" in text
    view = start_progress(BatchRun(agent, ["a 1 2"]), "auto")
    assert isinstance(view, TqdmProgress)  # not in a kernel: a tqdm bar, not the grid
    view.bar.disable = True
    view.finish()


def test_the_transcript_of_a_task_is_what_it_saw_and_said() -> None:
    history = [ChatMessage(role=MessageRole.USER, content="hello 0 0")]
    agent = make_agent(chat_history=history)
    batch = agent.run_batch(questions(1), progress=False)
    texts = [m.text for m in batch.transcript(0)]
    assert texts[0] == "hello 0 0" and texts[1] == "what is 0 + 0 ?" and texts[-1] == "The answer is 0"


def test_the_grid_shows_what_the_pure_summary_functions_draw() -> None:
    """The grid's status line, open task and static fallback are the pure functions' HTML (no
    widget needed to test or to render them)."""
    from nbagent.viz.batch.summary import batch_static_html, status_line_html, task_detail_html

    batch = finished_batch(["what is 1 + 2 ?", "boom <b>1</b> 1"])
    grid = BatchGrid(batch, throttle_s=0)
    assert grid.static_html() == batch_static_html(batch) == batch_summary_html(batch)
    grid.click(1)
    assert grid.detail.value == task_detail_html(batch, batch.items[1])
    assert "boom &lt;b&gt;1&lt;/b&gt; 1" in grid.detail.value and "ValueError" in grid.detail.value
    assert grid.status.value == status_line_html(batch)
    page = grid.static_html()
    assert page == batch_static_html(batch, 1)
    assert page.startswith(batch_summary_html(batch) + grid.detail.value)
    assert '<div class="nbagent nb-graph">' in page and "boom &lt;b&gt;1&lt;/b&gt; 1" in page.split(grid.detail.value)[1]
