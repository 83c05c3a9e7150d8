"""AgentRunner: the reference API plus the guarantees it lacks (safe failure, undo, steering)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    FnAgentWorker,
    MessageRole,
    StepStatus,
    StreamingAgentChatResponse,
    TaskStateError,
    TaskStatus,
    UnknownTaskError,
)
from nbagent import events as ev
from tests.helpers import CountingWorker


def make(target: int = 3, fail_on: set[int] | None = None, **kw: object) -> AgentRunner:
    return AgentRunner(CountingWorker(target=target, fail_on=fail_on or set()), **kw)  # type: ignore[arg-type]


def test_guide_usage_pattern_with_task_objects_and_ids() -> None:
    runner = make(target=2)
    task = runner.create_task("What is (121 * 3) + 42?")
    out = runner.run_step(task)  # a Task works
    assert not out.is_last and str(out) == "count=1 input=What is (121 * 3) + 42?"
    out = runner.run_step(task.task_id)  # and its id
    assert out.is_last
    response = runner.finalize_response(task.task_id)
    assert str(response) == "count=2 input=None"
    assert [t.task_id for t in runner.list_tasks()] == [task.task_id]
    assert len(runner.get_completed_steps(task)) == 2
    assert runner.get_completed_tasks() == [task]
    assert runner.get_task_output(task) is runner.get_completed_steps(task)[-1]


def test_unknown_task_id_names_it_and_lists_known() -> None:
    runner = make()
    t = runner.create_task("x")
    with pytest.raises(UnknownTaskError) as err:
        runner.run_step("nope")
    assert "'nope'" in str(err.value) and t.task_id in str(err.value)
    for method in (runner.get_task, runner.get_upcoming_steps, runner.delete_task, runner.undo_step):
        with pytest.raises(UnknownTaskError):
            method("nope")
    with pytest.raises(TypeError):
        runner.run_step(42)  # type: ignore[arg-type]


def test_failing_step_leaves_task_exactly_as_it_was_and_retry_works() -> None:
    runner = make(target=3, fail_on={2})
    task = runner.create_task("go")
    runner.run_step(task)
    state = runner.state_of(task)
    before_queue = [s.step_id for s in state.step_queue]
    before_extra = {k: (list(v) if isinstance(v, list) else v) for k, v in task.extra_state.items() if k != "memory"}
    before_scratch = [m.content for m in task.scratch_memory.get_all()]
    with pytest.raises(ValueError, match="boom at 2"):
        runner.run_step(task)
    assert [s.step_id for s in state.step_queue] == before_queue  # the step is back at the head
    assert task.extra_state["count"] == before_extra["count"] == 1
    assert list(task.extra_state["sources"]) == before_extra["sources"]
    assert [m.content for m in task.scratch_memory.get_all()] == before_scratch
    assert len(runner.get_completed_steps(task)) == 1
    assert state.status == TaskStatus.FAILED
    assert state.failures[-1].error_type == "ValueError" and state.failures[-1].attempt == 1
    assert state.step_status(before_queue[0]) == StepStatus.FAILED
    # retry: still failing (the worker fails at count 2 every time), then make it pass
    with pytest.raises(ValueError):
        runner.run_step(task)
    assert state.failures[-1].attempt == 2
    runner.agent_worker.fail_on = set()  # type: ignore[attr-defined]
    out = runner.run_step(task)
    assert str(out).startswith("count=2")
    assert state.status == TaskStatus.ACTIVE


def test_undo_restores_memory_state_queue_and_outputs() -> None:
    runner = make(target=5)
    task = runner.create_task("go")
    runner.run_step(task)
    state = runner.state_of(task)
    snapshot = (
        [s.step_id for s in state.step_queue],
        task.extra_state["count"],
        list(task.extra_state["seen_inputs"]),
        len(task.scratch_memory),
        len(task.extra_state["sources"]),
    )
    second = runner.run_step(task)
    assert task.extra_state["count"] == 2
    step = runner.undo_step(task)
    assert step.step_id == second.task_step.step_id
    assert (
        [s.step_id for s in state.step_queue],
        task.extra_state["count"],
        list(task.extra_state["seen_inputs"]),
        len(task.scratch_memory),
        len(task.extra_state["sources"]),
    ) == snapshot
    assert len(runner.get_completed_steps(task)) == 1
    # the branch the undone step made is kept, greyed
    assert state.step_status(second.next_steps[0].step_id) == StepStatus.UNDONE
    assert (second.task_step.step_id, second.next_steps[0].step_id) in state.undone_edges
    # run it again with new input: it forks
    again = runner.run_step(task, input="steer")
    assert str(again) == "count=2 input=steer"
    assert again.next_steps[0].step_id != second.next_steps[0].step_id


def test_undo_many_steps_back_to_the_start_and_new_input() -> None:
    runner = make(target=10)
    task = runner.create_task("go")
    for _ in range(4):
        runner.run_step(task)
    for _ in range(4):
        runner.undo_step(task)
    # back to before the first step: extra_state was still empty then
    assert "count" not in task.extra_state and len(task.scratch_memory) == 0
    assert runner.get_upcoming_steps(task)[0].step_state["count"] == 0
    with pytest.raises(TaskStateError, match="nothing to undo"):
        runner.undo_step(task)
    out = runner.run_step(task)
    assert str(out) == "count=1 input=go"


def test_undo_with_new_input_sets_the_step_input() -> None:
    runner = make(target=5)
    task = runner.create_task("go")
    runner.run_step(task)
    runner.undo_step(task, input="different")
    assert str(runner.run_step(task)) == "count=1 input=different"


def test_nothing_to_undo_is_a_clear_error_not_notimplemented() -> None:
    runner = make()
    task = runner.create_task("go")
    with pytest.raises(TaskStateError, match="no step has completed"):
        runner.undo_step(task)


def test_inject_input_and_edit_upcoming_step() -> None:
    runner = make(target=5)
    task = runner.create_task("go")
    runner.run_step(task)
    upcoming = runner.get_upcoming_steps(task)
    runner.edit_step(task, upcoming[0].step_id, input="edited")
    assert str(runner.run_step(task)) == "count=2 input=edited"
    assert str(runner.run_step(task, input="injected")) == "count=3 input=injected"
    with pytest.raises(ValueError, match="not queued"):
        runner.edit_step(task, "missing", input="x")


def test_abandon_keeps_runner_memory_untouched() -> None:
    runner = make(target=2)
    runner.memory.put(ChatMessage(role=MessageRole.USER, content="earlier"))
    task = runner.create_task("go")
    runner.run_step(task)
    runner.abandon_task(task)
    assert [m.content for m in runner.chat_history] == ["earlier"]
    assert runner.state_of(task).status == TaskStatus.ABANDONED
    with pytest.raises(TaskStateError, match="abandoned"):
        runner.run_step(task)
    with pytest.raises(TaskStateError, match="abandoned"):
        runner.finalize_response(task)


def test_finalize_merges_scratch_memory_once_and_collects_sources() -> None:
    runner = make(target=2)
    task = runner.create_task("go")
    runner.run_step(task)
    with pytest.raises(ValueError, match="not done"):
        runner.finalize_response(task)
    runner.run_step(task)
    response = runner.finalize_response(task)
    assert [m.content for m in runner.chat_history] == ["step 1", "step 2"]
    assert [s.content for s in response.sources] == ["1", "2"]
    assert task.extra_state["finalized"] is True
    assert runner.finalize_response(task) is response  # idempotent: memory not merged twice
    assert len(runner.chat_history) == 2
    with pytest.raises(TaskStateError, match="finalized"):
        runner.run_step(task)


def test_chat_with_delete_task_on_finish() -> None:
    runner = make(target=2, delete_task_on_finish=True)
    response = runner.chat("hi")
    assert str(response) == "count=2 input=None"
    assert runner.list_tasks() == []
    assert len(runner.chat_history) == 2


def test_chat_history_argument_and_query_leave_memory() -> None:
    runner = make(target=1)
    runner.chat("a", chat_history=[ChatMessage(content="preset")])
    assert [m.content for m in runner.chat_history] == ["preset", "step 1"]
    before = [m.content for m in runner.chat_history]
    answer = runner.query("q")
    assert str(answer) == "count=1 input=q"
    assert [m.content for m in runner.chat_history] == before


@pytest.mark.parametrize("name", ["run.json", "runs.db"])
def test_query_never_swaps_the_memory_a_save_holds(tmp_path: Path, name: str) -> None:
    """A query reads a conversation of its own: the runner's memory object stays in place
    while it runs, so what autosave writes (and a load reads back) is the conversation."""
    from nbagent import FunctionLLM
    from nbagent.workers.function_calling import FunctionCallingAgentWorker

    worker = FunctionCallingAgentWorker.from_tools([], llm=FunctionLLM(lambda msgs, tools: "re: " + msgs[-1].content))
    runner = AgentRunner(worker, autosave=tmp_path / name)
    memory = runner.memory
    seen: list[object] = []
    runner.subscribe(lambda event: seen.append(runner.memory))
    runner.chat("hello")
    answer = runner.query("q?")
    assert str(answer) == "re: q?"
    assert all(m is memory for m in seen) and runner.memory is memory
    assert [m.content for m in memory.get_all()] == ["hello", "re: hello"]
    loaded = AgentRunner.load(tmp_path / name)
    assert [m.content for m in loaded.memory.get_all()] == ["hello", "re: hello"]
    (query_task,) = [s for s in loaded.tasks.values() if s.task.input == "q?"]
    assert not query_task.adds_to_memory and query_task.finalized


def test_queue_empty_without_final_output_is_a_clear_error() -> None:
    def fn(state: dict) -> tuple[str, bool]:
        return "x", False

    runner = FnAgentWorker(fn).as_agent()
    task = runner.create_task("go")
    out = runner.run_step(task)
    runner.state_of(task).step_queue.clear()
    assert not out.is_last
    with pytest.raises(TaskStateError, match="no queued step"):
        runner.run_step(task)


def test_events_for_every_state_change() -> None:
    runner = make(target=2, fail_on={2})
    seen: list[ev.Event] = []
    stop = runner.subscribe(seen.append)
    task = runner.create_task("go")
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    runner.agent_worker.fail_on = set()  # type: ignore[attr-defined]
    runner.run_step(task)
    runner.undo_step(task)
    runner.run_step(task)
    runner.finalize_response(task)
    other = runner.create_task("other")
    runner.edit_step(other, runner.get_upcoming_steps(other)[0].step_id, input="e")
    runner.abandon_task(other)
    kinds = [type(e).__name__ for e in seen]
    assert kinds == [
        "TaskCreated", "StepStarted", "StepCompleted", "StepStarted", "StepFailed",
        "StepStarted", "StepCompleted", "StepUndone", "StepStarted", "StepCompleted",
        "TaskFinalized", "TaskCreated", "StepEdited", "TaskAbandoned",
    ]
    assert all(e.task_id in (task.task_id, other.task_id) for e in seen)
    stop()
    runner.create_task("silent")
    assert len(seen) == len(kinds)


def test_listener_errors_do_not_break_the_run() -> None:
    runner = make(target=1)

    def bad(_: ev.Event) -> None:
        raise RuntimeError("listener bug")

    runner.subscribe(bad)
    assert str(runner.chat("x")) == "count=1 input=x"


def test_sync_methods_work_inside_a_running_event_loop() -> None:
    runner = make(target=2)

    async def cell() -> str:
        task = runner.create_task("in loop")
        runner.run_step(task)
        runner.run_step(task)
        sync_answer = str(runner.finalize_response(task))
        async_answer = str(await runner.achat("awaited"))
        return sync_answer + "|" + async_answer + "|" + str(runner.chat("sync chat"))

    assert asyncio.run(cell()) == "count=2 input=None|count=2 input=None|count=2 input=None"


def test_a_task_cannot_run_two_steps_at_once() -> None:
    gate = asyncio.Event()

    async def slow(state: dict) -> tuple[str, bool]:
        await gate.wait()
        return "ok", True

    runner = FnAgentWorker(slow).as_agent()

    async def main() -> None:
        task = runner.create_task("x")
        first = asyncio.ensure_future(runner.arun_step(task))
        await asyncio.sleep(0)
        assert runner.state_of(task).status == TaskStatus.RUNNING
        with pytest.raises(TaskStateError, match="already running"):
            await runner.arun_step(task)
        gate.set()
        assert (await first).is_last

    asyncio.run(main())


def test_cancelled_step_rolls_back() -> None:
    async def slow(state: dict) -> tuple[str, bool]:
        state["touched"] = True
        await asyncio.sleep(10)
        return "never", True

    runner = FnAgentWorker(slow).as_agent()

    async def main() -> None:
        task = runner.create_task("x")
        fut = asyncio.ensure_future(runner.arun_step(task))
        await asyncio.sleep(0.01)
        fut.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fut
        assert "touched" not in task.extra_state
        assert len(runner.get_upcoming_steps(task)) == 1

    asyncio.run(main())


def test_init_task_state_kwargs_are_copied_per_task() -> None:
    def fn(state: dict) -> tuple[str, bool]:
        state["items"].append(state["input"])
        return str(state["items"]), True

    runner = AgentRunner(FnAgentWorker(fn), init_task_state_kwargs={"items": []})
    assert str(runner.chat("a")) == "['a']"
    assert str(runner.chat("b")) == "['b']"
    with pytest.raises(ValueError, match="not both"):
        runner.create_task("c", extra_state={})


def test_default_tool_choice_goes_to_the_first_step_only() -> None:
    seen: list[object] = []

    class Spy(FnAgentWorker):
        async def arun_step(self, step, task, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(kwargs.get("tool_choice"))
            return await super().arun_step(step, task, **kwargs)

    runner = AgentRunner(Spy(lambda s: ("x", s["step"] >= 2)), default_tool_choice="required")
    runner.chat("go")
    assert seen == ["required", "auto", "auto"]
    seen.clear()
    runner.chat("go", tool_choice="none")
    assert seen[0] == "none"


def test_reset_clears_tasks_and_memory() -> None:
    runner = make(target=1)
    runner.chat("x")
    runner.create_task("y")
    runner.reset()
    assert runner.list_tasks() == [] and runner.chat_history == []


def test_stream_chat_with_a_non_streaming_worker_gives_a_stream() -> None:
    runner = make(target=1)
    response = runner.stream_chat("go")
    assert isinstance(response, StreamingAgentChatResponse)
    assert "".join(response.response_gen) == "count=1 input=go"


def test_verbose_prints_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    runner = make(target=1, verbose=True)
    runner.chat("hello")
    assert "> Running step" in capsys.readouterr().out


def test_worker_returning_wrong_type_is_a_clear_error() -> None:
    class Bad(FnAgentWorker):
        async def arun_step(self, step, task, **kwargs):  # type: ignore[no-untyped-def]
            return "not an output"

    runner = AgentRunner(Bad(lambda s: ("x", True)))
    task = runner.create_task("go")
    with pytest.raises(TypeError, match="must return a TaskStepOutput"):
        runner.run_step(task)
    assert len(runner.get_upcoming_steps(task)) == 1


def test_step_latency_and_status_recorded() -> None:
    runner = make(target=2)
    task = runner.create_task("go")
    out = runner.run_step(task)
    state = runner.state_of(task)
    assert out.latency_s is not None and out.latency_s >= 0
    assert state.step_status(out.task_step.step_id) == StepStatus.DONE
    assert state.step_status(out.next_steps[0].step_id) == StepStatus.QUEUED
    assert out.next_steps[0].prev_steps == {out.task_step.step_id: out.task_step}


def test_as_agent_and_worker_type_check() -> None:
    runner = CountingWorker(target=1).as_agent(verbose=False)
    assert isinstance(runner, AgentRunner)
    assert isinstance(runner.chat("x"), AgentChatResponse)
    with pytest.raises(TypeError, match="BaseAgentWorker"):
        AgentRunner(object())  # type: ignore[arg-type]


def test_values_shared_by_extra_state_and_step_state_stay_shared_after_rollback() -> None:
    runner = make(target=5, fail_on={3})
    task = runner.create_task("go")
    runner.run_step(task)
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    step = runner.get_upcoming_steps(task)[0]
    assert step.step_state["seen_inputs"] is task.extra_state["seen_inputs"]
    assert step.step_state["sources"] is task.extra_state["sources"]
    assert list(task.extra_state["seen_inputs"]) == ["go", None]


def test_tokens_of_a_streamed_answer_are_events_and_finalize_waits_for_the_stream() -> None:
    from nbagent import ScriptedLLM
    from nbagent.workers.react import ReActAgentWorker

    llm = ScriptedLLM(["Thought: I can answer without using any more tools.\nAnswer: alpha beta gamma"])
    runner = AgentRunner(ReActAgentWorker.from_tools([], llm=llm))
    tokens: list[str] = []
    finalized: list[str] = []
    runner.subscribe(lambda e: tokens.append(e.token), ev.TokenStreamed)  # type: ignore[attr-defined]
    runner.subscribe(lambda e: finalized.append(e.response), ev.TaskFinalized)  # type: ignore[attr-defined]
    stream = runner.stream_chat("say it")
    assert finalized == [] and runner.chat_history == []  # not finalized until read
    text = "".join(stream.response_gen)
    assert text.strip() == "alpha beta gamma"
    assert "".join(tokens).strip().endswith("alpha beta gamma")
    assert finalized and finalized[0].strip() == "alpha beta gamma"
    assert [m.role for m in runner.chat_history] == [MessageRole.USER, MessageRole.ASSISTANT]


def test_undoing_past_a_failed_step_clears_the_failed_status() -> None:
    runner = make(target=5, fail_on={2})
    task = runner.create_task("go")
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    state = runner.state_of(task)
    failed = state.failed_step_id()
    assert state.status == TaskStatus.FAILED and failed is not None
    runner.undo_step(task)  # takes back step 1: the failed step 2 is now an undone branch
    assert state.failed_step_id() is None and state.status == TaskStatus.PENDING
    assert state.step_status(failed) == StepStatus.UNDONE
