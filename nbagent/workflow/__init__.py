"""nbagent's own event-driven workflow engine, and multi-agent AgentWorkflow built on it.

Importing this package imports no widget, Graphviz or OpenAI code.
"""

from nbagent.workflow.agent_events import (
    AgentInput,
    AgentOutput,
    AgentSetup,
    AgentStream,
    AgentStreamStructuredOutput,
    ToolCall,
    ToolCallResult,
)
from nbagent.workflow.agents import BaseWorkflowAgent
from nbagent.workflow.checkpoint import Checkpoint
from nbagent.workflow.checkpointer import WorkflowCheckpointer
from nbagent.workflow.context import Context, current_context
from nbagent.workflow.store import ContextStore, StoreState
from nbagent.workflow.decorators import StepSpec, step
from nbagent.workflow.errors import (
    CheckpointError,
    WorkflowCancelledError,
    WorkflowError,
    WorkflowRuntimeError,
    WorkflowTimeoutError,
    WorkflowValidationError,
)
from nbagent.workflow.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)
from nbagent.workflow.approval import ToolApprovalRequired, ToolApprovalResponse
from nbagent.workflow.function_agent import FunctionAgent
from nbagent.workflow.human import ask_human
from nbagent.workflow.typed import StructuredOutputRetry
from nbagent.workflow.react_agent import ReActAgent
from nbagent.workflow.multi_agent import (
    DEFAULT_HANDOFF_OUTPUT_PROMPT,
    DEFAULT_HANDOFF_PROMPT,
    DEFAULT_STATE_PROMPT,
    AgentWorkflow,
    AgentWorkflowStartEvent,
    MaxAgentIterationsError,
)
from nbagent.workflow.handler import WorkflowHandler
from nbagent.workflow.serde import JsonPickleSerializer, JsonSerializer
from nbagent.workflow.tools import workflow_tool
from nbagent.workflow.trace import RunTrace, ToolCallView, Turn
from nbagent.workflow.workflow import Workflow

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowStartEvent",
    "Checkpoint",
    "WorkflowCheckpointer",
    "BaseWorkflowAgent",
    "FunctionAgent",
    "ReActAgent",
    "AgentInput",
    "AgentSetup",
    "AgentStream",
    "AgentStreamStructuredOutput",
    "AgentOutput",
    "ToolCall",
    "ToolCallResult",
    "DEFAULT_HANDOFF_PROMPT",
    "DEFAULT_HANDOFF_OUTPUT_PROMPT",
    "DEFAULT_STATE_PROMPT",
    "MaxAgentIterationsError",
    "ask_human",
    "ToolApprovalRequired",
    "ToolApprovalResponse",
    "StructuredOutputRetry",
    "workflow_tool",
    "RunTrace",
    "Turn",
    "ToolCallView",
    "Workflow",
    "step",
    "StepSpec",
    "Context",
    "ContextStore",
    "StoreState",
    "current_context",
    "WorkflowHandler",
    "JsonSerializer",
    "JsonPickleSerializer",
    "Event",
    "StartEvent",
    "StopEvent",
    "InputRequiredEvent",
    "HumanResponseEvent",
    "WorkflowError",
    "WorkflowValidationError",
    "WorkflowRuntimeError",
    "WorkflowTimeoutError",
    "WorkflowCancelledError",
    "CheckpointError",
]
