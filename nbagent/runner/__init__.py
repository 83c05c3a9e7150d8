"""Runners: own the tasks' state and drive workers one step at a time."""

from nbagent.engine.agent_state import AgentState, DAGAgentState
from nbagent.engine.state import StepFailure, StepStatus, TaskState, TaskStatus
from nbagent.runner.base import AgentRunner

__all__ = ["AgentRunner", "AgentState", "DAGAgentState", "TaskState", "TaskStatus", "StepStatus", "StepFailure"]
