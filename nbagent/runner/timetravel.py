"""``AgentRunner``'s time travel: go back to a step, fork a new branch from it, list and
compare a task's branches (``nbagent.branches``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.engine.errors import TaskRef
from nbagent.engine.step_engine import StepEngine

if TYPE_CHECKING:
    from nbagent.branches import Branch, BranchComparison
    from nbagent.schema import TaskStep

__all__ = ["RunnerTimeTravel"]


class RunnerTimeTravel(StepEngine):
    """Go back, fork and compare branches of a task."""

    def goto_step(self, task_id: TaskRef, step_id: str, *, before: bool = False) -> TaskStep | None:
        """Go back to just after ``step_id`` completed (``before=True``: just before it ran),
        undoing every later step. Returns the step that runs next. See ``nbagent.branches``."""
        from nbagent.branches import goto_step

        return goto_step(self, task_id, step_id, before=before)

    def fork(self, task_id: TaskRef, step_id: str, input: str | None = None) -> TaskStep:
        """Go back to just before ``step_id`` and queue a new step (new id) in its place; the
        old branch stays in the graph. Returns the new step."""
        from nbagent.branches import fork

        return fork(self, task_id, step_id, input=input)

    def branches(self, task_id: TaskRef) -> list[Branch]:
        """The task's branches (paths of step ids), older first; see ``nbagent.branches``."""
        from nbagent.branches import branches

        return branches(self, task_id)

    def compare(self, task_id: TaskRef, a: Any, b: Any) -> BranchComparison:
        """Two branches side by side (a Branch, an index into ``branches``, "current" or a
        step id each); displays as HTML in a notebook."""
        from nbagent.branches import compare

        return compare(self, task_id, a, b)
