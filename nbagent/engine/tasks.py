"""The tasks a step engine holds: their states by id, the conversation memory, the events.

``TaskHolder`` is the bottom of the engine's classes: it declares every attribute a runner
has (class-level annotations; services keep their per-runner state in ``_services``, never in
attributes of their own), creates, finds, adopts and deletes tasks, and emits an event for
every change. The step path (``engine.core``) and everything above build on it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from nbagent._compat import pop_callback_manager, warn_callback_manager
from nbagent._lazy import LazyModule
from nbagent.engine.agent_state import AgentState
from nbagent.engine.base_agent import BaseAgent
from nbagent.engine.errors import TaskRef, UnknownTaskError
from nbagent.engine.slots import ServiceSlots
from nbagent.engine.state import TaskState
from nbagent import events as ev
from nbagent.events import EventDispatcher, announce_source
from nbagent.memory import ChatMemoryBuffer
from nbagent.prompts import PromptMixin
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.engine.txn import Claim
    from nbagent.messages import ChatMessage
    from nbagent.schema import Task, TaskStep, TaskStepOutput


@LazyModule
def schema() -> ModuleType:  # imported on first use: ``import nbagent`` defines no model
    from nbagent import schema as module

    return module


__all__ = ["TaskHolder"]


class TaskHolder(BaseAgent):
    """Tasks by id, the memory they share, the worker that runs their steps, the events.

    ``state`` (an ``AgentState``) holds the tasks (``runner.state.task_dict`` is
    ``runner.tasks``). ``callback_manager`` is accepted for code written for the reference
    and has no effect (a warning says so): ``subscribe`` is how to listen to steps.
    ``verbose=True`` prints each step as it starts. Without ``memory``, a memory holding
    ``chat_history`` is made; an ``llm`` that knows its context window sizes it (as on the
    reference; see ``ChatMemoryBuffer.from_defaults``).
    """

    # Every attribute an engine (and so every runner) has; nothing else is set on one.
    agent_worker: BaseAgentWorker
    state: AgentState  # task_dict is the dict behind ``tasks``
    memory: ChatMemoryBuffer
    init_task_state_kwargs: dict[str, Any]
    delete_task_on_finish: bool
    default_tool_choice: str | dict[str, Any]
    verbose: bool
    keep_history: bool
    max_finished_tasks: int | None
    events: EventDispatcher
    _approve_tools: Any  # the approval policy (``approve_tools``), checked
    _claims: dict[str, Claim]  # task id -> the call changing it now (``engine.txn``)
    _services: ServiceSlots  # per-runner state of the services above the engine

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
        approve_tools: Any = None,
        max_finished_tasks: int | None = None,
    ) -> None:
        if not isinstance(agent_worker, BaseAgentWorker):
            raise TypeError(
                f"agent_worker must be a BaseAgentWorker, got {type(agent_worker).__name__}"
            )
        self.agent_worker = agent_worker
        if state is None:
            state = AgentState()
        elif not isinstance(state, AgentState):
            raise TypeError(f"state must be an nbagent AgentState, got {type(state).__name__}")
        self.state = state
        if callback_manager is not None:
            warn_callback_manager(type(self).__name__)
        self.memory = memory if memory is not None else ChatMemoryBuffer.from_defaults(chat_history, llm=llm)
        if memory is not None and chat_history is not None:
            self.memory.set(chat_history)
        self.init_task_state_kwargs = dict(init_task_state_kwargs or {})
        self.delete_task_on_finish = delete_task_on_finish
        self.default_tool_choice = default_tool_choice
        self.verbose = verbose
        self.keep_history = keep_history
        self.events = EventDispatcher()
        self._claims = {}
        self._services = ServiceSlots()
        state._adopt(self)
        self.approve_tools = approve_tools
        if max_finished_tasks is not None and (
            not isinstance(max_finished_tasks, int) or isinstance(max_finished_tasks, bool) or max_finished_tasks < 0
        ):
            raise ValueError(f"max_finished_tasks must be an int >= 0 or None, got {max_finished_tasks!r}")
        self.max_finished_tasks = max_finished_tasks
        announce_source(self)  # process-wide listeners (nbagent.tracing.instrument) attach here

    @property
    def approve_tools(self) -> Literal["all"] | list[str] | Callable[[str, dict[str, Any]], bool] | None:
        """Runner-wide approval policy: None (only tools marked ``requires_approval``),
        ``"all"``, a list of tool names, or ``fn(tool_name, arguments) -> bool``."""
        return self._approve_tools

    @approve_tools.setter
    def approve_tools(self, policy: Any) -> None:
        from nbagent.approval import check_policy

        self._approve_tools = check_policy(policy)

    # ----- events ------------------------------------------------------------------------
    def subscribe(
        self, listener: Callable[[ev.Event], Any], types: Any = None
    ) -> Callable[[], None]:
        """Listen to this runner's events; returns the function that stops listening."""
        return self.events.subscribe(listener, types)

    def _emit(self, event: ev.Event) -> None:
        if self.events.active:
            self.events.emit(event)

    # ----- tasks -------------------------------------------------------------------------
    @property
    def chat_history(self) -> list[ChatMessage]:
        return self.memory.get_all()

    @property
    def tasks(self) -> dict[str, TaskState]:
        """Every task's state, by id (read it; change it through the runner's methods)."""
        return self.state.task_dict

    @property
    def _tasks(self) -> dict[str, TaskState]:
        return self.state.task_dict

    def state_of(self, task: TaskRef) -> TaskState:
        """The TaskState of a task or task id; an unknown id is a clear error."""
        task_id = task if type(task) is str else task.task_id if isinstance(task, schema.Task) else task
        if not isinstance(task_id, str):
            raise TypeError(f"expected a Task or a task id (str), got {type(task).__name__}")
        state = self._tasks.get(task_id)
        if state is None:
            known = ", ".join(repr(k) for k in self._tasks) or "none"
            raise UnknownTaskError(f"unknown task id {task_id!r}; known task ids: {known}")
        return state

    def create_task(self, input: str, **kwargs: Any) -> Task:
        """Create a task for ``input`` and queue its first step (nothing runs yet)."""
        if not isinstance(input, str):
            raise TypeError(f"task input must be a str, got {type(input).__name__}: {input!r}")
        if "extra_state" in kwargs and self.init_task_state_kwargs:
            raise ValueError("pass either extra_state or the runner's init_task_state_kwargs, not both")
        extra_state = kwargs.pop("extra_state", None)
        if extra_state is None:
            extra_state = copy.deepcopy(self.init_task_state_kwargs)
        pop_callback_manager(kwargs, "create_task")
        unknown = sorted(set(kwargs) - {"task_id"})
        if unknown:
            raise TypeError(
                f"create_task got unexpected keyword argument(s) {unknown}; it takes input, "
                "task_id, extra_state (and callback_manager, which has no effect)"
            )
        return self._new_task(input, extra_state, **kwargs)

    def _new_task(
        self,
        input: str,
        extra_state: dict[str, Any],
        *,
        memory: ChatMemoryBuffer | None = None,
        adds_to_memory: bool = True,
        **fields: Any,
    ) -> Task:
        """A new task with its first step queued. ``memory`` (default: the runner's) is the
        conversation it reads; ``adds_to_memory=False`` keeps its messages out of the runner's
        memory when it finalizes (``query``). Listeners hear ``TaskCreated`` once all is set."""
        task = schema.Task(input=input, memory=self.memory if memory is None else memory, extra_state=extra_state, **fields)
        task._runner = self
        state = TaskState(
            task=task, keep_history=self.keep_history, call_ids_known=True, adds_to_memory=adds_to_memory
        )
        first = self.agent_worker.initialize_step(task)
        if not isinstance(first, schema.TaskStep):
            raise TypeError(
                f"{type(self.agent_worker).__name__}.initialize_step must return a TaskStep, "
                f"got {type(first).__name__}"
            )
        state.register(first)
        state.step_queue.append(first)
        self._tasks[task.task_id] = state
        self._emit(ev.TaskCreated(task.task_id, input=input))
        return task

    def delete_task(self, task_id: TaskRef) -> None:
        """Forget a task (the runner's memory keeps what finalized tasks added)."""
        state = self.state_of(task_id)
        del self._tasks[state.task_id]
        self._emit(ev.TaskDeleted(state.task_id))

    def list_tasks(self, **kwargs: Any) -> list[Task]:
        """Every task the runner holds, oldest first."""
        return [s.task for s in self._tasks.values()]

    def get_task(self, task_id: TaskRef, **kwargs: Any) -> Task:
        """The ``Task`` of a task id (an unknown id is an ``UnknownTaskError`` listing the known ones)."""
        return self.state_of(task_id).task

    def get_upcoming_steps(self, task_id: TaskRef, **kwargs: Any) -> list[TaskStep]:
        """The queued steps (live objects: edit them, or use ``edit_step``, before they run)."""
        return list(self.state_of(task_id).step_queue)

    def get_completed_steps(self, task_id: TaskRef, **kwargs: Any) -> list[TaskStepOutput]:
        """The outputs of the task's completed steps, oldest first (a copy of the list)."""
        return list(self.state_of(task_id).completed_steps)

    def get_task_output(self, task_id: TaskRef, **kwargs: Any) -> TaskStepOutput:
        """The output of the task's latest completed step (ValueError if none has completed)."""
        state = self.state_of(task_id)
        if not state.completed_steps:
            raise ValueError(f"task {state.task_id!r} has no completed steps yet")
        return state.completed_steps[-1]

    def get_completed_tasks(self, **kwargs: Any) -> list[Task]:
        """The tasks whose last step is done (finalized or not)."""
        return [
            s.task
            for s in self._tasks.values()
            if s.completed_steps and s.completed_steps[-1].is_last
        ]

    def edit_step(
        self,
        task_id: TaskRef,
        step_id: str,
        *,
        input: str | None = None,
        step_state: dict[str, Any] | None = None,
    ) -> TaskStep:
        """Change a queued step's input or state before it runs."""
        state = self.state_of(task_id)
        step = next((s for s in state.step_queue if s.step_id == step_id), None)
        if step is None:
            queued = [s.step_id for s in state.step_queue]
            raise ValueError(
                f"step {step_id!r} is not queued in task {state.task_id!r}; "
                f"only queued steps can be edited: {queued}"
            )
        fields: list[str] = []
        if input is not None:
            step.input = input
            fields.append("input")
        if step_state is not None:
            step.step_state.update(step_state)
            fields.append("step_state")
        self._emit(ev.StepEdited(state.task_id, step_id=step_id, fields=tuple(fields)))
        return step

    def adopt_task(self, state: TaskState) -> TaskState:
        """Make a task that another runner holds (a loaded run, a batch record) a task of this
        one, as it is: it can be opened, drawn, costed and saved like the others. A task of
        this runner with the same id is replaced; listeners hear ``TaskCreated``.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> first = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
        >>> task = first.create_task("2 + 2?")
        >>> _ = first.run_step(task)
        >>> second = ReActAgent.from_tools([], llm=ScriptedLLM([]))
        >>> state = second.adopt_task(first.state_of(task))  # now second can draw, cost and save it
        >>> second.get_task(task.task_id).input, len(second.get_completed_steps(task.task_id))
        ('2 + 2?', 1)
        """
        if not isinstance(state, TaskState):
            raise TypeError(f"adopt_task takes a TaskState (runner.state_of(task)), got {type(state).__name__}")
        state.task._runner = self
        self._tasks[state.task_id] = state
        self._emit(ev.TaskCreated(state.task_id, input=state.task.input))
        return state

    # ----- prompts: the worker's, as "agent_worker:<key>" (reference PromptMixin) ----------
    def _get_prompt_modules(self) -> dict[str, PromptMixin]:
        worker = self.agent_worker
        return {"agent_worker": worker} if isinstance(worker, PromptMixin) else {}
