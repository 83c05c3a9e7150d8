"""The seams the layered runner is built on: model-owned setters, a task adopted from another
runner, a task run to its end, a run document of some tasks, the costs' accessors, the
per-runner service slots and the workers' promise to step without awaiting."""

from __future__ import annotations

import asyncio

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    CustomSimpleAgentWorker,
    FnAgentWorker,
    ReActAgentWorker,
    ScriptedLLM,
    UnknownTaskError,
)
from nbagent import costs
from nbagent.engine.slots import ServiceSlots
from nbagent.engine.state import TaskState
from nbagent.events import TaskCreated
from nbagent.messages import TokenUsage
from nbagent.schema import TaskStep
from nbagent.store.codec import runner_from_dict, runner_to_dict


class Count(CustomSimpleAgentWorker):
    """Counts to ``state['stop']`` (3 unless the task says otherwise), one step per number."""

    def _initialize_state(self, task, **kwargs):
        return {"n": 0, "stop": int(task.extra_state.get("stop", 3))}

    def _run_step(self, state, task, input=None):
        state["n"] += 1
        return AgentChatResponse(response=f"{task.input}: {state['n']}"), state["n"] >= state["stop"]

    def _finalize_task(self, state, **kwargs):
        pass


def test_measured_values_are_set_without_touching_the_fields_set() -> None:
    runner = AgentRunner(Count())
    task = runner.create_task("a")
    out = runner.run_step(task)
    assert out.latency_s is not None and out.latency_s >= 0 and out.input == "a"
    fields_set = set(out.model_fields_set)
    usage = TokenUsage(prompt_tokens=3, completion_tokens=4)
    out._set_measured(usage=usage)
    assert out.usage is usage and out.input == "a" and set(out.model_fields_set) == fields_set
    out._set_measured(latency_s=1.5, input=None)
    assert (out.latency_s, out.input, out.usage) == (1.5, None, usage)


def test_link_and_state_setters_put_the_very_objects_in_place() -> None:
    a, b = TaskStep(task_id="t"), TaskStep(task_id="t")
    nxt, prv, state = {b.step_id: b}, {}, {"k": 1}
    a._set_links(next_steps=nxt)
    a._set_links(prev_steps=prv)
    a._set_step_state(state)
    assert a.next_steps is nxt and a.prev_steps is prv and a.step_state is state
    runner = AgentRunner(Count())
    task = runner.create_task("a")
    out = runner.run_step(task)
    follow = list(out.next_steps)
    out._set_next_steps(follow)
    assert out.next_steps is follow
    extra = {"x": 1}
    task._set_extra_state(extra)
    assert task.extra_state is extra


def test_arun_task_runs_the_remaining_steps_and_leaves_the_answer_to_finalize() -> None:
    runner = AgentRunner(Count())
    task = runner.create_task("go")
    runner.run_step(task)
    last = asyncio.run(runner.arun_task(task))
    assert last.is_last and last.output.response == "go: 3"
    assert len(runner.get_completed_steps(task)) == 3 and runner.chat_history == []
    assert runner.finalize_response(task, last).response == "go: 3"
    with pytest.raises(UnknownTaskError, match="unknown task id 'nope'"):
        asyncio.run(runner.arun_task("nope"))


def test_a_task_adopted_from_another_runner_is_one_of_its_tasks() -> None:
    source = AgentRunner(Count())
    moved = source.create_task("elsewhere")
    source.run_step(moved)
    state = source.state_of(moved)
    target = AgentRunner(Count())
    heard: list[object] = []
    target.subscribe(heard.append)
    assert target.adopt_task(state) is state
    assert target.state_of(moved.task_id) is state and state.task._runner is target
    assert [type(e) for e in heard] == [TaskCreated] and heard[0].task_id == moved.task_id
    target.run_step(moved)  # it goes on, with this runner's worker
    assert [o.output.response for o in target.get_completed_steps(moved)] == ["elsewhere: 1", "elsewhere: 2"]
    with pytest.raises(TypeError, match="adopt_task takes a TaskState"):
        target.adopt_task(moved)  # type: ignore[arg-type]


