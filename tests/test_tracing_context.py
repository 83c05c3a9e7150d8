"""While a traced step's code runs, its step span is the current OpenTelemetry span.

So spans that code makes itself (a tool's own, an instrumented HTTP client's inside a model
call) go under the step that made them, not to the root of an unrelated trace; and when the
step ends, however it ends, the caller's current span is what it was. Checked with the SDK's
own current-span machinery (``start_as_current_span``), as a third-party instrumentation uses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import nbagent.tracing as tracing  # noqa: E402
from nbagent import (  # noqa: E402
    AgentChatResponse,
    AgentRunner,
    BaseAgentWorker,
    ChatMessage,
    CustomSimpleAgentWorker,
    FunctionCallingAgent,
    FunctionLLM,
    FunctionTool,
    ParallelAgentRunner,
    ScriptedLLM,
    Task,
    TaskStep,
    TaskStepOutput,
    tool_call,
)
from nbagent.events import current_step  # noqa: E402


class Traced:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.user = self.provider.get_tracer("the notebook's own code")

    def span(self, name: str) -> Any:
        found = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return found[0]

    def step(self, number: int) -> Any:
        found = [s for s in self.exporter.get_finished_spans()
                 if s.name.startswith("step ") and s.attributes["nbagent.step.number"] == number]
        assert len(found) == 1
        return found[0]

    def parent_of(self, name: str) -> int | None:
        parent = self.span(name).parent
        return None if parent is None else parent.span_id


@pytest.fixture
def traced() -> Iterator[Traced]:
    t = Traced()
    tracing.instrument(t.provider)
    try:
        yield t
    finally:
        tracing.uninstrument()


def test_spans_a_tool_and_a_model_call_make_go_under_their_call_spans_in_their_step(traced: Traced) -> None:
    def lookup(city: str) -> str:
        """Look a city up."""
        with traced.user.start_as_current_span("db query"):
            return f"{city}: sunny"

    calls = iter([tool_call("lookup", city="Oslo"), "It is sunny."])

    def model(messages: Any, tools: Any) -> Any:
        with traced.user.start_as_current_span(f"POST /v1/chat/completions {len(messages)}"):  # an HTTP client's span
            return next(calls)

    runner = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(lookup)], llm=FunctionLLM(model))
    assert "sunny" in str(runner.chat("weather in Oslo?"))
    step1, step2 = traced.step(1), traced.step(2)
    tool = traced.span("execute_tool lookup")  # named when the call ended, current while it ran
    assert tool.parent.span_id == step1.context.span_id
    assert traced.parent_of("db query") == tool.context.span_id
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    spans = traced.exporter.get_finished_spans()
    posts = sorted((s for s in spans if s.name.startswith("POST")), key=lambda s: s.start_time)
    chats = sorted((s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_time)
    assert [p.parent.span_id for p in posts] == [c.context.span_id for c in chats]  # each under its model call
    assert [c.parent.span_id for c in chats] == [step1.context.span_id, step2.context.span_id]
    assert all(p.context.trace_id == step1.context.trace_id for p in posts)  # one trace, not a root each
    for post, chat in zip(posts, chats):
        assert chat.start_time <= post.start_time <= post.end_time <= chat.end_time
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current after the run


def test_after_a_step_the_callers_span_is_current_again_and_the_task_goes_under_it(traced: Traced) -> None:
    seen: list[Any] = []

    class Peek(CustomSimpleAgentWorker):
        def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
            return {}

        def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
            seen.append(trace.get_current_span())
            return AgentChatResponse(response="ok"), len(seen) == 2

        def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
            pass

    worker = Peek(tools=[], llm=ScriptedLLM(["unused"]))
    assert worker.steps_synchronously  # the engine's sync early exit: no event loop round trip
    runner = AgentRunner(worker)
    with traced.user.start_as_current_span("cell") as cell:
        task = runner.create_task("go")
        runner.run_step(task.task_id)
        assert trace.get_current_span() is cell
        runner.run_step(task.task_id)
        assert trace.get_current_span() is cell
        runner.finalize_response(task.task_id)
    assert [s.get_span_context().span_id for s in seen] == [traced.step(1).context.span_id, traced.step(2).context.span_id]
    agent = traced.span("invoke_agent AgentRunner")
    assert agent.parent.span_id == traced.span("cell").context.span_id


def test_a_step_that_raises_leaves_the_callers_span_current_and_its_own_span_holds_what_it_made(traced: Traced) -> None:
    class Breaks(BaseAgentWorker):
        def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
            return TaskStep(task_id=task.task_id, input=task.input)

        async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
            with traced.user.start_as_current_span("before the failure"):
                pass
            raise RuntimeError("the worker broke")

    runner = AgentRunner(Breaks())
    task = runner.create_task("go")
    with traced.user.start_as_current_span("cell") as cell:
        with pytest.raises(RuntimeError, match="the worker broke"):
            runner.run_step(task.task_id)
        assert trace.get_current_span() is cell
    assert len(runner.get_upcoming_steps(task.task_id)) == 1  # still queued, as an untraced failure
    failed = traced.step(1)
    assert failed.attributes["nbagent.step.status"] == "failed"
    assert traced.parent_of("before the failure") == failed.context.span_id


class FanOut(BaseAgentWorker):
    """A root step fans out into three branches that overlap in time, each making a span."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input="root", step_state={"name": "root"})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        if name == "root":
            branches = [TaskStep(task_id=task.task_id, input=n, step_state={"name": n}) for n in "abc"]
            return TaskStepOutput(output="planned", task_step=step, next_steps=branches)
        with self.tracer.start_as_current_span(f"work {name}"):
            await asyncio.sleep(0.01 * (3 - "abc".index(name)))  # they interleave on the loop
            with self.tracer.start_as_current_span(f"inner {name}"):
                pass
        return TaskStepOutput(output=AgentChatResponse(response=name), task_step=step, is_last=name == "c")


