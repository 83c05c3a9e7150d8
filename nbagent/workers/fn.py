"""FnAgentWorker: a plain function of the state is the agent.

``fn(state) -> (output, is_done)``, sync or async. ``state`` holds your ``initial_state`` plus
``__task__`` (the Task), ``input`` (this step's input, or None), ``memory`` (this task's new
messages) and ``step`` (the step number, from 0). The successor of the reference's
QueryPipelineAgentWorker, without the pipeline.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.workers.base import BaseAgentWorker

__all__ = ["FnAgentWorker"]

_RESERVED = ("__task__", "input", "memory", "step")


class FnAgentWorker(BaseAgentWorker):
    """An agent whose every step is one call of ``fn``."""

    def __init__(
        self,
        fn: Callable[[dict[str, Any]], Any],
        initial_state: dict[str, Any] | None = None,
        max_steps: int | None = 100,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"FnAgentWorker needs a function, got {type(fn).__name__}")
        clash = sorted(set(initial_state or {}) & set(_RESERVED))
        if clash:
            raise ValueError(f"initial_state uses reserved key(s) {clash}; reserved: {list(_RESERVED)}")
        self.fn = fn
        self.initial_state = dict(initial_state or {})
        self.max_steps = max_steps

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        task.extra_state.update(copy.deepcopy(self.initial_state))
        task.extra_state["step"] = 0
        return TaskStep(task_id=task.task_id, input=task.input)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        state = task.extra_state
        n = int(state.get("step", 0))
        if self.max_steps is not None and n >= self.max_steps:
            raise RuntimeError(
                f"FnAgentWorker reached max_steps={self.max_steps} without finishing; "
                "make fn return is_done=True, or raise max_steps"
            )
        view = dict(state)
        view.update({"__task__": task, "input": step.input, "memory": task.scratch_memory, "step": n})
        result = self.fn(view)
        if inspect.isawaitable(result):
            result = await result
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"fn must return (output, is_done), got {result!r}")
        output, is_done = result
        for key, value in view.items():
            if key not in _RESERVED:
                state[key] = value
        state["step"] = n + 1
        if is_done and not isinstance(output, AgentChatResponse):
            output = AgentChatResponse(response=str(output))
        next_steps = [] if is_done else [step.get_next_step(input=None)]
        return TaskStepOutput(output=output, task_step=step, next_steps=next_steps, is_last=bool(is_done))
