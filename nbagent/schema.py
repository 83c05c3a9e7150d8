"""The step-wise agent's data: Task, TaskStep, TaskStepOutput and chat responses.

Steps link to each other through ``next_steps`` / ``prev_steps`` as in the reference API, but
serialise those links as lists of step ids, so a DAG of steps dumps to JSON without recursing.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    WrapSerializer,
    WrapValidator,
    field_serializer,
    model_validator,
)

from nbagent import _sync
from nbagent._lean import LeanModel
from nbagent._prefix import PrefixView
from nbagent.ids import new_id
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolOutput, ToolSelection
from nbagent.registry import html_view

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "Task",
    "TaskStep",
    "TaskStepOutput",
    "AgentChatResponse",
    "StreamingAgentChatResponse",
    "SkippedOutput",
    "ChatMessage",
    "MessageRole",
    "ToolSelection",
    "ToolOutput",
    "TokenUsage",
]


# Steps, outputs and answers are kept for the whole life of a task (thousands of them): their
# fields-set and field names are shared between instances (see nbagent._lean).
_LeanModel = LeanModel


def _same_dict(value: Any) -> dict[str, Any]:
    """Accept a dict as it is (no copy: state is carried forward by reference, as in the
    reference API, and the runner's snapshots take care of undo)."""
    if not isinstance(value, dict):
        raise TypeError(f"step_state must be a dict, got {type(value).__name__}")
    return value


def _same_steps(value: Any) -> list[TaskStep]:
    if isinstance(value, (list, tuple)):
        for s in value:
            if not isinstance(s, TaskStep):
                break
        else:
            return list(value) if isinstance(value, tuple) else value
    raise TypeError(f"next_steps must be a list of TaskStep, got {value!r}")


def _same_tool_outputs(value: Any) -> Sequence[ToolOutput]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"tool_outputs must be a list of ToolOutput, got {type(value).__name__}")
    return [v if isinstance(v, ToolOutput) else ToolOutput.model_validate(v) for v in value] if any(
        not isinstance(v, ToolOutput) for v in value
    ) else value


class Task(BaseModel):
    """One run of an agent on one user input.

    ``memory`` is the runner's conversation so far (read it; do not write it). New messages of
    this task go to ``scratch_memory``, which the runner merges into its memory when the task
    is finalized, and drops when the task is abandoned.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    task_id: str = Field(default_factory=new_id)
    input: str = Field(description="The user's input that started the task.")
    memory: ChatMemoryBuffer = Field(default_factory=ChatMemoryBuffer, exclude=True)
    scratch_memory: ChatMemoryBuffer = Field(
        default_factory=lambda: ChatMemoryBuffer(token_limit=10**9), exclude=True
    )
    extra_state: dict[str, Any] = Field(
        default_factory=dict, description="Worker state carried across the task's steps."
    )
    _runner: Any = PrivateAttr(default=None)
    # every tool-call id the task used (``nbagent.calls``): never rolled back, so no id names
    # two calls; None until the first is issued or the runner rebuilds it after a load
    _call_ids: dict[str, int] | None = PrivateAttr(default=None)

    @property
    def callback_manager(self) -> None:
        """The reference's field, for code that passes it on (``callback_manager=task.callback_manager``):
        always None; nbagent reports steps as events (``runner.subscribe``)."""
        return None

    def _set_extra_state(self, extra_state: dict[str, Any]) -> None:
        """Put ``extra_state`` in place as it is, the very dict (a loaded run's steps may share
        it), without validation."""
        self.__dict__["extra_state"] = extra_state

    @model_validator(mode="before")
    @classmethod
    def _no_callback_manager(cls, data: Any) -> Any:
        """The reference's ``callback_manager`` field: accepted, said to have no effect."""
        if isinstance(data, dict) and "callback_manager" in data:
            data = dict(data)
            if data.pop("callback_manager") is not None:
                from nbagent._compat import warn_callback_manager

                warn_callback_manager("Task", stacklevel=5)
        return data

    def __repr__(self) -> str:
        return f"Task(task_id={self.task_id!r}, input={_short(self.input)!r})"

    def __getattr__(self, name: str) -> Any:
        # The reference guide calls task.list_tasks() / task.get_completed_steps(...): those
        # are the runner's methods; say so instead of a bare AttributeError.
        call = _RUNNER_METHODS.get(name)
        if call is not None:
            raise AttributeError(
                f"'Task' object has no attribute {name!r}: {name} is a method of the runner "
                f"(the agent), not of the task; call {call}"
            )
        return super().__getattr__(name)  # type: ignore[misc]

    def _repr_html_(self) -> str | None:
        return html_view(self)


