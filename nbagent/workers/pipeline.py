"""``QueryPipelineAgentWorker``: an agent whose every step is one run of a query pipeline.

Deprecated on the reference page ("Use FnAgentWorker instead to build a stateful agent") and
kept so that code written for it runs after changing imports. New code: ``FnAgentWorker``.

Each step, the worker hands the pipeline's stateful components ``{task_key: task,
step_state_key: step.step_state}`` (``pipeline.update_state``) and runs the pipeline, which must
return ``(response, is_done)``. ``step_state`` starts as ``{"sources": [...], "memory": ...}``,
where ``memory`` is the task's new messages (``task.scratch_memory``: the runner moves them into
its memory when the task is finalized), and is carried from step to step; after each step
``task.extra_state`` is updated from it, as on the reference. The deprecated flow (an
``AgentInputComponent`` at the root, ``AgentFnComponent`` modules given ``task`` and ``state``)
works too.

Everything that must outlive a step lives in ``step_state`` / ``task.extra_state``, which the
runner snapshots: a step whose pipeline raises stays queued with its state as it was, and undo
works. The pipeline's components share one state, so one worker runs one pipeline at a time:
steps of tasks run together (``run_batch``) take turns instead of seeing each other's task. Any object with ``run`` / ``arun`` / ``update_state`` / ``module_dict`` /
``get_root_keys`` is accepted as the pipeline, e.g. LlamaIndex's own ``QueryPipeline`` with its
``StatefulFnComponent`` modules.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

from nbagent._compat import warn_callback_manager
from nbagent.query_pipeline import AgentInputComponent, BaseAgentComponent, QueryComponent
from nbagent.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.workers.base import BaseAgentWorker

__all__ = ["QueryPipelineAgentWorker"]

_PIPELINE_API = ("run", "arun", "update_state", "module_dict", "get_root_keys")
_NO_STREAMING = "This agent does not support streaming."


class QueryPipelineAgentWorker(BaseAgentWorker):
    """Deprecated (as on the reference): runs ``pipeline`` once per step; use ``FnAgentWorker``."""

    #: stream_step raises, as on the reference: the panel steps this worker with run_step
    supports_streaming = False

    def __init__(
        self,
        pipeline: Any,
        callback_manager: Any = None,
        task_key: str = "task",
        step_state_key: str = "step_state",
    ) -> None:
        warnings.warn(
            "Call to deprecated class QueryPipelineAgentWorker. (Use `FnAgentWorker` instead to "
            "build a stateful agent.)",
            DeprecationWarning,
            stacklevel=2,
        )
        missing = [name for name in _PIPELINE_API if not hasattr(pipeline, name)]
        if missing:
            raise TypeError(
                f"QueryPipelineAgentWorker needs a query pipeline (nbagent.query_pipeline."
                f"QueryPipeline, or LlamaIndex's); a {type(pipeline).__name__} has no {missing}"
            )
        if not pipeline.module_dict:
            raise ValueError("QueryPipelineAgentWorker: the pipeline has no modules; add them first")
        for name, value in (("task_key", task_key), ("step_state_key", step_state_key)):
            if not isinstance(value, str) or not value:
                raise TypeError(f"{name} must be a non-empty string, got {value!r}")
        if task_key == step_state_key:
            raise ValueError(f"task_key and step_state_key must differ, both are {task_key!r}")
        self.pipeline = pipeline
        self._sync_lock = threading.Lock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self.task_key = task_key
        self.step_state_key = step_state_key
        if callback_manager is not None:
            self.set_callback_manager(callback_manager)
        self.callback_manager = (
            callback_manager if callback_manager is not None else getattr(pipeline, "callback_manager", None)
        )
        self.agent_components  # noqa: B018  (validates the pipeline, as the reference does)
        _refuse_foreign_deprecated_flow(pipeline)

    @property
    def agent_input_component(self) -> AgentInputComponent:
        """The root ``AgentInputComponent`` of the deprecated flow (ValueError if there is none)."""
        roots = list(self.pipeline.get_root_keys())
        if not roots:
            raise ValueError("Query pipeline has no root module (every module has a link into it)")
        root = self.pipeline.module_dict[roots[0]]
        if not isinstance(root, AgentInputComponent):
            raise ValueError(f"Query pipeline first component must be AgentInputComponent, got {root!r}")
        return root

    @property
    def agent_components(self) -> Sequence[BaseAgentComponent]:
        """The deprecated ``AgentFnComponent`` modules (nested pipelines included)."""
        return _agent_components(self.pipeline)

    def _uses_deprecated(self) -> bool:
        try:
            self.agent_input_component
        except ValueError:
            return False
        return True

    def preprocess(self, task: Task, step: TaskStep) -> None:
        """Give this step's task and state to the components that take them.

        The worker calls this before each step; code that uses nbagent does not (so no example)."""
        for component in self.agent_components:
            component.partial(task=task, state=step.step_state)
        self.pipeline.update_state({self.task_key: task, self.step_state_key: step.step_state})

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        """The first step; its state holds ``sources`` and ``memory`` (the task's new messages)."""
        state: dict[str, Any] = {"sources": AppendLog(), "memory": task.scratch_memory}
        return TaskStep(task_id=task.task_id, input=task.input, step_state=state)

    def _step_output(self, result: Any, step: TaskStep, task: Task) -> TaskStepOutput:
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                "the query pipeline must return (response, is_done) (its last module's output), "
                f"got {_short(result)}"
            )
        response, is_done = result
        if is_done is None:
            raise TypeError(
                "the query pipeline returned (response, None): is_done must be True (the task is "
                "done) or False (run another step)"
            )
        is_done = bool(is_done)
        task.extra_state.update(step.step_state)
        next_steps = [] if is_done else [step.get_next_step(input=None)]
        return TaskStepOutput(
            output=_as_response(response), task_step=step, next_steps=next_steps, is_last=is_done
        )

    def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """One run of the pipeline."""
        with self._sync_lock:
            self.preprocess(task, step)
            if self._uses_deprecated():
                result = self.pipeline.run(state=step.step_state, task=task)
            else:
                result = self.pipeline.run()
        return self._step_output(result, step, task)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """One run of the pipeline (async)."""
        async with self._loop_lock():
            self.preprocess(task, step)
            if self._uses_deprecated():
                result = await self.pipeline.arun(state=step.step_state, task=task)
            else:
                result = await self.pipeline.arun()
        return self._step_output(result, step, task)

    def _loop_lock(self) -> asyncio.Lock:
        """This event loop's lock: the pipeline's shared state serves one step at a time."""
        loop = asyncio.get_running_loop()
        lock = self._async_locks.get(loop)
        if lock is None:
            lock = self._async_locks[loop] = asyncio.Lock()
        return lock

    def stream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        raise NotImplementedError(_NO_STREAMING)

    async def astream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        raise NotImplementedError(_NO_STREAMING)

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        """Move the task's new messages toward memory: the runner merges ``scratch_memory``
        itself; a buffer the pipeline put in ``extra_state["memory"]`` instead is emptied there."""
        memory = task.extra_state.get("memory")
        if memory is not None and memory is not task.scratch_memory:
            task.scratch_memory.put_messages(memory.get_all())
            memory.reset()

    def set_callback_manager(self, callback_manager: Any) -> None:
        """Passed on to the pipeline (nbagent's says it has no effect; LlamaIndex's uses it)."""
        self.callback_manager = callback_manager
        setter = getattr(self.pipeline, "set_callback_manager", None)
        if callable(setter) and not isinstance(self.pipeline, QueryComponent):
            setter(callback_manager)  # a foreign pipeline (LlamaIndex's) may use it
        elif callback_manager is not None:
            warn_callback_manager("QueryPipelineAgentWorker", stacklevel=4)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["pipeline"] = list(self.pipeline.module_dict)
        info["flow"] = "deprecated (AgentInputComponent)" if self._uses_deprecated() else "stateful"
        info["state keys"] = [self.task_key, self.step_state_key]
        return info


