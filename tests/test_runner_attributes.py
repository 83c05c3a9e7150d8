"""Every attribute a runner has is declared on its class (annotations over the MRO), whatever
services it used: autosave, a run store, prices, forks, a batch, the panel, a parallel run, a
load. Services keep their per-runner state in ``runner._services`` (``engine.slots``), never in
attributes of their own; costs keep theirs in a ``CostBook`` there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    ChatMessage,
    FunctionCallingAgent,
    FunctionLLM,
    FunctionTool,
    MessageRole,
    ParallelAgentRunner,
    tool_call,
)
from nbagent import costs
from nbagent.costs import CostBook, Pricing
from nbagent.engine.step_engine import StepEngine
from tests.helpers import CountingWorker

def declared(cls: type) -> set[str]:
    """The attribute names annotated on ``cls`` and its bases."""
    return {name for klass in cls.__mro__ for name in vars(klass).get("__annotations__", {})}


def undeclared(runner: object) -> set[str]:
    return set(vars(runner)) - declared(type(runner))


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def brain(messages: list[ChatMessage], tools: Any) -> Any:
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"it is {last.text}"
    return tool_call("add", a=1, b=2)


def agent(**kw: Any) -> FunctionCallingAgent:
    return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=FunctionLLM(brain, model="m1"), **kw)


def test_an_engine_and_a_runner_declare_what_they_set() -> None:
    engine = StepEngine(CountingWorker(target=2))
    engine.chat("go")
    assert undeclared(engine) == set()
    runner = AgentRunner(CountingWorker(target=2))
    runner.chat("go")
    assert undeclared(runner) == set()
    # what the engine declares for its instances, each one has: no stale annotation
    settings = {n for n in declared(StepEngine) if any(n in vars(k) for k in StepEngine.__mro__)}
    assert settings == {"defers_streamed_steps"}  # a class-level setting, not an instance's
    assert set(vars(engine)) == declared(StepEngine) - settings


def test_after_every_service_the_runner_has_only_declared_attributes(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    seen: set[str] = set()

    def note(runner: object) -> None:
        seen.update(undeclared(runner))

    # autosave to a run file, prices, steps, a fork, goto, cost, views
    runner = agent(autosave=tmp_path / "run.json")
    runner.pricing = Pricing({"m1": (1.0, 2.0)})
    task = runner.create_task("add")
    first = runner.run_step(task)
    runner.run_step(task)
    runner.goto_step(task, first.task_step.step_id)
    runner.run_step(task)
    runner.fork(task, first.task_step.step_id)
    assert runner.cost(task).spent.total_tokens > 0
    runner.graph(task)
    panel = runner.panel(task)
    panel.close()
    live = runner.live_graph(task)
    live.close()
    note(runner)
    # a batch with its store, then the same runner autosaving to a run store
    batch = runner.run_batch(["one", "two"], store=tmp_path / "batch.db", progress=False)
    assert len(batch.results) == 2
    runner.autosave = tmp_path / "runs.db"
    runner.chat("again")
    note(runner)
    # loads, from the file and from the store
    note(AgentRunner.load(tmp_path / "run.json", runner.agent_worker))
    note(AgentRunner.load(tmp_path / "runs.db", runner.agent_worker))
    # a parallel runner
    par = ParallelAgentRunner(CountingWorker(target=2), max_concurrency=2)
    par.chat("go")
    par.pricing = {"m1": (1.0, 1.0)}
    note(par)
    assert seen == set(), f"attributes set on a runner but not declared on its class: {sorted(seen)}"


def test_costs_live_in_a_cost_book_in_the_service_slots() -> None:
    runner = agent()
    assert costs.own_pricing(runner) is None
    runner.pricing = {"m1": (1.0, 2.0)}
    book = runner._services.get(CostBook)
    assert book is not None and book.pricing == Pricing({"m1": (1.0, 2.0)}) and runner.pricing is book.pricing
    task = runner.create_task("add")
    out = runner.run_step(task)
    assert dict(costs.step_models(runner)) == {out.task_step.step_id: "m1"} == book.step_models
    runner.pricing = None
    assert runner.pricing is None and costs.runner_pricing(runner) is costs.get_pricing()
    assert "_pricing" not in vars(runner) and "_step_models" not in vars(runner)


def test_the_cost_recorder_hears_only_completed_steps_and_the_store_sees_the_model(tmp_path: Path) -> None:
    """Recorded before a store writes the step: a saved step carries its model."""
    runner = agent(store=None, autosave=tmp_path / "runs.db")
    events = runner.events
    from nbagent.events import StepCompleted, StepStarted, TokenStreamed

    plain = AgentRunner(CountingWorker(target=1))
    assert plain.events.wants(StepCompleted)  # the cost recorder
    assert not plain.events.wants(StepStarted) and not plain.events.wants(TokenStreamed)
    # the store hears every change but a step's start and streamed tokens (none is built for it)
    assert events.wants(StepCompleted) and not events.wants(StepStarted) and not events.wants(TokenStreamed)
    runner.chat("add")
    loaded = AgentRunner.load(tmp_path / "runs.db")
    (state,) = loaded.tasks.values()
    assert {costs.step_model(loaded, sid) for sid in state.outputs} == {"m1"}
    assert set(costs.step_models(loaded)) == set(state.outputs)
