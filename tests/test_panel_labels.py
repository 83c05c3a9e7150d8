"""What the panel and the other views say, word for word (issue 29, the smaller items): the
streaming box after New task, whole messages in the transcript, counts with their nouns, the
workflow panel's one named count, descriptions cut at a word."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from nbagent import FunctionCallingAgentWorker, AgentRunner, ScriptedLLM, tool_call
from nbagent._counts import counted
from nbagent.viz.escape import preview, truncate
from nbagent.viz.panel import AgentPanel
from nbagent.viz.panel.data import TRANSCRIPT_RECENT
from tests.test_panel import chatty_runner, counting_runner


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


# ----- the panel -------------------------------------------------------------------------------


def test_new_task_empties_the_streaming_box_of_the_previous_answer() -> None:
    runner = chatty_runner(["The first answer, streamed.", "Its second step."], steps=2)
    panel = AgentPanel(runner, runner.create_task("first"))
    panel.run()
    assert "Its second step." in panel.tokens
    panel.new_task("second")
    assert panel.streamed_text == "" == panel.tokens
    assert panel.tokens_note == "no step has streamed yet"
    # picking the first task again does not bring another task's stream either
    panel.select(list(runner.tasks)[0])
    assert "Its second step." not in panel.tokens


def test_the_transcript_shows_the_last_messages_whole_and_folds_the_earlier_ones() -> None:
    replies = [f"reply {i}: " + "word " * 30 for i in range(9)]
    runner = chatty_runner(replies, steps=9)
    panel = AgentPanel(runner, runner.create_task("talk"))
    panel.run()
    messages = panel.transcript_messages()
    recent = TRANSCRIPT_RECENT
    assert len(messages) > recent
    sent = panel.transcript  # what the browser shows: the last messages whole, the rest counted
    assert sent["earlier"] == len(messages) - recent and sent["total"] == len(messages)
    assert [m["text"] for m in sent["messages"]] == [m.text for m in messages[-recent:]]
    html = panel.static_html()  # the picture: the same ones whole, the earlier ones folded
    folded, _, shown = html.partition("</details>")
    assert f"{len(messages) - recent} earlier messages" in folded
    for m in messages[-recent:]:
        assert m.text.strip() in _text(shown)  # each recent message whole
    assert messages[0].text in _text(folded)  # the earlier ones are there, folded


# ----- words ---------------------------------------------------------------------------------


def test_a_one_step_task_of_a_batch_says_1_step() -> None:
    from nbagent.viz.batch import BatchGrid
    from tests.test_batch import make_agent

    batch = make_agent().run_batch(["what is 1 + 2 ?"], progress=False)
    grid = BatchGrid(batch, throttle_s=0)
    grid.click(0)
    steps = batch[0].steps
    text = _text(grid.detail.value)
    assert f"{counted(steps, 'step')} ·" in text and not re.search(r"\b1 steps\b", text)
    assert not grid.graph_shown or grid.graph.task_id == batch[0].task_id


def test_prose_is_cut_at_a_word_and_code_where_it_must() -> None:
    text = "Looks facts up in the team's notes and returns them with their sources."
    assert truncate(text, 40, words=True) == "Looks facts up in the team's notes and…"
    assert truncate(text, 40) == "Looks facts up in the team's notes and …"[:39] + "…"
    assert preview("abcdefghij" * 5, 20, words=True) == "abcdefghijabcdefghi…"  # no space: cut anyway
    assert truncate("short", 40, words=True) == "short"


def test_workflow_draw_cuts_a_step_description_at_a_word() -> None:
    from nbagent.workflow import StartEvent, StopEvent, Workflow, step

    class Described(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            """Reads the request carefully, then answers it with everything the notes hold about it."""
            return StopEvent(result="ok")

    from nbagent.viz.workflow_dot import workflow_to_dot

    doc = "Reads the request carefully, then answers it with everything the notes hold about it."
    line = next(line for line in workflow_to_dot(Described()).splitlines() if "Reads the request" in line)
    kept = _text(line.partition("label=<")[2].partition(">, ")[0]).partition(" ")[2]  # after the step name
    assert kept.endswith("…") and len(kept) <= 60
    assert kept[:-1].split()[-1] in doc.split()  # the last word kept is a whole word


def test_the_workflow_panel_names_its_count_as_the_graph_does() -> None:
    from tests.test_workflow_panel import workflow

    async def go() -> None:
        panel = workflow(tool_call("lookup", city="Oslo"), "Sunny in Oslo.").panel(throttle_s=60.0)
        panel.start("Weather in Oslo?")
        assert panel.status_text() == "Run paused; 0 workflow steps taken."
        await panel.step()
        assert panel.status_text() == "Run paused; 1 workflow step taken."
        await panel.run()
        agent_steps = len(panel.trace.turns)
        assert f"{agent_steps} agent steps" in panel.dot  # the graph's title
        assert panel.status_text() == (
            f"Run done; {panel.steps} workflow steps taken, {agent_steps} of them agent steps.")
        assert panel.steps > agent_steps == 2

    asyncio.run(go())
