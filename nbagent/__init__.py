"""nbagent: see and steer an LLM agent's loop, one step at a time, in Jupyter.

The public API is flat (``from nbagent import AgentRunner, ReActAgent, FunctionTool``) and
loaded lazily, so ``import nbagent`` stays light: no openai, ipywidgets or graphviz import
happens until you use something that needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nbagent import _wiring
from nbagent._version import __version__
from nbagent.registry import register_view

_EXPORTS: dict[str, str] = {
    # data
    "Task": "nbagent.schema",
    "TaskStep": "nbagent.schema",
    "TaskStepOutput": "nbagent.schema",
    "AgentChatResponse": "nbagent.schema",
    "StreamingAgentChatResponse": "nbagent.schema",
    "ChatMessage": "nbagent.messages",
    "MessageRole": "nbagent.messages",
    "ToolSelection": "nbagent.messages",
    "ToolOutput": "nbagent.messages",
    "TokenUsage": "nbagent.messages",
    # ids, events, memory, tools
    "seed_ids": "nbagent.ids",
    "seeded_ids": "nbagent.ids",
    "new_id": "nbagent.ids",
    "EventDispatcher": "nbagent.events",
    "ChatMemoryBuffer": "nbagent.memory",
    "Memory": "nbagent.session_memory",
    "FunctionTool": "nbagent.tools",
    "ToolMetadata": "nbagent.tool_metadata",
    "PromptTemplate": "nbagent.prompts",
    "AppendLog": "nbagent.snapshot",
    # tools from MCP servers
    "BasicMCPClient": "nbagent.mcp",
    "McpToolSpec": "nbagent.mcp",
    "McpTool": "nbagent.mcp",
    "MCPServerError": "nbagent.mcp",
    # save / load, time travel, cost, report
    "PersistError": "nbagent.persist",
    "allow_type": "nbagent.persist",
    "Branch": "nbagent.branches",
    "Pricing": "nbagent.costs",
    "set_pricing": "nbagent.costs",
    "write_report": "nbagent.report",
    # approval of tool calls, typed answers
    "PendingCall": "nbagent.approval",
    "AwaitingApprovalError": "nbagent.engine.approvals",
    "StructuredOutputError": "nbagent.structured",
    # batches
    "BatchRun": "nbagent.batch",
    "BatchItem": "nbagent.batch",
    "BatchTaskError": "nbagent.batch",
    # models
    "LLM": "nbagent.llms",
    "ChatResponse": "nbagent.llms",
    "OpenAILLM": "nbagent.llms",
    "LocalLLM": "nbagent.llms",
    "ScriptedLLM": "nbagent.llms",
    "FunctionLLM": "nbagent.llms",
    "ReplayLLM": "nbagent.llms",
    "ScriptExhaustedError": "nbagent.llms",
    "tool_call": "nbagent.llms.scripted",
    "block_network": "nbagent.llms",
    "NetworkBlockedError": "nbagent.llms",
    # runners and workers
    "AgentRunner": "nbagent.runner.base",
    "BaseAgent": "nbagent.runner.base",
    "ParallelAgentRunner": "nbagent.runner.parallel",
    "StructuredPlannerAgent": "nbagent.runner.planner",
    "PlannerAgentState": "nbagent.runner.planner",
    "Plan": "nbagent.runner.planner",
    "SubTask": "nbagent.runner.planner",
    "TaskState": "nbagent.engine.state",
    "AgentState": "nbagent.engine.agent_state",
    "TaskStatus": "nbagent.engine.state",
    "StepStatus": "nbagent.engine.state",
    "UnknownTaskError": "nbagent.engine.errors",
    "TaskStateError": "nbagent.engine.errors",
    "BaseAgentWorker": "nbagent.workers.base",
    "CustomSimpleAgentWorker": "nbagent.workers.custom",
    "FnAgentWorker": "nbagent.workers.fn",
    "QueryPipelineAgentWorker": "nbagent.workers.pipeline",
    "PlannerAgentWorker": "nbagent.workers.planner",
    "MultimodalReActAgentWorker": "nbagent.workers.multimodal",
    "ImageDocument": "nbagent.images",
    "ReActAgentWorker": "nbagent.workers.react",
    "FunctionCallingAgentWorker": "nbagent.workers.function_calling",
    "OpenAIAgentWorker": "nbagent.workers.function_calling",
    "AgentPanel": "nbagent.viz.panel",
    "LiveGraph": "nbagent.viz.live",
    "StepGraph": "nbagent.viz.graph",
    "ReActAgent": "nbagent.agents",
    "OpenAIAgent": "nbagent.agents",
    "OldOpenAIAgent": "nbagent.agents",
    "OldReActAgent": "nbagent.agents",
    "FunctionCallingAgent": "nbagent.agents",
    # multi-agent workflows
    "AgentWorkflow": "nbagent.workflow",
    "Workflow": "nbagent.workflow",
}

__all__ = sorted(_EXPORTS) + ["__version__", "register_view"]

_wiring.install()  # nbagent's own views and roles (strings only: no view is imported yet)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs; nothing is imported at run time
    from nbagent.agents import FunctionCallingAgent, OldOpenAIAgent, OldReActAgent, OpenAIAgent, ReActAgent
    from nbagent.events import EventDispatcher
    from nbagent.approval import PendingCall
    from nbagent.batch import BatchItem, BatchRun, BatchTaskError
    from nbagent.engine.approvals import AwaitingApprovalError
    from nbagent.structured import StructuredOutputError
    from nbagent.branches import Branch
    from nbagent.costs import Pricing, set_pricing
    from nbagent.ids import new_id, seed_ids, seeded_ids
    from nbagent.llms import (
        LLM,
        ChatResponse,
        FunctionLLM,
        LocalLLM,
        NetworkBlockedError,
        OpenAILLM,
        ReplayLLM,
        ScriptedLLM,
        ScriptExhaustedError,
        block_network,
    )
    from nbagent.llms.scripted import tool_call
    from nbagent.mcp import BasicMCPClient, MCPServerError, McpTool, McpToolSpec
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.session_memory import Memory
    from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolOutput, ToolSelection
    from nbagent.engine.errors import TaskStateError, UnknownTaskError
    from nbagent.runner.base import AgentRunner, BaseAgent
    from nbagent.runner.parallel import ParallelAgentRunner
    from nbagent.runner.planner import Plan, PlannerAgentState, StructuredPlannerAgent, SubTask
    from nbagent.persist import PersistError, allow_type
    from nbagent.prompts import PromptTemplate
    from nbagent.report import write_report
    from nbagent.snapshot import AppendLog
    from nbagent.engine.agent_state import AgentState
    from nbagent.engine.state import StepStatus, TaskState, TaskStatus
    from nbagent.schema import (
        AgentChatResponse,
        StreamingAgentChatResponse,
        Task,
        TaskStep,
        TaskStepOutput,
    )
    from nbagent.tool_metadata import ToolMetadata
    from nbagent.tools import FunctionTool
    from nbagent.workers.base import BaseAgentWorker
    from nbagent.workers.custom import CustomSimpleAgentWorker
    from nbagent.workers.fn import FnAgentWorker
    from nbagent.workers.pipeline import QueryPipelineAgentWorker
    from nbagent.images import ImageDocument
    from nbagent.workers.multimodal import MultimodalReActAgentWorker
    from nbagent.workers.planner import PlannerAgentWorker
    from nbagent.workers.function_calling import FunctionCallingAgentWorker, OpenAIAgentWorker
    from nbagent.workers.react import ReActAgentWorker
    from nbagent.viz.graph import StepGraph
    from nbagent.viz.live import LiveGraph
    from nbagent.viz.panel import AgentPanel
