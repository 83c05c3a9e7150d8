"""The names LlamaIndex's docs notebooks import, on both sides (issue 23, item 10).

The notebooks import from a dozen modules (``llama_index.core.workflow``,
``llama_index.core.agent.workflow``, ``llama_index.core.memory``, ``llama_index.core.query_pipeline``
...). ``docs_both()`` gives the two namespaces of ``ref.both()`` plus every name the ported
scenarios use, each resolved when a scenario first reads it: from ``llama_index.core`` on the
reference side, from the place a user of nbagent imports it on the other. A name nbagent does
not have fails the one scenario that reads it, with an error naming the import a user would
have written, not the whole module.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import SimpleNamespace
from typing import Any

from tests.oracle.ref import both

# name -> (reference "module:attr", nbagent "module:attr")
_NAMES: dict[str, tuple[str, str]] = {
    # workflows (llama_index.core.workflow)
    "Workflow": ("llama_index.core.workflow:Workflow", "nbagent.workflow:Workflow"),
    "step": ("llama_index.core.workflow:step", "nbagent.workflow:step"),
    "Event": ("llama_index.core.workflow:Event", "nbagent.workflow:Event"),
    "StartEvent": ("llama_index.core.workflow:StartEvent", "nbagent.workflow:StartEvent"),
    "StopEvent": ("llama_index.core.workflow:StopEvent", "nbagent.workflow:StopEvent"),
    "InputRequiredEvent": ("llama_index.core.workflow:InputRequiredEvent", "nbagent.workflow:InputRequiredEvent"),
    "HumanResponseEvent": ("llama_index.core.workflow:HumanResponseEvent", "nbagent.workflow:HumanResponseEvent"),
    "JsonSerializer": ("llama_index.core.workflow:JsonSerializer", "nbagent.workflow:JsonSerializer"),
    # agent workflow events (llama_index.core.agent.workflow)
    "AgentInput": ("llama_index.core.agent.workflow:AgentInput", "nbagent.workflow:AgentInput"),
    "AgentStream": ("llama_index.core.agent.workflow:AgentStream", "nbagent.workflow:AgentStream"),
    "AgentOutput": ("llama_index.core.agent.workflow:AgentOutput", "nbagent.workflow:AgentOutput"),
    "ToolCall": ("llama_index.core.agent.workflow:ToolCall", "nbagent.workflow:ToolCall"),
    "ToolCallResult": ("llama_index.core.agent.workflow:ToolCallResult", "nbagent.workflow:ToolCallResult"),
    "AgentStreamStructuredOutput": (
        "llama_index.core.agent.workflow:AgentStreamStructuredOutput", "nbagent.workflow:AgentStreamStructuredOutput"
    ),
    # the step-wise agents (llama_index.core.agent)
    "FunctionCallingAgent": ("llama_index.core.agent:FunctionCallingAgent", "nbagent:FunctionCallingAgent"),
    "RunnerReActAgent": ("llama_index.core.agent:ReActAgent", "nbagent:ReActAgent"),
    "ReActChatFormatter": ("llama_index.core.agent:ReActChatFormatter", "nbagent.workers.react.formatter:ReActChatFormatter"),
    "QueryPipelineAgentWorker": ("llama_index.core.agent:QueryPipelineAgentWorker", "nbagent:QueryPipelineAgentWorker"),
    "StructuredPlannerAgent": ("llama_index.core.agent:StructuredPlannerAgent", "nbagent:StructuredPlannerAgent"),
    "Plan": ("llama_index.core.agent.runner.planner:Plan", "nbagent:Plan"),
    "SubTask": ("llama_index.core.agent.runner.planner:SubTask", "nbagent:SubTask"),
    # memory, tools, prompts
    "Memory": ("llama_index.core.memory:Memory", "nbagent:Memory"),
    "ToolMetadata": ("llama_index.core.tools:ToolMetadata", "nbagent:ToolMetadata"),
    "PromptTemplate": ("llama_index.core:PromptTemplate", "nbagent:PromptTemplate"),
    "ChatResponse": ("llama_index.core.llms:ChatResponse", "nbagent:ChatResponse"),
    # query pipelines (llama_index.core.query_pipeline)
    "QueryPipeline": ("llama_index.core.query_pipeline:QueryPipeline", "nbagent.query_pipeline:QueryPipeline"),
    "StatefulFnComponent": ("llama_index.core.query_pipeline:StatefulFnComponent", "nbagent.query_pipeline:StatefulFnComponent"),
    "ToolRunnerComponent": ("llama_index.core.query_pipeline:ToolRunnerComponent", "nbagent.query_pipeline:ToolRunnerComponent"),
}


def _resolve(where: str) -> Any:
    module, _, attr = where.partition(":")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's own import-time warnings
        mod = importlib.import_module(module)
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise AttributeError(f"from {module} import {attr}: {module} has no {attr!r}") from None


class DocsApi:
    """One side: ``ref``'s namespace, plus the docs' names resolved on first use."""

    def __init__(self, base: SimpleNamespace, side: int) -> None:
        self._base = base
        self._side = side

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if hasattr(self._base, name):
            return getattr(self._base, name)
        if name in _NAMES:
            value = _resolve(_NAMES[name][self._side])
            setattr(self._base, name, value)
            return value
        raise AttributeError(f"the docs namespace has no {name!r}")

    @property
    def is_reference(self) -> bool:
        return self._side == 0


def docs_both() -> list[DocsApi]:
    """The reference side, then nbagent's.

    With ``ORACLE_REFERENCE_ONLY=1`` both sides are the reference: a scenario then checks only
    that it runs on llama-index-core as written (how scenarios are checked before nbagent runs them)."""
    ref, nb = both()
    if os.environ.get("ORACLE_REFERENCE_ONLY") == "1":
        return [DocsApi(ref, 0), DocsApi(both()[0], 0)]
    return [DocsApi(ref, 0), DocsApi(nb, 1)]


def roles_contents(messages: Any) -> list[tuple[str, Any]]:
    """What a message list says: (role, text) pairs, the system prompt left out."""
    return [(m.role.value, m.content) for m in messages if m.role.value != "system"]
