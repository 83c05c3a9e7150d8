"""``AgentRunner``'s prices and costs: ``runner.pricing``, ``runner.cost(task)``
(``nbagent.costs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.engine.errors import TaskRef
from nbagent.engine.step_engine import StepEngine

if TYPE_CHECKING:
    from nbagent.costs import Pricing, RunnerCost, TaskCost

__all__ = ["RunnerPricing"]


class RunnerPricing(StepEngine):
    """Prices of this runner's models and the tokens and money its tasks spent."""

    @property
    def pricing(self) -> Pricing | None:
        """This runner's prices (a ``nbagent.costs.Pricing``), or None to use the global ones."""
        from nbagent.costs import own_pricing

        return own_pricing(self)

    @pricing.setter
    def pricing(self, value: Any) -> None:
        from nbagent.costs import set_runner_pricing

        set_runner_pricing(self, value)

    def cost(self, task_id: TaskRef | None = None) -> TaskCost | RunnerCost:
        """Tokens and money of a task (``TaskCost``), or of every task (``RunnerCost``)."""
        from nbagent.costs import runner_cost, task_cost

        if task_id is None:
            return runner_cost(self)
        return task_cost(self, self.state_of(task_id))
