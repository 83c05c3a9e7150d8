"""Whole tasks: run a task's steps to its end, finalize the answer into the conversation,
and the reference's chat engine on top (``chat``, ``stream_chat``, ``query`` and their async
twins, ``reset``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbagent import _sync
from nbagent._lazy import LazyModule
from nbagent.engine import streaming, txn
from nbagent.engine.base_agent import query_text
from nbagent.engine.core import ChatResponseType, Mode, StepCore
from nbagent.engine.errors import TaskRef, TaskStateError
from nbagent.engine.state import TaskState
from nbagent import events as ev
from nbagent.memory import ChatMemoryBuffer

if TYPE_CHECKING:
    from nbagent.messages import ChatMessage, ToolOutput
    from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse, TaskStepOutput

__all__ = ["ChatLoop"]


# imported on first use: ``import nbagent`` defines no model
@LazyModule
def messages() -> ModuleType:
    from nbagent import messages as module

    return module


@LazyModule
def schema() -> ModuleType:
    from nbagent import schema as module

    return module


class ChatLoop(StepCore):
    """Run tasks to their end and finalize them; the chat engine of the reference."""

    # ----- finishing ---------------------------------------------------------------------
    def _sources(self, state: TaskState) -> list[ToolOutput]:
        seen: list[ToolOutput] = []
        for out in state.completed_steps:
            seen.extend(out.tool_outputs)
        extra = state.task.extra_state.get("sources")
        if isinstance(extra, list):
            ids = {id(s) for s in seen}
            seen.extend(s for s in extra if isinstance(s, messages.ToolOutput) and id(s) not in ids)
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
        if not isinstance(output, (schema.AgentChatResponse, schema.StreamingAgentChatResponse)):
            output = schema.AgentChatResponse(response="" if output is None else str(output))
            step_output.output = output
        sources = self._sources(state)
        output.sources = sources
        if isinstance(output, schema.StreamingAgentChatResponse) and not output.is_done:
            output.add_done_callback(lambda text: self._finish(state, output, text))
        else:
            self._finish(state, output, output.response)
        return output

    def _finalize_when_streamed(self, state: TaskState, step_output: TaskStepOutput) -> StreamingAgentChatResponse:
        """The answer of a step whose reply still streams: finalized at the end of its stream,
        if the step turns out to be the last one."""
        stream = step_output.output
        assert isinstance(stream, schema.StreamingAgentChatResponse)

        def when_read(text: str) -> None:
            if step_output.is_last:
                answer = step_output.output  # the stream, or what the step ended saying instead
                if not isinstance(answer, (schema.AgentChatResponse, schema.StreamingAgentChatResponse)):
                    answer = step_output.output = schema.AgentChatResponse(response=str(answer))
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
        self._emit(ev.TaskFinalized(state.task_id, response=text))
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
        *,
        memory: ChatMemoryBuffer | None = None,
    ) -> ChatResponseType:
        """One task for ``message``, run to its answer. With ``memory``, the task reads that
        conversation instead of the runner's and adds nothing to the runner's (``query``)."""
        if chat_history is not None:
            self.memory.set(chat_history)
        choice = self.default_tool_choice if tool_choice is None else tool_choice
        if memory is None:
            task = self.create_task(message)
        else:
            extra_state = copy.deepcopy(self.init_task_state_kwargs)
            task = self._new_task(message, extra_state, memory=memory, adds_to_memory=False)
        output = await self._arun_to_end(task.task_id, mode, choice)
        if output is self.state_of(task).streaming:  # a reply still streams: it may not be the answer
            return streaming.chat_stream(self, task.task_id, output)
        response = self.finalize_response(task.task_id, output)
        if mode == "stream" and isinstance(response, schema.AgentChatResponse):
            stream = schema.StreamingAgentChatResponse(iter([response.response]), sources=response.sources)
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

    async def achat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> AgentChatResponse:
        """Run a whole task for ``message`` and return the answer."""
        response = await self._achat(message, chat_history, tool_choice, "wait")
        if isinstance(response, schema.StreamingAgentChatResponse):
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
        assert isinstance(response, schema.StreamingAgentChatResponse)
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
        # a conversation of its own, so the runner's memory (and what a store saved of it) is
        # never swapped out, not even while the query runs
        own = ChatMemoryBuffer(token_limit=self.memory.token_limit, tokenizer_fn=self.memory.tokenizer_fn)
        response = await self._achat(query, None, None, "wait", memory=own)
        if isinstance(response, schema.StreamingAgentChatResponse):
            return await response.aget_response()
        return response

    def query(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """Answer one question with no conversation history; memory is left as it was."""
        return _sync.run_sync(self.aquery(str_or_query_bundle))

    def reset(self) -> None:
        """Forget the conversation and every task; MCP tools' sessions close (they reopen lazily)."""
        from nbagent.mcp import close_tool_sessions

        self.memory.reset()
        self._tasks.clear()
        close_tool_sessions(getattr(self.agent_worker, "tools", None))
        self._emit(ev.RunnerReset(""))