_RUNNER_METHODS: dict[str, str] = {
    "list_tasks": "agent.list_tasks()",
    "get_completed_tasks": "agent.get_completed_tasks()",
    "get_completed_steps": "agent.get_completed_steps(task.task_id)",
    "get_upcoming_steps": "agent.get_upcoming_steps(task.task_id)",
    "get_task_output": "agent.get_task_output(task.task_id)",
    "run_step": "agent.run_step(task.task_id)",
    "arun_step": "await agent.arun_step(task.task_id)",
    "stream_step": "agent.stream_step(task.task_id)",
    "finalize_response": "agent.finalize_response(task.task_id)",
    "undo_step": "agent.undo_step(task.task_id)",
    "delete_task": "agent.delete_task(task.task_id)",
}

_NEXT_STEP_FIELDS = frozenset({"task_id", "step_id", "input", "step_state"})  # what get_next_step names
_NO_TOOL_OUTPUTS: tuple[ToolOutput, ...] = ()  # TaskStepOutput.tool_outputs' default


# Links loaded as ids, waiting for ``resolve_links``; kept outside the model so that a step
# carries no per-instance private storage (steps are the most numerous objects).
class _Unset:
    """The default of a setter's keyword: this field is left as it is."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()

_PENDING_LINKS: weakref.WeakKeyDictionary[TaskStep, tuple[list[str], list[str]]] = (
    weakref.WeakKeyDictionary()
)


class TaskStep(_LeanModel):
    """One step of a task: the input a worker turns into a ``TaskStepOutput``.

    Links to other steps live in ``next_steps`` / ``prev_steps`` (by id when serialised).
    """

    task_id: str
    step_id: str = Field(default_factory=new_id)
    input: str | None = Field(default=None, description="Input of this step (user or injected).")
    step_state: Annotated[dict[str, Any], PlainValidator(_same_dict)] = Field(default_factory=dict)
    next_steps: dict[str, TaskStep] = Field(default_factory=dict)
    prev_steps: dict[str, TaskStep] = Field(default_factory=dict)
    is_ready: bool = Field(default=True, description="False until the runner may run it.")

    @model_validator(mode="wrap")
    @classmethod
    def _accept_id_links(cls, data: Any, handler: Any) -> TaskStep:
        """Accept links given as lists of ids (from JSON); the runner resolves them later."""
        pending: tuple[list[str], list[str]] | None = None
        if isinstance(data, dict) and (
            isinstance(data.get("next_steps"), list) or isinstance(data.get("prev_steps"), list)
        ):
            data = dict(data)
            nxt = data.pop("next_steps", None)
            prv = data.pop("prev_steps", None)
            pending = (list(nxt or []), list(prv or []))
        step: TaskStep = handler(data)
        if pending is not None:
            _PENDING_LINKS[step] = pending
        return step

    @field_serializer("next_steps", "prev_steps")
    def _links_as_ids(self, links: dict[str, TaskStep]) -> list[str]:
        return list(links)

    def get_next_step(
        self,
        step_id: str | None = None,
        input: str | None = None,
        step_state: dict[str, Any] | None = None,
    ) -> TaskStep:
        """A new step of the same task that carries this step's state forward (not linked).

        Example:

        >>> from nbagent import TaskStep
        >>> first = TaskStep(task_id="t", step_id="s1", input="look it up", step_state={"tries": 1})
        >>> then = first.get_next_step(step_id="s2", input="answer")
        >>> then.task_id, then.step_state, then.prev_steps
        ('t', {'tries': 1}, {})
        """
        task_id = self.task_id
        step_id = step_id or new_id()
        state = self.step_state if step_state is None else step_state
        if type(task_id) is str and type(step_id) is str and (input is None or type(input) is str) and type(state) is dict:
            # what validation makes of these values, without it (every step makes one)
            values = TaskStep._field_values()
            values["task_id"] = task_id
            values["step_id"] = step_id
            values["input"] = input
            values["step_state"] = state
            values["next_steps"] = {}
            values["prev_steps"] = {}
            values["is_ready"] = True
            return TaskStep._from_valid(values, _NEXT_STEP_FIELDS)  # type: ignore[no-any-return]
        return TaskStep(task_id=task_id, step_id=step_id, input=input, step_state=state)

    def link_step(self, next_step: TaskStep) -> None:
        """Make ``next_step`` follow this one (both directions).

        Example:

        >>> from nbagent import TaskStep
        >>> first = TaskStep(task_id="t", step_id="s1", input="look it up")
        >>> then = first.get_next_step(step_id="s2", input="answer")
        >>> first.link_step(then)  # a worker returns `then` in its output's next_steps
        >>> list(first.next_steps), list(then.prev_steps)
        (['s2'], ['s1'])
        """
        if next_step.task_id != self.task_id:
            raise ValueError(
                f"cannot link step {next_step.step_id!r} of task {next_step.task_id!r} "
                f"after a step of task {self.task_id!r}: links stay within one task"
            )
        self.next_steps[next_step.step_id] = next_step
        next_step.prev_steps[self.step_id] = self

    def _set_links(
        self,
        *,
        next_steps: dict[str, TaskStep] = _UNSET,
        prev_steps: dict[str, TaskStep] = _UNSET,
    ) -> None:
        """Put link dicts in place as they are (the very dicts, no validation): what the
        runner's undo, a fork and a load do with links they own."""
        if next_steps is not _UNSET:
            self.__dict__["next_steps"] = next_steps
        if prev_steps is not _UNSET:
            self.__dict__["prev_steps"] = prev_steps

    def _set_step_state(self, step_state: dict[str, Any]) -> None:
        """Put ``step_state`` in place as it is, the very dict, without validation."""
        self.__dict__["step_state"] = step_state

    def resolve_links(self, registry: dict[str, TaskStep]) -> None:
        """Turn links loaded as ids back into step objects, from a registry of steps by id.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        pending = _PENDING_LINKS.get(self)
        if pending is None:
            return
        nxt, prv = pending
        missing = [i for i in [*nxt, *prv] if i not in registry]
        if missing:
            raise ValueError(f"step {self.step_id!r} links to unknown step ids {missing}")
        self.next_steps = {i: registry[i] for i in nxt}
        self.prev_steps = {i: registry[i] for i in prv}
        del _PENDING_LINKS[self]

    def __repr_args__(self) -> Any:
        for name in ("task_id", "step_id", "input", "is_ready"):
            yield name, getattr(self, name)
        yield "next_steps", list(self.next_steps)
        yield "prev_steps", list(self.prev_steps)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if not isinstance(other, TaskStep):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = object.__hash__

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _step_as_is(value: Any, handler: Any) -> Any:
    """A step given as a TaskStep is taken as it is, as pydantic would take it, without
    calling TaskStep's own validators (about 1 us per output); anything else is validated."""
    return value if isinstance(value, TaskStep) else handler(value)


