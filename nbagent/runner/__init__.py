"""Runners: own the tasks' state and drive workers one step at a time."""

from nbagent.runner.base import AgentRunner
from nbagent.runner.state import StepFailure, StepStatus, TaskState, TaskStatus

__all__ = ["AgentRunner", "TaskState", "TaskStatus", "StepStatus", "StepFailure"]
