"""Old path of ``nbagent.engine.agent_state``."""

from nbagent.engine.agent_state import (
    AgentState,
    DAGAgentState,
)

__all__ = ["AgentState", "DAGAgentState"]
