"""FnAgentWorker: a plain function of the state is the agent (the reference's contract).

``fn(state) -> (state, is_done)``, sync or async (``async_fn`` for the async path).
``state`` is the step's ``step_state``: your ``initial_state`` plus ``__task__`` (the Task),
carried from step to step; the answer is read from ``state["__output__"]`` (the keys are
``task_input_key`` / ``output_key``). After each step ``task.extra_state`` is updated from
the state, as in the reference. An exception in ``fn`` propagates; the runner keeps the step
queued and its state as it was, so it can be retried.

nbagent adds, for convenience, three read-only keys while ``fn`` runs (unless your state
already uses them): ``input`` (this step's input, or None), ``memory`` (this task's new
messages) and ``step`` (the step number, from 0). The short form ``fn(state) -> (output,
is_done)``, with anything but a dict first, is accepted too: the output is the answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput, step_output
from nbagent.workers.base import BaseAgentWorker

__all__ = ["FnAgentWorker", "DEFAULT_TASK_INPUT_KEY", "DEFAULT_OUTPUT_KEY"]

DEFAULT_TASK_INPUT_KEY = "__task__"
DEFAULT_OUTPUT_KEY = "__output__"
_STEP_COUNT_KEY = "__fn_steps__"  # in task.extra_state: how many steps fn has run
_CONVENIENCE = ("input", "memory", "step")


def _copy_containers(value: Any) -> Any:
    """``value`` with its dicts, lists, tuples and sets copied (so tasks never share them) and
    every other object shared."""
    if isinstance(value, dict):
        return {k: _copy_containers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_containers(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy_containers(v) for v in value)
    if isinstance(value, set):
        return {_copy_containers(v) for v in value}
    return value


class FnAgentWorker(BaseAgentWorker):
    """An agent whose every step is one call of ``fn`` (or ``async_fn``) on the state."""

    def __init__(
        self,
        fn: Callable[[dict[str, Any]], Any] | None = None,
        async_fn: Callable[[dict[str, Any]], Any] | None = None,
        initial_state: dict[str, Any] | None = None,
        task_input_key: str = DEFAULT_TASK_INPUT_KEY,
        output_key: str = DEFAULT_OUTPUT_KEY,
        verbose: bool = False,
        max_steps: int | None = 100,
    ) -> None:
        if fn is None and async_fn is None:
            raise TypeError("FnAgentWorker needs a function: fn=... (or async_fn=...)")
        for name, value in (("fn", fn), ("async_fn", async_fn)):
            if value is not None and not callable(value):
                raise TypeError(f"FnAgentWorker {name} must be callable, got {type(value).__name__}")
        if initial_state is not None and not isinstance(initial_state, Mapping):
            raise TypeError(f"initial_state must be a dict, got {type(initial_state).__name__}")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be an int >= 1 or None (no limit), got {max_steps!r}")
        self.fn = fn
        self.async_fn = async_fn
        self.initial_state = dict(initial_state or {})
        self.task_input_key = task_input_key
        self.output_key = output_key
        self.verbose = verbose
        self.max_steps = max_steps

    @property
    def steps_synchronously(self) -> bool:  # type: ignore[override]
        """A plain ``fn`` steps without awaiting; ``async_fn`` (or a subclass's own ``arun_step``) may not."""
        return self.async_fn is None and type(self).arun_step is FnAgentWorker.arun_step

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        """The first step; its state is the task's ``extra_state`` (e.g. the runner's
        ``init_task_state_kwargs``) plus ``initial_state``: its dicts, lists, tuples and sets
        copied for each task, any other object (a model, a router, a client) the very one
        given, as on the reference. The Task is added while ``fn`` runs."""
        state = dict(task.extra_state)  # e.g. the runner's init_task_state_kwargs
        state.update({key: _copy_containers(value) for key, value in self.initial_state.items()})
        task.extra_state[_STEP_COUNT_KEY] = 0
        return TaskStep(task_id=task.task_id, input=task.input, step_state=state)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        n = int(task.extra_state.get(_STEP_COUNT_KEY, 0))
        if self.max_steps is not None and n >= self.max_steps:
            raise RuntimeError(
                f"FnAgentWorker reached max_steps={self.max_steps} without finishing; "
                "make fn return is_done=True, or raise max_steps (None: no limit)"
            )
        state = step.step_state
        added = {self.task_input_key: task}
        for key, value in zip(_CONVENIENCE, (step.input, task.scratch_memory, n)):
            if key not in state:
                added[key] = value
        state.update(added)
        try:
            if self.async_fn is not None:
                result = self.async_fn(state)
            else:
                assert self.fn is not None
                result = self.fn(state)
            if inspect.isawaitable(result):
                result = await result
        finally:
            for key, value in added.items():  # never saved: the Task, the memory, the counters
                if state.get(key) is value:
                    del state[key]
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"fn must return (state, is_done), got {_short(result)}; put the answer in "
                f"state[{self.output_key!r}]"
            )
        first, is_done = result
        if isinstance(first, dict):  # the reference's contract
            if first is not state:  # a new dict: carry it forward in place
                new = {k: v for k, v in first.items() if k not in added or v is not added[k]}
                state.clear()
                state.update(new)
            output = state.get(self.output_key, "")
        else:  # nbagent's short form: (output, is_done)
            output = first
        task.extra_state.update(state)
        task.extra_state[_STEP_COUNT_KEY] = n + 1
        response = output if isinstance(output, AgentChatResponse) else AgentChatResponse(
            response="" if output is None else str(output)
        )
        if self.verbose:
            print(f"> FnAgentWorker step {n}: {_short(response.response)} (done={bool(is_done)})")
        next_steps = [] if is_done else [step.get_next_step(input=None)]
        return step_output(response, step, next_steps, bool(is_done))

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        fn = self.async_fn if self.async_fn is not None else self.fn
        info["fn"] = getattr(fn, "__name__", type(fn).__name__)
        return info


def _short(value: Any, n: int = 80) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= n else text[: n - 1] + "…"