def _view_as_is(value: Any, handler: Any) -> Any:
    return value if type(value) is PrefixView else handler(value)


def _view_as_list(value: Any, handler: Any) -> Any:
    return handler(list(value) if type(value) is PrefixView else value)


# a list of ToolOutput, or a worker's O(1) view of its task's sources so far (kept as it is:
# validating it as a list would copy it, and a long tool loop would keep O(N^2) references)
_Sources = Annotated[list[ToolOutput], WrapValidator(_view_as_is), WrapSerializer(_view_as_list)]


class AgentChatResponse(_LeanModel):
    """The answer of a task, with the tool outputs it was built from."""

    response: str = ""
    sources: _Sources = Field(default_factory=list)
    metadata: dict[str, Any] | None = Field(
        default=None, description="What the worker noted about the answer (None when nothing, as in the reference)."
    )
    is_dummy_stream: bool = False
    structured_response: Any = Field(
        default=None, description="The typed answer (an output_cls instance), when one was asked for."
    )

    def __init__(self, *args: Any, **data: Any) -> None:
        """As on the reference (a dataclass there), ``response`` and ``sources`` may be given by
        position: ``AgentChatResponse("The answer.")``."""
        if args:
            if len(args) > 2:
                raise TypeError(
                    f"AgentChatResponse takes response and sources by position, got {len(args)} positional "
                    "arguments; give metadata, is_dummy_stream, structured_response by name"
                )
            for name, value in zip(("response", "sources"), args):
                if name in data:
                    raise TypeError(f"AgentChatResponse got {name} twice (by position and by name)")
                data[name] = value
        super().__init__(**data)

    def __str__(self) -> str:
        return self.response

    @property
    def response_gen(self) -> Iterator[str]:
        """The whole answer as a one-token stream (so code written for streams works)."""
        yield self.response

    def _repr_html_(self) -> str | None:
        return html_view(self)


