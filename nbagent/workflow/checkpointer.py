"""WorkflowCheckpointer: the checkpoints of a workflow's runs, kept by run id (the reference's
checkpointer). It starts runs, so it sits above ``Workflow``; the checkpoints themselves and
their callback are in ``checkpoint.py``.
"""

from __future__ import annotations

from typing import Any

from nbagent.workflow.checkpoint import Checkpoint
from nbagent.workflow.events import Event
from nbagent.workflow.handler import WorkflowHandler
from nbagent.workflow.workflow import Workflow

__all__ = ["WorkflowCheckpointer"]


class WorkflowCheckpointer:
    """Keeps the checkpoints of a workflow's runs, by run id (the reference's checkpointer).

    ``checkpointer.run(...)`` starts a run that checkpoints after every step of the enabled
    steps; ``checkpoints[handler.run_id]`` lists them in order; ``run_from(checkpoint)`` resumes
    a run from one (its checkpoints are kept under the new run's id).
    """

    def __init__(self, workflow: Workflow, disabled_steps: list[str] | None = None) -> None:
        workflow = workflow._as_workflow() if callable(getattr(workflow, "_as_workflow", None)) else workflow
        if not isinstance(workflow, Workflow):
            raise TypeError(f"WorkflowCheckpointer needs a Workflow, got {type(workflow).__name__}")
        self.workflow = workflow
        self._checkpoints: dict[str, list[Checkpoint]] = {}
        self.enabled_checkpoints: set[str] = set(workflow.steps)
        for name in disabled_steps or []:
            self.disable_checkpoint(name)

    @property
    def checkpoints(self) -> dict[str, list[Checkpoint]]:
        """Run id -> that run's checkpoints, oldest first."""
        return self._checkpoints

    def _keep(self, checkpoint: Checkpoint) -> None:
        if checkpoint.last_completed_step in self.enabled_checkpoints:
            self._checkpoints.setdefault(checkpoint.run_id, []).append(checkpoint)

    def run(self, **kwargs: Any) -> WorkflowHandler:
        """``workflow.run(**kwargs)`` with checkpoints kept here."""
        handler = self.workflow.run(checkpoint_callback=self._keep, **kwargs)
        self._checkpoints.setdefault(handler.run_id, [])
        return handler

    def run_from(self, checkpoint: Checkpoint, **kwargs: Any) -> WorkflowHandler:
        """Resume from ``checkpoint`` (its run goes on as a new run, checkpointed here too)."""
        handler = self.workflow.run_from(checkpoint, checkpoint_callback=self._keep, **kwargs)
        self._checkpoints.setdefault(handler.run_id, [])
        return handler

    def filter_checkpoints(
        self,
        run_id: str | None = None,
        last_completed_step: str | None = None,
        input_event_type: type[Event] | None = None,
        output_event_type: type[Event] | None = None,
    ) -> list[Checkpoint]:
        """The kept checkpoints that match every criterion given."""
        runs = [run_id] if run_id is not None else list(self._checkpoints)
        out: list[Checkpoint] = []
        for rid in runs:
            for c in self._checkpoints.get(rid, []):
                if last_completed_step is not None and c.last_completed_step != last_completed_step:
                    continue
                if input_event_type is not None and type(c.input_event) is not input_event_type:
                    continue
                if output_event_type is not None and type(c.output_event) is not output_event_type:
                    continue
                out.append(c)
        return out

    def _check_step(self, step: str) -> None:
        if step not in self.workflow.steps:
            raise ValueError(f"there is no step {step!r}; steps: {list(self.workflow.steps)}")

    def enable_checkpoint(self, step: str) -> None:
        """Keep checkpoints taken after ``step`` again."""
        self._check_step(step)
        self.enabled_checkpoints.add(step)

    def disable_checkpoint(self, step: str) -> None:
        """Do not keep checkpoints taken after ``step``."""
        self._check_step(step)
        self.enabled_checkpoints.discard(step)
