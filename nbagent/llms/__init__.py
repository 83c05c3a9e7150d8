"""Chat models: one small protocol, a real OpenAI-compatible client, and offline models."""

from __future__ import annotations

from typing import Any

from nbagent.llms.base import (
    LLM,
    ChatResponse,
    IncompleteReplyError,
    MalformedReplyError,
    NetworkBlockedError,
    block_network,
    network_blocked,
)
from nbagent.llms.scripted import FunctionLLM, ScriptExhaustedError, ScriptedLLM
from nbagent.llms.stream import ChatStream

__all__ = [
    "LLM",
    "ChatResponse",
    "ChatStream",
    "NetworkBlockedError",
    "MalformedReplyError",
    "IncompleteReplyError",
    "block_network",
    "network_blocked",
    "ScriptedLLM",
    "FunctionLLM",
    "ScriptExhaustedError",
    "OpenAILLM",
    "ReplayLLM",
    "ReplayMissError",
    "LocalLLM",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAILLM":  # imports openai: only when asked for
        from nbagent.llms.openai import OpenAILLM

        return OpenAILLM
    if name == "LocalLLM":  # llama.cpp's server in a child process: only when asked for
        from nbagent.llms.local import LocalLLM

        return LocalLLM
    if name in ("ReplayLLM", "ReplayMissError"):  # record/replay cassettes: json, hashlib
        from nbagent.llms import replay

        return getattr(replay, name)
    raise AttributeError(f"module 'nbagent.llms' has no attribute {name!r}")
