"""``AgentRunner``: the step engine plus the conveniences people call on a runner.

The engine (``nbagent.engine.StepEngine``: tasks, the one transactional step path, undo,
approvals, chat) knows nothing above it. ``AgentRunner`` adds, one small mixin per concern,
what the services and views offer: save/load/autosave (``runner.persistence``), goto/fork/
branches/compare (``runner.timetravel``), pricing and cost (``runner.cost``), batches
(``runner.batching``), graph/panel/live graph (``runner.views``). Each imports its service
when first called, so ``import nbagent`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from nbagent.costs import attach_cost_recorder
from nbagent.engine.agent_state import AgentState
from nbagent.engine.base_agent import BaseAgent, query_text
from nbagent.engine.core import ChatResponseType, Mode
from nbagent.engine.errors import TaskRef, TaskStateError, UnknownTaskError
from nbagent.engine.step_engine import StepEngine
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage
from nbagent.runner.batching import RunnerBatch
from nbagent.runner.cost import RunnerPricing
from nbagent.runner.persistence import RunnerPersistence
from nbagent.runner.timetravel import RunnerTimeTravel
from nbagent.runner.views import RunnerViews
from nbagent.workers.base import BaseAgentWorker

__all__ = [
    "AgentRunner", "BaseAgent", "TaskRef", "UnknownTaskError", "TaskStateError", "query_text", "Mode",
    "ChatResponseType",
]


class AgentRunner(RunnerViews, RunnerBatch, RunnerPricing, RunnerTimeTravel, RunnerPersistence, StepEngine):
    """Orchestrates tasks for one worker, keeps their state and the conversation memory.

    ``state`` (an ``AgentState``) holds the tasks (``runner.state.task_dict`` is
    ``runner.tasks``). ``callback_manager`` is accepted for code written for the reference
    and has no effect (a warning says so): ``subscribe`` is how to listen to steps.
    ``verbose=True`` prints each step as it starts. Without ``memory``, a memory holding
    ``chat_history`` is made; an ``llm`` that knows its context window sizes it (as on the
    reference; see ``ChatMemoryBuffer.from_defaults``). ``autosave`` (a run file or store
    path) or ``store`` (a ``RunStore``) saves the run after every change.
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
        attach_cost_recorder(self)  # before any store subscribes: a saved step has its model
        if autosave is not None or store is not None:  # save after every change (nbagent.store)
            self.autosave = autosave if store is None else store

    @staticmethod
    def from_llm(tools: Sequence[Any] | None = None, llm: Any = None, **kwargs: Any) -> AgentRunner:
        """A ready agent for ``llm``: function calling if the model takes tools
        (``llm.is_function_calling_model``), ReAct otherwise. With no ``llm``, an OpenAI
        agent configured from the environment. ``kwargs`` go to ``from_tools``."""
        from nbagent.agents import FunctionCallingAgent, OpenAIAgent, ReActAgent

        if llm is None:
            return OpenAIAgent.from_tools(tools=tools, **kwargs)
        if getattr(llm, "is_function_calling_model", False):
            return FunctionCallingAgent.from_tools(tools=tools, llm=llm, **kwargs)
        return ReActAgent.from_tools(tools=tools, llm=llm, **kwargs)
