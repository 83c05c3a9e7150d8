"""``ParallelAgentRunner``: the parallel step engine (``nbagent.engine.parallel``: a task's
steps as a DAG, ready steps together, bounded) with the ``AgentRunner`` conveniences (save,
load, autosave, fork, cost, batches, views) on top."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nbagent.engine.parallel import DEFAULT_MAX_CONCURRENCY, BranchSnapshot, ParallelStepEngine
from nbagent.runner.base import AgentRunner
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.engine.agent_state import AgentState
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.messages import ChatMessage

__all__ = ["ParallelAgentRunner", "BranchSnapshot", "DEFAULT_MAX_CONCURRENCY"]


class ParallelAgentRunner(AgentRunner, ParallelStepEngine):
    """An ``AgentRunner`` that schedules a task's steps as a DAG and runs ready steps together.

    ``max_concurrency`` bounds how many steps of one call run at the same time (None: no
    bound). Everything else (tasks, events, undo, steering, finalize, the views) is the
    ``AgentRunner`` API.
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
        *,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        **kwargs: Any,
    ) -> None:
        """The reference's arguments in its order, plus ``max_concurrency`` (None: no bound);
        ``kwargs`` are ``AgentRunner``'s others (``default_tool_choice``, ``verbose``, ...)."""
        self._init_parallel(max_concurrency)
        AgentRunner.__init__(
            self,
            agent_worker,
            chat_history=chat_history,
            state=state,
            memory=memory,
            llm=llm,
            callback_manager=callback_manager,
            init_task_state_kwargs=init_task_state_kwargs,
            delete_task_on_finish=delete_task_on_finish,
            **kwargs,
        )
