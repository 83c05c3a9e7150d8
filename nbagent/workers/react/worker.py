"""ReActAgentWorker: a model that reasons in text (Thought / Action / Observation / Answer).

Works with any chat model, function-calling or not: the tools are described in the system
prompt and the model names them in its reply. One step is one model call, plus the tool call
it asks for. The worker keeps nothing between steps; a task's state is in ``extra_state``:

- ``reasoning``: AppendLog of reasoning steps (action, observation, response);
- ``reasoning_messages`` / ``reasoning_tokens``: each step rendered once and counted once,
  parallel to ``reasoning``, so building a prompt never re-renders old steps;
- ``sources``: AppendLog of every ToolOutput;
- ``iterations``: model calls made so far (checked against ``max_iterations``).

The user's question, human input injected between steps and the final answer go to
``task.scratch_memory``; the runner merges them into its memory when the task is finalized.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from nbagent import approval, calls, structured
from nbagent._compat import pop_callback_manager
from nbagent.llms.base import LLM, ChatResponse
from nbagent.llms.stream import open_stream
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.prompts import PromptDictType, PromptTemplate
from nbagent.snapshot import AppendLog
from nbagent.schema import (
    AgentChatResponse,
    StreamingAgentChatResponse,
    Task,
    TaskStep,
    TaskStepOutput,
)
from nbagent.tools import FunctionTool, acall_tool, as_tools, tools_by_name
from nbagent.workers.base import BaseAgentWorker, EmptyResponseError, person_input
from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    HumanReasoningStep,
    ObservationReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ReasoningStep,
    ResponseReasoningStep,
    extract_thought,
    resolve_tool_name,
)
from nbagent.workers.react.prompt import FORMAT_REMINDER

__all__ = ["ReActAgentWorker", "MaxIterationsError", "EmptyResponseError", "parse_error_text"]

_MISSING_TOOL = "Error: No such tool named `{name}`."  # the reference's words
_TOOL_ERROR = "Error: {error} ({type})"  # the reference's words, then the exception's type
_PINK, _BLUE = "38;5;200", "34"  # the reference's print_text colours
_STATE_KEYS = ("reasoning", "reasoning_messages", "reasoning_tokens", "sources", "iterations")


class _Same:
    """``_begin``'s default: the step's own input."""


_SAME = _Same()


def _sources_so_far(task: Task) -> Sequence[ToolOutput]:
    """Every source of the task so far, as a step's output shows it: an O(1) view of the log
    (a copy per step kept O(N^2) references over a long tool loop), unchanged by later steps."""
    sources = task.extra_state["sources"]
    return sources.view() if isinstance(sources, AppendLog) else list(sources)


def parse_error_text(error: Exception) -> str:
    """What the model is told when its reply does not parse: the reference's words, then a
    reminder of the format."""
    return f"Error while parsing the output: {error}\n\n{FORMAT_REMINDER}."


class MaxIterationsError(ValueError):
    """A task used all the model calls ``max_iterations`` allows without answering."""


class ReActAgentWorker(BaseAgentWorker):
    """The reference API's ReAct agent worker, with a prompt whose size stays bounded.

    ``reasoning_token_budget`` caps the tokens of reasoning shown to the model per step: the
    newest steps that fit, plus a line saying how many earlier ones were left out.
    """

    def __init__(
        self,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None,
        llm: LLM,
        max_iterations: int = 10,
        verbose: bool = False,
        react_system_prompt: str | None = None,
        context: str | None = None,
        reasoning_token_budget: int = 2000,
        tool_retriever: Any = None,
        *,
        output_parser: ReActOutputParser | None = None,
        formatter: ReActChatFormatter | None = None,
        output_cls: type[Any] | None = None,
        max_output_retries: int = 2,
    ) -> None:
        if llm is None:
            raise ValueError(
                "ReActAgentWorker needs a model: pass llm=..., e.g. OpenAILLM(model=...) or "
                "ScriptedLLM([...]) to run offline"
            )
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be an nbagent LLM, got {type(llm).__name__}: {llm!r}")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
        if not isinstance(reasoning_token_budget, int) or reasoning_token_budget < 1:
            raise ValueError(
                f"reasoning_token_budget must be an int >= 1, got {reasoning_token_budget!r}"
            )
        if tools and tool_retriever is not None:
            raise ValueError("pass either tools or tool_retriever, not both")
        if tool_retriever is not None and not callable(getattr(tool_retriever, "retrieve", None)):
            raise TypeError(
                f"tool_retriever must have a retrieve(text) method returning tools, "
                f"got {type(tool_retriever).__name__}"
            )
        structured.check_output_cls(output_cls, "json", max_output_retries)
        self.output_cls = output_cls  # the Answer must be this model's JSON (see nbagent.structured)
        self.max_output_retries = max_output_retries
        self.tools: list[FunctionTool] = as_tools(tools)
        self._tools_by_name = tools_by_name(self.tools)
        self.llm = llm
        self.max_iterations = max_iterations
        self.verbose = verbose
        self.reasoning_token_budget = reasoning_token_budget
        self.tool_retriever = tool_retriever
        self.output_parser = output_parser or ReActOutputParser()
        if formatter is None:
            formatter = ReActChatFormatter(react_system_prompt, context)
        else:  # a formatter given with a header or context: they apply to it, not vanish
            if react_system_prompt is not None:
                formatter.system_header = react_system_prompt
            if context is not None:
                formatter.context = context
        self.formatter = formatter

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        llm: LLM | None = None,
        max_iterations: int = 10,
        verbose: bool = False,
        **kwargs: Any,
    ) -> ReActAgentWorker:
        """Build the worker the way the reference API does (``react_chat_formatter`` accepted)."""
        pop_callback_manager(kwargs, "ReActAgentWorker.from_tools")
        if "react_chat_formatter" in kwargs:
            kwargs["formatter"] = kwargs.pop("react_chat_formatter")
        return cls(tools, llm, max_iterations=max_iterations, verbose=verbose, **kwargs)  # type: ignore[arg-type]

    # ----- prompts (the reference's key: "system_prompt", the ReAct header) -----------------
    def _get_prompts(self) -> PromptDictType:
        return {"system_prompt": PromptTemplate(self.formatter.system_header)}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        if "system_prompt" in prompts_dict:
            self.formatter.system_header = prompts_dict["system_prompt"].template

    def prompt_preview(self) -> str | None:
        """The ReAct system prompt as the model sees it, filled for the worker's tools."""
        return self.formatter.system_message(self.tools).text

    # ----- tools -------------------------------------------------------------------------
    def get_tools(self, input: str) -> list[FunctionTool]:
        """The tools offered for this input (all of them, or what the retriever picks)."""
        if self.tool_retriever is None:
            return self.tools
        return as_tools(self.tool_retriever.retrieve(input))

    # ----- steps -------------------------------------------------------------------------
    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        state = task.extra_state
        state["reasoning"] = AppendLog()
        state["reasoning_messages"] = AppendLog()
        state["reasoning_tokens"] = AppendLog()
        state["sources"] = AppendLog()
        state["iterations"] = 0
        state["current_reasoning"] = state["reasoning"]  # the reference's name, same list
        return TaskStep(task_id=task.task_id, input=task.input)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """One model call and, if it asks for one, one tool call."""
        if approval.record_of(step) is not None:
            return await self._run_decided(step, task)
        resumed = calls.journaled_reply(calls.current_journal())
        if resumed is not None:  # an earlier attempt ran the call: act on that reply again
            tools, _ = self._begin(step, task, given=resumed.input)
            return await self._finish_step(resumed.reply, step, task, tools, resumed)
        tools, messages = self._begin(step, task)
        response = await self.llm.achat(messages)
        return await self._finish_step(response.message.text, step, task, tools)

    async def astream_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        """Like ``arun_step``, but an answer is streamed from the moment ``Answer:`` arrives."""
        if (
            approval.record_of(step) is not None
            or self.output_cls is not None  # a typed answer is validated whole: no token stream
            or calls.journaled_reply(calls.current_journal()) is not None
        ):
            return await self.arun_step(step, task, **kwargs)
        tools, messages = self._begin(step, task)
        stream = await open_stream(self.llm.astream_chat(messages))  # either calling convention
        parts: list[str] = []
        scan = _stream_scanner(self.output_parser)
        while True:  # not `async for`: the stream must stay open when the answer is handed on
            try:
                chunk = await stream.__anext__()
            except StopAsyncIteration:
                break
            delta = chunk.delta or ""
            parts.append(delta)
            if scan.is_action:
                continue
            found = scan.feed(delta)  # linear in the reply: never re-reads what it has seen
            if found is not None:
                return self._streamed_answer("".join(parts), found, stream, step, task)
        return await self._finish_step("".join(parts), step, task, tools)

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        """Nothing to do: the runner merges ``scratch_memory``; the reasoning stays viewable."""

    # ----- internals ---------------------------------------------------------------------
    def _begin(
        self, step: TaskStep, task: Task, given: str | None | _Same = _SAME
    ) -> tuple[list[FunctionTool], list[ChatMessage]]:
        """Check the limit, record the user's input, count the call, build the prompt.

        ``given``: the step input the reply answered, when a retry acts on an earlier
        attempt's reply (new input given to the retry then goes to the next step)."""
        resuming = given is not _SAME
        text_in = step.input if given is _SAME else given
        state = task.extra_state
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(
                f"task {task.task_id!r} has no ReAct state {missing}: create the task with "
                "runner.create_task(...) so ReActAgentWorker.initialize_step runs first"
            )
        n = int(state["iterations"])
        if n >= self.max_iterations:
            raise MaxIterationsError(
                "Reached max iterations. "
                f"ReActAgentWorker reached max_iterations={self.max_iterations} (model calls) "
                f"in task {task.task_id!r} without an answer. The step stays queued: raise the "
                f"limit (worker.max_iterations = {2 * self.max_iterations}, or "
                "ReActAgentWorker(..., max_iterations=N)) and run it again, or undo_step/steer it"
            )
        if n == 0:  # the question, always first
            task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=task.input))
        added = person_input(step, task, first=n == 0, text=text_in)
        if added is not None:  # human input injected by run_step(task, input=...)
            # in memory for the transcript; in the reasoning so the prompt shows it in order
            task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=added))
            if self.verbose:
                print(f"Added user message to memory: {added}")
            self._record(task, HumanReasoningStep(text=added))
        state["iterations"] = n + 1
        if state.get("current_reasoning") is not state["reasoning"]:  # e.g. after a load
            state["current_reasoning"] = state["reasoning"]
        tools = self.get_tools(task.input)
        if resuming:
            return tools, []  # the reply is there already: no prompt to build
        messages = self.formatter.format_window(
            tools,
            task.memory.get(input=task.input),
            task.scratch_memory.get_all()[:1],  # the question; later input is in the reasoning
            state["reasoning"],
            state["reasoning_messages"],
            state["reasoning_tokens"],
            self.reasoning_token_budget,
        )
        if self.output_cls is not None:
            rule = structured.json_instructions(self.output_cls, "The text after 'Answer:' must be")
            messages.insert(1 if messages and messages[0].role == MessageRole.SYSTEM else 0,
                            ChatMessage(role=MessageRole.SYSTEM, content=rule))
        return tools, messages

    def _record(self, task: Task, rstep: ReasoningStep, echo: bool = True) -> None:
        message, tokens = self.formatter.render(rstep, getattr(self.formatter, "observation_role", MessageRole.USER))
        state = task.extra_state
        state["reasoning"].append(rstep)
        state["reasoning_messages"].append(message)
        state["reasoning_tokens"].append(tokens)
        if self.verbose and echo and not isinstance(rstep, HumanReasoningStep):
            # as the reference prints it: ANSI pink for reasoning, blue for observations
            colour = _BLUE if isinstance(rstep, ObservationReasoningStep) else _PINK
            print(f"\033[1;3;{colour}m{rstep.get_content()}\n\033[0m", end="")

    def _next(self, step: TaskStep) -> list[TaskStep]:
        if approval.APPROVAL_KEY in step.step_state:  # the decisions belong to this step only
            rest = {k: v for k, v in step.step_state.items() if k != approval.APPROVAL_KEY}
            return [step.get_next_step(input=None, step_state=rest)]
        return [step.get_next_step(input=None)]

    async def _finish_step(
        self, text: str, step: TaskStep, task: Task, tools: list[FunctionTool], resumed: calls.Resumed | None = None
    ) -> TaskStepOutput:
        """Act on a complete reply: answer, call the tool, or report the parse error.

        ``resumed``: the reply is an earlier attempt's, whose call ran (its output is reused)."""
        if not text.strip():
            raise EmptyResponseError(
                f"the model returned an empty message (step {step.step_id!r} of task "
                f"{task.task_id!r}); the step stays queued: run it again, steer it with "
                "run_step(task, input=...), or check the model"
            )
        try:
            parsed = self.output_parser.parse(text)
        except ReActParseError as error:
            obs = ObservationReasoningStep(observation=parse_error_text(error), is_error=True)
            self._record(task, obs)
            return TaskStepOutput(
                output=AgentChatResponse(response=obs.content, sources=_sources_so_far(task)),
                task_step=step,
                next_steps=self._next(step),
                is_last=False,
            )
        if isinstance(parsed, ResponseReasoningStep):
            if self.output_cls is not None:
                return self._typed_answer(parsed, step, task)
            return self._answer(parsed, step, task, tool_outputs=[])
        assert isinstance(parsed, ActionReasoningStep)
        self._record(task, parsed)
        by_name = self._tools_by_name if tools is self.tools else tools_by_name(tools)
        name = resolve_tool_name(parsed.action, by_name)  # "_add_" may be emphasis, or the tool's own name
        if name != parsed.action:
            parsed = parsed.model_copy(update={"action": name})
        if resumed is not None and resumed.ids:
            call_id = resumed.ids[0]
        else:  # unique for the task's life: an undo and a re-run never reuse it
            call_id = calls.issue_call_id(task, f"react_{task.extra_state['iterations']}")
        call = ToolSelection(tool_id=call_id, tool_name=parsed.action, tool_kwargs=parsed.action_input)
        if calls.kept_output(call_id) is None and approval.needs_approval(
            by_name.get(parsed.action), call, approval.policy_of(task)
        ):
            # the action waits for a person; the next step runs it (or reports the rejection)
            rec = approval.make_record([call], [True])
            rec["thought"] = parsed.thought
            return TaskStepOutput(
                output=AgentChatResponse(response="", metadata={approval.AWAITING_KEY: [call_id]}),
                task_step=step,
                next_steps=[step.get_next_step(input=None, step_state={approval.APPROVAL_KEY: rec})],
                is_last=False,
                reasoning=parsed.thought or None,
            )
        calls.remember_reply(calls.current_journal(), text, [call_id], step.input)
        out: ToolOutput = await calls.run_call(
            call_id, call_id, lambda: acall_tool(by_name, call, missing=_MISSING_TOOL, error=_TOOL_ERROR)
        )
        result = self._after_call(parsed.thought, out, step, task, by_name)
        if resumed is not None and step.input != resumed.input and result.next_steps:
            result.next_steps[0].input = step.input  # input given to the retry goes to the model next
        return result

    async def _run_decided(self, step: TaskStep, task: Task) -> TaskStepOutput:
        """Run the action a person approved (maybe with edited input), or tell the model it
        was rejected and why."""
        tools = self.get_tools(task.input)
        by_name = self._tools_by_name if tools is self.tools else tools_by_name(tools)
        ((call_id, call, rejected),) = approval.split_decided(step)
        if rejected is not None:
            out = rejected
        else:
            out = await calls.run_call(
                call_id, call.tool_id, lambda: acall_tool(by_name, call, missing=_MISSING_TOOL, error=_TOOL_ERROR)
            )
        thought = str((approval.record_of(step) or {}).get("thought") or "")
        result = self._after_call(thought, out, step, task, by_name)
        if step.input is not None and result.next_steps:  # input given here goes to the model next
            result.next_steps[0].input = step.input
        return result

    def _after_call(
        self, thought: str, out: ToolOutput, step: TaskStep, task: Task, by_name: dict[str, FunctionTool]
    ) -> TaskStepOutput:
        """Record a tool's output as an observation; answer if it returns directly."""
        task.extra_state["sources"].append(out)
        self._record(task, ObservationReasoningStep(observation=out.content, is_error=out.is_error))
        tool = by_name.get(out.tool_name)
        if tool is not None and tool.return_direct and not out.is_error:
            answer = ResponseReasoningStep(thought=thought, response=out.content)
            return self._answer(answer, step, task, tool_outputs=[out], record=False)
        return TaskStepOutput(
            # as the reference: the last reasoning step's text, and every source so far
            output=AgentChatResponse(
                response=f"Observation: {out.content}", sources=_sources_so_far(task)
            ),
            task_step=step,
            next_steps=self._next(step),
            is_last=False,
            reasoning=thought or None,
            tool_outputs=[out],
        )

    def _typed_answer(self, parsed: ResponseReasoningStep, step: TaskStep, task: Task) -> TaskStepOutput:
        """Validate the Answer as ``output_cls``: the typed answer, or a visible retry step."""
        cls = self.output_cls
        assert cls is not None
        try:
            obj = structured.parse_json_answer(parsed.response, cls)
        except ValueError as error:
            used = int(task.extra_state.get(structured.RETRIES_KEY, 0))
            if used >= self.max_output_retries:
                raise structured.StructuredOutputError(
                    f"the answer did not fit {cls.__name__} after {used} retries "
                    f"(max_output_retries={self.max_output_retries}): {error}. The step stays "
                    "queued: raise worker.max_output_retries and run it again, or steer it with input"
                ) from None
            task.extra_state[structured.RETRIES_KEY] = used + 1
            self._record(task, parsed)
            note = structured.feedback(str(error), "react", cls)
            self._record(task, ObservationReasoningStep(observation=note, is_error=True))
            return TaskStepOutput(
                output=AgentChatResponse(response=note, metadata={"output_error": str(error)}),
                task_step=step,
                next_steps=self._next(step),
                is_last=False,
                reasoning=parsed.thought or None,
            )
        text = structured.answer_text(obj)
        out = self._answer(ResponseReasoningStep(thought=parsed.thought, response=text), step, task, [])
        out.output.structured_response = obj
        return out

    def _answer(
        self,
        answer: ResponseReasoningStep,
        step: TaskStep,
        task: Task,
        tool_outputs: list[ToolOutput],
        record: bool = True,
    ) -> TaskStepOutput:
        if record:  # a return_direct answer is the observation itself: the reference records no more
            self._record(task, answer)
        task.scratch_memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=answer.response))
        return TaskStepOutput(
            output=AgentChatResponse(response=answer.response, sources=_sources_so_far(task)),
            task_step=step,
            next_steps=[],
            is_last=True,
            reasoning=answer.thought or None,
            tool_outputs=tool_outputs,
        )

    def _streamed_answer(
        self,
        text: str,
        found: tuple[int, int],
        stream: AsyncIterator[ChatResponse],
        step: TaskStep,
        task: Task,
    ) -> TaskStepOutput:
        """Hand the rest of the model's stream to the caller as the answer's tokens."""
        label_start, answer_start = found
        thought = extract_thought(text[:label_start])
        prefix = text[answer_start:].lstrip()
        pending = prefix[len(prefix.rstrip()) :]  # sent only if more text follows
        prefix = prefix.rstrip()
        fenced = text.lstrip().startswith("```")

        async def remember(full: str) -> None:
            """The answer has been read to its end: record it, inside the step (the runner
            ends the step after this)."""
            answer = full.strip()
            if fenced and answer.endswith("```"):
                answer = answer[:-3].rstrip()
            # not printed: the reader saw it stream (the reference prints nothing here either)
            self._record(task, ResponseReasoningStep(thought=thought, response=answer), echo=False)
            task.scratch_memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=answer))

        response = StreamingAgentChatResponse(
            _rest_of_answer(stream, strip_leading=not prefix, pending=pending if prefix else "", fenced=fenced),
            sources=_sources_so_far(task),
            prefix=prefix,
            finish_step=remember,
        )
        return TaskStepOutput(
            output=response,
            task_step=step,
            next_steps=[],
            is_last=True,
            reasoning=thought or None,
        )

    def __repr__(self) -> str:
        names = [t.name for t in self.tools]
        return (
            f"ReActAgentWorker(llm={self.llm!r}, tools={names}, "
            f"max_iterations={self.max_iterations})"
        )