def test_parallel_branches_each_nest_their_own_spans_though_they_interleave(traced: Traced) -> None:
    runner = ParallelAgentRunner(FanOut(traced.user))
    task = runner.create_task("go")
    runner.run_step(task.task_id)
    asyncio.run(runner.arun_steps_in_queue(task.task_id))
    steps = {s.attributes["nbagent.step.id"]: s for s in traced.exporter.get_finished_spans() if s.name.startswith("step ")}
    for name in "abc":
        work = traced.span(f"work {name}")
        step = work.parent.span_id
        assert step in {s.context.span_id for s in steps.values()}
        assert traced.parent_of(f"inner {name}") == work.context.span_id
    assert len({traced.span(f"work {n}").parent.span_id for n in "abc"}) == 3  # three branches, three parents
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_an_awaited_step_in_a_running_loop_nests_and_restores_the_same(traced: Traced) -> None:
    def model(messages: Any, tools: Any) -> str:
        with traced.user.start_as_current_span("POST"):
            return "hi"

    runner = FunctionCallingAgent.from_tools([], llm=FunctionLLM(model))

    async def main() -> Any:
        with traced.user.start_as_current_span("cell") as cell:
            task = runner.create_task("hello")
            await runner.arun_step(task.task_id)
            return cell, trace.get_current_span()

    cell, after = asyncio.run(main())
    assert after is cell
    chat = traced.span("chat function")
    assert traced.parent_of("POST") == chat.context.span_id
    assert chat.parent.span_id == traced.step(1).context.span_id


def test_untraced_a_step_opens_nothing_for_its_code() -> None:
    seen: list[Any] = []

    def model(messages: list[ChatMessage], tools: Any) -> str:
        ctx = current_step()
        seen.append((ctx is not None, ctx.closers if ctx is not None else "no step", trace.get_current_span()))
        return "hi"

    runner = FunctionCallingAgent.from_tools([], llm=FunctionLLM(model))
    runner.chat("hello")
    assert seen == [(True, None, trace.INVALID_SPAN)]


