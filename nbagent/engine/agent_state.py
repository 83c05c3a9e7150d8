"""AgentState: the reference API's view of a runner's tasks (``runner.state``).

``task_dict`` is the very dict behind ``runner.tasks`` (task id -> ``TaskState``), so the two
can never drift: a task created, deleted or reset through the runner shows here at once, and
the ``TaskState`` objects are the runner's own (``.task``, ``.step_queue``,
``.completed_steps``, plus nbagent's registry, failures and undo history).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbagent._lazy import LazyModule
from nbagent.engine.state import TaskState

if TYPE_CHECKING:
    from nbagent.schema import Task, TaskStep, TaskStepOutput


@LazyModule
def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import schema as module

    return module

__all__ = ["AgentState", "DAGAgentState"]


class AgentState:
    """The tasks of one runner, by id, with the reference's accessors."""

    def __init__(self, task_dict: Mapping[str, TaskState] | None = None) -> None:
        if task_dict is None:
            task_dict = {}
        if not isinstance(task_dict, dict):
            raise TypeError(
                f"task_dict must be a dict of task id -> TaskState, got {type(task_dict).__name__}"
            )
        for key, value in task_dict.items():
            if not isinstance(value, TaskState):
                raise TypeError(
                    f"task_dict[{key!r}] must be an nbagent TaskState, got {type(value).__name__}"
                )
            if key != value.task.task_id:
                raise ValueError(
                    f"task_dict key {key!r} does not match its task's id {value.task.task_id!r}"
                )
        self.task_dict: dict[str, TaskState] = task_dict

    def _state(self, task_id: str) -> TaskState:
        if isinstance(task_id, schema.Task):
            task_id = task_id.task_id
        state = self.task_dict.get(task_id)
        if state is None:
            from nbagent.engine.errors import UnknownTaskError

            known = ", ".join(repr(k) for k in self.task_dict) or "none"
            raise UnknownTaskError(f"unknown task id {task_id!r}; known task ids: {known}")
        return state

    def get_task(self, task_id: str) -> Task:
        """The Task with this id."""
        return self._state(task_id).task

    def get_step_queue(self, task_id: str) -> deque[TaskStep]:
        """The task's queue of steps to run (the live deque)."""
        return self._state(task_id).step_queue

    def get_completed_steps(self, task_id: str) -> list[TaskStepOutput]:
        """The task's completed step outputs, oldest first (the live list)."""
        return self._state(task_id).completed_steps

    def reset(self) -> None:
        """Forget every task (in place: the runner sees it too)."""
        self.task_dict.clear()

    def __len__(self) -> int:
        return len(self.task_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tasks={list(self.task_dict)})"

    def _adopt(self, runner: Any) -> None:
        """Make tasks given from outside runnable by ``runner``: their steps registered."""
        for state in self.task_dict.values():
            state.task._runner = runner
            for step in state.step_queue:
                if step.step_id not in state.steps:
                    state.register(step)


# The reference's ParallelAgentRunner takes a ``DAGAgentState``; nbagent's one state serves both.
DAGAgentState = AgentState
