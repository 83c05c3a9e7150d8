"""AgentRunner: creates tasks, runs their steps through a worker, and owns all their state.

One step path: ``_astep`` is the only code that runs a step; every public method, sync or
async, streaming or not, goes through it (sync ones via ``run_sync``, which also works inside
a notebook's running event loop). A step is snapshotted before it runs, so a failure rolls
back cleanly and ``undo_step`` can go back any number of steps.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from nbagent import _sync, calls
from nbagent._compat import pop_callback_manager, warn_callback_manager
from nbagent._counts import counted
from nbagent.events import (
    Event,
    EventDispatcher,
    RunnerReset,
    StepCompleted,
    StepContext,
    StepEdited,
    StepFailed,
    StepStarted,
    StepUndone,
    TaskAbandoned,
    TaskCreated,
    TaskDeleted,
    TaskFinalized,
    _reset_current,
    _set_current,
)
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, ToolOutput
from nbagent.prompts import PromptMixin
from nbagent.engine.agent_state import AgentState
from nbagent.engine.errors import TaskRef, TaskStateError, UnknownTaskError, busy_message
from nbagent.engine.slots import ServiceSlots
from nbagent.engine import streaming, txn
from nbagent.engine.state import StepSnapshot, TaskState, TaskStatus
from nbagent.registry import html_view
from nbagent.schema import (
    AgentChatResponse,
    SkippedOutput,
    StreamingAgentChatResponse,
    Task,
    TaskStep,
    TaskStepOutput,
)
from nbagent.workers.base import BaseAgentWorker

__all__ = ["AgentRunner", "BaseAgent", "TaskRef", "UnknownTaskError", "TaskStateError"]

Mode = Literal["wait", "stream"]
ChatResponseType = Union[AgentChatResponse, StreamingAgentChatResponse]
_T = TypeVar("_T")


def _approvals() -> Any:
    from nbagent.engine import approvals

    return approvals


def query_text(str_or_query_bundle: object) -> str:
    """The question in a ``query`` call: a string, or a reference QueryBundle's ``query_str``."""
    if isinstance(str_or_query_bundle, str):
        return str_or_query_bundle
    text = getattr(str_or_query_bundle, "query_str", None)
    if isinstance(text, str):
        return text
    raise TypeError(
        f"query() takes a string or a query bundle with a query_str string, "
        f"got {type(str_or_query_bundle).__name__}"
    )


