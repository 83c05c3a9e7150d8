"""``StepEngine``: the step engine, whole and usable alone.

Tasks and their queue, the one transactional step path, undo, skip, held steps, tool-call
approvals, finalizing answers into the conversation, and the reference's chat methods. It
emits an event for every change and imports nothing above the engine: saving, costs,
branches, batches and views are services and views that listen to it, and ``AgentRunner``
(``nbagent.runner``) is this engine plus their convenience methods.
"""

from __future__ import annotations

from nbagent._counts import counted
from nbagent.engine.chat import ChatLoop
from nbagent.engine.edits import StepEdits
from nbagent.registry import html_view

__all__ = ["StepEngine"]


class StepEngine(ChatLoop, StepEdits):
    """Runs the tasks of one worker step by step and owns all their state.

    Takes ``AgentRunner``'s arguments but ``autosave`` and ``store`` (services above it).
    """

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(worker={type(self.agent_worker).__name__}, "
            f"tasks={len(self._tasks)}, memory={counted(len(self.memory), 'message')})"
        )

    def _repr_html_(self) -> str | None:
        return html_view(self)
