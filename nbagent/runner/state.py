"""Old path of ``nbagent.engine.state`` (tasks' state lives in the step engine now)."""

from nbagent.engine.state import (
    StepFailure,
    StepSnapshot,
    StepStatus,
    TaskState,
    TaskStatus,
)

__all__ = ["StepFailure", "StepSnapshot", "StepStatus", "TaskState", "TaskStatus"]