class BaseAgent(PromptMixin, ABC):
    """The reference's ``BaseAgent``: a chat engine that also answers one-off queries.

    ``AgentRunner`` is nbagent's implementation (step by step); this base is here so code
    written for the reference can subclass it or check ``isinstance(agent, BaseAgent)``.
    As on the reference, streaming is optional: by default it raises NotImplementedError.
    """

    @property
    @abstractmethod
    def chat_history(self) -> list[ChatMessage]:
        """The conversation so far."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the conversation."""

    @abstractmethod
    def chat(self, message: str, chat_history: Sequence[ChatMessage] | None = None) -> AgentChatResponse:
        """Answer ``message``; ``chat_history``, if given, replaces the conversation first."""

    @abstractmethod
    async def achat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> AgentChatResponse:
        """Async ``chat``."""

    def stream_chat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        raise NotImplementedError("stream_chat not implemented")

    async def astream_chat(
        self, message: str, chat_history: Sequence[ChatMessage] | None = None
    ) -> StreamingAgentChatResponse:
        raise NotImplementedError("astream_chat not implemented")

    def query(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Answer a question with no conversation history (the reference's query engine side)."""
        return self.chat(query_text(str_or_query_bundle), chat_history=[])

    async def aquery(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Async ``query``."""
        return await self.achat(query_text(str_or_query_bundle), chat_history=[])


class AgentRunner(BaseAgent):
    """Orchestrates tasks for one worker, keeps their state and the conversation memory.

    ``state`` (an ``AgentState``) holds the tasks (``runner.state.task_dict`` is
    ``runner.tasks``). ``callback_manager`` is accepted for code written for the reference
    and has no effect (a warning says so): ``subscribe`` is how to listen to steps.
    ``verbose=True`` prints each step as it starts. Without ``memory``, a memory holding
    ``chat_history`` is made; an ``llm`` that knows its context window sizes it (as on the
    reference; see ``ChatMemoryBuffer.from_defaults``).
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
        if not isinstance(agent_worker, BaseAgentWorker):
            raise TypeError(
                f"agent_worker must be a BaseAgentWorker, got {type(agent_worker).__name__}"
            )
        self.agent_worker = agent_worker
        if state is None:
            state = AgentState()
        elif not isinstance(state, AgentState):
            raise TypeError(f"state must be an nbagent AgentState, got {type(state).__name__}")
        self.state: AgentState = state  # task_dict is the dict behind ``tasks``
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
        self._services = ServiceSlots()  # state of the services above the engine (store, costs...)
        state._adopt(self)
        self.approve_tools = approve_tools
        if max_finished_tasks is not None and (
            not isinstance(max_finished_tasks, int) or isinstance(max_finished_tasks, bool) or max_finished_tasks < 0
        ):
            raise ValueError(f"max_finished_tasks must be an int >= 0 or None, got {max_finished_tasks!r}")
        self.max_finished_tasks = max_finished_tasks
        if autosave is not None and store is not None:
            raise ValueError("pass autosave= (a run file or store path) or store= (a RunStore), not both")
        if autosave is not None or store is not None:  # save after every change (nbagent.store)
            self.autosave = autosave if store is None else store

    # ----- events ------------------------------------------------------------------------
    def subscribe(
        self, listener: Callable[[Event], Any], types: Any = None
    ) -> Callable[[], None]:
        """Listen to this runner's events; returns the function that stops listening."""
        return self.events.subscribe(listener, types)

    def _emit(self, event: Event) -> None:
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

    def state_of(self, task: TaskRef) -> TaskState:
        """The TaskState of a task or task id; an unknown id is a clear error."""
        task_id = task.task_id if isinstance(task, Task) else task
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
        task = Task(input=input, memory=self.memory, extra_state=extra_state, **kwargs)
        task._runner = self
        state = TaskState(task=task, keep_history=self.keep_history, call_ids_known=True)
        first = self.agent_worker.initialize_step(task)
        if not isinstance(first, TaskStep):
            raise TypeError(
                f"{type(self.agent_worker).__name__}.initialize_step must return a TaskStep, "
                f"got {type(first).__name__}"
            )
        state.register(first)
        state.step_queue.append(first)
        self._tasks[task.task_id] = state
        self._emit(TaskCreated(task.task_id, input=input))
        return task

    def delete_task(self, task_id: TaskRef) -> None:
        """Forget a task (the runner's memory keeps what finalized tasks added)."""
        state = self.state_of(task_id)
        del self._tasks[state.task_id]
        self._emit(TaskDeleted(state.task_id))

    def list_tasks(self, **kwargs: Any) -> list[Task]:
        return [s.task for s in self._tasks.values()]

    def get_task(self, task_id: TaskRef, **kwargs: Any) -> Task:
        return self.state_of(task_id).task

    def get_upcoming_steps(self, task_id: TaskRef, **kwargs: Any) -> list[TaskStep]:
        """The queued steps (live objects: edit them, or use ``edit_step``, before they run)."""
        return list(self.state_of(task_id).step_queue)

    def get_completed_steps(self, task_id: TaskRef, **kwargs: Any) -> list[TaskStepOutput]:
        return list(self.state_of(task_id).completed_steps)

    def get_task_output(self, task_id: TaskRef, **kwargs: Any) -> TaskStepOutput:
        state = self.state_of(task_id)
        if not state.completed_steps:
            raise ValueError(f"task {state.task_id!r} has no completed steps yet")
        return state.completed_steps[-1]

    def get_completed_tasks(self, **kwargs: Any) -> list[Task]:
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
        self._emit(StepEdited(state.task_id, step_id=step_id, fields=tuple(fields)))
        return step

    # ----- the one step path -------------------------------------------------------------
    def _check_runnable(self, state: TaskState) -> None:
        if state.abandoned:
            raise TaskStateError(f"task {state.task_id!r} was abandoned; create a new task")
        if state.finalized:
            raise TaskStateError(f"task {state.task_id!r} is finalized; create a new task")
        if state.running:
            raise TaskStateError(busy_message(state))

    def _pick_step(self, state: TaskState, step: TaskStep | None) -> TaskStep:
        queue = state.step_queue
        if step is not None:
            if not any(s is step or s.step_id == step.step_id for s in queue):
                raise ValueError(
                    f"step {step.step_id!r} is not queued in task {state.task_id!r}; "
                    f"queued: {[s.step_id for s in queue]}"
                )
            picked = next(s for s in queue if s.step_id == step.step_id)
            _approvals().check_decided(state, picked)
            return picked
        if not queue:
            done = "its last step is done" if state.status == TaskStatus.COMPLETED else (
                "no final output was produced"
            )
            raise TaskStateError(
                f"task {state.task_id!r} has no queued step to run ({done})"
            )
        for s in queue:
            if state.is_step_ready(s):
                return s
        for s in queue:
            _approvals().check_decided(state, s)
        held = [s.step_id for s in queue if not s.is_ready]
        if held:
            raise TaskStateError(
                f"task {state.task_id!r} has no ready step: step(s) {held} are held "
                "(is_ready=False); release one with runner.release_step(task_id, step_id) "
                "or set step.is_ready = True"
            )
        raise TaskStateError(
            f"task {state.task_id!r} has queued steps but none is ready: "
            f"{[s.step_id for s in queue]} wait for steps that are not done"
        )

    # Hooks around a step's state changes; ParallelAgentRunner overrides them so that a
    # branch's rollback or undo never touches what its siblings did. The transaction rules
    # that make a step safe to interrupt anywhere are in ``nbagent.engine.txn``.
    def _snapshot_step(self, state: TaskState, step: TaskStep) -> StepSnapshot:
        """What ``step`` may change, taken before anything changes."""
        return state.snapshot(step)

    def _take_step(self, state: TaskState, step: TaskStep, snap: StepSnapshot, input: str | None) -> None:
        """Mark ``step`` running (the task is busy from here), set its new input, unqueue it."""
        state.running.add(step.step_id)
        if input is not None:
            step.input = input
        state.step_queue.remove(step)

    def _roll_back(self, state: TaskState, step: TaskStep, snap: StepSnapshot) -> None:
        """Undo what a failed step changed; it goes back to the queue (idempotent)."""
        state.restore(snap)
        state.running.discard(step.step_id)

    def _commit(
        self, state: TaskState, step: TaskStep, output: TaskStepOutput, snap: StepSnapshot
    ) -> None:
        """Record a finished step's output and queue its next steps."""
        state.complete(step, output, snap)

    def _undo_attempt(self, state: TaskState, att: txn.StepAttempt) -> None:
        """Take back all an interrupted or failed attempt did, whatever line it reached; the
        tool calls it ran stay recorded on the step (its journal), for the retry."""
        assert att.step is not None and att.snap is not None
        if att.output is not None and att.mark is not None:
            txn.undo_commit(state, att.step, att.output, att.snap, att.mark)
        self._roll_back(state, att.step, att.snap)
        calls.keep_journal(att.step, att.journal)
        calls.release_ids(att.step, state.task, att.issued, att.journal)

    def _abort_step(self, state: TaskState, att: txn.StepAttempt, error: BaseException) -> None:
        """The ``except`` of ``_astep``: roll the attempt back, record it as failed."""
        if att.ctx_token is not None:
            try:
                _reset_current(att.ctx_token)
            except (RuntimeError, ValueError):  # already reset, or another context's token
                pass
        step = att.step
        token = att.claim
        if token is None:
            return  # failed before claiming the task (or already rolled back): nothing to do
        if not txn.claim(self, state, token):
            return  # another caller holds it: our commit was complete before we let it go
        try:
            if att.snap is None or step is None:
                if step is not None:  # its journal was taken off it: put it back
                    txn.retry(calls.keep_journal, step, att.journal)
                return  # nothing changed yet (a bad step, a finalized task...)
            if att.output is not None and att.mark is not None:
                if not txn.committed_on_top(state, att.output, att.mark):
                    return  # its commit was complete and another call has built on it
            txn.retry(self._undo_attempt, state, att)
            state.streaming = None
            failure = state.record_failure(step, error)
        finally:
            txn.release(self, state, token)
            att.claim = None  # rolled back once: a second abort of this attempt does nothing
        self._emit(
            StepFailed(
                state.task_id,
                step_id=step.step_id,
                error_type=failure.error_type,
                error=failure.message,
            )
        )

    def _claim_token(self) -> txn.Claim:
        """The claim a step call takes (ParallelAgentRunner: its event loop's, shared)."""
        return txn.Claim()

    #: whether ``stream_step`` returns while a step's reply still streams (the step then ends
    #: with its stream); ParallelAgentRunner reads each reply to its end inside the step
    defers_streamed_steps: bool = True

    async def _astep(
        self,
        task_id: TaskRef,
        step: TaskStep | None = None,
        input: str | None = None,
        mode: Mode = "wait",
        **kwargs: Any,
    ) -> TaskStepOutput:
        state = self.state_of(task_id)
        await streaming.aend_streamed_step(state)
        att = txn.StepAttempt()
        try:  # from here to the return, any exception puts the task back (see engine.txn)
            att.claim = self._claim_token()
            if not txn.claim(self, state, att.claim):
                att.claim = None
                raise TaskStateError(busy_message(state))
            self._check_runnable(state)
            picked = att.step = self._pick_step(state, step)
            task = state.task
            if not state.call_ids_known:  # a loaded task: the ids its run used stay used
                calls.note_call_ids(task, state.scan_call_ids())
                state.call_ids_known = True
            att.journal = calls.journal_of(picked)
            calls.detach_journal(picked)  # the snapshot must not hold it (an undo to it neither)
            att.snap = self._snapshot_step(state, picked)
            self._take_step(state, picked, att.snap, input)
            ctx = StepContext(task.task_id, picked.step_id, self.events, att.journal, att.issued)
            att.ctx_token = _set_current(ctx)
            if self.events.active:
                self.events.emit(StepStarted(task.task_id, step_id=picked.step_id, input=picked.input))
            if self.verbose:
                print(f"> Running step {picked.step_id}. Step input: {picked.input}")
            start = time.perf_counter()
            if mode == "stream":
                output = await self.agent_worker.astream_step(picked, task, **kwargs)
            else:
                output = await self.agent_worker.arun_step(picked, task, **kwargs)
            if not isinstance(output, TaskStepOutput):
                raise TypeError(
                    f"{type(self.agent_worker).__name__} returned {type(output).__name__}; "
                    "a step must return a TaskStepOutput"
                )
            _reset_current(att.ctx_token)
            att.ctx_token = None
            if _sync.interrupted():  # its caller gave up while a blocking call ran
                raise asyncio.CancelledError("the call running this step was interrupted")
            if streaming.is_open(output):  # the reply is still streaming: the step ends with it
                streaming.stream_on(self, state, att, ctx, output, start)
                if mode != "stream" or not self.defers_streamed_steps:
                    await output.output.aget_response()  # read here: the step ends in this call
                return output
            self._end_step(state, att, ctx, output, time.perf_counter() - start)
            return output
        except BaseException as error:
            self._abort_step(state, att, error)
            raise

    def _end_step(
        self, state: TaskState, att: txn.StepAttempt, ctx: StepContext, output: TaskStepOutput, latency: float
    ) -> None:
        """Record a step that has ended: commit its output, queue what follows, tell listeners,
        let the task go. (The rest of ``_astep``'s transaction; ``_abort_step`` undoes it.)"""
        picked = att.step
        assert picked is not None and att.snap is not None and att.claim is not None
        # the input is kept because an undo may give the step new input
        if ctx.usage is not None:
            output._set_measured(latency_s=latency, input=picked.input, usage=ctx.usage)
        else:
            output._set_measured(latency_s=latency, input=picked.input)
        att.mark = txn.mark_commit(state, picked, output)
        att.output = output
        self._commit(state, picked, output, att.snap)
        state.running.discard(picked.step_id)
        state.streaming = None
        self._after_step(state, output)
        if self.events.active:
            self.events.emit(
                StepCompleted(
                    state.task_id,
                    step_id=picked.step_id,
                    is_last=output.is_last,
                    next_step_ids=tuple(s.step_id for s in output.next_steps),
                    latency_s=latency,
                )
            )
        txn.release(self, state, att.claim)  # the last change: the task is free again

    # ----- stepping (reference API) ------------------------------------------------------
    async def arun_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the next step (or ``step``); ``input`` is a person's word for it (steering: on a
        task's first step the model gets it after the question)."""
        return await self._astep(task_id, step, input=input, mode="wait", **kwargs)

    def run_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Run the next step (or ``step``); ``input`` is a person's word for it (steering: on a
        task's first step the model gets it after the question)."""
        return _sync.run_sync(self._astep(task_id, step, input=input, mode="wait", **kwargs))

    async def astream_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Like ``arun_step``, with the model's words streamed as they come (see ``stream_step``)."""
        return await self._astep(task_id, step, input=input, mode="stream", **kwargs)

    def stream_step(
        self, task_id: TaskRef, input: str | None = None, step: TaskStep | None = None, **kwargs: Any
    ) -> TaskStepOutput:
        """Like ``run_step``, with the model's words streamed as they come.

        A reply that starts with text returns at once: ``output.output`` streams it, and the
        step runs on until the stream has been read to its end (``print_response_stream()``,
        ``str()``, ``finalize_response``; any later call on the task reads the rest first).
        Until then ``is_last`` says what the reply looks like so far (an answer); at its end
        the step is what the same reply makes of it with ``run_step``: tool calls after the
        text run (or wait for approval) and the step is not the last one.
        """
        return _sync.run_sync(self._astep(task_id, step, input=input, mode="stream", **kwargs))

    def undo_step(self, task_id: TaskRef, input: str | None = None) -> TaskStep:
        """Take back the last completed step and queue it again (with new ``input`` if given).

        Memory, extra state, queue and completed outputs go back to what they were before
        that step ran; the branch it produced stays in the graph, greyed.
        """
        state = self.state_of(task_id)

        def undo() -> TaskStep:
            step = self._take_back(state)
            if input is not None:
                step.input = input
            self._emit(StepUndone(state.task_id, step_id=step.step_id))
            return step

        return self._transact(
            state,
            lambda: self._check_undo(state),
            lambda: [state.steps[state.history[-1].step_id]],
            undo,
        )

    def skip_step(self, task_id: TaskRef, step_id: str | None = None, *, reason: str = "skipped") -> TaskStepOutput:
        """Mark a queued step done without running it: by default the step that failed.

        The worker is not called. The step's output says it was skipped (``reason``), and the
        task moves on: steps linked after it (a plan's DAG) become ready, or, when nothing is
        linked after it, a fresh step with the same state is queued (what the next Run step
        runs; inject input to steer it). Undo takes a skip back like any step.
        """
        state = self.state_of(task_id)
        chosen: list[TaskStep] = []

        def check() -> None:
            self._check_runnable(state)
            sid = step_id if step_id is not None else state.failed_step_id()
            queued = [s.step_id for s in state.step_queue]
            if sid is None:
                raise TaskStateError(
                    f"nothing to skip in task {state.task_id!r}: no step has failed; "
                    f"pass step_id= one of the queued steps {queued}"
                )
            found = next((s for s in state.step_queue if s.step_id == sid), None)
            if found is None:
                raise ValueError(f"step {sid!r} is not queued in task {state.task_id!r}; queued: {queued}")
            chosen[:] = [found]

        def skip() -> TaskStepOutput:
            step = chosen[0]
            snap = self._snapshot_step(state, step)
            state.step_queue.remove(step)
            # the next step carries the state on, but not the skipped step's tool journal
            follow = [] if step.next_steps else [step.get_next_step(step_state=calls.without_journal(step.step_state))]
            output = TaskStepOutput(output=SkippedOutput(reason=reason), task_step=step, next_steps=follow,
                                    is_last=False)
            output._set_measured(latency_s=0.0, input=step.input)
            self._commit(state, step, output, snap)
            self._after_step(state, output)
            self._emit(StepCompleted(state.task_id, step_id=step.step_id, is_last=False,
                                     next_step_ids=tuple(s.step_id for s in follow), latency_s=0.0))
            return output

        return self._transact(state, check, lambda: list(chosen), skip)

    def _transact(
        self,
        state: TaskState,
        check: Callable[[], Any],
        touched: Callable[[], list[TaskStep]],
        body: Callable[[], _T],
        after: str = "undo after it ends",
    ) -> _T:
        """Run ``body`` (undo, goto, fork) all or nothing: holding the task's claim, after
        ``check``, with a checkpoint of the task that any exception restores."""
        __tracebackhide__ = True  # IPython: the learner's call, then the message
        streaming.end_streamed_step(state)
        cp: txn.Checkpoint | None = None
        token: txn.Claim | None = None
        try:
            token = txn.Claim()
            if not txn.claim(self, state, token):
                token = None
                raise TaskStateError(f"{busy_message(state)}; {after}")
            check()
            cp = txn.Checkpoint(state, touched())
            result = body()
            txn.release(self, state, token)  # the last change
            return result
        except BaseException as error:
            if token is not None and txn.claim(self, state, token):  # ours (again): put it back
                try:
                    if cp is not None:
                        txn.retry(cp.restore)
                finally:
                    txn.release(self, state, token)
                if cp is not None:
                    self._emit(StepEdited(state.task_id, step_id="", fields=("reverted",)))
            if isinstance(error, Exception) and _sync.raised_on_purpose(error):
                raise _sync.trim_traceback(error)  # "nothing to undo": shown from the caller's line
            raise

    def _check_undo(self, state: TaskState) -> None:
        if state.finalized or state.abandoned:
            raise TaskStateError(
                f"task {state.task_id!r} is {state.status.value}; only a task that is not "
                "finalized or abandoned can undo a step"
            )
        if state.running:
            raise TaskStateError(busy_message(state) + "; undo after it ends")
        if not state.history:
            why = "no step has completed" if not state.completed_steps else (
                "undo history is off (keep_history=False)"
            )
            raise TaskStateError(f"nothing to undo in task {state.task_id!r}: {why}")

    def _undo_last(self, state: TaskState) -> TaskStep:
        """Take back the last completed step (no checks, no event); return it."""
        _, snap = state.undo()
        return state.steps[snap.step_id]

    def _take_back(self, state: TaskState) -> TaskStep:
        """Undo the last completed step (``undo_step``, ``goto_step``, ``fork``): the approvals
        its calls ran with are used up, so running it again waits for a new decision."""
        from nbagent.approval import withdraw_used

        step = self._undo_last(state)
        if withdraw_used(step, "the step that ran the call was undone; running it again needs a new decision"):
            self._emit(StepEdited(state.task_id, step_id=step.step_id, fields=("approval",)))
        return step

    def abandon_task(self, task_id: TaskRef) -> None:
        """Give up on a task: nothing it did reaches the runner's memory."""
        state = self.state_of(task_id)
        if state.finalized:
            raise TaskStateError(f"task {state.task_id!r} is already finalized")
        streaming.end_streamed_step(state)
        if state.running:
            raise TaskStateError(f"task {state.task_id!r} is running a step; abandon after it ends")
        state.abandoned = True
        self._emit(TaskAbandoned(state.task_id))

    # ----- prompts: the worker's, as "agent_worker:<key>" (reference PromptMixin) ----------
    def _get_prompt_modules(self) -> dict[str, PromptMixin]:
        worker = self.agent_worker
        return {"agent_worker": worker} if isinstance(worker, PromptMixin) else {}

    # ----- held steps (is_ready=False; nbagent.engine.holds) --------------------------------
    def release_step(self, task_id: TaskRef, step_id: str | None = None) -> list[TaskStep]:
        """Let held steps run (``is_ready=True``): ``step_id``, or every held step of the
        task. Returns the steps released."""
        from nbagent.engine.holds import release_step

        return release_step(self, task_id, step_id)

    def hold_step(self, task_id: TaskRef, step_id: str) -> TaskStep:
        """Hold a queued step back (``is_ready=False``) until ``release_step``."""
        from nbagent.engine.holds import hold_step

        return hold_step(self, task_id, step_id)

    # ----- approval of tool calls (nbagent.approval, nbagent.engine.approvals) -------------
    @property
    def approve_tools(self) -> Any:
        """Runner-wide approval policy: None (only tools marked ``requires_approval``),
        ``"all"``, a list of tool names, or ``fn(tool_name, arguments) -> bool``."""
        return self.__dict__.get("_approve_tools")

    @approve_tools.setter
    def approve_tools(self, policy: Any) -> None:
        from nbagent.approval import check_policy

        self.__dict__["_approve_tools"] = check_policy(policy)

    def pending_approvals(self, task_id: TaskRef) -> list[Any]:
        """The task's tool calls waiting for a decision (``call_id``, ``tool_name``, ``arguments``)."""
        return _approvals().pending_approvals(self, task_id)

    def approve(
        self, task_id: TaskRef, call_id: str, arguments: dict[str, Any] | None = None, *, by: str = "user"
    ) -> dict[str, Any]:
        """Approve a waiting call, optionally with edited ``arguments``; returns the decision."""
        streaming.end_streamed_step(self.state_of(task_id))
        return _approvals().approve(self, task_id, call_id, arguments, by=by)

    def reject(
        self, task_id: TaskRef, call_id: str, reason: str | None = None, *, by: str = "user"
    ) -> dict[str, Any]:
        """Reject a waiting call; the model gets ``reason`` as its result. Returns the decision."""
        streaming.end_streamed_step(self.state_of(task_id))
        return _approvals().reject(self, task_id, call_id, reason, by=by)

    # ----- finishing ---------------------------------------------------------------------
    def _sources(self, state: TaskState) -> list[ToolOutput]:
        seen: list[ToolOutput] = []
        for out in state.completed_steps:
            seen.extend(out.tool_outputs)
        extra = state.task.extra_state.get("sources")
        if isinstance(extra, list):
            ids = {id(s) for s in seen}
            seen.extend(s for s in extra if isinstance(s, ToolOutput) and id(s) not in ids)
        return seen

    def finalize_response(
        self, task_id: TaskRef, step_output: TaskStepOutput | None = None
    ) -> ChatResponseType:
        """Finish a task whose last step is done: run the worker's finalize hook, merge the
        task's new messages into memory and return the answer.

        A streamed answer is finalized when its stream ends. If that reply turns out to call
        tools after its text (see ``stream_step``), its step was not the last one: the end of
        the stream raises TaskStateError, and the task goes on.
        """
        state = self.state_of(task_id)
        if state.finalized:
            return state.final_response  # type: ignore[no-any-return]
        if state.abandoned:
            raise TaskStateError(f"task {state.task_id!r} was abandoned; it has no response")
        if step_output is None:
            if state.streaming is not None:
                step_output = state.streaming
            elif not state.completed_steps:
                raise ValueError(f"task {state.task_id!r} has no completed steps to finalize")
            else:
                step_output = state.completed_steps[-1]
        if step_output is state.streaming and step_output.is_last:
            return self._finalize_when_streamed(state, step_output)
        if not step_output.is_last:
            raise ValueError(
                f"task {state.task_id!r} is not done: finalize_response needs the output of "
                f"the last step (is_last=True), got step {step_output.task_step.step_id!r}"
            )
        output = step_output.output
        if not isinstance(output, (AgentChatResponse, StreamingAgentChatResponse)):
            output = AgentChatResponse(response="" if output is None else str(output))
            step_output.output = output
        sources = self._sources(state)
        output.sources = sources
        if isinstance(output, StreamingAgentChatResponse) and not output.is_done:
            output.add_done_callback(lambda text: self._finish(state, output, text))
        else:
            self._finish(state, output, output.response)
        return output

    def _finalize_when_streamed(self, state: TaskState, step_output: TaskStepOutput) -> StreamingAgentChatResponse:
        """The answer of a step whose reply still streams: finalized at the end of its stream,
        if the step turns out to be the last one."""
        stream = step_output.output
        assert isinstance(stream, StreamingAgentChatResponse)

        def when_read(text: str) -> None:
            if step_output.is_last:
                answer = step_output.output  # the stream, or what the step ended saying instead
                if not isinstance(answer, (AgentChatResponse, StreamingAgentChatResponse)):
                    answer = step_output.output = AgentChatResponse(response=str(answer))
                answer.sources = self._sources(state)
                self._finish(state, answer, text if answer is stream else answer.response)
                return
            waiting = [c.tool_name for c in self.pending_approvals(state.task_id)]
            ran = [o.tool_name for o in step_output.tool_outputs]
            raise TaskStateError(
                f"the streamed reply of step {step_output.task_step.step_id!r} ended with tool "
                f"calls, so it was not the task's answer: "
                + (f"{ran} ran" if ran else "")
                + (" and " if ran and waiting else "")
                + (f"{waiting} wait for approval (agent.approve / agent.reject)" if waiting else "")
                + f"; task {state.task_id!r} is not finalized: run its next step"
            )

        stream.add_done_callback(when_read)
        return stream

    def _finish(self, state: TaskState, output: ChatResponseType, text: str) -> None:
        if state.finalized:
            return
        before = self.memory.snapshot() if state.adds_to_memory else None
        try:  # all or nothing: the task's messages reach memory once, with finalized set
            self.agent_worker.finalize_task(state.task)
            if before is not None:
                self.memory.put_messages(state.task.scratch_memory.get_all())
            state.final_response = output
            state.finalized = True
        except BaseException:
            if not state.finalized:
                state.final_response = None
                if before is not None:
                    txn.retry(self.memory.restore, before)
            raise
        state.history = []  # a finalized task can no longer undo: its snapshots are dead weight
        self._emit(TaskFinalized(state.task_id, response=text))
        if self.delete_task_on_finish and state.task_id in self._tasks:
            self.delete_task(state.task_id)
        else:
            self._forget_finished()

    def _forget_finished(self) -> None:
        """Forget the oldest finalized tasks beyond ``max_finished_tasks``, so that a long
        session's memory stays bounded (the conversation memory keeps what they said)."""
        limit = self.max_finished_tasks
        if limit is None:
            return
        finished = [s.task_id for s in self._tasks.values() if s.finalized]
        for task_id in finished[: max(len(finished) - limit, 0)]:
            self.delete_task(task_id)

    # ----- end to end --------------------------------------------------------------------
    async def _achat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None,
        tool_choice: str | dict[str, Any] | None,
        mode: Mode,
    ) -> ChatResponseType:
        if chat_history is not None:
            self.memory.set(chat_history)
        choice = self.default_tool_choice if tool_choice is None else tool_choice
        task = self.create_task(message)
        output = await self._arun_to_end(task.task_id, mode, choice)
        if output is self.state_of(task).streaming:  # a reply still streams: it may not be the answer
            return streaming.chat_stream(self, task.task_id, output)
        response = self.finalize_response(task.task_id, output)
        if mode == "stream" and isinstance(response, AgentChatResponse):
            stream = StreamingAgentChatResponse(iter([response.response]), sources=response.sources)
            stream.structured_response = response.structured_response  # a typed answer stays typed
            return stream
        return response

    async def _arun_to_end(
        self, task_id: str, mode: Mode, tool_choice: str | dict[str, Any]
    ) -> TaskStepOutput:
        """Run the task's steps until the last one (``chat`` and friends; the parallel runner
        schedules its DAG here instead)."""
        choice = tool_choice
        while True:
            output = await self._astep(task_id, mode=mode, tool_choice=choice)
            if output.is_last:
                return output
            choice = "auto"  # a forced tool choice applies to the first step only

    async def arun_task(
        self, task_id: TaskRef, *, tool_choice: str | dict[str, Any] | None = None
    ) -> TaskStepOutput:
        """Run the task's steps until its last one and return that step's output (not yet
        finalized: ``finalize_response`` makes the answer). ``tool_choice`` (default: the
        runner's) applies to the first step only, as in ``chat``."""
        state = self.state_of(task_id)
        choice = self.default_tool_choice if tool_choice is None else tool_choice
        return await self._arun_to_end(state.task_id, "wait", choice)

    def adopt_task(self, state: TaskState) -> TaskState:
        """Make a task that another runner holds (a loaded run, a batch record) a task of this
        one, as it is: it can be opened, drawn, costed and saved like the others. A task of
        this runner with the same id is replaced; listeners hear ``TaskCreated``."""
        if not isinstance(state, TaskState):
            raise TypeError(f"adopt_task takes a TaskState (runner.state_of(task)), got {type(state).__name__}")
        state.task._runner = self
        self._tasks[state.task_id] = state
        self._emit(TaskCreated(state.task_id, input=state.task.input))
        return state

    async def achat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> AgentChatResponse:
        """Run a whole task for ``message`` and return the answer."""
        response = await self._achat(message, chat_history, tool_choice, "wait")
        if isinstance(response, StreamingAgentChatResponse):
            return await response.aget_response()
        return response

    def chat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> AgentChatResponse:
        """Run a whole task for ``message`` and return the answer."""
        return _sync.run_sync(self.achat(message, chat_history, tool_choice))

    async def astream_chat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> StreamingAgentChatResponse:
        """Run a task; the answer comes back as a stream of tokens."""
        response = await self._achat(message, chat_history, tool_choice, "stream")
        assert isinstance(response, StreamingAgentChatResponse)
        return response

    def stream_chat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> StreamingAgentChatResponse:
        """Run a task; the answer comes back as a stream of tokens."""
        return _sync.run_sync(self.astream_chat(message, chat_history, tool_choice))

    async def aquery(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Answer one question with no conversation history; memory is left as it was.

        Takes a string or, as on the reference, a query bundle (anything with ``query_str``).
        """
        query = query_text(str_or_query_bundle)
        saved = self.memory
        self.memory = ChatMemoryBuffer(token_limit=saved.token_limit, tokenizer_fn=saved.tokenizer_fn)
        try:
            return await self.achat(query)
        finally:
            self.memory = saved

    def query(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Answer one question with no conversation history; memory is left as it was."""
        return _sync.run_sync(self.aquery(str_or_query_bundle))

    def reset(self) -> None:
        """Forget the conversation and every task; MCP tools' sessions close (they reopen lazily)."""
        from nbagent.mcp import close_tool_sessions

        self.memory.reset()
        self._tasks.clear()
        close_tool_sessions(getattr(self.agent_worker, "tools", None))
        self._emit(RunnerReset(""))

    def run_batch(self, inputs: Any, **options: Any) -> Any:
        """One task per input, ``max_concurrency`` at a time; a ``BatchRun``. See ``nbagent.batch``."""
        from nbagent.batch import run_batch

        return run_batch(self, inputs, **options)

    async def arun_batch(self, inputs: Any, **options: Any) -> Any:
        """``run_batch`` on the running event loop. See ``nbagent.batch``."""
        from nbagent.batch import arun_batch

        return await arun_batch(self, inputs, **options)

    # ----- views -------------------------------------------------------------------------
    def graph(self, task_id: TaskRef | None = None, **kwargs: Any) -> Any:
        """The task's step DAG, displayable in Jupyter (``.source`` is the DOT text)."""
        from nbagent.viz.graph import StepGraph

        state = self.state_of(task_id) if task_id is not None else self._latest_state()
        return StepGraph(state, **kwargs)

    def panel(self, task: TaskRef | None = None, **kwargs: Any) -> Any:
        """An ipywidgets control panel driving this runner (``throttle_s``, ``auto_finalize``)."""
        from nbagent.viz.panel import AgentPanel

        return AgentPanel(self, task, **kwargs)

    def live_graph(self, task: TaskRef | None = None, **kwargs: Any) -> Any:
        """A widget showing the task's step DAG, redrawn after every step."""
        from nbagent.viz.live import LiveGraph

        return LiveGraph(self, task, **kwargs)

    def _latest_state(self) -> TaskState:
        if not self._tasks:
            raise ValueError("the runner has no tasks yet; create one with create_task(...)")
        return next(reversed(self._tasks.values()))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(worker={type(self.agent_worker).__name__}, "
            f"tasks={len(self._tasks)}, memory={counted(len(self.memory), 'message')})"
        )

    def _repr_html_(self) -> str | None:
        return html_view(self)

    # ----- save / load, autosave, time travel, cost (nbagent.persist, .branches, .costs) ---
    def _after_step(self, state: TaskState, output: TaskStepOutput) -> None:
        """Bookkeeping after a step completed: the model it ran with (for its cost)."""
        from nbagent.costs import record_step

        record_step(self, state, output)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write every task (steps, links, queue, outputs, memory, state, failures, undo
        history) to ``path`` as versioned JSON, atomically. See ``nbagent.persist``."""
        from nbagent.persist import save_runner

        return save_runner(self, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        agent_worker: BaseAgentWorker | None = None,
        *,
        autosave: bool = False,
        restore_ids: bool = True,
        **runner_kwargs: Any,
    ) -> Any:
        """A runner rebuilt from a file ``save`` wrote: its tasks continue where they stopped.

        Without ``agent_worker`` the run can be viewed and reported, not stepped.
        ``autosave=True`` keeps saving to ``path``. A run saved while ids were seeded
        (``seed_ids``) continues that id sequence unless ``restore_ids=False``.
        """
        from nbagent.persist import load_runner

        runner = load_runner(path, agent_worker, runner_cls=cls, restore_ids=restore_ids, **runner_kwargs)
        if autosave:
            runner.autosave = path
        return runner

    @property
    def autosave(self) -> Path | None:
        """The file saved after every step and state change, or None (set a path to start)."""
        from nbagent.persist import autosave_path

        return autosave_path(self)

    @autosave.setter
    def autosave(self, path: str | os.PathLike[str] | None) -> None:
        from nbagent.persist import set_autosave

        set_autosave(self, path)

    def goto_step(self, task_id: TaskRef, step_id: str, *, before: bool = False) -> TaskStep | None:
        """Go back to just after ``step_id`` completed (``before=True``: just before it ran),
        undoing every later step. Returns the step that runs next. See ``nbagent.branches``."""
        from nbagent.branches import goto_step

        return goto_step(self, task_id, step_id, before=before)

    def fork(self, task_id: TaskRef, step_id: str, input: str | None = None) -> TaskStep:
        """Go back to just before ``step_id`` and queue a new step (new id) in its place; the
        old branch stays in the graph. Returns the new step."""
        from nbagent.branches import fork

        return fork(self, task_id, step_id, input=input)

    def branches(self, task_id: TaskRef) -> list[Any]:
        """The task's branches (paths of step ids), older first; see ``nbagent.branches``."""
        from nbagent.branches import branches

        return branches(self, task_id)

    def compare(self, task_id: TaskRef, a: Any, b: Any) -> Any:
        """Two branches side by side (a Branch, an index into ``branches``, "current" or a
        step id each); displays as HTML in a notebook."""
        from nbagent.branches import compare

        return compare(self, task_id, a, b)

    @property
    def skipped_tasks(self) -> dict[str, str]:
        """Tasks the load that built this runner skipped as damaged: task id -> what was damaged
        (empty for a runner made here, or loaded whole). See ``nbagent.store.damage``."""
        from nbagent.store.damage import skipped_tasks

        return skipped_tasks(self)

    @property
    def pricing(self) -> Any:
        """This runner's prices (a ``nbagent.costs.Pricing``), or None to use the global ones."""
        from nbagent.costs import own_pricing

        return own_pricing(self)

    @pricing.setter
    def pricing(self, value: Any) -> None:
        from nbagent.costs import set_runner_pricing

        set_runner_pricing(self, value)

    def cost(self, task_id: TaskRef | None = None) -> Any:
        """Tokens and money of a task (``TaskCost``), or of every task (``RunnerCost``)."""
        from nbagent.costs import runner_cost, task_cost

        if task_id is None:
            return runner_cost(self)
        return task_cost(self, self.state_of(task_id))
