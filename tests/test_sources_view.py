"""A ReAct step's output shows its task's sources as they were at that step, in O(1) memory.

Each output holds a ``PrefixView`` of the task's one ``AppendLog`` of sources, not a copy (a
copy per step kept O(N^2) references over a long tool loop). What a view shows must never
change: not when later steps append, not after an undo and different steps, not after a step
that fails half-way, not after saving and loading (run file or SQLite store). LlamaIndex
0.12.52 shares one list across its step outputs, so there an earlier output's sources grow
with later steps; nbagent deliberately does not (asserted below against the real thing).
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent import AgentRunner, ReActAgentWorker, ScriptedLLM, ToolOutput
from nbagent._prefix import PrefixView
from nbagent.persist import PersistError
from nbagent.runner.snapshot import AppendLog
from nbagent.schema import AgentChatResponse


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


def act(tool: str, a: int, b: int) -> str:
    return f'Thought: use {tool}.\nAction: {tool}\nAction Input: {{"a": {a}, "b": {b}}}'


def react(replies: list[str], **kw: Any) -> ReActAgentWorker:
    return ReActAgentWorker.from_tools([add, mul], llm=ScriptedLLM(replies), max_iterations=100, **kw)


def shown(runner: AgentRunner, task: Any) -> list[list[str]]:
    """What each completed output shows as its sources (tool contents)."""
    return [[s.content for s in out.output.sources] for out in runner.get_completed_steps(task)]


def tool(content: str) -> ToolOutput:
    return ToolOutput(content=content, tool_name="t", raw_input={}, raw_output=content)


# ----- the view itself: reads as the list it stands for -------------------------------------


def test_a_view_reads_like_the_list_it_shows() -> None:
    log: AppendLog[ToolOutput] = AppendLog()
    log.extend(tool(c) for c in "abc")
    view = log.view()
    log.append(tool("d"))  # not shown: the view is of the first 3
    items = list(log)[:3]
    assert len(view) == 3 and bool(view) and not AppendLog().view()
    assert view[0] is items[0] and view[-1] is items[2] and view[-3] is items[0]
    with pytest.raises(IndexError):
        view[3]  # the 4th item exists in the log, but not in this view
    with pytest.raises(IndexError):
        view[-4]
    assert view[1:] == items[1:] and view[::-1] == items[::-1] and view[5:] == []
    assert type(view[:]) is list
    assert list(view) == items and list(reversed(view)) == items[::-1]
    assert view == items and items == view and view != items[:2] and view != tuple(items)
    assert view == log.view()[:3] and log.view() != view
    assert items[1] in view and log[3] not in view and view.index(items[2]) == 2 and view.count(items[0]) == 1
    assert repr(view) == repr(items)
    assert view + [log[3]] == list(log) and [log[3]] + view == [log[3], *items]
    assert view.copy() == items and type(view.copy()) is list
    with pytest.raises(TypeError):
        hash(view)
    with pytest.raises(TypeError):
        view[0] = tool("x")  # type: ignore[index]
    assert copy.copy(view) is view
    deep = copy.deepcopy(view)
    assert [s.content for s in deep] == ["a", "b", "c"] and deep[0] is not items[0]


def test_pydantic_keeps_the_view_and_dumps_it_as_a_list() -> None:
    log: AppendLog[ToolOutput] = AppendLog([tool("a"), tool("b")])
    view = log.view()
    resp = AgentChatResponse(response="r", sources=view)
    assert resp.sources is view  # validated without a copy
    as_list = AgentChatResponse(response="r", sources=list(log))
    assert resp == as_list
    assert resp.model_dump() == as_list.model_dump()
    assert json.loads(resp.model_dump_json()) == json.loads(as_list.model_dump_json())
    back = AgentChatResponse.model_validate_json(resp.model_dump_json())
    assert [s.content for s in back.sources] == ["a", "b"]
    with pytest.raises(ValueError, match="sources"):
        AgentChatResponse(sources=[1])  # a list is still checked item by item


def test_undo_below_a_view_copies_on_write_and_a_cut_above_copies_nothing() -> None:
    log: AppendLog[ToolOutput] = AppendLog([tool("a"), tool("b")])
    two = log.view()
    log.append(tool("c"))
    three = log.view()
    assert two._shares_storage_with(three) and three._cell.items is log
    log.restore(3)  # a failed step that appended nothing: no view changes, no copy
    assert three._cell.items is log
    log.restore(1)  # undo below both views
    log.append(tool("x"))
    assert [s.content for s in two] == ["a", "b"] and [s.content for s in three] == ["a", "b", "c"]
    assert [s.content for s in log.view()] == ["a", "x"]
    assert three._cell.items is not log and two._shares_storage_with(three)  # one frozen copy


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "view", "restore"]), st.integers(0, 6)), max_size=40))
def test_every_view_keeps_what_it_showed_whatever_the_log_does(ops: list[tuple[str, int]]) -> None:
    log: AppendLog[int] = AppendLog()
    views: list[tuple[PrefixView[int], list[int]]] = []
    counter = 0
    for op, k in ops:
        if op == "append":
            for _ in range(k % 3 + 1):
                counter += 1
                log.append(counter)
        elif op == "view":
            views.append((log.view(), list(log)))
        else:
            log.restore(min(k, len(log)))
        for view, expected in views:
            assert list(view) == expected and len(view) == len(expected)


# ----- a ReAct tool loop --------------------------------------------------------------------


def test_earlier_outputs_keep_their_sources_after_later_steps_and_share_one_log() -> None:
    runner = AgentRunner(react([act("add", 1, i) for i in range(6)] + ["Thought: done.\nAnswer: ok"]))
    task = runner.create_task("add")
    seen = []
    for _ in range(6):
        out = runner.run_step(task)
        seen.append([s.content for s in out.output.sources])
    assert seen == [[str(1 + j) for j in range(i + 1)] for i in range(6)]
    assert shown(runner, task) == seen
    log = task.extra_state["sources"]
    outs = runner.get_completed_steps(task)
    # no copy per step: every output reads the task's one log
    assert all(type(o.output.sources) is PrefixView and o.output.sources._cell.items is log for o in outs)
    last = runner.run_step(task)
    assert last.is_last and shown(runner, task)[:6] == seen


def test_undo_then_different_steps_leave_earlier_and_undone_outputs_as_they_were() -> None:
    replies = [act("add", 1, 1), act("add", 1, 2), act("add", 1, 3), act("mul", 5, 5), act("mul", 6, 6)]
    runner = AgentRunner(react(replies))
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    assert shown(runner, task) == [["2"], ["2", "3"], ["2", "3", "4"]]
    runner.undo_step(task)
    runner.undo_step(task)
    for _ in range(2):  # different steps in their place
        runner.run_step(task)
    assert shown(runner, task) == [["2"], ["2", "25"], ["2", "25", "36"]]
    undone = runner.state_of(task).undone_outputs
    assert sorted([s.content for s in o.output.sources] for o in undone) == [["2", "3"], ["2", "3", "4"]]
    assert [s.content for s in task.extra_state["sources"]] == ["2", "25", "36"]


def test_fork_keeps_the_abandoned_branch_outputs_exact() -> None:
    replies = [act("add", 1, 1), act("add", 1, 2), act("add", 1, 3), act("mul", 3, 3)]
    runner = AgentRunner(react(replies))
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    second = runner.get_completed_steps(task)[1].task_step.step_id
    runner.fork(task, second, input="try mul")
    runner.run_step(task)
    assert shown(runner, task) == [["2"], ["2", "9"]]
    undone = runner.state_of(task).undone_outputs
    assert sorted([s.content for s in o.output.sources] for o in undone) == [["2", "3"], ["2", "3", "4"]]


class _FailsAfterTheCall(ReActAgentWorker):
    """Fails once after the tool ran and the step's output (with its view) was built."""

    fail_next = True
    lost: Any = None

    def _after_call(self, *args: Any, **kwargs: Any) -> Any:
        result = super()._after_call(*args, **kwargs)
        if self.fail_next:
            self.fail_next = False
            self.lost = result.output.sources
            raise RuntimeError("boom after the call")
        return result


