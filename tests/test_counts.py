"""Counted nouns: no label says "1 steps" or "1 replies" (issue 29)."""

from __future__ import annotations

from nbagent import AgentRunner, ScriptedLLM
from nbagent._counts import counted
from nbagent.costs import Cost
from nbagent.viz.html import llm_html
from nbagent.workers.react import ReActAgentWorker


def test_counted_nouns() -> None:
    assert counted(1, "step") == "1 step"
    assert [counted(n, "step") for n in (0, 2)] == ["0 steps", "2 steps"]
    assert counted(1, "reply") == "1 reply" and counted(3, "reply") == "3 replies"
    assert counted(2, "key") == "2 keys"  # a vowel before the y
    assert counted(2, "event type") == "2 event types"
    assert counted(2, "child", "children") == "2 children"


def test_labels_of_one_thing_are_singular() -> None:
    llm = ScriptedLLM(["Answer: 4"])
    assert "0 of 1 reply used" in llm_html(llm)
    runner = AgentRunner(ReActAgentWorker.from_tools([], llm=llm))
    task = runner.create_task("2+2?")
    runner.run_step(task)
    (branch,) = runner.branches(task)
    assert "1 step:" in repr(branch)
    assert str(Cost(prompt_tokens=1, completion_tokens=0)).startswith("1 token (")
    runner.finalize_response(task)
    runner.memory.set(runner.memory.get_all()[:1])
    assert repr(runner).endswith("memory=1 message)")
