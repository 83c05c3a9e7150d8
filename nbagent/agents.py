"""Ready-made runners: ``ReActAgent.from_tools(tools, llm=...)`` and ``OpenAIAgent``.

Each is an ``AgentRunner`` around the matching worker, so every step-wise method (run_step,
undo_step, graph, panel) works on them too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage
from nbagent.runner.base import AgentRunner

__all__ = ["ReActAgent", "OpenAIAgent", "FunctionCallingAgent", "OldOpenAIAgent", "OldReActAgent"]

# Arguments ``from_tools`` takes itself and gives to both the worker and the runner.
_SHARED = ("llm", "verbose")


def _runner_keys(cls: type) -> tuple[str, ...]:
    """Every keyword the runner class takes (read from its signature, so a new runner argument
    is forwarded without a list to keep up to date), except its worker."""
    params = inspect.signature(cls.__init__).parameters.values()
    return tuple(
        p.name
        for p in params
        if p.name not in ("self", "agent_worker") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def _split(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the runner's arguments out of ``kwargs`` (what is left goes to the worker)."""
    return {k: kwargs.pop(k) for k in _runner_keys(cls) if k in kwargs and k not in _SHARED}


class ReActAgent(AgentRunner):
    """An AgentRunner around a ReActAgentWorker (works with any chat model, no tool API)."""

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[Any] | None = None,
        llm: Any = None,
        chat_history: Sequence[ChatMessage] | None = None,
        memory: ChatMemoryBuffer | None = None,
        max_iterations: int = 10,
        verbose: bool = False,
        **kwargs: Any,
    ) -> ReActAgent:
        from nbagent.workers.react import ReActAgentWorker

        if llm is None:
            raise ValueError("ReActAgent.from_tools needs llm=... (e.g. OpenAILLM(...) or ScriptedLLM([...]))")
        runner_kwargs = _split(cls, kwargs)
        worker = ReActAgentWorker.from_tools(
            tools=list(tools or []), llm=llm, max_iterations=max_iterations, verbose=verbose, **kwargs
        )
        return cls(worker, chat_history=chat_history, memory=memory, llm=llm, verbose=verbose, **runner_kwargs)


class FunctionCallingAgent(AgentRunner):
    """An AgentRunner around a FunctionCallingAgentWorker (models with a tools API)."""

    _worker_factory: Callable[..., Any] | None = None

    @classmethod
    def _make_worker(cls, tools: list[Any], llm: Any, **kwargs: Any) -> Any:
        from nbagent.workers.function_calling import FunctionCallingAgentWorker

        if llm is None:
            raise ValueError(f"{cls.__name__}.from_tools needs llm=...")
        return FunctionCallingAgentWorker.from_tools(tools=tools, llm=llm, **kwargs)

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[Any] | None = None,
        llm: Any = None,
        chat_history: Sequence[ChatMessage] | None = None,
        memory: ChatMemoryBuffer | None = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> FunctionCallingAgent:
        runner_kwargs = _split(cls, kwargs)
        worker = cls._make_worker(list(tools or []), llm, verbose=verbose, **kwargs)
        return cls(
            worker, chat_history=chat_history, memory=memory, llm=worker.llm, verbose=verbose, **runner_kwargs
        )


class OpenAIAgent(FunctionCallingAgent):
    """A function-calling agent over OpenAI (or any OpenAI-compatible server).

    With no ``llm``, an ``OpenAILLM(model=...)`` is made from the environment
    (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
    """

    @classmethod
    def _make_worker(cls, tools: list[Any], llm: Any, **kwargs: Any) -> Any:
        from nbagent.workers.function_calling import OpenAIAgentWorker

        return OpenAIAgentWorker.from_tools(tools=tools, llm=llm, **kwargs)


# The guide's "older legacy implementations" (``from llama_index.core.agent import
# OldOpenAIAgent, OldReActAgent``): the same agents, which also run step by step.
OldOpenAIAgent = OpenAIAgent
OldReActAgent = ReActAgent
