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
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from nbagent import approval, structured
from nbagent import calls as calls_
from nbagent._compat import pop_callback_manager
from nbagent.llms.base import ChatResponse
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.prompts import PromptDictType, PromptTemplate, template_text
from nbagent.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.tools import FunctionTool, acall_tool, as_tools, tools_by_name
from nbagent.workers.base import BaseAgentWorker, EmptyResponseError, person_input

__all__ = [
    "FunctionCallingAgentWorker",
    "OpenAIAgentWorker",
    "SOURCES_KEY",
    "CALLS_KEY",
    "UNEXECUTED_KEY",
]

log = logging.getLogger("nbagent.workers.function_calling")

SOURCES_KEY = "sources"
CALLS_KEY = "function_calls"
#: Metadata key listing tool calls a reply asked for that were not run (see module docstring).
UNEXECUTED_KEY = "unexecuted_tool_calls"
_FIRST = "is_first"
_SAME: Any = object()  # ``_prepare``'s default input: the step's own
_CHOICE_KEYWORDS = ("auto", "none", "required")


class FunctionCallingAgentWorker(BaseAgentWorker):
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
        """The tools offered for ``input``: the fixed list, or what the retriever returns."""
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
        stream = aiter(self.llm.astream_chat(messages, tools=tools, tool_choice=choice))
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
        choice = _check_tool_choice(tool_choice, tools)
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

    def _typed_request(
        self, tools: list[FunctionTool], messages: list[ChatMessage], choice: Any
    ) -> tuple[list[Any], Any, dict[str, Any]]:
        """With ``output_cls``: add the answer tool, the response format or the JSON prompt."""
        cls = self.output_cls
        if cls is None:
            return list(tools), choice, {}
        mode = structured.pick_mode(self.structured_mode, self.llm)
        if mode == "tool":
            if choice == "none":  # the tool budget is spent: answering is all that is left
                choice = {"type": "function", "function": {"name": structured.FINAL_TOOL}}
            return [*tools, structured.final_tool(cls)], choice or "auto", {}
        if mode == "response_format":
            return list(tools), choice, {"response_format": structured.response_format(cls)}
        at = 1 if messages and messages[0].role == MessageRole.SYSTEM else 0
        messages.insert(at, ChatMessage(role=MessageRole.SYSTEM, content=structured.json_instructions(cls)))
        return list(tools), choice, {}

    def _retry(self, task: Task, problem: str) -> str:
        """Count a bad typed answer; the feedback for the model, or raise when out of retries."""
        assert self.output_cls is not None
        used = int(task.extra_state.get(structured.RETRIES_KEY, 0))
        if used >= self.max_output_retries:
            raise structured.StructuredOutputError(
                f"the answer did not fit {self.output_cls.__name__} after {used} retries "
                f"(max_output_retries={self.max_output_retries}): {problem}. The step stays "
                "queued: raise worker.max_output_retries and run it again, or steer it with input"
            )
        task.extra_state[structured.RETRIES_KEY] = used + 1
        mode = structured.pick_mode(self.structured_mode, self.llm)
        return structured.feedback(problem, mode, self.output_cls)

    def _typed_answer(
        self, step: TaskStep, task: Task, reply: ChatMessage, calls: list[ToolSelection]
    ) -> TaskStepOutput | None:
        """Handle a reply when ``output_cls`` is set and the reply answers (a ``final_result``
        call, or text): the typed answer, or a visible retry step. None: not an answer."""
        cls = self.output_cls
        if cls is None:
            return None
        final = next((c for c in calls if c.tool_name == structured.FINAL_TOOL), None)
        if calls and final is None:
            return None  # ordinary tool calls
        sources: AppendLog[ToolOutput] = task.extra_state[SOURCES_KEY]
        task.scratch_memory.put(_as_assistant(reply))
        try:
            if final is not None:
                obj = structured.validate_args(final.tool_kwargs, cls)
            else:
                obj = structured.parse_json_answer(reply.text, cls)
        except ValueError as error:
            note = self._retry(task, str(error))
            outputs: list[ToolOutput] = []
            if final is None:
                task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=note))
            for c in calls:
                content = note if c is final else (
                    f"Error: not run: {structured.FINAL_TOOL} was called in the same reply"
                )
                out = ToolOutput(
                    content=content, tool_name=c.tool_name, raw_input=dict(c.tool_kwargs),
                    is_error=True, tool_call_id=c.tool_id,
                )
                outputs.append(out)
                task.scratch_memory.put(
                    ChatMessage(role=MessageRole.TOOL, content=content, tool_call_id=c.tool_id, name=c.tool_name)
                )
            if self.verbose:
                print(f"=== Typed answer rejected ===\n{error}")
            return TaskStepOutput(
                output=AgentChatResponse(response=note, metadata={"output_error": str(error)}),
                task_step=step,
                next_steps=[step.get_next_step(step_state={})],
                is_last=False,
                reasoning=reply.text or None,
                tool_outputs=outputs,
            )
        text = structured.answer_text(obj)
        for c in calls:  # keep the transcript valid: every call gets its reply
            content = "Answer accepted." if c is final else (
                f"Error: not run: the answer was given with {structured.FINAL_TOOL}"
            )
            task.scratch_memory.put(
                ChatMessage(role=MessageRole.TOOL, content=content, tool_call_id=c.tool_id, name=c.tool_name)
            )
        if calls:
            task.scratch_memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        if self.verbose:
            print(f"=== Answer ({cls.__name__}) ===\n{text}")
        answer = AgentChatResponse(response=text, sources=list(sources), structured_response=obj)
        return TaskStepOutput(output=answer, task_step=step, is_last=True, reasoning=(reply.text or None) if calls else None)

    def _budget_left(self, task: Task) -> int | None:
        if self.max_function_calls is None:
            return None
        return max(0, self.max_function_calls - int(task.extra_state[CALLS_KEY]))

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
                additional_kwargs={**reply.additional_kwargs, UNEXECUTED_KEY: _dump(calls)},
            )
            task.scratch_memory.put(message)
            log.warning(
                "max_function_calls=%s reached; %d tool call(s) of the reply were not run",
                self.max_function_calls,
                len(calls),
            )
            answer = AgentChatResponse(
                response=text, sources=list(sources), metadata={UNEXECUTED_KEY: _dump(calls)}
            )
            return TaskStepOutput(output=answer, task_step=step, is_last=True)
        if not calls and not (text or "").strip():
            raise EmptyResponseError(
                f"the model returned an empty message (no text, no tool call) in step "
                f"{step.step_id!r} of task {task.task_id!r}; the step stays queued: run it "
                "again, steer it with run_step(task, input=...), or check the model"
            )
        if not calls:
            task.scratch_memory.put(_as_assistant(reply))
            # as the reference: a step's sources are the calls it ran (none here);
            # finalize_response attaches every source of the task
            answer = AgentChatResponse(response=text, sources=[])
            return TaskStepOutput(output=answer, task_step=step, is_last=True)

        task.scratch_memory.put(_as_assistant(reply))
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

    async def _run_decided(self, step: TaskStep, task: Task) -> TaskStepOutput:
        """Run the calls of a reply once a person decided: approved ones (with edited
        arguments), the others of the reply; rejected ones answer with the reason."""
        tools = await self.aget_tools(task.input)
        decided = approval.split_decided(step)
        to_run = [d for d in decided if d.rejected is None]
        ran = iter(await self._run_calls(task, tools, [d.call for d in to_run], [d.call_id for d in to_run]))
        outputs = [d.rejected if d.rejected is not None else next(ran) for d in decided]
        return self._after_calls(step, task, tools, [d.call for d in decided], outputs, "", carry_input=step.input)

    def _after_calls(
        self,
        step: TaskStep,
        task: Task,
        tools: list[FunctionTool],
        calls: list[ToolSelection],
        outputs: list[ToolOutput],
        text: str,
        carry_input: str | None = None,
    ) -> TaskStepOutput:
        """Record the tool replies; answer (return_direct) or queue the next model call."""
        sources: AppendLog[ToolOutput] = task.extra_state[SOURCES_KEY]
        for call, out in zip(calls, outputs):
            task.scratch_memory.put(
                ChatMessage(
                    role=MessageRole.TOOL,
                    content=out.content,
                    tool_call_id=call.tool_id,
                    name=call.tool_name,
                )
            )
        sources.extend(outputs)
        by_name = tools_by_name(tools)
        direct = next(
            (
                out
                for out in outputs
                if not out.is_error
                and out.tool_name in by_name
                and by_name[out.tool_name].return_direct
            ),
            None,
        )
        if direct is not None:  # the tool's reply is the answer (memory ends with it, as on the reference)
            answer = AgentChatResponse(
                response=direct.content,
                sources=list(outputs),
                metadata={"return_direct": direct.tool_name},
            )
            return TaskStepOutput(
                output=answer, task_step=step, is_last=True, reasoning=text or None, tool_outputs=outputs
            )
        progress = AgentChatResponse(response=text, sources=list(outputs))
        return TaskStepOutput(
            output=progress,
            task_step=step,
            next_steps=[step.get_next_step(input=carry_input, step_state={})],
            is_last=False,
            reasoning=text or None,
            tool_outputs=outputs,
        )

    async def _run_calls(
        self, task: Task, tools: list[FunctionTool], calls: list[ToolSelection], ids: list[str]
    ) -> list[ToolOutput]:
        """Run the calls within the budget (concurrently unless told not to), in call order;
        each at most once in the step (``ids``: their task-unique ids, see ``nbagent.calls``)."""
        by_name = tools_by_name(tools)
        left = self._budget_left(task)
        runnable = calls if left is None else calls[:left]
        # sync tools go to threads when several run together, so that they overlap like async ones
        together = self.allow_parallel_tool_calls and len(runnable) > 1
        in_thread = True if together else None

        def run(c: ToolSelection) -> Callable[[], Any]:
            return lambda: acall_tool(by_name, c, in_thread=in_thread, missing=_MISSING_TOOL, error=_TOOL_ERROR)

        outputs = await calls_.run_calls([(cid, c.tool_id, run(c)) for c, cid in zip(runnable, ids)], together)
        for call in calls[len(runnable) :]:
            outputs.append(
                ToolOutput(
                    content=(
                        f"Error: not run: this agent may make at most {self.max_function_calls} "
                        "tool calls per task and has made them all; answer with what you have"
                    ),
                    tool_name=call.tool_name,
                    raw_input=call.tool_kwargs,
                    is_error=True,
                    tool_call_id=call.tool_id,
                )
            )
        task.extra_state[CALLS_KEY] = int(task.extra_state[CALLS_KEY]) + len(runnable)
        if self.verbose:  # the reference's words, one call and its output after the other
            for call, out in zip(runnable, outputs):
                print("=== Calling Function ===")
                print(f"Calling function: {call.tool_name} with args: {_args_json(call.tool_kwargs)}")
                print(f"=== Function Output ===\n{out.content}")
        return outputs

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