def test_a_failing_step_changes_no_output_and_its_lost_view_stays_exact() -> None:
    llm = ScriptedLLM([act("add", 1, 1), act("add", 2, 2), act("mul", 3, 3), act("mul", 4, 4)])
    worker = _FailsAfterTheCall.from_tools([add, mul], llm=llm, max_iterations=10)
    worker.fail_next = False
    runner = AgentRunner(worker)
    task = runner.create_task("go")
    runner.run_step(task)
    worker.fail_next = True
    with pytest.raises(RuntimeError, match="boom"):
        runner.run_step(task)
    lost = worker.lost
    assert [s.content for s in lost] == ["2", "4"]
    assert [s.content for s in task.extra_state["sources"]] == ["2"]  # rolled back
    # the queued step runs again: the call that ran is not run again, its output is reused
    # (nbagent.calls), and the model is not asked again
    runner.run_step(task)
    assert shown(runner, task) == [["2"], ["2", "4"]] and len(llm.requests) == 2
    runner.run_step(task)  # the log was cut to one item and grew again, twice
    assert shown(runner, task) == [["2"], ["2", "4"], ["2", "4", "9"]]
    assert [s.content for s in lost] == ["2", "4"]  # the cut did not reach the lost view


# ----- save and load ----------------------------------------------------------------------