def test_step_models_are_read_and_adopted_through_the_costs_module() -> None:
    llm = ScriptedLLM(["Answer: hi"], model="small-1")
    runner = AgentRunner(ReActAgentWorker.from_tools([], llm=llm))
    task = runner.create_task("q")
    out = runner.run_step(task)
    sid = out.task_step.step_id
    assert dict(costs.step_models(runner)) == {sid: "small-1"}
    with pytest.raises(TypeError):
        costs.step_models(runner)["x"] = "y"  # type: ignore[index]  # read-only
    other = AgentRunner(Count())
    assert dict(costs.step_models(other)) == {}
    costs.adopt_step_models(other, {sid: "small-1"})
    assert costs.step_model(other, sid) == "small-1"
    assert costs.own_pricing(runner) is None
    runner.pricing = {"small-1": (1.0, 2.0)}
    assert costs.own_pricing(runner) is runner.pricing is not None
    assert costs.runner_pricing(runner) is runner.pricing


def test_a_run_document_of_some_tasks_without_the_conversation() -> None:
    runner = AgentRunner(Count())
    runner.chat("first")  # a conversation in memory
    keep = runner.create_task("kept", extra_state={"stop": 1})
    runner.run_step(keep)
    whole = runner_to_dict(runner)
    assert whole == runner_to_dict(runner, tasks=list(runner.tasks.values()), with_memory=True)
    one = runner_to_dict(runner, tasks=[runner.state_of(keep)], with_memory=False)
    assert one["runner"]["settings"] == whole["runner"]["settings"]
    assert one["runner"]["worker"] == whole["runner"]["worker"]
    loaded = runner_from_dict(one, Count(), restore_ids=False)
    assert list(loaded.tasks) == [keep.task_id] and loaded.chat_history == []
    assert [o.output.response for o in loaded.get_completed_steps(keep.task_id)] == ["kept: 1"]
    stranger = AgentRunner(Count())
    alien = stranger.state_of(stranger.create_task("x"))
    with pytest.raises(ValueError, match=r"runner_to_dict\(tasks=...\) takes task states of this runner"):
        runner_to_dict(runner, tasks=[alien])


def test_service_slots_keep_one_state_per_service_class() -> None:
    class Book:
        def __init__(self) -> None:
            self.lines: list[str] = []

    runner = AgentRunner(Count())
    slots = runner._services
    assert isinstance(slots, ServiceSlots) and list(slots) == [costs.CostBook]  # its cost recorder's
    assert slots.get(Book) is None
    book = slots.setdefault(Book)
    assert slots.setdefault(Book) is book and Book in slots and list(slots) == [costs.CostBook, Book]
    with pytest.raises(TypeError, match="the state made for"):
        slots.setdefault(int, lambda: "not an int")  # type: ignore[arg-type,return-value]
    assert slots.pop(Book) is book and slots.get(Book) is None
    assert AgentRunner(Count())._services is not slots  # per runner


def test_workers_say_whether_they_step_without_awaiting() -> None:
    class Awaits(Count):
        async def _arun_step(self, state, task, input=None):
            await asyncio.sleep(0)
            return self._run_step(state, task, input)

    class Inherits(Awaits):
        pass

    assert Count.steps_synchronously and Count().steps_synchronously
    assert not Awaits.steps_synchronously and not Inherits.steps_synchronously
    assert FnAgentWorker(fn=lambda s: ("x", True)).steps_synchronously

    async def afn(state):
        return "x", True

    assert not FnAgentWorker(async_fn=afn).steps_synchronously
    assert not ReActAgentWorker.from_tools([], llm=ScriptedLLM(["Answer: x"])).steps_synchronously
    assert "steps_synchronously" not in Count.model_fields  # a class promise, not a field



def test_the_runner_batch_methods_take_exactly_the_batch_functions_parameters() -> None:
    """``AgentRunner.run_batch`` spells out ``nbagent.batch.run_batch``'s parameters (so its
    documentation shows them); ``arun_batch``, ``BatchRun``'s plus ``progress``. Same names,
    kinds and defaults: a parameter added to one and not the other fails here."""
    import inspect

    from nbagent.batch import BatchRun, run_batch

    def params(fn: object, drop: int) -> list[tuple[str, object, object]]:
        sig = inspect.signature(fn)  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in list(sig.parameters.values())[drop:]]

    assert params(AgentRunner.run_batch, 1) == params(run_batch, 1)  # self / runner
    batch_run = dict((n, (k, d)) for n, k, d in params(BatchRun.__init__, 2))  # self, runner
    batch_run["progress"] = (inspect.Parameter.KEYWORD_ONLY, False)
    arun = params(AgentRunner.arun_batch, 1)
    assert arun[0][0] == "inputs" and {n: (k, d) for n, k, d in arun[1:]} == {
        n: v for n, v in batch_run.items() if n != "inputs"
    }
