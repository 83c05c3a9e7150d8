"""``AgentRunner``'s views: the step graph, the live graph and the control panel
(``nbagent.viz``, imported when first asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.engine.errors import TaskRef
from nbagent.engine.state import TaskState
from nbagent.engine.step_engine import StepEngine

if TYPE_CHECKING:
    from nbagent.viz.graph import StepGraph
    from nbagent.viz.live import LiveGraph
    from nbagent.viz.panel import AgentPanel

__all__ = ["RunnerViews"]


class RunnerViews(StepEngine):
    """Draw a task's steps, live or not, and drive the runner from a panel."""

    def graph(self, task_id: TaskRef | None = None, **kwargs: Any) -> StepGraph:
        """The task's step DAG (default: the latest task), displayable in Jupyter (``.source``
        is the DOT text); ``kwargs`` are ``StepGraph``'s drawing options."""
        from nbagent.viz.graph import StepGraph

        state = self.state_of(task_id) if task_id is not None else self._latest_state()
        return StepGraph(state, **kwargs)

    def panel(self, task: TaskRef | None = None, **kwargs: Any) -> AgentPanel:
        """An ipywidgets control panel driving this runner (``throttle_s``, ``auto_finalize``)."""
        from nbagent.viz.panel import AgentPanel

        return AgentPanel(self, task, **kwargs)

    def live_graph(self, task: TaskRef | None = None, **kwargs: Any) -> LiveGraph:
        """A widget showing the task's step DAG, redrawn after every step."""
        from nbagent.viz.live import LiveGraph

        return LiveGraph(self, task, **kwargs)

    def _latest_state(self) -> TaskState:
        if not self._tasks:
            raise ValueError("the runner has no tasks yet; create one with create_task(...)")
        return next(reversed(self._tasks.values()))