def test_a_sampled_out_step_takes_the_spans_its_code_makes_with_it() -> None:
    """A step span the sampler dropped is still the current span (not recording, same trace):
    under a parent-based sampler the spans its code makes are dropped with it, not exported
    as roots of traces of their own. A no-op provider's span carries no trace: nothing is made current."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
    from opentelemetry.trace import NoOpTracerProvider

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    user = provider.get_tracer("user")
    seen: list[Any] = []

    def model(messages: Any, tools: Any) -> str:
        seen.append(trace.get_current_span())
        with user.start_as_current_span("POST"):
            return "hi"

    runner = FunctionCallingAgent.from_tools([], llm=FunctionLLM(model))
    tracing.trace_runner(runner, provider)
    runner.chat("hello")
    assert exporter.get_finished_spans() == ()
    assert seen[0].get_span_context().is_valid and not seen[0].is_recording()

    quiet = FunctionCallingAgent.from_tools([], llm=FunctionLLM(model))
    tracing.trace_runner(quiet, NoOpTracerProvider())
    quiet.chat("hello")
    assert seen[1] is trace.INVALID_SPAN


def test_in_an_agent_workflow_a_model_call_runs_under_its_chat_span_and_a_tool_under_its_tool_span(traced: Traced) -> None:
    """The workflow runtime's steps run each agent turn's model call and each tool call: while
    they run, the turn's ``chat`` span and the call's ``execute_tool`` span are current (the
    tool in its worker thread too), and nothing stays current after the run."""
    from nbagent.workflow import AgentWorkflow, FunctionAgent

    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        with traced.user.start_as_current_span(f"weather api {city}"):
            return f"sunny in {city}"

    replies = iter([tool_call("lookup", city="Paris"), tool_call("lookup", city="Oslo"), "Sunny twice."])

    def model(messages: Any, tools: Any) -> Any:
        with traced.user.start_as_current_span("POST"):
            return next(replies)

    weather = FunctionAgent(name="weather", description="Weather", tools=[lookup], llm=FunctionLLM(model, model="big"))
    wf = AgentWorkflow([weather], root_agent="weather")

    async def main() -> Any:
        return await wf.run(user_msg="Weather in Paris and Oslo?")

    assert str(asyncio.run(main())) == "Sunny twice."
    spans = traced.exporter.get_finished_spans()
    chats = sorted((s for s in spans if s.name == "chat big"), key=lambda s: s.start_time)
    posts = sorted((s for s in spans if s.name == "POST"), key=lambda s: s.start_time)
    assert len(chats) == len(posts) == 3
    assert [p.parent.span_id for p in posts] == [c.context.span_id for c in chats]
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name == "execute_tool lookup"}
    assert len(tools) == 2
    for city in ("Paris", "Oslo"):
        api = traced.span(f"weather api {city}")
        assert api.parent.span_id in {t.context.span_id for t in tools.values()}
    assert traced.span("weather api Paris").parent.span_id != traced.span("weather api Oslo").parent.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_model_calls_made_together_in_one_step_each_nest_their_own_spans(traced: Traced) -> None:
    """Two model calls of one step at once (asyncio.gather): each call's spans go under its
    own chat span, though the calls interleave, and the step's span is current again after."""

    def model(messages: Any, tools: Any) -> str:
        with traced.user.start_as_current_span(f"POST {messages[-1].text}"):
            return messages[-1].text.upper()

    llm = FunctionLLM(model)
    after: list[Any] = []

    class TwoAtOnce(BaseAgentWorker):
        def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
            return TaskStep(task_id=task.task_id, input=task.input)

        async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
            async def ask(text: str) -> Any:
                await asyncio.sleep(0.01 if text == "a" else 0)  # a starts first, ends last
                return await llm.achat([ChatMessage(role="user", content=text)])

            replies = await asyncio.gather(ask("a"), ask("b"))
            after.append(trace.get_current_span())
            return TaskStepOutput(output=AgentChatResponse(response=" ".join(str(r) for r in replies)),
                                  task_step=step, is_last=True)

    runner = AgentRunner(TwoAtOnce())
    task = runner.create_task("go")
    runner.run_step(task.task_id)
    chats = [s for s in traced.exporter.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 2
    for text in "ab":
        post = traced.span(f"POST {text}")
        chat = next(c for c in chats if c.context.span_id == post.parent.span_id)
        assert chat.start_time <= post.start_time <= post.end_time <= chat.end_time
        assert chat.parent.span_id == traced.step(1).context.span_id
    assert after[0].get_span_context().span_id == traced.step(1).context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_streamed_model_call_read_in_its_step_nests_its_spans(traced: Traced) -> None:
    def model(messages: Any, tools: Any) -> str:
        with traced.user.start_as_current_span("POST stream"):
            return "a streamed answer"

    runner = FunctionCallingAgent.from_tools([], llm=FunctionLLM(model))
    response = runner.stream_chat("hello")
    assert "".join(response.response_gen) == "a streamed answer"
    chat = traced.span("chat function")
    assert chat.attributes["gen_ai.request.stream"] is True
    assert traced.parent_of("POST stream") == chat.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_tool_calls_run_together_each_nest_the_spans_their_tool_makes(traced: Traced) -> None:
    """A reply with two tool calls: they run at once (worker threads), each tool's own span
    under its own ``execute_tool`` span."""
    import threading

    both = threading.Barrier(2, timeout=5)

    def fetch(name: str) -> str:
        """Fetch a page."""
        with traced.user.start_as_current_span(f"GET {name}"):
            both.wait()  # both tools are running at this moment
            return f"page {name}"

    calls = [{"name": "fetch", "arguments": {"name": n}} for n in "ab"]
    llm = ScriptedLLM([{"tool_calls": calls}, "Fetched both."])
    runner = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(fetch)], llm=llm)
    assert str(runner.chat("fetch a and b")) == "Fetched both."
    tools = {s.context.span_id: s for s in traced.exporter.get_finished_spans() if s.name == "execute_tool fetch"}
    assert len(tools) == 2
    parents = {traced.parent_of(f"GET {n}") for n in "ab"}
    assert parents == set(tools)  # one each, not both under the same one
    for span in tools.values():
        assert span.parent.span_id == traced.step(1).context.span_id
