"""BaseAgentWorker: turns one TaskStep into a TaskStepOutput and keeps no state of its own.

Implement ``initialize_step`` and one of ``arun_step`` / ``run_step``; the other is derived.
Streaming defaults to the non-streaming path. Everything a worker needs between steps travels
in ``task.extra_state``, ``step.step_state`` and ``task.scratch_memory``; the runner
snapshots those before each step, which is what makes undo and safe retries work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent.prompts import PromptMixin
from nbagent.registry import html_view, provided

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task, TaskStep, TaskStepOutput

__all__ = ["BaseAgentWorker", "EmptyResponseError", "person_input"]


_STEP_INPUT: Any = object()


def person_input(step: TaskStep, task: Task, first: bool, *, text: Any = _STEP_INPUT) -> str | None:
    """What a person gave as this step's input, to go to the model after what it has seen.

    A task's first step carries the question as its input (the reference's convention), so
    there only an input other than the question is the person's: it goes after the question,
    never in its place (``run_step(task, input=...)`` on a new task). ``text``: the input to
    judge instead of ``step.input`` (a retry acting on an earlier attempt's reply passes the
    input that reply answered; see ``nbagent.calls``).
    """
    given = step.input if text is _STEP_INPUT else text
    if given is None or (first and given == task.input):
        return None
    return given  # type: ignore[no-any-return]


class EmptyResponseError(ValueError):
    """The model's reply had no text and no tool call: the step fails and stays queued."""


class BaseAgentWorker(PromptMixin, ABC):
    """The reference API's agent worker (``get_prompts`` / ``update_prompts``: none by
    default; the ReAct and function-calling workers expose theirs)."""

    #: True when ``arun_step`` only calls plain functions and never awaits anything that can
    #: suspend, so a sync ``run_step`` may drive it without an event loop. A promise the class
    #: makes (or an instance, as a property): False unless it says so.
    steps_synchronously: bool = False

    @abstractmethod
    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        """The first step of a new task."""

    def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """Run one step (sync). Derived from ``arun_step`` unless overridden."""
        if type(self).arun_step is BaseAgentWorker.arun_step:
            raise NotImplementedError(
                f"{type(self).__name__} must implement run_step or arun_step"
            )
        return _sync.run_sync(self.arun_step(step, task, **kwargs))

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """Run one step (async). Derived from ``run_step`` unless overridden."""
        if type(self).run_step is BaseAgentWorker.run_step:
            raise NotImplementedError(
                f"{type(self).__name__} must implement run_step or arun_step"
            )
        return self.run_step(step, task, **kwargs)

    def stream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """Run one step, streaming the answer if it is the last one."""
        if type(self).astream_step is BaseAgentWorker.astream_step:
            return self.run_step(step, task, **kwargs)
        return _sync.run_sync(self.astream_step(step, task, **kwargs))

    async def astream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """Async streaming step; by default the same as ``arun_step``."""
        if type(self).stream_step is not BaseAgentWorker.stream_step:
            return self.stream_step(step, task, **kwargs)
        return await self.arun_step(step, task, **kwargs)

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        """Hook run once when the task is finalized (the runner merges memory itself)."""

    def set_callback_manager(self, callback_manager: Any) -> None:
        """Accepted for compatibility with the reference API and has no effect (a warning
        says so): the runner's events replace callbacks (``runner.subscribe``)."""
        if callback_manager is not None:
            from nbagent._compat import warn_callback_manager

            warn_callback_manager(f"{type(self).__name__}.set_callback_manager")

    def as_agent(self, **kwargs: Any) -> AgentRunner:
        """This worker inside a new AgentRunner."""
        return provided("agent_runner")(self, **kwargs)

    def describe(self) -> dict[str, Any]:
        """What the views show about this worker: kind, model, tools, limits.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"])).agent_worker.describe()
        {'kind': 'ReActAgentWorker', 'model': 'scripted', 'max_iterations': 10}
        """
        info: dict[str, Any] = {"kind": type(self).__name__}
        llm = getattr(self, "llm", None)
        if llm is not None:
            info["model"] = getattr(llm, "model", type(llm).__name__)
        tools = getattr(self, "tools", None)
        if tools:
            info["tools"] = [_tool_label(t) for t in tools]
        for limit in ("max_iterations", "max_steps"):
            if getattr(self, limit, None) is not None:
                info[limit] = getattr(self, limit)
        return info

    def prompt_preview(self) -> str | None:
        """The system prompt the model will see on the next step (None if there is none)."""
        return None

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _tool_label(tool: Any) -> str:
    """A tool's name, and the MCP server it lives on if it has one."""
    name = getattr(tool, "name", str(tool))
    server = getattr(getattr(tool, "metadata", None), "server", None)
    return f"{name} (MCP: {server})" if isinstance(server, str) and server else name
