"""CustomSimpleAgentWorker: write an agent as three methods over one state dict.

``_initialize_state`` returns the task's starting state, ``_run_step`` (or ``_arun_step``)
returns ``(response, is_done)`` for one step, ``_finalize_task`` cleans up. The keys
``memory`` (this task's new messages) and ``sources`` (tool outputs) are provided and
reserved.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from nbagent._compat import warn_callback_manager
from nbagent.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput, step_output
from nbagent.tools import FunctionTool, as_tools
from nbagent.workers.base import BaseAgentWorker

__all__ = ["CustomSimpleAgentWorker", "RESERVED_STATE_KEYS"]

RESERVED_STATE_KEYS = ("memory", "sources")


class CustomSimpleAgentWorker(BaseModel, BaseAgentWorker):
    """Base for simple sequential agents; subclass and implement the three methods."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", defer_build=True)  # a misspelt argument is an error

    tools: Sequence[Any] = Field(default_factory=list, description="Tools the agent may use")
    llm: Any = Field(default=None, description="The model (an nbagent LLM)")
    tool_retriever: Any = Field(default=None, description="Object with retrieve(text) -> tools")
    verbose: bool = Field(default=False, description="Print each step")
    _get_tools: Callable[[str], Sequence[FunctionTool]] = PrivateAttr()

    def __init__(
        self,
        tools: Sequence[Any] | None = None,
        llm: Any = None,
        callback_manager: Any = None,
        verbose: bool = False,
        tool_retriever: Any = None,
        **kwargs: Any,
    ) -> None:
        """The reference's arguments, in its order (a subclass's own fields go in ``kwargs``)."""
        if callback_manager is not None:
            kwargs["callback_manager"] = callback_manager  # the validator warns about it
        super().__init__(
            tools=[] if tools is None else tools,
            llm=llm,
            verbose=verbose,
            tool_retriever=tool_retriever,
            **kwargs,
        )

    @model_validator(mode="before")
    @classmethod
    def _no_callback_manager(cls, data: Any) -> Any:
        """The reference's ``callback_manager``: accepted, said to have no effect."""
        if isinstance(data, dict) and "callback_manager" in data:
            data = dict(data)
            if data.pop("callback_manager") is not None:
                warn_callback_manager(cls.__name__, stacklevel=5)
        return data

    def model_post_init(self, __context: Any) -> None:
        if self.tools and self.tool_retriever is not None:
            raise ValueError("pass either tools or tool_retriever, not both")
        self.tools = as_tools(self.tools)
        if self.tool_retriever is not None:
            retriever = self.tool_retriever
            self._get_tools = lambda text: as_tools(retriever.retrieve(text))
        else:
            tools = list(self.tools)
            self._get_tools = lambda _: tools

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[Any] | None = None,
        tool_retriever: Any = None,
        llm: Any = None,
        callback_manager: Any = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> CustomSimpleAgentWorker:
        """Make the worker from tools (or a ``tool_retriever``) and a model, as the
        reference's ``from_tools`` does; other keywords are the subclass's own fields.
        ``callback_manager`` is accepted and has no effect (a warning says so)."""
        if callback_manager is not None:
            warn_callback_manager("from_tools")
        return cls(tools=list(tools or []), tool_retriever=tool_retriever, llm=llm, verbose=verbose, **kwargs)

    # a plain ``_run_step`` steps without awaiting; a subclass with its own ``_arun_step`` or
    # ``arun_step`` does not promise that (see ``__init_subclass__``)
    steps_synchronously: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "steps_synchronously" not in vars(cls):
            cls.steps_synchronously = (
                cls._arun_step is CustomSimpleAgentWorker._arun_step
                and cls.arun_step is CustomSimpleAgentWorker.arun_step
            )

    def get_tools(self, input: str) -> list[FunctionTool]:
        """The tools for this input: the worker's own, or what its ``tool_retriever``
        gives for the input."""
        return list(self._get_tools(input))

    @abstractmethod
    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        """The task's starting state (must not use the reserved keys)."""

    def _run_step(
        self, state: dict[str, Any], task: Task, input: str | None = None
    ) -> tuple[AgentChatResponse, bool]:
        """One step: return ``(response, is_done)``. Implement this or ``_arun_step``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _run_step or _arun_step")

    async def _arun_step(
        self, state: dict[str, Any], task: Task, input: str | None = None
    ) -> tuple[AgentChatResponse, bool]:
        """Async step; by default calls ``_run_step``."""
        return self._run_step(state, task, input=input)

    @abstractmethod
    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        """Clean up when the task is finalized."""

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        state = self._initialize_state(task, **kwargs)
        if not isinstance(state, dict):
            raise TypeError(f"_initialize_state must return a dict, got {type(state).__name__}")
        clash = sorted(set(state) & set(RESERVED_STATE_KEYS))
        if clash:
            raise ValueError(
                f"_initialize_state returned reserved key(s) {clash}; the keys "
                f"{list(RESERVED_STATE_KEYS)} are provided by the worker, use other names"
            )
        state["memory"] = task.scratch_memory
        state["sources"] = AppendLog()
        return TaskStep(task_id=task.task_id, input=task.input, step_state=state)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        if type(self)._arun_step is CustomSimpleAgentWorker._arun_step:
            result = self._run_step(step.step_state, task, input=step.input)
        else:
            result = await self._arun_step(step.step_state, task, input=step.input)
        if type(result) is not tuple and inspect.isawaitable(result):  # a plain tuple never is
            result = await result
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"{type(self).__name__}._run_step must return (response, is_done), got {result!r}"
            )
        response, is_done = result
        if not isinstance(response, AgentChatResponse):
            response = AgentChatResponse(response=str(response))
        task.extra_state.update(step.step_state)
        next_steps = [] if is_done else [step.get_next_step(input=None)]
        return step_output(response, step, next_steps, bool(is_done))

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        self._finalize_task(task.extra_state, **kwargs)
