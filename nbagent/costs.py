"""Tokens and money per step, per task and per runner, from per-model prices that you set.

nbagent ships no prices (they change too often to hard-code). Set them once, globally or per
runner (a runner's own prices win)::

    from nbagent.costs import Pricing, set_pricing
    set_pricing({"gpt-4o-mini": (0.15, 0.60)})          # $ per 1M input / output tokens
    runner.pricing = Pricing({"my-model": (1.0, 2.0)})  # just this runner

A model name matches a price exactly, else by its part after the last ``/``, else by the
longest priced name it starts with followed by ``-``, ``:`` or ``@`` (so ``gpt-4o-mini`` prices
``gpt-4o-mini-2024-07-18``). With no prices set, no view shows any cost.

Which model a step used: a ``CostRecorder`` listening to the runner's ``StepCompleted``
events records its worker's ``llm.model`` (a saved run keeps these). A runner's prices and
recorded models live in a ``CostBook`` in its service slots (``runner._services``); read and
change them through the functions here, never as attributes. Limits: a worker that calls several different models in
one step is priced at its ``llm``'s price; a failed attempt reports no usage, so it is not
counted; steps run before a runner recorded models are priced at the worker's current model.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel

from nbagent._counts import counted
from nbagent.registry import html_view

from nbagent.events import Event, StepCompleted

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.engine.step_engine import StepEngine as AgentRunner
    from nbagent.messages import TokenUsage
    from nbagent.schema import TaskStepOutput

__all__ = [
    "ModelPrice",
    "Pricing",
    "Cost",
    "TaskCost",
    "RunnerCost",
    "CostBook",
    "CostRecorder",
    "attach_cost_recorder",
    "set_pricing",
    "get_pricing",
    "format_money",
    "task_cost",
    "runner_cost",
    "output_cost",
    "step_model",
    "step_models",
    "adopt_step_models",
    "own_pricing",
    "runner_pricing",
    "set_runner_pricing",
    "cost_label",
    "task_cost_label",
    "runner_cost_label",
]

_PER = 1_000_000


class ModelPrice(NamedTuple):
    """Price of one model, in currency units per million tokens."""

    input_per_1m: float
    output_per_1m: float


def _as_price(model: str, price: Any) -> ModelPrice:
    if isinstance(price, Mapping):
        try:
            price = (price["input_per_1m"], price["output_per_1m"])
        except KeyError:
            raise ValueError(
                f"price of {model!r} as a dict needs 'input_per_1m' and 'output_per_1m', got {dict(price)!r}"
            ) from None
    if not isinstance(price, (tuple, list)) or len(price) != 2:
        raise TypeError(
            f"price of {model!r} must be (input_per_1M, output_per_1M), e.g. (0.15, 0.60); got {price!r}"
        )
    values = []
    for v in price:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"price of {model!r} must hold two numbers >= 0, got {price!r}")
        values.append(float(v))
    return ModelPrice(values[0], values[1])


class Pricing:
    """Prices per model: ``Pricing({"gpt-4o-mini": (0.15, 0.60)})`` (per 1M input/output tokens)."""

    def __init__(
        self, prices: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None, *, currency: str = "$"
    ) -> None:
        if not isinstance(currency, str):
            raise TypeError(f"currency must be a str such as '$' or 'EUR ', got {currency!r}")
        self.currency = currency
        self._prices: dict[str, ModelPrice] = {}
        items = prices.items() if isinstance(prices, Mapping) else (prices or [])
        for model, price in items:
            self.set(model, price)

    def set(self, model: str, price: Any) -> None:
        """Set (or replace) the price of ``model``."""
        if not isinstance(model, str) or not model:
            raise TypeError(f"a model name must be a non-empty str, got {model!r}")
        self._prices[model] = _as_price(model, price)

    @property
    def models(self) -> dict[str, ModelPrice]:
        """The price of each model, by model name (a copy)."""
        return dict(self._prices)

    def price_of(self, model: str | None) -> ModelPrice | None:
        """The price that applies to ``model`` (see the module docstring), or None.

        Example:

        >>> from nbagent import Pricing
        >>> Pricing({"gpt-4o-mini": (0.15, 0.60)}).price_of("gpt-4o-mini")  # $ per million tokens
        ModelPrice(input_per_1m=0.15, output_per_1m=0.6)
        """
        if not model or not self._prices:
            return None
        found = self._prices.get(model)
        if found is not None:
            return found
        tail = model.rsplit("/", 1)[-1]
        found = self._prices.get(tail)
        if found is not None:
            return found
        best: str | None = None
        for name in self._prices:
            if len(tail) > len(name) and tail.startswith(name) and tail[len(name)] in "-:@":
                if best is None or len(name) > len(best):
                    best = name
        return self._prices[best] if best is not None else None

    def cost(self, usage: TokenUsage | None, model: str | None) -> float | None:
        """Money for ``usage`` tokens of ``model``; None when the model has no price."""
        price = self.price_of(model)
        if price is None or usage is None:
            return None
        return (usage.prompt_tokens * price.input_per_1m + usage.completion_tokens * price.output_per_1m) / _PER

    def __bool__(self) -> bool:
        return bool(self._prices)

    def __len__(self) -> int:
        return len(self._prices)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pricing):
            return NotImplemented
        return self._prices == other._prices and self.currency == other.currency

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (saved with a run)."""
        return {"currency": self.currency, "models": {m: list(p) for m, p in self._prices.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pricing:
        """Pricing from plain data (``{"models": {...}, "currency": "$"}``, as a JSON file
        holds it); anything else is a ``ValueError`` that shows what was given."""
        if not isinstance(data, Mapping) or not isinstance(data.get("models"), Mapping):
            raise ValueError(f"pricing data needs a 'models' mapping, got {data!r}")
        return cls(data["models"], currency=str(data.get("currency", "$")))

    @classmethod
    def coerce(cls, value: Pricing | Mapping[str, Any] | None) -> Pricing | None:
        """A Pricing from a Pricing, a ``{model: (in, out)}`` dict, or None.

        Example:

        >>> from nbagent import Pricing
        >>> Pricing.coerce({"gpt-4o-mini": (0.15, 0.60)}), Pricing.coerce(None)
        (Pricing({'gpt-4o-mini': (0.15, 0.6)}, currency='$'), None)
        """
        if value is None or isinstance(value, Pricing):
            return value
        if isinstance(value, Mapping):
            return cls(value)
        raise TypeError(f"pricing must be a Pricing, a dict of model -> (input, output) or None, got {value!r}")

    def __repr__(self) -> str:
        inner = ", ".join(f"{m!r}: ({p.input_per_1m:g}, {p.output_per_1m:g})" for m, p in self._prices.items())
        return f"Pricing({{{inner}}}, currency={self.currency!r})"


_default = Pricing()


def set_pricing(pricing: Pricing | Mapping[str, Any] | None) -> Pricing:
    """Set the global prices (None clears them); runners without their own use these.

    Example:

    >>> from nbagent import set_pricing
    >>> set_pricing({"gpt-4o-mini": (0.15, 0.60)})  # (input, output) $ per million tokens
    Pricing({'gpt-4o-mini': (0.15, 0.6)}, currency='$')
    >>> _ = set_pricing(None)
    """
    global _default
    _default = Pricing.coerce(pricing) or Pricing()
    return _default


def get_pricing() -> Pricing:
    """The global prices (empty unless ``set_pricing`` was called)."""
    return _default


def format_money(amount: float, currency: str = "$") -> str:
    """``$0.0012``-style text: two decimals from 1 up, four from 0.01, else two significant digits."""
    if amount == 0:
        return f"{currency}0"
    if amount >= 1:
        return f"{currency}{amount:,.2f}"
    if amount >= 0.01:
        return f"{currency}{amount:.4f}"
    digits = min(12, 1 - math.floor(math.log10(amount)))
    return f"{currency}{amount:.{digits}f}"


@dataclass(frozen=True)
class Cost:
    """Tokens and money of some steps. ``amount`` is None when none of them had a price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    amount: float | None = None
    currency: str = "$"
    steps: int = 0
    unpriced: int = 0  # steps with tokens but no price for their model

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Cost) -> Cost:
        if self.amount is None and other.amount is None:
            amount = None
        else:
            amount = (self.amount or 0.0) + (other.amount or 0.0)
        return Cost(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            amount,
            self.currency if self.steps else other.currency,
            self.steps + other.steps,
            self.unpriced + other.unpriced,
        )

    @property
    def money(self) -> str | None:
        """The amount as text (``$0.0012``), or None without a price."""
        if self.amount is None:
            return None
        text = format_money(self.amount, self.currency)
        return f"{text} (+{self.unpriced} unpriced)" if self.unpriced else text

    def __str__(self) -> str:
        text = f"{counted(self.total_tokens, 'token')} ({self.prompt_tokens} prompt + {self.completion_tokens} completion)"
        money = self.money
        return f"{text} · {money}" if money else text


def _sum(costs: Iterable[Cost], currency: str) -> Cost:
    total = Cost(currency=currency)
    for c in costs:
        total = total + c
    return total


@dataclass(frozen=True)
class StepCost:
    """One step's cost in a ``TaskCost``."""

    step_id: str
    model: str | None
    cost: Cost
    undone: bool = False


@dataclass(frozen=True)
class TaskCost:
    """A task's tokens and money: ``total`` over its current steps, ``spent`` with undone runs too."""

    task_id: str
    steps: list[StepCost] = field(default_factory=list)
    total: Cost = field(default_factory=Cost)
    spent: Cost = field(default_factory=Cost)

    def __str__(self) -> str:
        text = f"task {self.task_id[:8]}: {self.total}"
        if self.spent.total_tokens != self.total.total_tokens:
            text += f"; spent with undone steps: {self.spent}"
        return text

    def _repr_html_(self) -> str | None:
        return html_view(self)


@dataclass(frozen=True)
class RunnerCost:
    """Every task's cost, and the sums."""

    tasks: list[TaskCost] = field(default_factory=list)
    total: Cost = field(default_factory=Cost)
    spent: Cost = field(default_factory=Cost)

    def __str__(self) -> str:
        return f"{counted(len(self.tasks), 'task')}: {self.total}"


# ----- which runner owns an output (for views that get only the output) -------------------------

_RUNNERS: dict[str, list[weakref.ref[Any]]] = {}
_PRICED: weakref.WeakSet[Any] = weakref.WeakSet()  # runners with prices of their own


def register_runner(task_id: str, runner: AgentRunner) -> None:
    """Remember that ``runner`` holds task ``task_id`` (views find prices and models this way)."""
    refs = _RUNNERS.setdefault(task_id, [])
    for ref in refs:
        if ref() is runner:
            return
    refs[:] = [r for r in refs if r() is not None]
    refs.append(weakref.ref(runner))


@dataclass(slots=True)
class CostBook:
    """A runner's own prices (None: the global ones) and the model each of its steps ran with
    (step id -> model name), kept in ``runner._services``."""

    pricing: Pricing | None = None
    step_models: dict[str, str] = field(default_factory=dict)


def _book(runner: Any) -> CostBook | None:
    services = getattr(runner, "_services", None)
    return None if services is None else services.get(CostBook)


class CostRecorder:
    """Listens to a runner's ``StepCompleted`` events: records the model each step ran with
    and registers the runner for views of its outputs. Subscribed by the runner before any
    store, so a store writing a step sees its model already recorded."""

    __slots__ = ("_runner", "_book")

    def __init__(self, runner: AgentRunner) -> None:
        self._runner = weakref.ref(runner)  # the runner holds its listeners: no cycle back
        self._book = runner._services.setdefault(CostBook)

    def __call__(self, event: Event) -> None:
        runner = self._runner()
        if runner is None or not isinstance(event, StepCompleted):
            return
        model = current_model(runner)
        if model is not None:
            self._book.step_models[event.step_id] = model
        if event.usage is not None:
            register_runner(event.task_id, runner)


def attach_cost_recorder(runner: AgentRunner) -> CostRecorder:
    """Record the models and owners of ``runner``'s steps from now on (once per runner)."""
    recorder = CostRecorder(runner)
    runner.events.subscribe(recorder, StepCompleted)
    return recorder


def set_runner_pricing(runner: AgentRunner, value: Pricing | Mapping[str, Any] | None) -> None:
    """Give ``runner`` prices of its own (None: use the global ones)."""
    pricing = Pricing.coerce(value)
    runner._services.setdefault(CostBook).pricing = pricing
    if pricing is not None:
        _PRICED.add(runner)
        for task_id in list(runner.tasks):
            register_runner(task_id, runner)
    else:
        _PRICED.discard(runner)


def own_pricing(runner: Any) -> Pricing | None:
    """The prices ``runner`` was given (``runner.pricing = ...``), or None: it uses the global ones."""
    book = _book(runner)
    return None if book is None else book.pricing


_NO_MODELS: dict[str, str] = {}


def _models(runner: Any) -> dict[str, str]:
    book = _book(runner)
    return _NO_MODELS if book is None else book.step_models


def step_models(runner: Any) -> Mapping[str, str]:
    """Step id -> the model the step ran with, as recorded when it completed (read-only)."""
    return MappingProxyType(_models(runner))


def adopt_step_models(runner: AgentRunner, models: Mapping[str, str]) -> None:
    """Record the models that steps ran with elsewhere (a loaded run, a task adopted from a
    batch record), so that their cost uses the model each step really ran with."""
    if models:
        runner._services.setdefault(CostBook).step_models.update(models)


def _pricing_anywhere() -> bool:
    return bool(_default) or len(_PRICED) > 0


def runner_pricing(runner: Any) -> Pricing:
    """The prices that apply to ``runner``: its own, else the global ones."""
    own = own_pricing(runner)
    return own if own is not None else _default


def step_model(runner: Any, step_id: str) -> str | None:
    """The model a step ran with: as recorded when it completed, else the worker's model now."""
    recorded = _models(runner).get(step_id)
    if recorded is not None:
        return recorded  # type: ignore[no-any-return]
    return current_model(runner)


def current_model(runner: Any) -> str | None:
    """The model the runner's worker calls now (its ``llm.model``; a loaded worker's saved
    one), or None. Asked after every step, so it never makes a worker raise AttributeError."""
    worker = getattr(runner, "agent_worker", None)
    llm = _attribute(worker, "llm")
    if llm is not None:  # (None has no model: not asked, a failed lookup costs 0.2 us a step)
        model = getattr(llm, "model", None)
        if isinstance(model, str):
            return model
    saved = _attribute(worker, "saved_model")
    return saved if isinstance(saved, str) else None


_HAS: dict[tuple[type, str], bool] = {}


def _attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)`` without the slow way to None: a missing attribute of a
    pydantic model (a worker) is an AttributeError its ``__getattr__`` builds, about 6 us."""
    own = getattr(obj, "__dict__", None)
    if own is not None and name in own:
        return own[name]
    cls = type(obj)
    found = _HAS.get((cls, name))
    if found is None:
        getter = getattr(cls, "__getattr__", None)
        dynamic = getter is not None and getter is not getattr(BaseModel, "__getattr__", None)
        found = _HAS[(cls, name)] = dynamic or any(name in vars(k) for k in cls.__mro__)
    return getattr(obj, name, None) if found else None


def output_cost(runner: Any, out: TaskStepOutput, pricing: Pricing | None = None) -> Cost:
    """One step output's tokens and money."""
    pricing = runner_pricing(runner) if pricing is None else pricing
    usage = out.usage
    if usage is None:
        return Cost(currency=pricing.currency, steps=1)
    amount = pricing.cost(usage, step_model(runner, out.task_step.step_id))
    return Cost(
        usage.prompt_tokens,
        usage.completion_tokens,
        amount,
        pricing.currency,
        1,
        1 if amount is None and usage.total_tokens else 0,
    )


def task_cost(runner: Any, state: TaskState) -> TaskCost:
    """The cost of a task: its completed steps (``total``), plus its undone runs (``spent``)."""
    pricing = runner_pricing(runner)
    steps = [
        StepCost(o.task_step.step_id, step_model(runner, o.task_step.step_id), output_cost(runner, o, pricing))
        for o in list(state.completed_steps)
    ]
    undone = [
        StepCost(o.task_step.step_id, step_model(runner, o.task_step.step_id), output_cost(runner, o, pricing), True)
        for o in list(state.undone_outputs)
    ]
    total = _sum((s.cost for s in steps), pricing.currency)
    spent = total + _sum((s.cost for s in undone), pricing.currency)
    return TaskCost(state.task_id, steps + undone, total, spent)


def runner_cost(runner: Any) -> RunnerCost:
    """The cost of every task of a runner."""
    tasks = [task_cost(runner, s) for s in list(runner.tasks.values())]
    currency = runner_pricing(runner).currency
    return RunnerCost(tasks, _sum((t.total for t in tasks), currency), _sum((t.spent for t in tasks), currency))


# ----- short labels for the views (None when no price applies: views stay as they were) ------


def _owner(out: TaskStepOutput) -> Any:
    sid = out.task_step.step_id
    fallback = None
    for ref in list(_RUNNERS.get(out.task_step.task_id, ())):
        runner = ref()
        if runner is None:
            continue
        state = runner.tasks.get(out.task_step.task_id)
        if state is None:
            continue
        if state.outputs.get(sid) is out or any(o is out for o in state.undone_outputs):
            return runner
        fallback = fallback or runner
    return fallback


def cost_label(out: TaskStepOutput) -> str | None:
    """``$0.0012`` for a step output whose model has a price; None otherwise."""
    if not _pricing_anywhere() or out.usage is None:
        return None
    try:
        runner = _owner(out)
        pricing = runner_pricing(runner) if runner is not None else _default
        model = step_model(runner, out.task_step.step_id) if runner is not None else None
        amount = pricing.cost(out.usage, model)
    except Exception:  # noqa: BLE001 - a view must not break over a cost
        return None
    return None if amount is None else format_money(amount, pricing.currency)


def task_cost_label(state: TaskState) -> str | None:
    """The task's money (and what undone runs added), or None when nothing has a price."""
    if not _pricing_anywhere():
        return None
    runner = getattr(state.task, "_runner", None)
    if runner is None:
        return None
    try:
        cost = task_cost(runner, state)
    except Exception:  # noqa: BLE001
        return None
    if cost.spent.amount is None:
        return None
    text = cost.total.money or format_money(0, cost.total.currency)
    if cost.spent.amount != (cost.total.amount or 0.0):
        text += f" (spent {cost.spent.money} with undone steps)"
    return text


def runner_cost_label(runner: Any) -> str | None:
    """Money over all the runner's tasks (undone runs included), or None without prices."""
    if not _pricing_anywhere():
        return None
    try:
        cost = runner_cost(runner)
    except Exception:  # noqa: BLE001
        return None
    return cost.spent.money