# ----- helpers ---------------------------------------------------------------------------


def _check_tool_choice(choice: Any, tools: list[FunctionTool]) -> Any:
    """Validate a tool choice against the offered tools; None when no tools are offered."""
    names = [t.name for t in tools]
    if choice is None:
        choice = "auto"
    forced: str | None = None
    if isinstance(choice, str):
        if choice not in _CHOICE_KEYWORDS:
            forced = choice
    elif isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and "name" in function:
            forced = str(function["name"])
    else:
        raise TypeError(
            f"tool_choice must be 'auto', 'none', 'required', a tool name or an OpenAI "
            f"tool_choice dict, got {type(choice).__name__}: {choice!r}"
        )
    if forced is not None and forced not in names:
        raise ValueError(
            f"tool_choice {forced!r} is not a tool of this agent; use 'auto', 'none', "
            f"'required' or one of the tool names: {names or '(no tools)'}"
        )
    if choice == "required" and not names:
        raise ValueError("tool_choice='required' needs at least one tool, and this agent has none")
    return choice if tools else None


def _as_assistant(reply: ChatMessage) -> ChatMessage:
    """The model's reply as an assistant message (a copy, so the model's object stays its own)."""
    return reply.model_copy(update={"role": MessageRole.ASSISTANT})


def _dump(calls: list[ToolSelection]) -> list[dict[str, Any]]:
    return [c.model_dump() for c in calls]


_MISSING_TOOL = "Tool with name {name} not found, please double check."  # the reference's words
_TOOL_ERROR = "Encountered error: {error} ({type})"  # the reference's words, then the exception's type


def _args_json(kwargs: dict[str, Any]) -> str:
    """Tool arguments as the reference prints them (``json.dumps``; anything else as text)."""
    return json.dumps(kwargs, default=str)
