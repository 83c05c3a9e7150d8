"""One task of a batch, run through the runner's own API and kept apart from the others.

A batch never copies a runner or rewrites its attributes: each input becomes a task of the
runner (``create_task``), runs to its last step through the same step loop ``achat`` uses
(``arun_task``), reads one frozen copy of the conversation and adds nothing to it
(``adds_to_memory``). A finished task travels as the codec's JSON-able document of a runner
holding just that task (``task_record``) and becomes a task of another runner again
(``adopt_record`` / ``adopt_state``, which use ``adopt_task``): that is how Ray workers and
the run store hand tasks back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nbagent.memory import ChatMemoryBuffer
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse

if TYPE_CHECKING:
    from nbagent.batch.results import BatchItem
    from nbagent.engine.state import TaskState
    from nbagent.schema import Task, TaskStepOutput

__all__ = [
    "BatchRunner",
    "check_runner",
    "frozen_history",
    "run_isolated",
    "fill_from_state",
    "response_of",
    "task_record",
    "adopt_record",
    "adopt_state",
]


@runtime_checkable
class BatchRunner(Protocol):
    """What a batch asks of a runner (``AgentRunner`` and its subclasses have it all)."""

    memory: ChatMemoryBuffer

    @property
    def tasks(self) -> dict[str, TaskState]: ...

    def create_task(self, input: str, **kwargs: Any) -> Task: ...

    def state_of(self, task: Any) -> TaskState: ...

    def delete_task(self, task_id: Any) -> None: ...

    async def arun_task(self, task_id: Any, *, tool_choice: Any = None) -> TaskStepOutput: ...

    def finalize_response(self, task_id: Any, step_output: Any = None) -> Any: ...

    def adopt_task(self, state: TaskState) -> TaskState: ...


def check_runner(runner: object, what: str) -> BatchRunner:
    """``runner`` if it runs tasks as an ``AgentRunner`` does, else a TypeError naming ``what``
    needed one and what it got."""
    if not isinstance(runner, BatchRunner):
        raise TypeError(f"{what} an AgentRunner (e.g. ReActAgent.from_tools(...)), got {type(runner).__name__}")
    return runner


def frozen_history(runner: BatchRunner) -> ChatMemoryBuffer:
    """A copy of the runner's conversation that every task of a batch reads and none writes."""
    memory = runner.memory
    return ChatMemoryBuffer(
        token_limit=memory.token_limit,
        chat_history=memory.get_all(),
        tokenizer_fn=memory.tokenizer_fn,
    )


async def run_isolated(
    runner: BatchRunner,
    text: str,
    history: ChatMemoryBuffer,
    timeout_s: float | None = None,
    item: BatchItem | None = None,
    started: Callable[[str], Any] | None = None,
) -> tuple[TaskState | None, AgentChatResponse | None, BaseException | None]:
    """Run one task for ``text`` to its end through the runner's own step loop (the one
    ``achat`` uses), reading ``history`` and adding nothing to the runner's memory.

    Returns the task's state, its answer and the exception that ended it (one of the two
    is None). The asyncio and the Ray backend both run tasks through here. ``started(task_id)``
    is called once the task exists, before its first step (the batch tells its listeners).
    """
    try:
        task = runner.create_task(text)
    except Exception as err:  # noqa: BLE001 - recorded on the item: the batch goes on
        return None, None, err
    task.memory = history
    state = runner.state_of(task.task_id)
    state.adds_to_memory = False  # its messages stay on the task (its transcript), never join the conversation
    if item is not None:
        item.task_id = task.task_id
    if started is not None:
        started(task.task_id)
    try:
        run = runner.arun_task(task.task_id)
        output = await (asyncio.wait_for(run, timeout_s) if timeout_s is not None else run)
        response = runner.finalize_response(task.task_id, output)
        if isinstance(response, StreamingAgentChatResponse):
            response = await response.aget_response()
        return state, response, None
    except asyncio.TimeoutError:
        return state, None, TimeoutError(f"the task did not finish within timeout_s={timeout_s} s")
    except Exception as err:  # noqa: BLE001 - one failing task never stops the others
        return state, None, err


def fill_from_state(runner: BatchRunner, item: BatchItem, state: TaskState | None) -> None:
    """Copy a task's steps, tokens and cost onto its item."""
    if state is None:
        return
    from nbagent.costs import task_cost

    item.task_id = state.task_id
    item.steps = len(state.completed_steps)
    try:
        total = task_cost(runner, state).total
    except Exception:  # noqa: BLE001 - a cost that cannot be computed is left empty
        return
    item.prompt_tokens = total.prompt_tokens
    item.completion_tokens = total.completion_tokens
    item.cost = total.amount


def response_of(state: TaskState) -> AgentChatResponse | None:
    """The finished task's answer as an ``AgentChatResponse`` (a streamed one, read whole)."""
    response = state.final_response
    if isinstance(response, AgentChatResponse):
        return response
    if isinstance(response, StreamingAgentChatResponse):
        return AgentChatResponse(response=response.response, sources=response.sources)
    return None


def task_record(runner: BatchRunner, state: TaskState) -> dict[str, Any]:
    """One task as the codec's run document (a runner holding just that task): plain
    JSON-able data that a store keeps and a Ray worker sends back."""
    from nbagent.store.codec import runner_to_dict

    return runner_to_dict(runner, tasks=[state], with_memory=False)  # the worker, settings and prices


def adopt_record(runner: BatchRunner, doc: dict[str, Any]) -> TaskState:
    """Make the task of a ``task_record`` document a task of ``runner`` (it can then be
    opened, drawn and costed like any other; its steps cannot be re-run from here)."""
    from nbagent.store.codec import runner_from_dict

    loaded = runner_from_dict(doc, None, restore_ids=False, source="a batch record")
    states = list(loaded.tasks.values())
    if len(states) != 1:
        raise ValueError(f"a batch record holds exactly one task, this one holds {len(states)}")
    return adopt_state(runner, states[0], loaded)


def adopt_state(runner: BatchRunner, state: TaskState, loaded: Any) -> TaskState:
    """Move a task that ``loaded`` (a runner rebuilt from a record or the store) holds into
    ``runner``, with the models its steps ran with (for their cost)."""
    from nbagent.costs import adopt_step_models, register_runner, step_models

    # the models first: a store that hears TaskCreated writes them with the task
    adopt_step_models(runner, {sid: m for sid, m in step_models(loaded).items() if sid in state.steps})
    register_runner(state.task_id, runner)
    return runner.adopt_task(state)