def _agent_components(component: Any) -> list[BaseAgentComponent]:
    found: list[BaseAgentComponent] = []
    for sub in getattr(component, "sub_query_components", None) or list(component.module_dict.values()):
        if isinstance(sub, BaseAgentComponent):
            found.append(sub)
        if getattr(sub, "sub_query_components", None):
            found.extend(_agent_components(sub))
    return found


def _refuse_foreign_deprecated_flow(pipeline: Any) -> None:
    """LlamaIndex's own AgentInputComponent / AgentFnComponent check for LlamaIndex's Task, so
    they cannot run on nbagent's: say so now rather than fail inside the first step."""
    for key, module in pipeline.module_dict.items():
        names = {cls.__name__ for cls in type(module).__mro__}
        if (
            not isinstance(module, QueryComponent)
            and type(module).__module__.startswith("llama_index")
            and names & {"AgentInputComponent", "BaseAgentComponent"}
        ):
            raise TypeError(
                f"module {key!r} is LlamaIndex's {type(module).__name__}, which only takes "
                "LlamaIndex's Task; use nbagent.query_pipeline's AgentInputComponent / "
                "AgentFnComponent, or the current form: StatefulFnComponent"
            )


def _as_response(response: Any) -> AgentChatResponse:
    if isinstance(response, AgentChatResponse):
        return response
    text = getattr(response, "response", response)  # e.g. LlamaIndex's AgentChatResponse
    return AgentChatResponse(response="" if text is None else str(text))


def _short(value: Any, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"
