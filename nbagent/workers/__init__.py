"""Agent workers: each turns one TaskStep into a TaskStepOutput."""

from __future__ import annotations

from typing import Any

from nbagent.workers.base import BaseAgentWorker
from nbagent.workers.custom import CustomSimpleAgentWorker
from nbagent.workers.fn import FnAgentWorker

__all__ = [
    "BaseAgentWorker",
    "CustomSimpleAgentWorker",
    "FnAgentWorker",
    "ReActAgentWorker",
    "FunctionCallingAgentWorker",
    "OpenAIAgentWorker",
]

_LAZY = {
    "ReActAgentWorker": "nbagent.workers.react",
    "FunctionCallingAgentWorker": "nbagent.workers.function_calling",
    "OpenAIAgentWorker": "nbagent.workers.function_calling",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nbagent.workers' has no attribute {name!r}")