class SkippedOutput(BaseModel):
    """The output ``skip_step`` records: the step was marked done without running, so views
    can draw it as skipped (not as a step that ran). Reads as ``(reason)``."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a light import

    reason: str = "skipped"

    def __str__(self) -> str:
        return f"({self.reason})"


class TaskStepOutput(_LeanModel):
    """What a worker made of one step: its output, the steps that follow, whether it is last.

    The runner fills ``latency_s``, ``usage`` (tokens of the model calls made in the step) and
    ``input`` (what the step ran with).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    output: Any = Field(description="The step's output; on the last step an agent response.")
    task_step: Annotated[TaskStep, WrapValidator(_step_as_is)]
    next_steps: Annotated[list[TaskStep], PlainValidator(_same_steps)] = Field(default_factory=list)
    is_last: bool = False
    reasoning: str | None = Field(default=None, description="The model's thought, if any.")
    tool_outputs: Annotated[Sequence[ToolOutput], PlainValidator(_same_tool_outputs)] = Field(
        default=_NO_TOOL_OUTPUTS, description="The tool calls made in this step, with their outputs."
    )
    latency_s: float | None = None
    usage: TokenUsage | None = None
    input: str | None = Field(
        default=None,
        description="The input the step ran with (the runner fills it): the step's own input "
        "may change later, e.g. undo_step(task, input=...) queues it again with new input.",
    )

    @field_serializer("next_steps")
    def _next_as_ids(self, steps: list[TaskStep]) -> list[str]:
        return [s.step_id for s in steps]

    @field_serializer("output")
    def _output_json(self, output: Any) -> Any:
        if isinstance(output, BaseModel):
            return output.model_dump(mode="json")
        if isinstance(output, StreamingAgentChatResponse):
            return {"response": output.response, "streaming": True}
        if output is None or isinstance(output, (str, int, float, bool)):
            return output
        return str(output)

    def _set_measured(
        self,
        *,
        latency_s: float | None = _UNSET,
        input: str | None = _UNSET,
        usage: TokenUsage | None = _UNSET,
    ) -> None:
        """Record what the runner measured (or a loaded run says): the step's time, the input
        it ran with and its models' tokens. No validation (the runner's own values), and
        pydantic's fields-set bookkeeping would add a few hundred bytes to every retained output."""
        fields = self.__dict__
        if latency_s is not _UNSET:
            fields["latency_s"] = latency_s
        if input is not _UNSET:
            fields["input"] = input
        if usage is not _UNSET:
            fields["usage"] = usage

    def _set_next_steps(self, next_steps: list[TaskStep]) -> None:
        """Put the list of following steps in place as it is, the very list, without validation."""
        self.__dict__["next_steps"] = next_steps

    def settle(self, final: TaskStepOutput) -> None:
        """Take what a streamed step ended with: this output was returned while the step's
        reply still streamed (``is_last`` then says what the reply looked like so far); once
        it has ended, ``final`` says whether the step is last, which steps follow and which
        tools ran. The output stays the stream the caller has read, with the final one's
        sources and metadata, unless the step ended saying something else.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        self.is_last = final.is_last
        self.next_steps = list(final.next_steps)
        self.reasoning = final.reasoning
        self.tool_outputs = final.tool_outputs
        stream, said = self.output, final.output
        if stream is said:
            return
        if (
            isinstance(stream, StreamingAgentChatResponse)
            and isinstance(said, (AgentChatResponse, StreamingAgentChatResponse))
            and (said.response or "").strip() == stream.response.strip()
        ):  # the step says what streamed (the answer, or the words before its tool calls)
            stream.sources = list(said.sources)
            stream.metadata.update(said.metadata or {})
            if said.structured_response is not None:
                stream.structured_response = said.structured_response
        else:  # the step says something else (a return_direct tool's output is the answer)
            self.output = said

    def __str__(self) -> str:
        return str(self.output)

    def __repr_args__(self) -> Any:
        yield "output", _short(str(self.output))
        yield "step_id", self.task_step.step_id
        yield "next_steps", [s.step_id for s in self.next_steps]
        yield "is_last", self.is_last

    def _repr_html_(self) -> str | None:
        return html_view(self)


_OUTPUT_FIELDS = frozenset({"output", "task_step", "next_steps", "is_last"})


def step_output(output: Any, task_step: TaskStep, next_steps: list[TaskStep], is_last: bool) -> TaskStepOutput:
    """``TaskStepOutput(output=..., task_step=..., next_steps=..., is_last=...)``, how a
    worker's step usually ends: built without validation when validation would take the
    values as they are (a step, a list of steps, a bool), else validated."""
    if isinstance(task_step, TaskStep) and type(next_steps) is list and type(is_last) is bool:
        for s in next_steps:
            if not isinstance(s, TaskStep):
                break
        else:
            values = TaskStepOutput._field_values()
            values["output"] = output
            values["task_step"] = task_step
            values["next_steps"] = next_steps
            values["is_last"] = is_last
            values["reasoning"] = None
            values["tool_outputs"] = _NO_TOOL_OUTPUTS
            values["latency_s"] = None
            values["usage"] = None
            values["input"] = None
            return TaskStepOutput._from_valid(values, _OUTPUT_FIELDS)  # type: ignore[no-any-return]
    return TaskStepOutput(output=output, task_step=task_step, next_steps=next_steps, is_last=is_last)


class StreamingAgentChatResponse:
    """An answer whose tokens arrive over time.

    Read it with ``response_gen`` (sync) or ``async_response_gen()`` (async); ``response``
    holds the text read so far, ``str()`` reads to the end. Done-callbacks run once, with the
    whole text, when the stream ends (the runner finalizes a streamed task there);
    error-callbacks run once, with the exception, if the stream breaks before its end (the
    runner puts the answer's step back in the queue there), and the exception goes on to the reader.

    A worker that streams a reply before knowing what the reply makes of its step (text that
    tool calls may follow) passes ``finish_step``: once the reply has ended, the runner awaits
    ``finish_step(text)`` for the step's real output (see ``AgentRunner.stream_step``).
    """

    def __init__(
        self,
        token_source: AsyncIterator[str] | Iterator[str] | None = None,
        *,
        sources: list[ToolOutput] | None = None,
        prefix: str = "",
        loop: asyncio.AbstractEventLoop | None = None,
        strip_end: bool = False,
        finish_step: Callable[[str], Awaitable[TaskStepOutput | None]] | None = None,
    ) -> None:
        self._source = token_source
        #: what ends the step once the reply has ended (None: the step is what it said)
        self.finish_step = finish_step
        # the final response loses trailing whitespace (the tokens are the model's, as they
        # came), as the reference's streamed ReAct answer does
        self._strip_end = strip_end
        self._loop = loop or _sync.current_loop()
        self._tokens: list[str] = [prefix] if prefix else []
        self.response = prefix
        self.sources: list[ToolOutput] = list(sources or [])
        self.metadata: dict[str, Any] = {}
        self.structured_response: Any = None  # a typed answer, when the agent has output_cls
        self.is_done = token_source is None
        self._done_callbacks: list[Callable[[str], None]] = []
        self._token_callbacks: list[Callable[[str], None]] = []
        self._error_callbacks: list[Callable[[BaseException], None]] = []
        self.error: BaseException | None = None  # what broke the stream, if it broke

    def add_done_callback(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(full_text)`` when the stream ends (at once if it already has)."""
        if self.is_done:
            fn(self.response)
        else:
            self._done_callbacks.append(fn)

    def add_token_callback(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(token)`` for every token read from now on.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: Hello there."]))
        >>> stream, tokens = agent.stream_chat("Hi"), []
        >>> stream.add_token_callback(tokens.append)
        >>> stream.get_response().response, tokens
        ('Hello there.', ['Hello', ' there.'])
        """
        self._token_callbacks.append(fn)

    def add_error_callback(self, fn: Callable[[BaseException], None]) -> None:
        """Call ``fn(error)`` if the stream breaks before its end (at once if it already has).

        Example:

        >>> from nbagent import StreamingAgentChatResponse
        >>> def tokens():
        ...     yield "Hello"
        ...     raise ConnectionError("the server hung up")
        >>> stream, errors = StreamingAgentChatResponse(tokens()), []
        >>> stream.add_error_callback(errors.append)
        >>> try:
        ...     stream.get_response()
        ... except ConnectionError:
        ...     pass
        >>> stream.response, errors
        ('Hello', [ConnectionError('the server hung up')])
        """
        if self.error is not None:
            fn(self.error)
        elif not self.is_done:
            self._error_callbacks.append(fn)

    def _fail(self, error: BaseException) -> None:
        """The token source raised: the answer has no end. Tell the listeners once."""
        if self.is_done or self.error is not None:
            return
        self.error = error
        callbacks, self._error_callbacks = self._error_callbacks, []
        self._done_callbacks = []
        for fn in callbacks:
            fn(error)

    def wrap_source(self, wrap: Callable[[AsyncIterator[str] | Iterator[str]], AsyncIterator[str]]) -> None:
        """Read the tokens still to come through ``wrap(source)`` (the runner ends a streamed
        step inside it). Only before anything past the prefix has been read.

        The step engine calls this; code that uses nbagent does not (so no example)."""
        if self.is_done or self._source is None:
            raise RuntimeError("this stream has ended: there is no source left to wrap")
        self._source = wrap(self._source)

    def _take(self, token: str) -> None:
        self._tokens.append(token)
        self.response += token
        for fn in self._token_callbacks:
            fn(token)

    def _finish(self) -> None:
        if self.is_done:
            return
        self.is_done = True
        if self._strip_end:
            self.response = self.response.rstrip()
        callbacks, self._done_callbacks = self._done_callbacks, []
        for fn in callbacks:
            fn(self.response)

    @property
    def response_gen(self) -> Iterator[str]:
        """Tokens, from the first, read synchronously."""
        yield from list(self._tokens)
        source = self._source
        if self.is_done or source is None:
            return
        while True:
            if self.error is not None:
                raise self.error
            try:
                if isinstance(source, Iterator):
                    token = next(source)
                else:
                    token = _sync.next_on(self._loop, source)
                self._take(token)  # in the try: a token taken is kept, or the read fails
            except StopIteration:
                self._finish()
                return
            except BaseException as err:  # Ctrl-C while reading too: the answer has no end
                self._fail(err)
                raise
            yield token

    async def async_response_gen(self) -> AsyncIterator[str]:
        """Tokens, from the first, read asynchronously."""
        for token in list(self._tokens):
            yield token
        source = self._source
        if self.is_done or source is None:
            return
        while True:
            if self.error is not None:
                raise self.error
            try:
                if isinstance(source, Iterator):
                    token = next(source)
                else:
                    token = await _sync.anext_on(self._loop, source)
                self._take(token)  # in the try: a token taken is kept, or the read fails
            except (StopIteration, StopAsyncIteration):
                self._finish()
                return
            except BaseException as err:  # Ctrl-C while reading too: the answer has no end
                self._fail(err)
                raise
            yield token

    def get_response(self) -> AgentChatResponse:
        """Read to the end and return the plain response.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: Hello there."]))
        >>> agent.stream_chat("Hi").get_response().response
        'Hello there.'
        """
        for _ in self.response_gen:
            pass
        return AgentChatResponse(
            response=self.response, sources=self.sources, structured_response=self.structured_response
        )

    async def aget_response(self) -> AgentChatResponse:
        """Read the rest of the stream, then give the whole answer as a plain
        ``AgentChatResponse`` (its text, sources and typed answer).

        Example:

        >>> import asyncio
        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: Hello there."]))
        >>> async def ask():
        ...     stream = await agent.astream_chat("Hi")
        ...     return (await stream.aget_response()).response
        >>> asyncio.run(ask())
        'Hello there.'
        """
        async for _ in self.async_response_gen():
            pass
        return AgentChatResponse(
            response=self.response, sources=self.sources, structured_response=self.structured_response
        )

    def print_response_stream(self) -> None:
        """Print the tokens as they come (no newline after them, as on the reference).

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: Hello there."]))
        >>> agent.stream_chat("Hi").print_response_stream(); print()
        Hello there.
        """
        for token in self.response_gen:
            print(token, end="", flush=True)

    def __str__(self) -> str:
        if not self.is_done:
            self.get_response()
        return self.response

    def __repr__(self) -> str:
        state = "done" if self.is_done else "streaming"
        return f"StreamingAgentChatResponse({state}, response={_short(self.response)!r})"


def _short(text: str | None, n: int = 60) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


AGENT_CHAT_RESPONSE_TYPE = AgentChatResponse | StreamingAgentChatResponse


def user_message(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)
