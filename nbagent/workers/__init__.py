"""Agent workers: each turns one TaskStep into a TaskStepOutput.

Only ``BaseAgentWorker`` is imported with the package (every runner needs it); the workers
themselves load when first named, so ``import nbagent`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nbagent.workers.base import BaseAgentWorker

__all__ = [
    "BaseAgentWorker",
    "CustomSimpleAgentWorker",
    "FnAgentWorker",
    "ReActAgentWorker",
    "FunctionCallingAgentWorker",
    "OpenAIAgentWorker",
]

_LAZY = {
    "CustomSimpleAgentWorker": "nbagent.workers.custom",
    "FnAgentWorker": "nbagent.workers.fn",
    "ReActAgentWorker": "nbagent.workers.react",
    "FunctionCallingAgentWorker": "nbagent.workers.function_calling",
    "OpenAIAgentWorker": "nbagent.workers.function_calling",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nbagent.workers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs; nothing is imported at run time
    from nbagent.workers.custom import CustomSimpleAgentWorker
    from nbagent.workers.fn import FnAgentWorker
    from nbagent.workers.function_calling import FunctionCallingAgentWorker, OpenAIAgentWorker
    from nbagent.workers.react import ReActAgentWorker