def _run_with_undo(runner: AgentRunner) -> Any:
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    runner.undo_step(task)
    runner.run_step(task)
    return task


REPLIES = [act("add", 1, 1), act("add", 1, 2), act("add", 1, 3), act("mul", 4, 4), "Thought: ok.\nAnswer: done"]


@pytest.mark.parametrize("where", ["run.json", "runs.db"])
def test_save_and_load_keep_what_every_output_showed(tmp_path: Path, where: str) -> None:
    path = tmp_path / where
    runner = AgentRunner(react(REPLIES), autosave=path) if where.endswith(".db") else AgentRunner(react(REPLIES))
    task = _run_with_undo(runner)
    if not where.endswith(".db"):
        runner.save(path)
    expected = [["2"], ["2", "3"], ["2", "3", "16"]]
    assert shown(runner, task) == expected
    live_undone = runner.state_of(task).undone_outputs
    assert [[s.content for s in o.output.sources] for o in live_undone] == [["2", "3", "4"]]
    loaded = AgentRunner.load(path, react(REPLIES[4:]))
    assert shown(loaded, task.task_id) == expected
    undone = loaded.state_of(task.task_id).undone_outputs
    assert [[s.content for s in o.output.sources] for o in undone] == [["2", "3", "4"]]
    # the loaded run goes on: its answer has every source, earlier outputs are unchanged
    final = loaded.run_step(task.task_id)
    assert final.is_last and shown(loaded, task.task_id)[:3] == expected
    assert [s.content for s in loaded.finalize_response(task.task_id).sources] == ["2", "3", "16"]


# ----- against the reference ----------------------------------------------------------------