async def _rest_of_answer(
    stream: AsyncIterator[ChatResponse], strip_leading: bool, pending: str = "", fenced: bool = False
) -> AsyncIterator[str]:
    """The remaining text deltas of a model stream: leading whitespace dropped if asked, and
    whitespace held back until more text follows, so the answer never ends in a newline (nor,
    in a reply written inside a code fence, in the closing fence: the same answer as unstreamed)."""
    while True:
        try:
            chunk = await stream.__anext__()
        except StopAsyncIteration:
            return
        delta = chunk.delta or ""
        if strip_leading:
            delta = delta.lstrip()
            if not delta:
                continue
            strip_leading = False
        core = delta.rstrip()
        if not core or (fenced and core.strip() == "```"):
            pending += delta
            continue
        yield pending + core
        pending = delta[len(core) :]



class _RescanScanner:
    """For a custom output parser without ``stream_scanner``: its ``find_answer`` /
    ``has_action`` on the whole text so far, as before (quadratic on long replies)."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.text = ""
        self.is_action = False

    def feed(self, delta: str) -> tuple[int, int] | None:
        self.text += delta
        found: tuple[int, int] | None = self.parser.find_answer(self.text)
        if found is None:
            self.is_action = bool(self.parser.has_action(self.text))
        return found


def _stream_scanner(parser: Any) -> Any:
    make = getattr(parser, "stream_scanner", None)
    return make() if callable(make) else _RescanScanner(parser)
