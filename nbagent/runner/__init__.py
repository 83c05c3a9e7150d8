"""Runners: own the tasks' state and drive workers one step at a time."""

from nbagent.runner.agent_state import AgentState, DAGAgentState
from nbagent.runner.base import AgentRunner
from nbagent.runner.state import StepFailure, StepStatus, TaskState, TaskStatus

__all__ = ["AgentRunner", "AgentState", "DAGAgentState", "TaskState", "TaskStatus", "StepStatus", "StepFailure"]
