"""Time travel: goto_step to any earlier step, fork a branch, list and compare branches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, ScriptedLLM, StepStatus, TaskStateError, seed_ids
from nbagent.branches import Branch, BranchComparison
from nbagent.viz.dot import node_names, task_to_dot
from nbagent.workers import ReActAgentWorker
from tests.helpers import CountingWorker


def counting(target: int = 6) -> tuple[AgentRunner, Any]:
    runner = AgentRunner(CountingWorker(target=target))  # type: ignore[arg-type]
    return runner, runner.create_task("count")


def run(runner: AgentRunner, task: Any, n: int) -> list[str]:
    return [runner.run_step(task).task_step.step_id for _ in range(n)]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def act(a: int, b: int) -> str:
    return f'Thought: I add {a} and {b}.\nAction: add\nAction Input: {{"a": {a}, "b": {b}}}'


# ----- goto_step ---------------------------------------------------------------------------------


def test_goto_step_goes_back_to_just_after_any_earlier_step() -> None:
    runner, task = counting()
    ids = run(runner, task, 4)
    nxt = runner.goto_step(task, ids[1])
    state = runner.state_of(task)
    assert [o.task_step.step_id for o in state.completed_steps] == ids[:2]
    assert task.extra_state["count"] == 2
    assert [m.text for m in task.scratch_memory.get_all()] == ["step 1", "step 2"]
    assert nxt is not None and nxt.step_id == ids[2]  # step 3 is queued again, same id
    assert state.step_status(ids[3]) == StepStatus.UNDONE  # the later step stays visible
    assert str(runner.run_step(task)) == "count=3 input=None"


def test_goto_step_before_requeues_the_step_itself() -> None:
    runner, task = counting()
    ids = run(runner, task, 3)
    step = runner.goto_step(task, ids[0], before=True)
    assert step is not None and step.step_id == ids[0]
    state = runner.state_of(task)
    assert state.completed_steps == [] and step.step_state["count"] == 0 and "count" not in task.extra_state
    assert runner.goto_step(task, ids[0], before=True) is step  # already there: nothing to undo
    assert str(runner.run_step(task, input="again")) == "count=1 input=again"


def test_goto_step_refuses_what_it_cannot_reach() -> None:
    runner, task = counting()
    ids = run(runner, task, 3)
    runner.goto_step(task, ids[0])
    with pytest.raises(ValueError, match="undone"):
        runner.goto_step(task, ids[2])  # on the undone branch now
    with pytest.raises(ValueError, match="has no step 'nope'"):
        runner.goto_step(task, "nope")
    done, t2 = counting(target=1)
    (sid,) = run(done, t2, 1)
    done.finalize_response(t2)
    with pytest.raises(TaskStateError, match="finalized"):
        done.goto_step(t2, sid)
    off = AgentRunner(CountingWorker(target=5), keep_history=False)  # type: ignore[arg-type]
    t3 = off.create_task("x")
    (sid,) = run(off, t3, 1)
    with pytest.raises(TaskStateError, match="keep_history=False"):
        off.goto_step(t3, sid, before=True)


# ----- fork and branches -------------------------------------------------------------------------


def test_fork_puts_a_new_step_in_place_and_keeps_the_old_branch() -> None:
    runner, task = counting()
    ids = run(runner, task, 3)
    new = runner.fork(task, ids[1], input="other way")
    state = runner.state_of(task)
    assert new.step_id not in ids and new.input == "other way"
    assert [s.step_id for s in state.step_queue] == [new.step_id]
    assert list(new.prev_steps) == [ids[0]] and list(state.steps[ids[0]].next_steps) == [new.step_id]
    assert state.step_status(ids[1]) == StepStatus.UNDONE and state.step_status(ids[2]) == StepStatus.UNDONE
    assert task.extra_state["count"] == 1
    more = run(runner, task, 2)
    assert more[0] == new.step_id
    assert str(state.completed_steps[1].output) == "count=2 input=other way"
    # the graph draws the old branch dashed beside the new one
    names = node_names(state)
    dot = task_to_dot(state)
    # (the old step ran, so it is drawn as its undone run, a "u" node, hanging under step 1)
    ghost = next(line.split()[0] for line in dot.splitlines()
                 if line.startswith("  u") and f"undone run · {ids[1][:8]}" in line)
    assert f"{names[ids[0]]} -> {ghost} [style=\"dashed\"" in dot
    assert f"{names[ids[0]]} -> {names[new.step_id]};" in dot
    branches = runner.branches(task)
    # a branch runs to its queued end: the old one to the step that was queued after step 3
    old_end = runner.state_of(task).undone_edges[0][1]
    assert [b.step_ids for b in branches] == [
        (*ids, old_end), (ids[0], *more, runner.get_upcoming_steps(task)[0].step_id)
    ]
    assert [b.current for b in branches] == [False, True]


def test_undo_past_a_fork_point_cuts_the_link_to_the_new_step() -> None:
    runner, task = counting()
    ids = run(runner, task, 2)
    new = runner.fork(task, ids[1])
    runner.undo_step(task)  # takes back step 1, whose next step is now the forked one
    state = runner.state_of(task)
    assert [s.step_id for s in state.step_queue] == [ids[0]]
    assert state.step_status(new.step_id) == StepStatus.UNDONE
    assert not state.steps[ids[0]].next_steps


def test_fork_of_the_first_step_and_of_a_queued_step() -> None:
    runner, task = counting()
    ids = run(runner, task, 2)
    root = runner.fork(task, ids[0], input="fresh start")
    assert runner.state_of(task).completed_steps == [] and not root.prev_steps
    run(runner, task, 1)
    queued = runner.get_upcoming_steps(task)[0]
    other = runner.fork(task, queued.step_id, input="x")  # nothing to undo: just replaced
    assert runner.get_upcoming_steps(task) == [other]
    roots = [b.step_ids[0] for b in runner.branches(task)]
    assert roots[0] == ids[0] and roots[-1] == root.step_id
    with pytest.raises(ValueError, match="undone"):
        runner.fork(task, ids[1])


def test_plain_undo_and_rerun_also_makes_a_branch() -> None:
    runner, task = counting()
    ids = run(runner, task, 3)
    runner.undo_step(task)
    runner.undo_step(task)  # step 2 is queued again with its own id; step 3 is cut off
    again = run(runner, task, 2)
    assert again[0] == ids[1]
    branches = runner.branches(task)
    assert [b.step_ids[:3] for b in branches] == [tuple(ids), (ids[0], ids[1], again[1])]
    assert [b.current for b in branches] == [False, True]
    cmp = runner.compare(task, branches[0], "current")
    # step 2 ran twice: each branch shows the run that led to its own next step
    (a2, b2) = cmp.rows[1]
    assert a2 is not None and b2 is not None and a2.step_id == b2.step_id == ids[1]
    assert a2.output == b2.output == "count=2 input=None"
    assert a2.output_ref is not b2.output_ref and a2.status == "undone" and b2.status == "done"
    assert cmp.shared == 1


def test_branches_of_a_queued_task_and_the_current_end() -> None:
    runner, task = counting()
    (only,) = runner.branches(task)
    assert only.current and len(only) == 1
    ids = run(runner, task, 2)
    (b,) = runner.branches(task)
    assert b.step_ids[:2] == tuple(ids) and b.current and b.leaf == runner.get_upcoming_steps(task)[0].step_id


# ----- compare -----------------------------------------------------------------------------------


def react_fork() -> tuple[AgentRunner, Any, list[Branch]]:
    seed_ids(0)
    hostile = '<script>alert("x")</script>'
    llm = ScriptedLLM([act(1, 2), act(3, 4), f"Thought: done {hostile}\nAnswer: 10 {hostile}", act(5, 5),
                       "Thought: ok\nAnswer: 13"])
    runner = AgentRunner(ReActAgentWorker.from_tools([add], llm=llm))
    task = runner.create_task(f"sum {hostile}")
    ids = run(runner, task, 3)
    runner.fork(task, ids[1], input=f"use 5+5 {hostile}")
    run(runner, task, 2)
    return runner, task, runner.branches(task)


def test_compare_shows_two_branches_side_by_side() -> None:
    runner, task, branches = react_fork()
    cmp = runner.compare(task, 0, 1)
    assert isinstance(cmp, BranchComparison) and cmp.shared == 1 and len(cmp.rows) == 3
    old, new = cmp.rows[1]
    assert old is not None and new is not None
    assert old.calls == (("add(a=3, b=4)", "7", False),) and new.calls == (("add(a=5, b=5)", "10", False),)
    assert new.input is not None and new.input.startswith("use 5+5")
    last_old, last_new = cmp.rows[2]
    assert last_old is not None and last_new is not None
    assert last_old.is_last and last_new.output == "13" and last_old.status == "undone"
    text = cmp.to_text()
    assert "add(a=3, b=4) -> 7" in text and "add(a=5, b=5) -> 10" in text and "(1 shared step)" in text
    # the same branches by leaf id and by "current"
    same = runner.compare(task, branches[0].leaf, "current")
    assert (same.left, same.right) == (cmp.left, cmp.right)


def test_compare_html_is_escaped_and_inert() -> None:
    runner, task, _ = react_fork()
    page = runner.compare(task, 0, 1)._repr_html_()
    assert page.startswith('<div class="nbagent nb-compare">')
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "onerror" not in page and "href" not in page
    assert "1 shared step" in page


def test_compare_rejects_unknown_branches() -> None:
    runner, task, _ = react_fork()
    with pytest.raises(ValueError, match="has 2 branches"):
        runner.compare(task, 0, 5)
    with pytest.raises(ValueError, match="no branch"):
        runner.compare(task, 0, "zzzzzzzz")
    with pytest.raises(TypeError):
        runner.compare(task, 0, 1.5)  # type: ignore[arg-type]


def test_branches_survive_save_and_load(tmp_path: Path) -> None:
    runner, task, branches = react_fork()
    loaded = AgentRunner.load(runner.save(tmp_path / "run.json"))
    assert loaded.branches(task.task_id) == branches
    assert loaded.compare(task.task_id, 0, 1).to_text() == runner.compare(task, 0, 1).to_text()


def test_a_failed_step_is_retried_not_forked() -> None:
    runner = AgentRunner(CountingWorker(target=5, fail_on={2}))  # type: ignore[arg-type]
    task = runner.create_task("count")
    runner.run_step(task)
    with pytest.raises(ValueError, match="boom"):
        runner.run_step(task)
    failed = runner.get_upcoming_steps(task)[0]
    with pytest.raises(ValueError, match="waits to be retried"):
        runner.fork(task, failed.step_id)
