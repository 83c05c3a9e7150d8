"""``AgentRunner``: the step engine plus the conveniences people call on a runner.

The engine (``nbagent.engine.StepEngine``: tasks, the one transactional step path, undo,
approvals, chat) knows nothing above it. ``AgentRunner`` adds, one small mixin per concern,
what the services and views offer: save/load/autosave (``runner.persistence``), goto/fork/
branches/compare (``runner.timetravel``), pricing and cost (``runner.cost``), batches
(``runner.batching``), graph/panel/live graph (``runner.views``). Each imports its service
when first called, so ``import nbagent`` stays light.

The ready-made agents live here too (``ReActAgent.from_tools(tools, llm=...)``,
``FunctionCallingAgent``, ``OpenAIAgent``): each is an ``AgentRunner`` around the matching
worker, so every step-wise method (run_step, undo_step, graph, panel) works on them.
``nbagent.agents`` re-exports them.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent.engine.agent_state import AgentState
from nbagent.engine.base_agent import BaseAgent, query_text
from nbagent.engine.core import ChatResponseType, Mode
from nbagent.engine.errors import TaskRef, TaskStateError, UnknownTaskError
from nbagent.engine.step_engine import StepEngine
from nbagent.memory import ChatMemoryBuffer
from nbagent.runner.batching import RunnerBatch
from nbagent.runner.cost import RunnerPricing
from nbagent.runner.persistence import RunnerPersistence
from nbagent.runner.timetravel import RunnerTimeTravel
from nbagent.runner.views import RunnerViews
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage

__all__ = [
    "AgentRunner", "ReActAgent", "FunctionCallingAgent", "OpenAIAgent", "OldOpenAIAgent", "OldReActAgent",
    "BaseAgent", "TaskRef", "UnknownTaskError", "TaskStateError", "query_text", "Mode", "ChatResponseType",
]


class AgentRunner(RunnerViews, RunnerBatch, RunnerPricing, RunnerTimeTravel, RunnerPersistence, StepEngine):
    """Orchestrates tasks for one worker, keeps their state and the conversation memory.

    ``state`` (an ``AgentState``) holds the tasks (``runner.state.task_dict`` is
    ``runner.tasks``). ``callback_manager`` is accepted for code written for the reference
    and has no effect (a warning says so): ``subscribe`` is how to listen to steps.
    ``verbose=True`` prints each step as it starts. Without ``memory``, a memory holding
    ``chat_history`` is made; an ``llm`` that knows its context window sizes it (as on the
    reference; see ``ChatMemoryBuffer.from_defaults``). ``autosave`` (a run file or store
    path) or ``store`` (a ``RunStore``) saves the run after every change. ``tracer_provider``
    (an OpenTelemetry ``TracerProvider``) traces this runner's tasks, steps, model and tool
    calls as spans (``nbagent.tracing``; ``pip install "nbagent[otel]"``).
    """

    def __init__(
        self,
        agent_worker: BaseAgentWorker,
        chat_history: Sequence[ChatMessage] | None = None,
        state: AgentState | None = None,
        memory: ChatMemoryBuffer | None = None,
        llm: Any = None,
        callback_manager: Any = None,
        init_task_state_kwargs: dict[str, Any] | None = None,
        delete_task_on_finish: bool = False,
        default_tool_choice: str | dict[str, Any] = "auto",
        verbose: bool = False,
        keep_history: bool = True,
        autosave: str | os.PathLike[str] | None = None,
        approve_tools: Any = None,
        store: Any = None,
        max_finished_tasks: int | None = None,
        tracer_provider: Any = None,
    ) -> None:
        # the engine's own initializer, by name: a parallel runner sets its engine's
        # max_concurrency itself, before this
        StepEngine.__init__(
            self,
            agent_worker,
            chat_history=chat_history,
            state=state,
            memory=memory,
            llm=llm,
            callback_manager=callback_manager,
            init_task_state_kwargs=init_task_state_kwargs,
            delete_task_on_finish=delete_task_on_finish,
            default_tool_choice=default_tool_choice,
            verbose=verbose,
            keep_history=keep_history,
            approve_tools=approve_tools,
            max_finished_tasks=max_finished_tasks,
        )
        if autosave is not None and store is not None:
            raise ValueError("pass autosave= (a run file or store path) or store= (a RunStore), not both")
        from nbagent.costs import attach_cost_recorder  # on first use: import nbagent stays light

        attach_cost_recorder(self)  # before any store subscribes: a saved step has its model
        if autosave is not None or store is not None:  # save after every change (nbagent.store)
            self.autosave = autosave if store is None else store
        if tracer_provider is not None:  # OpenTelemetry spans of this runner only (nbagent.tracing)
            from nbagent.tracing import trace_runner

            trace_runner(self, tracer_provider)

    @staticmethod
    def from_llm(tools: Sequence[Any] | None = None, llm: Any = None, **kwargs: Any) -> AgentRunner:
        """A ready agent for ``llm``: function calling if the model takes tools
        (``llm.is_function_calling_model``), ReAct otherwise. With no ``llm``, an OpenAI
        agent configured from the environment. ``kwargs`` go to ``from_tools``.

        Example:

        >>> from nbagent import AgentRunner, ScriptedLLM
        >>> agent = AgentRunner.from_llm([], llm=ScriptedLLM(["Hello!"]))
        >>> type(agent).__name__, str(agent.chat("Hi"))
        ('FunctionCallingAgent', 'Hello!')
        """
        if llm is None:
            return OpenAIAgent.from_tools(tools=tools, **kwargs)
        if getattr(llm, "is_function_calling_model", False):
            return FunctionCallingAgent.from_tools(tools=tools, llm=llm, **kwargs)
        return ReActAgent.from_tools(tools=tools, llm=llm, **kwargs)


# ----- ready-made agents: an AgentRunner around the matching worker -----------------------

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
        """A ReAct agent for ``llm`` with ``tools``. Keyword arguments the runner takes
        (``autosave``, ``approve_tools``, ``keep_history``...) go to the runner, the others
        (``react_chat_formatter``, ``output_parser``...) to the worker."""
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
        """A function-calling agent for ``llm`` with ``tools``. Keyword arguments the runner
        takes (``autosave``, ``approve_tools``, ``keep_history``...) go to the runner, the
        others (``system_prompt``, ``allow_parallel_tool_calls``...) to the worker."""
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
