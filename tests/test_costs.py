"""Costs: prices per model, tokens and money per step / task / runner, shown only when priced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, ScriptedLLM, seed_ids
from nbagent import costs
from nbagent.costs import Cost, Pricing, format_money, set_pricing
from nbagent.messages import TokenUsage
from nbagent.viz import html as H
from nbagent.viz.dot import task_to_dot
from nbagent.workers import ReActAgentWorker


@pytest.fixture(autouse=True)
def _no_global_prices() -> Iterator[None]:
    saved = costs.get_pricing()
    set_pricing(None)
    yield
    set_pricing(saved)


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def act(a: int, b: int) -> str:
    return f'Thought: add.\nAction: add\nAction Input: {{"a": {a}, "b": {b}}}'


def react_runner(model: str = "scripted") -> tuple[AgentRunner, Any]:
    seed_ids(0)
    llm = ScriptedLLM([act(1, 2), act(3, 4), "Thought: done.\nAnswer: 10"], model=model)
    runner = AgentRunner(ReActAgentWorker.from_tools([add], llm=llm))
    return runner, runner.create_task("add things")


# ----- prices ------------------------------------------------------------------------------------


def test_pricing_matches_exact_then_provider_prefix_then_dated_names() -> None:
    p = Pricing({"gpt-4o": (2.5, 10), "gpt-4o-mini": (0.15, 0.6)})
    assert p.price_of("gpt-4o-mini") == (0.15, 0.6)
    assert p.price_of("openai/gpt-4o-mini") == (0.15, 0.6)
    assert p.price_of("gpt-4o-mini-2024-07-18") == (0.15, 0.6)  # longest priced prefix wins
    assert p.price_of("gpt-4o-2024-08-06") == (2.5, 10)
    assert p.price_of("gpt-4") is None and p.price_of("gpt-4omni") is None and p.price_of(None) is None
    usage = TokenUsage(prompt_tokens=1_000_000, completion_tokens=500_000)
    assert p.cost(usage, "gpt-4o") == pytest.approx(2.5 + 5.0)
    assert p.cost(usage, "unknown") is None


def test_pricing_rejects_bad_prices_with_clear_messages() -> None:
    with pytest.raises(TypeError, match=r"\(input_per_1M, output_per_1M\)"):
        Pricing({"m": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        Pricing({"m": (-1, 2)})
    with pytest.raises(ValueError, match="input_per_1m"):
        Pricing({"m": {"input": 1}})
    assert Pricing({"m": {"input_per_1m": 1, "output_per_1m": 2}}).price_of("m") == (1.0, 2.0)
    assert Pricing.from_dict(Pricing({"m": (1, 2)}, currency="EUR ").to_dict()) == Pricing({"m": (1, 2)}, currency="EUR ")


def test_format_money() -> None:
    assert format_money(0) == "$0"
    assert format_money(12.345) == "$12.35"
    assert format_money(0.0123) == "$0.0123"
    assert format_money(0.00012345) == "$0.00012"
    assert format_money(0.004, "EUR ") == "EUR 0.0040"


def test_cost_sums_and_keeps_unpriced_apart() -> None:
    a = Cost(10, 5, 0.5, "$", 1)
    b = Cost(1, 1, None, "$", 1, unpriced=1)
    total = a + b
    assert (total.prompt_tokens, total.completion_tokens, total.amount, total.steps, total.unpriced) == (11, 6, 0.5, 2, 1)
    assert total.money == "$0.5000 (+1 unpriced)"
    assert (Cost() + Cost()).amount is None


# ----- per step, per task, per runner ---------------------------------------------------------------


def test_task_cost_is_the_sum_of_its_steps_at_their_models_prices() -> None:
    runner, task = react_runner()
    runner.pricing = {"scripted": (1.0, 2.0), "big": (10.0, 20.0)}
    first = runner.run_step(task)
    runner.agent_worker.llm = ScriptedLLM([act(3, 4), "Thought: done.\nAnswer: 10"], model="big")
    runner.run_step(task)
    last = runner.run_step(task)
    cost = runner.cost(task)
    usages = [o.usage for o in runner.get_completed_steps(task)]
    assert all(u is not None for u in usages)
    expected = (usages[0].prompt_tokens * 1 + usages[0].completion_tokens * 2) / 1e6 + sum(
        (u.prompt_tokens * 10 + u.completion_tokens * 20) / 1e6 for u in usages[1:]
    )
    assert cost.total.amount == pytest.approx(expected)
    assert [s.model for s in cost.steps] == ["scripted", "big", "big"]
    assert cost.total.total_tokens == sum(u.total_tokens for u in usages)
    assert cost.steps[0].step_id == first.task_step.step_id and last.is_last
    # an undone step was still paid for: it counts in "spent", not in "total"
    runner.undo_step(task)
    after = runner.cost(task)
    assert after.spent.amount == pytest.approx(expected)
    assert after.total.amount == pytest.approx(expected - cost.steps[2].cost.amount)
    assert runner.cost().spent.amount == pytest.approx(expected)


def test_runner_prices_win_over_global_ones() -> None:
    runner, task = react_runner()
    runner.run_step(task)
    set_pricing({"scripted": (1.0, 1.0)})
    g = runner.cost(task).total.amount
    runner.pricing = Pricing({"scripted": (3.0, 3.0)})
    assert runner.cost(task).total.amount == pytest.approx(3 * g)
    runner.pricing = None
    assert runner.cost(task).total.amount == pytest.approx(g)
    set_pricing(None)
    assert runner.cost(task).total.amount is None and runner.cost(task).total.total_tokens > 0


# ----- views -------------------------------------------------------------------------------------


def test_views_show_no_cost_without_prices_and_the_money_with_them() -> None:
    runner, task = react_runner()
    out = runner.run_step(task)
    state = runner.state_of(task)
    plain = (task_to_dot(state), H.task_html(task), H.runner_html(runner), H.step_output_html(out))
    assert not any("$" in view for view in plain)
    runner.pricing = {"scripted": (1000.0, 1000.0)}
    money = format_money(runner.cost(task).total.amount or 0)
    dot = task_to_dot(state)
    assert f"tok · {money}" in dot
    assert f"<th>cost</th><td>{money}</td>" in H.task_html(task)
    assert f"<th>cost</th><td>{money}</td>" in H.runner_html(runner)
    assert money in H.step_output_html(out) and money in H.timeline_html(state)
    runner.pricing = None
    assert task_to_dot(state) == plain[0]


def test_prices_and_step_models_survive_save_and_load(tmp_path: Path) -> None:
    runner, task = react_runner(model="gpt-4o-mini-2024-07-18")
    runner.pricing = {"gpt-4o-mini": (0.15, 0.6)}
    runner.run_step(task)
    runner.run_step(task)
    expected = runner.cost(task)
    loaded = AgentRunner.load(runner.save(tmp_path / "run.json"))  # no worker: the saved models price it
    assert loaded.pricing == runner.pricing
    got = loaded.cost(task.task_id)
    assert got.total.amount == pytest.approx(expected.total.amount)
    assert [s.model for s in got.steps] == ["gpt-4o-mini-2024-07-18"] * 2
    assert str(got).startswith(f"task {task.task_id[:8]}: ")
    html = got._repr_html_()
    assert "gpt-4o-mini-2024-07-18" in html and "<script" not in html
