"""ParallelAgentRunner: a DAG scheduler that fixes what users hit in the reference's runner."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    BaseAgentWorker,
    ChatMessage,
    ParallelAgentRunner,
    StepStatus,
    Task,
    TaskStateError,
    TaskStatus,
    TaskStep,
    TaskStepOutput,
)
from nbagent import events as ev
from nbagent.viz.dot import task_to_dot

Action = Callable[[TaskStep, Task], Awaitable[Any]]


class DagWorker(BaseAgentWorker):
    """The root step creates every step of ``spec`` (name -> names of its previous steps);
    those with previous steps are made ``is_ready=False`` (wait for them), the others ready
    (``is_ready=False`` with nothing to wait for would hold them). Step ``last`` answers.
    ``actions`` give a step's behaviour."""

    def __init__(self, spec: dict[str, list[str]], last: str, actions: dict[str, Action] | None = None) -> None:
        self.spec = spec
        self.last = last
        self.actions = actions or {}
        self.calls: list[tuple[str, str | None, Any]] = []  # (name, step input, tool_choice)

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"name": "root"})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        self.calls.append((name, step.input, kwargs.get("tool_choice")))
        if name == "root":
            steps = {
                n: TaskStep(task_id=task.task_id, input=n, step_state={"name": n}, is_ready=not self.spec[n])
                for n in self.spec
            }
            for n, prevs in self.spec.items():
                for p in prevs:
                    steps[p].link_step(steps[n])
            return TaskStepOutput(output="planned", task_step=step, next_steps=list(steps.values()))
        action = self.actions.get(name)
        result = await action(step, task) if action is not None else name
        if name == self.last:
            return TaskStepOutput(output=AgentChatResponse(response=str(result)), task_step=step, is_last=True)
        return TaskStepOutput(output=result, task_step=step)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def by_name(runner: ParallelAgentRunner, task: Task) -> dict[str, TaskStep]:
    return {s.step_state.get("name", "?"): s for s in runner.state_of(task).steps.values()}


DIAMOND = {"a": [], "b": [], "c": ["a"], "j": ["b", "c"]}


def test_steps_created_not_ready_run_once_their_prev_steps_are_done() -> None:
    worker = DagWorker(DIAMOND, "j")
    runner = ParallelAgentRunner(worker)
    assert str(runner.chat("go")) == "j"
    assert sorted(worker.names()) == ["a", "b", "c", "j", "root"]
    assert worker.names().index("c") > worker.names().index("a")
    assert worker.names()[-1] == "j"
    task = runner.list_tasks()[0]
    # the runner took over the waiting: a step that waited for unfinished parents is ready now
    assert all(s.is_ready for s in by_name(runner, task).values())
    assert runner.state_of(task).status == TaskStatus.FINALIZED


def test_waves_follow_the_dag_and_the_graph_shows_blocked_steps() -> None:
    runner = ParallelAgentRunner(DagWorker(DIAMOND, "j"))
    task = runner.create_task("go")
    assert [o.output for o in runner.run_steps_in_queue(task)] == ["planned"]
    steps = by_name(runner, task)
    state = runner.state_of(task)
    assert state.step_status(steps["c"].step_id) == StepStatus.BLOCKED
    assert state.step_status(steps["j"].step_id) == StepStatus.BLOCKED
    assert state.step_status(steps["a"].step_id) == StepStatus.QUEUED
    dot = task_to_dot(state)
    assert dot.count(" blocked · ") == 2 and dot.count(" queued · ") == 2
    assert [o.output for o in runner.run_steps_in_queue(task)] == ["a", "b"]  # together, queue order
    assert [o.output for o in runner.run_steps_in_queue(task)] == ["c"]
    (last,) = runner.run_steps_in_queue(task)
    assert last.is_last and str(runner.finalize_response(task)) == "j"
    # the creating step links only to steps without dependencies of their own
    assert sorted(steps["root"].next_steps) == sorted([steps["a"].step_id, steps["b"].step_id])
    assert sorted(steps["j"].prev_steps) == sorted([steps["b"].step_id, steps["c"].step_id])


