"""The step engine's errors and the task reference every runner method accepts.

They live below the runners so that the engine's own modules (approvals, holds, the task
registry) and the views can raise and catch them without importing ``AgentRunner``.
``nbagent.runner.base`` re-exports them under their old names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ForwardRef, Union

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import Task

__all__ = ["TaskRef", "UnknownTaskError", "TaskStateError", "busy_message"]

# the model by name, resolved in its module: ``import nbagent`` defines no model
TaskRef = Union[ForwardRef("Task", module="nbagent.schema"), str]


class UnknownTaskError(KeyError):
    """A task id the runner does not know."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class TaskStateError(RuntimeError):
    """The call does not fit the task's state (finalized, abandoned, nothing to undo...)."""


def busy_message(state: TaskState) -> str:
    """Why a call on a task that is running a step is refused."""
    return (
        f"task {state.task_id!r} is busy: it is already running step(s) {sorted(state.running)} "
        "(another call, a thread or the panel's run); wait for it to end or stop it"
    )
