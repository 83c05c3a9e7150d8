"""FunctionCallingAgentWorker: an agent for models with a tools API (OpenAI-style tool calls).

Each step sends one request: the optional system prompt, the runner's history, then this
task's own messages (``task.scratch_memory``). A reply with tool calls runs the tools
(concurrently by default), appends the assistant's call message and one ``role=tool`` reply
per call to the scratch memory, and queues another step. A reply without tool calls is the
answer.

State between steps lives in ``task.extra_state`` under two keys:

- ``"sources"``: an ``AppendLog`` of every ``ToolOutput`` of the task (O(1) snapshots);
- ``"function_calls"``: how many tool calls have run so far.

Rules worth knowing (each is tested):

- ``max_function_calls`` caps the tool calls that run in one task. Once that many have run,
  the next request is sent with ``tool_choice="none"`` so the model must answer. Calls of one
  reply that go past the cap are not run; the model sees an error observation for each. If
  the model calls tools anyway after ``"none"``, those calls are not run and the reply's text
  is the answer; the calls are listed in the response's ``metadata["unexecuted_tool_calls"]``.
- ``return_direct``: when a tool with ``return_direct=True`` succeeds, its output is the
  answer and the task ends. If several did in one reply, the first in call order wins. The
  answer is also stored as an assistant message, so the next turn's history reads naturally.
- Streaming: a streamed reply is the same reply as unstreamed, read as it comes. Text that
  arrives before any tool call streams to the caller at once; the step's output is then
  returned with ``is_last=True`` for now, and when the reply ends it is handled exactly as
  ``arun_step`` handles it (``finish_step``): tool calls after the text run, or wait for
  approval, and the step is not the last one (the runner ends the step there). A reply that
  starts with tool calls is read to its end first.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from nbagent import approval, structured
from nbagent import calls as calls_
from nbagent._compat import pop_callback_manager
from nbagent.llms.base import ChatResponse
from nbagent.llms.stream import open_stream
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.prompts import PromptDictType, PromptTemplate, template_text
from nbagent.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.tools import FunctionTool, as_tools, tools_by_name
from nbagent.workers.base import BaseAgentWorker, EmptyResponseError, person_input
from nbagent.workers.tool_calls import (
    CALLS_KEY,
    SOURCES_KEY,
    ToolCallSteps,
    args_json,
    as_assistant,
    check_tool_choice,
    dump_calls,
)
from nbagent.workers.typed_answers import TypedAnswerSteps

__all__ = [
    "FunctionCallingAgentWorker",
    "OpenAIAgentWorker",
    "SOURCES_KEY",
    "CALLS_KEY",
    "UNEXECUTED_KEY",
]

log = logging.getLogger("nbagent.workers.function_calling")

#: Metadata key listing tool calls a reply asked for that were not run (see module docstring).
UNEXECUTED_KEY = "unexecuted_tool_calls"
_FIRST = "is_first"
_SAME: Any = object()  # ``_prepare``'s default input: the step's own


class FunctionCallingAgentWorker(ToolCallSteps, TypedAnswerSteps, BaseAgentWorker):
    """Calls tools through the model's tools API until the model answers in text."""

    def __init__(
        self,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None,
        llm: Any,
        max_function_calls: int | None = 10,
        allow_parallel_tool_calls: bool = True,
        system_prompt: str | None = None,
        verbose: bool = False,
        tool_retriever: Any = None,
        output_cls: type[Any] | None = None,
        structured_mode: str = "auto",
        max_output_retries: int = 2,
    ) -> None:
        if llm is None:
            raise ValueError(
                f"{type(self).__name__} needs llm=... : a function-calling model such as "
                "OpenAILLM(model=...) or, offline, ScriptedLLM([...])"
            )
        if not getattr(llm, "is_function_calling_model", False):
            raise ValueError(
                f"{type(self).__name__} needs a model with a tools API, but "
                f"{llm!r} has is_function_calling_model=False; use ReActAgentWorker (it "
                "works with any chat model), or a model that supports tool calls"
            )
        if max_function_calls is not None and (
            isinstance(max_function_calls, bool)
            or not isinstance(max_function_calls, int)
            or max_function_calls < 0
        ):
            raise ValueError(
                f"max_function_calls must be an int >= 0 or None (no limit), "
                f"got {max_function_calls!r}"
            )
        if tools and tool_retriever is not None:
            raise ValueError("pass either tools or tool_retriever, not both")
        if tool_retriever is not None and not (
            hasattr(tool_retriever, "retrieve") or hasattr(tool_retriever, "aretrieve")
        ):
            raise TypeError(
                "tool_retriever must have retrieve(text) -> tools (or async aretrieve), got "
                f"{type(tool_retriever).__name__}"
            )
        structured.check_output_cls(output_cls, structured_mode, max_output_retries)
        self.output_cls = output_cls
        self.structured_mode = structured_mode
        self.max_output_retries = max_output_retries
        self.tools: list[FunctionTool] = as_tools(tools)
        if output_cls is not None and structured.FINAL_TOOL in {t.name for t in self.tools}:
            raise ValueError(
                f"a tool is named {structured.FINAL_TOOL!r}, the name output_cls uses for the "
                "answer; rename the tool"
            )
        self.llm = llm
        self.max_function_calls = max_function_calls
        self.allow_parallel_tool_calls = allow_parallel_tool_calls
        self.system_prompt = None if system_prompt is None else template_text(system_prompt, "system_prompt")
        self.verbose = verbose
        self.tool_retriever = tool_retriever

    # ----- prompts ("system_prompt": sent first on every model call; empty: none) ----------
    def _get_prompts(self) -> PromptDictType:
        return {"system_prompt": PromptTemplate(self.system_prompt or "")}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        if "system_prompt" in prompts_dict:
            self.system_prompt = prompts_dict["system_prompt"].template or None

    def prompt_preview(self) -> str | None:
        return self.system_prompt or None

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        llm: Any = None,
        **kwargs: Any,
    ) -> FunctionCallingAgentWorker:
        """Build the worker the way the reference API does (``callback_manager`` is ignored)."""
        pop_callback_manager(kwargs, "from_tools")
        return cls(tools=list(tools or []), llm=llm, **kwargs)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["max_function_calls"] = self.max_function_calls
        info["allow_parallel_tool_calls"] = self.allow_parallel_tool_calls
        if self.tool_retriever is not None:
            info["tool_retriever"] = type(self.tool_retriever).__name__
        if self.output_cls is not None:
            info["output_cls"] = self.output_cls.__name__
        return info

    def __repr__(self) -> str:
        names = [t.name for t in self.tools]
        return (
            f"{type(self).__name__}(llm={self.llm!r}, tools={names}, "
            f"max_function_calls={self.max_function_calls})"
        )

    # ----- tools -------------------------------------------------------------------------
    async def aget_tools(self, input: str) -> list[FunctionTool]:
        """The tools offered for ``input``: the fixed list, or what the retriever returns.

        Example:

        >>> import asyncio
        >>> from nbagent import FunctionCallingAgentWorker, ScriptedLLM
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> worker = FunctionCallingAgentWorker.from_tools([add], llm=ScriptedLLM([]))
        >>> [tool.metadata.name for tool in asyncio.run(worker.aget_tools("1 + 2?"))]
        ['add']
        """
        retriever = self.tool_retriever
        if retriever is None:
            return list(self.tools)
        if hasattr(retriever, "aretrieve"):
            found = await retriever.aretrieve(input)
        else:
            found = retriever.retrieve(input)
            if inspect.isawaitable(found):
                found = await found
        return as_tools(found)

    # ----- steps -------------------------------------------------------------------------
    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        task.extra_state[SOURCES_KEY] = AppendLog()
        task.extra_state[CALLS_KEY] = 0
        return TaskStep(task_id=task.task_id, input=task.input, step_state={_FIRST: True})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        if approval.record_of(step) is not None:
            return await self._run_decided(step, task)
        resumed = calls_.journaled_reply(calls_.current_journal())
        if resumed is not None:  # an earlier attempt ran calls of this reply: act on it again
            tools, _, _ = await self._prepare(step, task, kwargs.get("tool_choice"), given=resumed.input)
            return await self._handle_reply(step, task, tools, resumed.reply, resumed=resumed)
        tools, messages, choice = await self._prepare(step, task, kwargs.get("tool_choice"))
        offered, choice, extra = self._typed_request(tools, messages, choice)
        response: ChatResponse = await self.llm.achat(messages, tools=offered, tool_choice=choice, **extra)
        return await self._handle_reply(step, task, tools, response.message)

    async def astream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        if (
            approval.record_of(step) is not None
            or self.output_cls is not None  # a typed answer is validated whole: no token stream
            or calls_.journaled_reply(calls_.current_journal()) is not None
        ):
            return await self.arun_step(step, task, **kwargs)
        tools, messages, choice = await self._prepare(step, task, kwargs.get("tool_choice"))
        stream = await open_stream(self.llm.astream_chat(messages, tools=tools, tool_choice=choice))
        last: ChatResponse | None = None
        saw_calls = False
        while True:  # by hand, not `async for`: the stream stays open for the reply's tail
            try:
                chunk = await anext(stream)
            except StopAsyncIteration:
                break
            last = chunk
            if chunk.message.tool_calls:
                saw_calls = True
            elif chunk.delta and not saw_calls:
                return self._stream_reply(step, task, tools, stream, chunk)
        if last is None:
            raise RuntimeError(f"{self.llm!r} streamed no chunk at all; a reply needs at least one")
        return await self._handle_reply(step, task, tools, last.message)

    # ----- internals ---------------------------------------------------------------------
    async def _prepare(
        self, step: TaskStep, task: Task, tool_choice: Any, given: Any = _SAME
    ) -> tuple[list[FunctionTool], list[ChatMessage], Any]:
        """Record this step's user input, pick the tools and the tool choice, build the request.

        ``given``: the step input an earlier attempt's reply answered (a retry acting on it)."""
        text_in = step.input if given is _SAME else given
        state = task.extra_state
        if SOURCES_KEY not in state or CALLS_KEY not in state:
            raise RuntimeError(
                f"task {task.task_id!r} was not started by {type(self).__name__}.initialize_step "
                f"(extra_state lacks {SOURCES_KEY!r}/{CALLS_KEY!r}); create it with runner.create_task"
            )
        tools = await self.aget_tools(task.input)
        choice = check_tool_choice(tool_choice, tools)
        if self.max_function_calls is not None and state[CALLS_KEY] >= self.max_function_calls:
            choice = "none" if tools else None  # the budget is spent: the model must answer
        first = bool(step.step_state.get(_FIRST))
        added = person_input(step, task, first, text=text_in)
        for text in ([task.input] if first else []) + ([added] if added is not None else []):
            task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=text))
            if self.verbose:  # the reference's words
                print(f"Added user message to memory: {text}")
        messages: list[ChatMessage] = []
        if self.system_prompt:
            messages.append(ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt))
        messages.extend(task.memory.get())
        messages.extend(task.scratch_memory.get_all())
        return tools, messages, choice

    async def _handle_reply(
        self,
        step: TaskStep,
        task: Task,
        tools: list[FunctionTool],
        reply: ChatMessage,
        resumed: calls_.Resumed | None = None,
    ) -> TaskStepOutput:
        """Turn one whole reply into the step's output: run its tool calls, or answer.

        ``resumed``: the reply is an earlier attempt's, some of whose calls ran (their kept
        outputs are reused; input given to the retry goes to the model next)."""
        if not self.allow_parallel_tool_calls and len(reply.tool_calls) > 1:
            # one call per reply, as the reference's models enforce it (force_single_tool_call;
            # its worker raises for a model that does not) and as FunctionAgent does
            log.warning(
                "allow_parallel_tool_calls=False: the reply made %d tool calls; only the first (%s) is kept",
                len(reply.tool_calls),
                reply.tool_calls[0].tool_name,
            )
            reply = reply.model_copy(update={"tool_calls": list(reply.tool_calls[:1])})
        calls = list(reply.tool_calls)
        sources: AppendLog[ToolOutput] = task.extra_state[SOURCES_KEY]
        text = reply.text
        if self.verbose and reply.content:  # as the reference prints it, before any call runs
            print(f"=== LLM Response ===\n{reply.content}")
        typed = self._typed_answer(step, task, reply, calls)
        if typed is not None:
            return typed
        if calls and self._budget_left(task) == 0:
            # The model was told tool_choice="none" and called tools anyway: answer with text.
            message = ChatMessage(
                role=MessageRole.ASSISTANT,
                content=reply.content,
                additional_kwargs={**reply.additional_kwargs, UNEXECUTED_KEY: dump_calls(calls)},
            )
            task.scratch_memory.put(message)
            log.warning(
                "max_function_calls=%s reached; %d tool call(s) of the reply were not run",
                self.max_function_calls,
                len(calls),
            )
            answer = AgentChatResponse(
                response=text, sources=list(sources), metadata={UNEXECUTED_KEY: dump_calls(calls)}
            )
            return TaskStepOutput(output=answer, task_step=step, is_last=True)
        if not calls and not (text or "").strip():
            raise EmptyResponseError(
                f"the model returned an empty message (no text, no tool call) in step "
                f"{step.step_id!r} of task {task.task_id!r}; the step stays queued: run it "
                "again, steer it with run_step(task, input=...), or check the model"
            )
        if not calls:
            task.scratch_memory.put(as_assistant(reply))
            # as the reference: a step's sources are the calls it ran (none here);
            # finalize_response attaches every source of the task
            answer = AgentChatResponse(response=text, sources=[])
            return TaskStepOutput(output=answer, task_step=step, is_last=True)

        task.scratch_memory.put(as_assistant(reply))
        # the ids a person decides on: unique in the task, the model's own where it can be
        ids = list(resumed.ids) if resumed is not None and len(resumed.ids) == len(calls) else [
            calls_.issue_call_id(task, c.tool_id) for c in calls
        ]
        kept = {cid: out for cid in ids if (out := calls_.kept_output(cid)) is not None}
        policy = approval.policy_of(task)
        by_name = tools_by_name(tools)
        flags = [
            cid not in kept and approval.needs_approval(by_name.get(c.tool_name), c, policy)
            for c, cid in zip(calls, ids)
        ]
        if any(flags):  # nothing runs until a person decides; the next step runs the calls
            state: dict[str, Any] = {approval.APPROVAL_KEY: approval.make_record(calls, flags, ids)}
            if kept:  # calls that ran before this step failed once: their outputs go along
                state[calls_.JOURNAL_KEY] = {"outputs": kept}
            waiting = step.get_next_step(step_state=state)
            names = [c.tool_name for c, f in zip(calls, flags) if f]
            if self.verbose:
                print(f"=== Awaiting approval ===\n{names}")
            note = AgentChatResponse(
                response=text, metadata={approval.AWAITING_KEY: [cid for cid, f in zip(ids, flags) if f]}
            )
            return TaskStepOutput(
                output=note, task_step=step, next_steps=[waiting], is_last=False, reasoning=text or None
            )
        calls_.remember_reply(calls_.current_journal(), reply, ids, step.input)
        outputs = await self._run_calls(task, tools, calls, ids)
        carry = step.input if resumed is not None and step.input != resumed.input else None
        return self._after_calls(step, task, tools, calls, outputs, text, carry_input=carry)

    def _stream_reply(
        self,
        step: TaskStep,
        task: Task,
        tools: list[FunctionTool],
        stream: AsyncIterator[ChatResponse],
        first: ChatResponse,
    ) -> TaskStepOutput:
        """The reply started with text: stream it as it comes. It is the answer unless tool
        calls follow; its end decides, through ``_handle_reply`` as for an unstreamed reply."""
        latest = [first]

        async def rest() -> AsyncIterator[str]:
            async for chunk in stream:
                latest[0] = chunk
                if chunk.delta:
                    yield chunk.delta

        async def finish(_text: str) -> TaskStepOutput:
            # the last chunk holds the whole reply: its text and any tool calls
            return await self._handle_reply(step, task, tools, latest[0].message)

        response = StreamingAgentChatResponse(
            rest(),
            sources=list(task.extra_state[SOURCES_KEY]),
            prefix=first.delta or "",
            strip_end=True,  # no trailing newline on the final response (issue 11, item 7)
            finish_step=finish,
        )
        return TaskStepOutput(output=response, task_step=step, is_last=True)


class OpenAIAgentWorker(FunctionCallingAgentWorker):
    """A FunctionCallingAgentWorker that makes an ``OpenAILLM`` when no model is given."""

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        llm: Any = None,
        model: str = "gpt-4o-mini",
        base_url: str | None = None,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> OpenAIAgentWorker:
        """Build the worker; with no ``llm``, ``OpenAILLM(model, base_url, api_key)``.

        The key and URL default to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.
        """
        if llm is None:
            from nbagent.llms.openai import OpenAILLM  # imports openai: only when needed

            llm = OpenAILLM(model=model, base_url=base_url, api_key=api_key)
        pop_callback_manager(kwargs, "from_tools")
        return cls(tools=list(tools or []), llm=llm, **kwargs)

    def _print_call(self, call: ToolSelection, out: ToolOutput) -> None:
        """``verbose=True``: a call and its output in ``OpenAIAgent``'s words
        (llama-index-agent-openai), as the docs notebooks show them."""
        print("=== Calling Function ===")
        print(f"Calling function: {call.tool_name} with args: {args_json(call.tool_kwargs)}")
        print(f"Got output: {out.content}")
        print("========================\n")