def test_a_step_with_two_prev_steps_waits_for_both_and_running_steps_are_drawn() -> None:
    gate = asyncio.Event()
    seen: dict[str, Any] = {}

    async def slow_a(step: TaskStep, task: Task) -> str:
        await gate.wait()
        return "A"

    async def fast_b(step: TaskStep, task: Task) -> str:
        return "B"

    worker = DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": slow_a, "b": fast_b})
    runner = ParallelAgentRunner(worker)

    async def main() -> str:
        task = runner.create_task("go")
        run = asyncio.ensure_future(runner.arun_until_done(task))
        for _ in range(20):
            await asyncio.sleep(0)
        state = runner.state_of(task)
        steps = by_name(runner, task)
        seen["a"] = state.step_status(steps["a"].step_id)
        seen["b"] = state.step_status(steps["b"].step_id)
        seen["j"] = state.step_status(steps["j"].step_id)
        seen["task"] = state.status
        seen["dot"] = task_to_dot(state)
        seen["started_j"] = "j" in worker.names()
        gate.set()
        out = await run
        return str(out.output)

    assert asyncio.run(main()) == "j"
    assert seen["a"] == StepStatus.RUNNING and seen["b"] == StepStatus.DONE
    assert seen["j"] == StepStatus.BLOCKED and not seen["started_j"]
    assert seen["task"] == TaskStatus.RUNNING
    assert " running · " in seen["dot"] and " blocked · " in seen["dot"]