def test_llama_index_shares_one_growing_list_nbagent_keeps_each_step_as_it_was() -> None:
    li = pytest.importorskip("llama_index.core")
    from llama_index.core.agent import ReActAgentWorker as LIWorker
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.tools import FunctionTool as LITool

    li.Settings.tokenizer = str.split  # offline
    replies = [act("add", 1, 1), act("add", 1, 2), "Thought: ok.\nAnswer: done"]

    class Scripted(CustomLLM):  # type: ignore[misc]
        i: int = 0

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(is_chat_model=False)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            text = replies[self.i]
            self.i += 1
            return CompletionResponse(text=text)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            raise NotImplementedError

    from llama_index.core.agent import AgentRunner as LIRunner

    with warnings.catch_warnings(record=True):  # its deprecation notice (forced "always")
        li_runner = LIRunner(LIWorker.from_tools([LITool.from_defaults(fn=add)], llm=Scripted()))
    li_task = li_runner.create_task("go")
    li_first = li_runner.run_step(li_task.task_id)
    li_first_then = [s.content for s in li_first.output.sources]
    li_runner.run_step(li_task.task_id)
    li_first_now = [s.content for s in li_first.output.sources]
    assert li_first_then == ["2"] and li_first_now == ["2", "3"]  # the reference's first output grew

    runner = AgentRunner(react(replies))
    task = runner.create_task("go")
    first = runner.run_step(task)
    second = runner.run_step(task)
    assert [s.content for s in first.output.sources] == li_first_then  # as it was at that step
    assert [s.content for s in second.output.sources] == li_first_now  # the same sources at the end


def test_a_run_file_holds_each_source_once_and_loaded_views_share_the_loaded_log(tmp_path: Path) -> None:
    steps = 30
    runner = AgentRunner(react([act("add", 1, i) for i in range(steps)]))
    task = runner.create_task("go")
    for _ in range(steps):
        runner.run_step(task)
    runner.undo_step(task)  # the undone output's view is frozen: written with its own list
    path = runner.save(tmp_path / "run.json")
    doc = json.loads(path.read_text())
    outs = doc["tasks"][0]["outputs"]
    views = [o["output"]["data"]["sources"] for o in outs]
    assert all(v["$type"] == "prefix" for v in views)
    assert sorted(v["n"] for v in views) == list(range(1, steps + 1))
    # N lengths and the tool outputs once, not N^2/2 references
    assert len(re.findall(r'"tool_name":\s*"add"', path.read_text())) == steps
    loaded = AgentRunner.load(path, react([act("mul", 5, 5)]))
    state = loaded.state_of(task.task_id)
    log = state.task.extra_state["sources"]
    assert type(log) is AppendLog and len(log) == steps - 1
    # the views read one list: the undo froze one copy of the log for the views it had handed
    # out, and the loaded ones read that one copy (each holding a length), as the live ones did
    frozen = state.undone_outputs[0].output.sources.log
    assert type(frozen) is list and all(o.output.sources.log is frozen for o in state.completed_steps)
    assert all(a is b for a, b in zip(log, frozen))
    assert [len(o.output.sources) for o in state.completed_steps] == list(range(1, steps))
    assert [s.content for s in state.undone_outputs[0].output.sources] == [str(1 + i) for i in range(steps)]
    # the loaded run undoes and goes on: what the loaded outputs show does not move
    before = shown(loaded, task.task_id)
    loaded.undo_step(task.task_id)
    loaded.run_step(task.task_id)
    after = shown(loaded, task.task_id)
    assert after[:-1] == before[:-1] and after[-1] == [*before[-1][:-1], "25"]
    assert [s.content for s in state.undone_outputs[-1].output.sources] == before[-1]


def test_loaded_views_read_the_loaded_log_and_a_bad_prefix_is_refused_by_name(tmp_path: Path) -> None:
    runner = AgentRunner(react([act("add", 1, 1), act("add", 1, 2)]))
    task = runner.create_task("go")
    runner.run_step(task)
    runner.run_step(task)
    path = runner.save(tmp_path / "run.json")
    good = AgentRunner.load(path).state_of(task.task_id)
    assert all(o.output.sources.log is good.task.extra_state["sources"] for o in good.completed_steps)
    doc = json.loads(path.read_text())
    view = doc["tasks"][0]["outputs"][1]["output"]["data"]["sources"]
    assert view["$type"] == "prefix" and view["n"] == 2
    view["n"] = 7  # more than the log holds
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(PersistError, match="prefix"):
        AgentRunner.load(bad)
