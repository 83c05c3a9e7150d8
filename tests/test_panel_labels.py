"""What the panel and the other views say, word for word (issue 29, the smaller items): the
streaming box after New task, whole messages in the transcript, the approval row's groups,
counts with their nouns, the workflow panel's one named count, descriptions cut at a word,
and the buttons that look disabled when they are."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from nbagent import FunctionCallingAgentWorker, AgentRunner, ScriptedLLM, tool_call
from nbagent._counts import counted
from nbagent.viz.escape import preview, truncate
from nbagent.viz.panel import AgentPanel
from tests.test_panel import chatty_runner, counting_runner


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


# ----- the panel -------------------------------------------------------------------------------


def test_new_task_empties_the_streaming_box_of_the_previous_answer() -> None:
    runner = chatty_runner(["The first answer, streamed.", "Its second step."], steps=2)
    panel = AgentPanel(runner, runner.create_task("first"))
    panel.run()
    assert "Its second step." in panel.tokens_view.value
    panel.new_task("second")
    assert panel.streamed_text == ""
    assert "Its second step." not in panel.tokens_view.value and "first answer" not in panel.tokens_view.value
    assert "no step has streamed yet" in panel.tokens_view.value
    # picking the first task again does not bring another task's stream either
    panel.select(list(runner.tasks)[0])
    assert "Its second step." not in panel.tokens_view.value


def test_the_transcript_shows_the_last_messages_whole_and_folds_the_earlier_ones() -> None:
    replies = [f"reply {i}: " + "word " * 30 for i in range(9)]
    runner = chatty_runner(replies, steps=9)
    panel = AgentPanel(runner, runner.create_task("talk"))
    panel.run()
    messages = panel.transcript_messages()
    assert len(messages) > AgentPanel.TRANSCRIPT_RECENT
    html = panel.transcript.value
    folded, _, shown = html.partition("</details>")
    earlier = len(messages) - AgentPanel.TRANSCRIPT_RECENT
    assert f"{earlier} earlier messages" in folded
    for m in messages[-AgentPanel.TRANSCRIPT_RECENT:]:
        assert m.text.strip() in _text(shown)  # each recent message whole
    assert messages[0].text in _text(folded)  # the earlier ones are there, folded
    # neither the transcript nor the inspector sits in a box that scrolls (and cuts lines)
    side = next(w for w in panel.widget.children[-1].children if panel.transcript in getattr(w, "children", ()))
    assert panel.inspector in side.children
    for w in (side, panel.inspector, panel.transcript):
        assert w.layout.max_height is None and w.layout.overflow is None


def test_the_coloured_buttons_take_their_colour_only_while_enabled() -> None:
    panel = AgentPanel(counting_runner(2))
    css = panel.widget.children[0].value
    for b in (panel.step_button, panel.run_button, panel.stop_button, panel.retry_button):
        assert b.button_style == ""  # a button_style would keep the colour when disabled
        cls = next(c for c in b._dom_classes if c.startswith("nbagent-btn-"))
        assert re.search(rf"\.{cls}\.jupyter-button:not\(\[disabled\]\)\{{background:#", css)
    assert ".nbagent-panel .jupyter-button[disabled]{background:transparent" in css


def test_an_approval_row_wraps_between_its_groups_never_inside_one() -> None:
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    from nbagent import FunctionTool

    tool = FunctionTool.from_defaults(delete_file, requires_approval=True)
    llm = ScriptedLLM([tool_call("delete_file", path="a-rather-long-file-name-for-the-row.txt")])
    runner = AgentRunner(FunctionCallingAgentWorker.from_tools([tool], llm=llm))
    panel = AgentPanel(runner, runner.create_task("tidy up"))
    panel.step()
    (row,) = panel.approvals.rows.values()
    label, approve_group, reject_group = row.widget.children
    assert row.widget.layout.flex_flow == "row wrap"
    assert list(approve_group.children) == [row.arguments, row.approve_button, row.edit_button]
    assert list(reject_group.children) == [row.reason, row.reject_button]  # Reject stays by its reason
    for group in (approve_group, reject_group):  # kept whole: no shrinking, no wrapping inside
        assert group.layout.flex_flow == "row nowrap" and group.layout.flex == "0 0 auto"
    assert label.layout.flex.startswith("1 1")  # the call's text takes the room left


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
        panel = workflow(tool_call("lookup", city="Oslo"), "Sunny in Oslo.").panel(renderer="html", throttle_s=60.0)
        panel.start("Weather in Oslo?")
        assert panel.status_text() == "Run paused; 0 workflow steps taken."
        await panel.step()
        assert panel.status_text() == "Run paused; 1 workflow step taken."
        await panel.run()
        agent_steps = len(panel.view.trace.turns)
        panel.view.flush()
        assert f"{agent_steps} agent steps" in panel.view.source  # the graph's title
        assert panel.status_text() == (
            f"Run done; {panel.steps} workflow steps taken, {agent_steps} of them agent steps.")
        assert panel.steps > agent_steps == 2

    asyncio.run(go())