def test_a_failing_branch_keeps_its_siblings_results_and_is_retried() -> None:
    attempts = {"b": 0, "a": 0}

    async def a(step: TaskStep, task: Task) -> str:
        attempts["a"] += 1
        await asyncio.sleep(0.01)  # still running when b fails
        task.extra_state["a"] = "written by a"
        return "A"

    async def b(step: TaskStep, task: Task) -> str:
        attempts["b"] += 1
        step.step_state["tries"] = attempts["b"]  # its own state: rolled back on failure
        if attempts["b"] == 1:
            raise ValueError("b failed once")
        return "B"

    runner = ParallelAgentRunner(DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": a, "b": b}))
    task = runner.create_task("go")
    with pytest.raises(ValueError, match="b failed once"):
        runner.run_until_done(task)
    state = runner.state_of(task)
    steps = by_name(runner, task)
    assert [o.output for o in state.completed_steps] == ["planned", "A"]  # a finished and was kept
    assert task.extra_state["a"] == "written by a"  # the sibling's shared write survives
    assert state.step_queue[0] is steps["b"] and "tries" not in steps["b"].step_state
    assert state.step_status(steps["b"].step_id) == StepStatus.FAILED
    assert state.step_status(steps["j"].step_id) == StepStatus.BLOCKED
    assert state.status == TaskStatus.FAILED and not state.running
    out = runner.run_until_done(task)  # retry: only b and then j run
    assert out.is_last and attempts == {"a": 1, "b": 2}
    assert steps["b"].step_state["tries"] == 2
    assert state.completed_steps[-1] is out


def test_chat_with_nothing_left_and_no_final_output_is_a_clear_error_not_a_hang() -> None:
    class Stops(BaseAgentWorker):
        def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
            return TaskStep(task_id=task.task_id, input=task.input)

        async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
            return TaskStepOutput(output="no next steps", task_step=step, is_last=False)

    runner = ParallelAgentRunner(Stops())

    async def main() -> None:
        await asyncio.wait_for(runner.achat("go"), timeout=5)

    with pytest.raises(TaskStateError, match="no final output"):
        asyncio.run(main())
    with pytest.raises(TaskStateError, match="no final output"):
        runner.chat("again")


def test_a_cycle_is_reported_not_spun_on() -> None:
    runner = ParallelAgentRunner(DagWorker({"a": ["b"], "b": ["a"], "j": ["a"]}, "j"))
    task = runner.create_task("go")

    async def main() -> None:
        await asyncio.wait_for(runner.arun_until_done(task), timeout=5)

    with pytest.raises(TaskStateError, match="none is ready") as err:
        asyncio.run(main())
    assert "cycle" in str(err.value)
    with pytest.raises(TaskStateError, match="none is ready"):
        runner.run_steps_in_queue(task)
    blocked = by_name(runner, task)["a"]
    with pytest.raises(TaskStateError, match="is blocked"):
        runner.run_step(task, step=blocked)


def test_exceptions_keep_their_own_type_and_message() -> None:
    async def broken(step: TaskStep, task: Task) -> str:
        raise RuntimeError("database is down")

    runner = ParallelAgentRunner(DagWorker({"a": [], "j": ["a"]}, "j", {"a": broken}))
    with pytest.raises(RuntimeError) as err:
        runner.chat("go")
    assert type(err.value) is RuntimeError and str(err.value) == "database is down"
    task = runner.list_tasks()[0]
    assert runner.state_of(task).failures[-1].error_type == "RuntimeError"

    async def main() -> None:
        await runner.arun_until_done(task)

    with pytest.raises(RuntimeError, match="^database is down$"):
        asyncio.run(main())


def test_two_failures_raise_the_first_and_note_the_other() -> None:
    async def bad_a(step: TaskStep, task: Task) -> str:
        raise KeyError("a")

    async def bad_b(step: TaskStep, task: Task) -> str:
        raise ValueError("b")

    runner = ParallelAgentRunner(DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": bad_a, "b": bad_b}))
    task = runner.create_task("go")
    runner.run_steps_in_queue(task)
    with pytest.raises(KeyError) as err:
        runner.run_steps_in_queue(task)
    assert any("ValueError: b" in note for note in err.value.__notes__)
    state = runner.state_of(task)
    assert sorted(f.error_type for f in state.failures) == ["KeyError", "ValueError"]
    assert {s.step_state["name"] for s in state.step_queue} == {"a", "b", "j"}


def test_reset_clears_tasks_and_memory() -> None:
    runner = ParallelAgentRunner(DagWorker({"j": []}, "j"))
    runner.chat("x")
    runner.create_task("y")
    assert len(runner.list_tasks()) == 2
    runner.reset()
    assert runner.list_tasks() == [] and runner.tasks == {}
    assert str(runner.chat("after reset")) == "j" and len(runner.list_tasks()) == 1


def test_input_and_tool_choice_reach_the_worker() -> None:
    worker = DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j")
    runner = ParallelAgentRunner(worker, default_tool_choice="required")
    runner.chat("go")
    assert worker.calls[0] == ("root", "go", "required")  # the first step gets the choice
    assert {c[2] for c in worker.calls[1:]} == {"auto"}  # later ones go back to "auto"
    worker.calls.clear()
    runner.chat("go", tool_choice="none")
    assert worker.calls[0][2] == "none"

    worker.calls.clear()
    task = runner.create_task("go")
    runner.run_step(task, input="steered root")
    runner.run_steps_in_queue(task, input="human says hi", tool_choice="required")
    assert sorted(worker.calls) == [
        ("a", "human says hi", "required"), ("b", "human says hi", "required"), ("root", "steered root", None),
    ]
    out = runner.run_until_done(task, input="final input", tool_choice="x")
    assert worker.calls[-1] == ("j", "final input", "x") and out.is_last


def test_max_concurrency_is_respected() -> None:
    live = {"now": 0, "max": 0}

    async def work(step: TaskStep, task: Task) -> str:
        live["now"] += 1
        live["max"] = max(live["max"], live["now"])
        await asyncio.sleep(0.005)
        live["now"] -= 1
        return step.step_state["name"]

    names = [f"t{i}" for i in range(10)]
    spec: dict[str, list[str]] = {n: [] for n in names}
    spec["j"] = list(names)
    runner = ParallelAgentRunner(DagWorker(spec, "j", {n: work for n in names}), max_concurrency=3)
    assert str(runner.chat("go")) == "j"
    assert live["max"] == 3
    live["max"] = 0
    runner.max_concurrency = None
    runner.chat("go")
    assert live["max"] == 10
    with pytest.raises(ValueError, match="max_concurrency"):
        runner.max_concurrency = 0
    with pytest.raises(ValueError, match="max_concurrency"):
        ParallelAgentRunner(DagWorker(spec, "j"), max_concurrency=-1)


def test_ready_steps_beyond_the_bound_are_shown_queued_while_others_run() -> None:
    gate = asyncio.Event()

    async def held(step: TaskStep, task: Task) -> str:
        await gate.wait()
        return "ok"

    runner = ParallelAgentRunner(
        DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": held, "b": held}), max_concurrency=1
    )

    async def main() -> tuple[list[StepStatus], str]:
        task = runner.create_task("go")
        await runner.arun_steps_in_queue(task)
        run = asyncio.ensure_future(runner.arun_steps_in_queue(task))
        for _ in range(5):
            await asyncio.sleep(0)
        state = runner.state_of(task)
        steps = by_name(runner, task)
        statuses = [state.step_status(steps[n].step_id) for n in ("a", "b", "j")]
        dot = task_to_dot(state)
        gate.set()
        await run
        return statuses, dot

    statuses, dot = asyncio.run(main())
    assert statuses == [StepStatus.RUNNING, StepStatus.QUEUED, StepStatus.BLOCKED]
    assert all(f" {w} · " in dot for w in ("running", "queued", "blocked", "done"))


def test_sync_calls_work_inside_a_running_event_loop() -> None:
    runner = ParallelAgentRunner(DagWorker(DIAMOND, "j"))

    async def cell() -> list[str]:
        answer = str(runner.chat("sync chat"))
        task = runner.create_task("steps")
        outs = runner.run_steps_in_queue(task) + runner.run_steps_in_queue(task)
        last = runner.run_until_done(task)
        return [answer, *[str(o.output) for o in outs], str(last.output), str(await runner.achat("awaited"))]

    assert asyncio.run(cell()) == ["j", "planned", "a", "b", "j", "j"]


def test_events_for_each_step() -> None:
    runner = ParallelAgentRunner(DagWorker(DIAMOND, "j"))
    seen: list[ev.Event] = []
    runner.subscribe(seen.append)
    runner.chat("go")
    task = runner.list_tasks()[0]
    ids = set(runner.state_of(task).steps)
    started = [e.step_id for e in seen if isinstance(e, ev.StepStarted)]
    completed = [e.step_id for e in seen if isinstance(e, ev.StepCompleted)]
    assert sorted(started) == sorted(ids) == sorted(completed)
    assert isinstance(seen[0], ev.TaskCreated) and isinstance(seen[-1], ev.TaskFinalized)
    root = by_name(runner, task)["root"]
    (root_done,) = [e for e in seen if isinstance(e, ev.StepCompleted) and e.step_id == root.step_id]
    assert len(root_done.next_step_ids) == 4


def test_undo_takes_back_one_branch_without_touching_its_sibling() -> None:
    async def a(step: TaskStep, task: Task) -> str:
        task.extra_state["a"] = "A's work"
        await asyncio.sleep(0.005)
        return "A"

    async def b(step: TaskStep, task: Task) -> str:
        task.extra_state["b"] = "B's work"
        await asyncio.sleep(0.02)  # finishes after a
        return "B"

    runner = ParallelAgentRunner(DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": a, "b": b}))
    task = runner.create_task("go")
    runner.run_steps_in_queue(task)
    runner.run_steps_in_queue(task)
    state = runner.state_of(task)
    steps = by_name(runner, task)
    undone = runner.undo_step(task)  # b finished last
    assert undone is steps["b"]
    assert [o.output for o in state.completed_steps] == ["planned", "A"]
    assert task.extra_state["a"] == "A's work"  # the sibling's work is not clobbered
    assert [s.step_state["name"] for s in state.step_queue] == ["b", "j"]
    assert state.step_status(steps["j"].step_id) == StepStatus.BLOCKED
    assert runner.undo_step(task) is steps["a"]
    assert [s.step_state["name"] for s in state.step_queue] == ["a", "b", "j"]
    assert [o.output for o in state.completed_steps] == ["planned"]
    assert runner.undo_step(task) is steps["root"]  # ran alone: everything goes back
    assert [s.step_id for s in state.step_queue] == [steps["root"].step_id]
    assert task.extra_state == {} and state.completed_steps == []
    assert {steps[n].step_id for n in "abj"} <= state.undone_ids
    # re-running forks a new branch; the old one stays (undone) in the graph
    out = runner.run_until_done(task)
    assert out.is_last and len(state.steps) == 7  # root, 3 undone, 3 new
    dot = task_to_dot(state)
    assert dot.count(" undone run · ") == 3  # root, a and b: what each did, dashed
    assert dot.count(" undone · never ran") == 1  # j was queued, never ran


def test_undo_of_a_step_that_ran_alone_restores_everything_like_agent_runner() -> None:
    async def a(step: TaskStep, task: Task) -> str:
        task.extra_state["n"] = task.extra_state.get("n", 0) + 1
        task.scratch_memory.put(ChatMessage(content="from a"))
        return "A"

    runner = ParallelAgentRunner(DagWorker({"a": [], "j": ["a"]}, "j", {"a": a}))
    task = runner.create_task("go")
    runner.run_steps_in_queue(task)
    runner.run_steps_in_queue(task)
    assert task.extra_state == {"n": 1} and len(task.scratch_memory) == 1
    step = runner.undo_step(task, input="again")
    assert step.input == "again" and task.extra_state == {} and len(task.scratch_memory) == 0
    with pytest.raises(TaskStateError, match="nothing to undo"):
        runner.undo_step(runner.create_task("fresh"))


def test_answer_stays_last_when_a_sibling_finishes_after_it() -> None:
    async def slow(step: TaskStep, task: Task) -> str:
        await asyncio.sleep(0.02)
        return "late"

    runner = ParallelAgentRunner(DagWorker({"s": [], "j": []}, "j", {"s": slow}))
    task = runner.create_task("go")
    out = runner.run_until_done(task)
    state = runner.state_of(task)
    assert state.completed_steps[-1] is out and runner.get_task_output(task) is out
    assert [o.output for o in state.completed_steps][:2] == ["planned", "late"]  # s was kept
    assert state.status == TaskStatus.COMPLETED
    assert str(runner.finalize_response(task)) == "j"


def test_cancelling_a_run_rolls_the_running_steps_back_into_the_queue() -> None:
    async def forever(step: TaskStep, task: Task) -> str:
        await asyncio.sleep(10)
        return "never"

    runner = ParallelAgentRunner(DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": forever, "b": forever}))

    async def main() -> None:
        task = runner.create_task("go")
        await runner.arun_steps_in_queue(task)
        run = asyncio.ensure_future(runner.arun_until_done(task))
        await asyncio.sleep(0.01)
        assert len(runner.state_of(task).running) == 2
        with pytest.raises(TaskStateError, match="still running"):
            runner.finalize_response(task)
        with pytest.raises(TaskStateError, match="undo after"):
            runner.undo_step(task)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        state = runner.state_of(task)
        assert not state.running
        assert sorted(s.step_state["name"] for s in state.step_queue) == ["a", "b", "j"]

    asyncio.run(main())


def test_a_step_task_cancelled_before_its_first_turn_ends_the_call_not_hangs_it() -> None:
    """Something else cancels one of the run's step tasks before it has started (its
    bookkeeping cannot run inside it): the call raises that the step was cancelled, the step
    stays queued, the others' results are kept."""
    worker = DagWorker({"a": [], "b": []}, "j")
    runner = ParallelAgentRunner(worker, max_concurrency=None)

    async def main() -> None:
        task = runner.create_task("go")
        await runner.arun_steps_in_queue(task)  # the root: a and b are queued
        call = asyncio.ensure_future(runner.arun_steps_in_queue(task))
        await asyncio.sleep(0)  # the call has made its step tasks; none has had a turn
        steps = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and t is not call]
        assert len(steps) == 2
        steps[0].cancel()
        with pytest.raises(asyncio.CancelledError, match="was cancelled"):
            await asyncio.wait_for(call, 5)  # (a hang would end here as TimeoutError)
        state = runner.state_of(task)
        assert not state.running
        assert len(state.step_queue) + len(state.outputs) == 3  # root done; each of a, b done or queued
        assert [s.step_state["name"] for s in state.step_queue] in (["a"], ["b"])

    asyncio.run(main())


def test_a_step_cannot_run_twice_and_single_steps_follow_the_dag() -> None:
    gate = asyncio.Event()

    async def held(step: TaskStep, task: Task) -> str:
        await gate.wait()
        return "A"

    runner = ParallelAgentRunner(DagWorker({"a": [], "b": [], "j": ["a", "b"]}, "j", {"a": held}))

    async def main() -> list[str]:
        task = runner.create_task("go")
        await runner.arun_step(task)
        a = by_name(runner, task)["a"]
        first = asyncio.ensure_future(runner.arun_step(task, step=a))
        await asyncio.sleep(0)
        with pytest.raises(TaskStateError, match="already running"):
            await runner.arun_step(task, step=a)
        b_out = await runner.arun_step(task)  # the next ready step (b) runs beside a
        gate.set()
        a_out = await first
        j_out = await runner.arun_step(task)
        with pytest.raises(TaskStateError, match="already done"):
            await runner.arun_step(task, step=a)
        return [str(b_out.output), str(a_out.output), str(j_out.output)]

    assert asyncio.run(main()) == ["b", "A", "j"]


def test_reference_mode_enum_values_are_accepted_and_bad_modes_rejected() -> None:
    class Mode:
        value = "wait"

    runner = ParallelAgentRunner(DagWorker({"j": []}, "j"))
    task = runner.create_task("go")
    assert [o.output for o in runner.run_steps_in_queue(task, Mode())] == ["planned"]
    with pytest.raises(ValueError, match="mode must be one of"):
        runner.run_steps_in_queue(task, "fast")
    stream = runner.stream_chat("go")
    assert "".join(stream.response_gen) == "j"


def _check_invariants(runner: ParallelAgentRunner, task: Task) -> None:
    state = runner.state_of(task)
    queued = [s.step_id for s in state.step_queue]
    assert len(queued) == len(set(queued)), "a step is queued twice"
    assert not set(queued) & set(state.outputs), "a step is both queued and done"
    assert {id(o) for o in state.completed_steps} == {id(o) for o in state.outputs.values()}
    assert len(state.history) == len(state.completed_steps)
    for sid in state.steps:  # never dropped: every live step is done, running or queued
        assert sid in state.outputs or sid in state.undone_ids or sid in state.running or sid in queued
    if any(o.is_last for o in state.completed_steps):
        assert state.completed_steps[-1].is_last


@pytest.mark.parametrize("seed", range(40))
def test_random_runs_failures_and_undos_keep_the_task_consistent(seed: int) -> None:
    import random

    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(2, 7))]
    spec = {n: rng.sample(names[:i], k=rng.randint(0, min(2, i))) for i, n in enumerate(names)}
    spec["j"] = list(names)
    flaky = {n: rng.random() < 0.3 for n in names}

    async def act(step: TaskStep, task: Task) -> str:
        name = step.step_state["name"]
        task.extra_state[name] = task.extra_state.get(name, 0) + 1
        await asyncio.sleep(rng.choice([0, 0.001, 0.002]))
        if flaky[name] and rng.random() < 0.5:
            raise ValueError(name)
        return name

    runner = ParallelAgentRunner(
        DagWorker(spec, "j", {n: act for n in names}), max_concurrency=rng.choice([1, 2, None])
    )
    task = runner.create_task("go")
    for _ in range(30):
        op = rng.random()
        try:
            if op < 0.45:
                runner.run_steps_in_queue(task)
            elif op < 0.7:
                runner.undo_step(task)
            else:
                runner.run_until_done(task)
        except (ValueError, TaskStateError):
            pass
        _check_invariants(runner, task)
    flaky.update(dict.fromkeys(flaky, False))
    state = runner.state_of(task)
    if not (state.completed_steps and state.completed_steps[-1].is_last):
        assert runner.run_until_done(task).is_last
    _check_invariants(runner, task)
