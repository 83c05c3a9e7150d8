"""nbagent.tracing: runs as OpenTelemetry spans, checked with the SDK's in-memory exporter.

Every scenario asserts the exact span tree (names, OpenInference kinds, error marks) and the
GenAI attributes that matter to a backend; content stays off the spans unless asked for.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import nbagent.tracing as tracing  # noqa: E402
from nbagent import (  # noqa: E402
    AgentChatResponse,
    BaseAgentWorker,
    ChatMessage,
    FunctionCallingAgent,
    FunctionLLM,
    FunctionTool,
    ParallelAgentRunner,
    ReActAgent,
    ScriptedLLM,
    Task,
    TaskStep,
    TaskStepOutput,
    tool_call,
)
from nbagent.tracing import SpanTree  # noqa: E402


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


class Traced:
    """A provider whose spans land in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def tree(self, *attributes: str) -> list[str]:
        return SpanTree(self.spans).lines(attributes)

    def named(self, prefix: str) -> list[Any]:
        return [s for s in self.spans if s.name.startswith(prefix)]


@pytest.fixture
def traced() -> Iterator[Traced]:
    t = Traced()
    tracing.instrument(t.provider)
    try:
        yield t
    finally:
        tracing.uninstrument()


REACT = [
    'Thought: I add.\nAction: add\nAction Input: {"a": 2, "b": 3}',
    "Thought: I know.\nAnswer: 5",
]


def test_react_run_is_one_agent_span_with_a_step_span_per_step_and_its_calls(traced: Traced) -> None:
    agent = ReActAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM(REACT))
    assert str(agent.chat("2 + 3?")) == "5"
    assert traced.tree() == [
        "invoke_agent ReActAgent [AGENT]",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM]",
        "    execute_tool add [TOOL]",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    (task,) = agent.list_tasks()
    (root,) = traced.named("invoke_agent")
    a = root.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "ReActAgent"
    assert a["gen_ai.provider.name"] == "nbagent.scripted" and a["gen_ai.request.model"] == "scripted"
    assert a["gen_ai.conversation.id"] == a["session.id"] and a["nbagent.task.status"] == "finalized"
    assert a["gen_ai.conversation.id"] == task.task_id
    chat1, chat2 = traced.named("chat")
    for chat in (chat1, chat2):
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0 and chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["llm.token_count.total"] == (
            chat.attributes["gen_ai.usage.input_tokens"] + chat.attributes["gen_ai.usage.output_tokens"]
        )
        assert chat.kind.name == "CLIENT"
    # a ReAct reply's tool call is text to the model: it stops, then the worker acts
    assert chat1.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    (tool,) = traced.named("execute_tool")
    assert tool.attributes["gen_ai.tool.name"] == "add" and tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.call.id"]
    assert tool.status.status_code.name == "UNSET"
    steps = traced.named("step")
    assert [s.attributes["nbagent.step.number"] for s in steps] == [1, 2]
    assert [s.attributes["nbagent.step.status"] for s in steps] == ["done", "done"]
    assert [s.attributes["nbagent.step.is_last"] for s in steps] == [False, True]
    # nothing the model or a tool said is on a span unless asked for
    for s in traced.spans:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                    "gen_ai.tool.call.result", "input.value", "output.value"} & set(s.attributes)
    # every span of the run is one trace, and times nest
    assert len({s.context.trace_id for s in traced.spans}) == 1
    by_id = {s.context.span_id: s for s in traced.spans}
    for s in traced.spans:
        if s.parent is not None:
            p = by_id[s.parent.span_id]
            assert p.start_time <= s.start_time and s.end_time <= p.end_time


def test_parallel_tool_calls_are_sibling_tool_spans_and_a_failing_tool_is_an_error(traced: Traced) -> None:
    llm = ScriptedLLM([
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "divide", "arguments": {"a": 1, "b": 0}}]},
        "3, and 1/0 fails",
    ])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add), FunctionTool.from_defaults(divide)], llm=llm)
    agent.chat("go")
    assert traced.tree("gen_ai.tool.call.id") == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM]",
        "    execute_tool add [TOOL] gen_ai.tool.call.id=call_1",
        "    execute_tool divide [TOOL] ! gen_ai.tool.call.id=call_2",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    chat1 = traced.named("chat")[0]
    assert chat1.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    bad = traced.named("execute_tool divide")[0]
    assert bad.status.status_code.name == "ERROR" and bad.attributes["error.type"] == "ToolError"
    assert "division by zero" in bad.status.description
    assert [e.name for e in bad.events] == ["exception"]
    assert bad.start_time <= bad.events[0].timestamp == bad.end_time  # when it failed, not when it was drawn
    # the step that ran a failing tool did not fail: the model saw the error and answered
    assert all(s.status.status_code.name == "UNSET" for s in traced.named("step"))


def test_content_is_captured_only_when_asked() -> None:
    t = Traced()
    tracing.instrument(t.provider, capture_content=True)
    try:
        llm = ScriptedLLM([tool_call("add", a=2, b=3), "It is 5."])
        FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm).chat("What is 2 + 3?")
    finally:
        tracing.uninstrument()
    chat1, chat2 = t.named("chat")
    sent = json.loads(chat1.attributes["gen_ai.input.messages"])
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": "What is 2 + 3?"}]}
    said = json.loads(chat1.attributes["gen_ai.output.messages"])
    assert said[0]["parts"][0]["type"] == "tool_call" and said[0]["parts"][0]["arguments"] == {"a": 2, "b": 3}
    assert said[0]["finish_reason"] == "tool_calls"
    assert json.loads(chat2.attributes["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "It is 5."}]
    (tool,) = t.named("execute_tool")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert tool.attributes["gen_ai.tool.call.result"] == "5"
    (root,) = t.named("invoke_agent")
    assert root.attributes["input.value"] == "What is 2 + 3?" and root.attributes["output.value"] == "It is 5."


def test_the_standard_environment_switch_captures_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    t = Traced()
    tracing.instrument(t.provider)
    try:
        ReActAgent.from_tools([], llm=ScriptedLLM(["Thought: easy.\nAnswer: hi"])).chat("hello")
    finally:
        tracing.uninstrument()
    (chat,) = t.named("chat")
    assert "hello" in chat.attributes["gen_ai.input.messages"]


def test_undo_is_an_event_on_the_task_span_and_the_rerun_a_new_step_span(traced: Traced) -> None:
    llm = ScriptedLLM([tool_call("add", a=1, b=1), tool_call("add", a=2, b=2), "4"])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
    task = agent.create_task("go")
    first = agent.run_step(task)
    agent.undo_step(task)
    agent.run_step(task)
    agent.run_step(task)
    agent.finalize_response(task)
    assert traced.tree() == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM]",
        "    execute_tool add [TOOL]",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM]",
        "    execute_tool add [TOOL]",
        "  step 3 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    (root,) = traced.named("invoke_agent")
    undone = [e for e in root.events if e.name == "nbagent.step.undone"]
    assert [e.attributes["nbagent.step.id"] for e in undone] == [first.task_step.step_id]
    steps = traced.named("step")
    assert steps[0].attributes["nbagent.step.id"] == steps[1].attributes["nbagent.step.id"] == first.task_step.step_id
    assert steps[0].end_time <= undone[0].timestamp <= steps[1].start_time


def test_a_failing_step_is_an_error_span_and_its_retry_a_new_one(traced: Traced) -> None:
    llm = ScriptedLLM([ConnectionError("server down"), "fine now"])
    agent = FunctionCallingAgent.from_tools([], llm=llm)
    task = agent.create_task("hi")
    with pytest.raises(ConnectionError):
        agent.run_step(task)
    agent.run_step(task)
    agent.finalize_response(task)
    assert traced.tree() == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN] !",
        "    chat scripted [LLM] !",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    failed = traced.named("step")[0]
    assert failed.attributes["nbagent.step.status"] == "failed" and failed.attributes["error.type"] == "ConnectionError"
    assert "server down" in failed.status.description
    assert traced.named("chat")[0].attributes["error.type"] == "ConnectionError"


def test_approvals_are_events_on_the_tool_span_and_a_rejected_call_has_a_span_that_ran_nothing(traced: Traced) -> None:
    ran: list[int] = []

    def charge(amount: int) -> str:
        """Charge a card."""
        ran.append(amount)
        return f"charged {amount}"

    tool = FunctionTool.from_defaults(charge, requires_approval=True)
    llm = ScriptedLLM([
        {"tool_calls": [{"name": "charge", "arguments": {"amount": 5}}, {"name": "charge", "arguments": {"amount": 500}}]},
        "charged 5 only",
    ])
    agent = FunctionCallingAgent.from_tools([tool], llm=llm)
    task = agent.create_task("pay")
    agent.run_step(task)
    small, big = agent.pending_approvals(task)
    agent.approve(task, small.call_id, by="ana")
    agent.reject(task, big.call_id, reason="too much", by="bo")
    agent.run_step(task)
    agent.run_step(task)
    agent.finalize_response(task)
    assert ran == [5]
    assert traced.tree() == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM]",
        "  step 2 [CHAIN]",
        "    execute_tool charge [TOOL]",
        "    execute_tool charge [TOOL]",
        "  step 3 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    done, rejected = traced.named("execute_tool")
    assert done.attributes["nbagent.call.id"] == small.call_id and "nbagent.call.rejected" not in done.attributes
    assert [(e.name, dict(e.attributes)) for e in done.events] == [
        ("nbagent.approval", {"nbagent.approval.decision": "approved", "nbagent.approval.by": "ana",
                              "nbagent.approval.reason": ""}),
    ]
    assert rejected.attributes["nbagent.call.id"] == big.call_id and rejected.attributes["nbagent.call.rejected"] is True
    assert [dict(e.attributes) for e in rejected.events] == [
        {"nbagent.approval.decision": "rejected", "nbagent.approval.by": "bo", "nbagent.approval.reason": "too much"},
    ]


class FanOut(BaseAgentWorker):
    """A root step that fans out into three steps (each asks the model), joined by a last one."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"name": "root"})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        if name == "root":
            branches = [TaskStep(task_id=task.task_id, input=n, step_state={"name": n}) for n in ("a", "b", "c")]
            join = TaskStep(task_id=task.task_id, input="join", step_state={"name": "join"}, is_ready=False)
            for b in branches:
                b.link_step(join)
            return TaskStepOutput(output="planned", task_step=step, next_steps=[*branches, join])
        if name == "join":
            return TaskStepOutput(output=AgentChatResponse(response="joined"), task_step=step, is_last=True)
        await asyncio.sleep(0.01 * (3 - "abc".index(name)))  # a ends last: they overlap
        reply = await self.llm.achat([ChatMessage(role="user", content=name)])
        return TaskStepOutput(output=str(reply), task_step=step)


def test_parallel_dag_steps_are_siblings_under_their_task_and_overlap(traced: Traced) -> None:
    runner = ParallelAgentRunner(FanOut(FunctionLLM(lambda messages, tools: messages[-1].text.upper())))
    assert str(runner.chat("go")) == "joined"
    assert traced.tree() == [
        "invoke_agent ParallelAgentRunner [AGENT]",
        "  step 1 [CHAIN]",
        "  step 2 [CHAIN]",
        "    chat function [LLM]",
        "  step 3 [CHAIN]",
        "    chat function [LLM]",
        "  step 4 [CHAIN]",
        "    chat function [LLM]",
        "  step 5 [CHAIN]",
    ]
    root = traced.named("invoke_agent")[0]
    steps = traced.named("step")
    assert all(s.parent.span_id == root.context.span_id for s in steps)
    branches = [s for s in steps if s.attributes["nbagent.step.number"] in (2, 3, 4)]
    assert max(s.start_time for s in branches) < min(s.end_time for s in branches)  # they ran together
    # each model call sits under the branch step that made it
    chats = traced.named("chat")
    assert {c.parent.span_id for c in chats} == {s.context.span_id for s in branches}


def test_a_batch_is_a_span_each_task_links_to(traced: Traced) -> None:
    agent = FunctionCallingAgent.from_tools([], llm=FunctionLLM(lambda messages, tools: "ok " + messages[-1].text))
    batch = agent.run_batch(["a", "b", "c"], max_concurrency=2, progress=False, name="nightly")
    assert [str(r) for r in batch.results] == ["ok a", "ok b", "ok c"]
    (b,) = traced.named("batch")
    assert b.name == "batch nightly" and b.attributes["nbagent.batch.size"] == 3 and b.attributes["nbagent.batch.failed"] == 0
    tasks = traced.named("invoke_agent")
    assert len(tasks) == 3
    assert sorted(t.attributes["nbagent.batch.index"] for t in tasks) == [0, 1, 2]
    for t in tasks:
        assert [link.context.span_id for link in t.links] == [b.context.span_id]
        assert t.parent is None  # tasks are their own traces, linked to the batch
        own = [s for s in traced.spans if s.context.trace_id == t.context.trace_id]
        assert SpanTree(own).lines() == [
            "invoke_agent FunctionCallingAgent [AGENT]",
            "  step 1 [CHAIN]",
            "    chat function [LLM]",
        ]


def test_a_workflow_with_a_handoff_is_invoke_workflow_with_an_agent_span_per_turn(traced: Traced) -> None:
    from nbagent.workflow import AgentWorkflow, FunctionAgent

    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        return f"sunny in {city}"

    triage = FunctionAgent(name="triage", description="Routes", can_handoff_to=["weather"],
                           llm=ScriptedLLM([tool_call("handoff", to_agent="weather", reason="it is weather")], model="small"))
    weather = FunctionAgent(name="weather", description="Weather", tools=[lookup],
                            llm=ScriptedLLM([tool_call("lookup", city="Paris"), "Sunny."], model="big"))
    wf = AgentWorkflow([triage, weather], root_agent="triage")

    async def main() -> Any:
        return await wf.run(user_msg="Weather in Paris?")

    assert str(asyncio.run(main())) == "Sunny."
    assert traced.tree() == [
        "invoke_workflow AgentWorkflow [CHAIN]",
        "  invoke_agent triage [AGENT]",
        "    chat small [LLM]",
        "    execute_tool handoff [TOOL]",
        "  invoke_agent weather [AGENT]",
        "    chat big [LLM]",
        "    execute_tool lookup [TOOL]",
        "  invoke_agent weather [AGENT]",
        "    chat big [LLM]",
    ]
    (wf_span,) = traced.named("invoke_workflow")
    assert wf_span.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert wf_span.attributes["gen_ai.workflow.name"] == "AgentWorkflow"
    assert wf_span.attributes["nbagent.answered_by"] == "weather" and wf_span.attributes["nbagent.workflow.status"] == "done"
    handoff = traced.named("execute_tool handoff")[0]
    assert handoff.attributes["nbagent.handoff.to"] == "weather"
    turns = traced.named("invoke_agent")
    assert turns[1].attributes["nbagent.handoff.from"] == "triage"
    assert turns[1].attributes["nbagent.handoff.reason"] == "it is weather"
    assert "nbagent.handoff.from" not in turns[2].attributes
    assert [t.attributes["gen_ai.agent.name"] for t in turns] == ["triage", "weather", "weather"]
    chats = traced.named("chat")
    assert [c.attributes["gen_ai.request.model"] for c in chats] == ["small", "big", "big"]
    assert all(c.attributes["gen_ai.usage.input_tokens"] > 0 and c.attributes["gen_ai.usage.output_tokens"] > 0
               for c in chats)
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [("tool_calls",), ("tool_calls",), ("stop",)]


def test_a_failed_workflow_run_is_an_error_span(traced: Traced) -> None:
    from nbagent.workflow import AgentWorkflow, FunctionAgent

    agent = FunctionAgent(name="solo", description="x", llm=ScriptedLLM([RuntimeError("model gone")]))
    wf = AgentWorkflow([agent], root_agent="solo")

    async def main() -> Any:
        return await wf.run(user_msg="hi")

    with pytest.raises(RuntimeError):
        asyncio.run(main())
    (span,) = traced.named("invoke_workflow")
    assert span.status.status_code.name == "ERROR" and span.attributes["error.type"] == "RuntimeError"
    assert traced.tree()[0] == "invoke_workflow AgentWorkflow [CHAIN] !"


def test_runners_made_before_instrument_are_traced_and_uninstrument_stops_it() -> None:
    agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Thought: a.\nAnswer: one", "Thought: b.\nAnswer: two"]))
    t = Traced()
    tracing.instrument(t.provider)
    assert tracing.is_instrumented()
    agent.chat("first")
    tracing.uninstrument()
    assert not tracing.is_instrumented()
    agent.chat("second")
    assert [s.name for s in t.spans if s.name.startswith("invoke")] == ["invoke_agent ReActAgent"]
    from nbagent import events

    assert not any(agent.events.wants(k) for k in (events.ModelCalled, events.ToolCalled, events.StepStarted))


def test_instrument_again_replaces_the_provider() -> None:
    agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Thought: a.\nAnswer: one"], repeat_last=True))
    first, second = Traced(), Traced()
    tracing.instrument(first.provider)
    tracing.instrument(second.provider)
    try:
        agent.chat("x")
    finally:
        tracing.uninstrument()
    assert first.spans == [] and len(second.named("invoke_agent")) == 1


def test_an_open_task_span_ends_when_tracing_stops() -> None:
    t = Traced()
    tracing.instrument(t.provider)
    agent = FunctionCallingAgent.from_tools([], llm=ScriptedLLM(["done"]))
    task = agent.create_task("hi")
    agent.run_step(task)
    assert t.named("invoke_agent") == []  # still open: the task was not finalized
    tracing.uninstrument()
    (root,) = t.named("invoke_agent")
    assert root.attributes["nbagent.task.status"] == "untraced" and root.attributes["nbagent.task.steps"] == 1


class Raising(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.calls += 1
        raise OSError("collector exploded")

    def shutdown(self) -> None:
        pass


def test_an_exporter_that_raises_never_breaks_a_step(caplog: pytest.LogCaptureFixture) -> None:
    exporter = Raising()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(provider)
    try:
        agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([tool_call("add", a=1, b=2), "3"]))
        assert str(agent.chat("go")) == "3"
    finally:
        tracing.uninstrument()
    assert exporter.calls >= 6  # every span was offered to it, and every export raised
    (task,) = agent.list_tasks()
    assert len(agent.state_of(task).completed_steps) == 2


class Stuck(SpanExporter):
    """A collector that never answers (until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.got = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.release.wait(10)
        self.got += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_collector_that_hangs_does_not_hold_up_steps_with_a_batch_processor() -> None:
    exporter = Stuck()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1, max_export_batch_size=1))
    tracing.instrument(provider)
    try:
        llm = ScriptedLLM([tool_call("add", a=1, b=2)] * 5 + ["done"])
        agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
        assert str(agent.chat("go")) == "done"  # all six steps ran while the export hung
        assert exporter.got == 0
    finally:
        tracing.uninstrument()
        exporter.release.set()
        provider.shutdown()
    assert exporter.got > 0


def test_a_runner_given_a_tracer_provider_is_traced_and_instrument_leaves_it_alone() -> None:
    own, everyone = Traced(), Traced()
    # the runner's own argument, forwarded by from_tools like every runner argument
    agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Thought: a.\nAnswer: one"], repeat_last=True),
                                  tracer_provider=own.provider)
    tracing.instrument(everyone.provider)
    try:
        agent.chat("x")
    finally:
        tracing.uninstrument()
    agent.chat("y")  # its own tracer outlives uninstrument
    tracing.untrace_runner(agent)
    agent.chat("z")
    assert len(own.named("invoke_agent")) == 2 and everyone.spans == []


def test_trace_runner_refuses_what_is_not_a_runner() -> None:
    with pytest.raises(TypeError, match="needs an AgentRunner"):
        tracing.trace_runner(object(), TracerProvider())
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry TracerProvider.*got str"):
        FunctionCallingAgent.from_tools([], llm=ScriptedLLM(["x"]), tracer_provider="http://localhost:4318")
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry TracerProvider"):
        tracing.instrument("http://localhost:4318")
    assert not tracing.is_instrumented()


def test_off_means_no_call_event_is_ever_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent import events

    built: list[str] = []

    def never(*args: Any, **kwargs: Any) -> Any:
        built.append("built")
        raise AssertionError("an event nobody listens to was built")

    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=ScriptedLLM([tool_call("add", a=1, b=2), "3"]))
    monkeypatch.setattr(events, "ModelCalled", type("ModelCalled", (events.ModelCalled,), {"__new__": never}))
    monkeypatch.setattr(events, "ToolCalled", type("ToolCalled", (events.ToolCalled,), {"__new__": never}))
    assert str(agent.chat("go")) == "3"
    assert built == []


def test_a_streamed_chat_has_the_same_tree_and_its_model_calls_say_they_streamed(traced: Traced) -> None:
    llm = ScriptedLLM([tool_call("add", a=1, b=2), "The answer is three."])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
    response = agent.stream_chat("go")
    assert "".join(response.response_gen) == "The answer is three."
    assert traced.tree() == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM]",
        "    execute_tool add [TOOL]",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM]",
    ]
    assert [c.attributes["gen_ai.request.stream"] for c in traced.named("chat")] == [True, True]
    assert traced.named("chat")[1].attributes["gen_ai.usage.output_tokens"] > 0


def test_a_workflow_call_that_waits_for_a_person_says_so_and_a_rejection_is_no_error(traced: Traced) -> None:
    from nbagent.workflow import AgentWorkflow, FunctionAgent
    from nbagent.workflow.approval import ToolApprovalRequired, ToolApprovalResponse

    deleted: list[str] = []

    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    llm = ScriptedLLM([tool_call("delete_file", path="a.txt"), "I left a.txt alone."])
    agent = FunctionAgent(name="tidy", description="x", llm=llm,
                          tools=[FunctionTool.from_defaults(delete_file, requires_approval=True)])
    wf = AgentWorkflow([agent], root_agent="tidy")

    async def main() -> Any:
        handler = wf.run(user_msg="tidy up")
        async for ev in handler.stream_events():
            if isinstance(ev, ToolApprovalRequired):
                handler.ctx.send_event(ToolApprovalResponse.reject(ev, reason="keep it", by="ana"))
        return await handler

    assert str(asyncio.run(main())) == "I left a.txt alone." and deleted == []
    assert traced.tree() == [
        "invoke_workflow AgentWorkflow [CHAIN]",
        "  invoke_agent tidy [AGENT]",
        "    chat scripted [LLM]",
        "    execute_tool delete_file [TOOL]",
        "  invoke_agent tidy [AGENT]",
        "    chat scripted [LLM]",
    ]
    (call,) = traced.named("execute_tool")
    assert call.attributes["nbagent.call.rejected"] is True and call.status.status_code.name == "UNSET"
    assert [(e.name, dict(e.attributes)) for e in call.events] == [
        ("nbagent.approval.asked", {"nbagent.approval.agent": "tidy"}),
        ("nbagent.approval", {"nbagent.approval.decision": "rejected", "nbagent.approval.by": "ana",
                              "nbagent.approval.reason": "keep it"}),
    ]


def _summariser(llm: Any) -> Any:
    """A plain workflow whose one step asks ``llm``."""
    from nbagent.workflow import StartEvent, StopEvent, Workflow, step

    class Summariser(Workflow):
        @step
        async def summarise(self, ev: StartEvent) -> StopEvent:
            reply = await llm.achat([ChatMessage(role="user", content=ev.get("text"))])
            return StopEvent(result=str(reply))

    return Summariser()


def test_a_plain_workflow_is_one_span_with_a_chat_span_per_model_call(traced: Traced) -> None:
    wf = _summariser(ScriptedLLM(["short."], model="tiny"))

    async def main() -> Any:
        return await wf.run(text="a long text")

    from nbagent.memory import count_tokens

    assert asyncio.run(main()) == "short."
    assert traced.tree("nbagent.workflow.step", "gen_ai.usage.output_tokens") == [
        "invoke_workflow Summariser [CHAIN]",
        f"  chat tiny [LLM] nbagent.workflow.step=summarise gen_ai.usage.output_tokens={count_tokens('short.')}",
    ]


def test_untraced_a_workflow_step_gets_no_step_context() -> None:
    from nbagent import events

    seen: list[Any] = []

    class Spy(ScriptedLLM):
        async def _achat(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(events.current_step())
            return await super()._achat(*args, **kwargs)

    wf = _summariser(Spy(["ok"]))

    async def main() -> Any:
        handler = wf.run(text="x")
        assert not handler.events.wants(events.ModelCalled)
        return await handler

    assert asyncio.run(main()) == "ok" and seen == [None]


def test_a_task_span_ends_with_its_task_however_it_ends(traced: Traced) -> None:
    agent = FunctionCallingAgent.from_tools([], llm=ScriptedLLM(["one"], repeat_last=True))
    abandoned, deleted, reset = agent.create_task("a"), agent.create_task("b"), agent.create_task("c")
    agent.run_step(abandoned)
    agent.abandon_task(abandoned)
    agent.delete_task(deleted)
    assert len(traced.named("invoke_agent")) == 2  # the third is still open
    agent.reset()
    statuses = {s.attributes["gen_ai.conversation.id"]: s.attributes["nbagent.task.status"] for s in traced.named("invoke_agent")}
    assert statuses == {abandoned.task_id: "abandoned", deleted.task_id: "deleted", reset.task_id: "reset"}
    steps = {s.attributes["gen_ai.conversation.id"]: s.attributes["nbagent.task.steps"] for s in traced.named("invoke_agent")}
    assert steps == {abandoned.task_id: 1, deleted.task_id: 0, reset.task_id: 0}


def test_a_task_made_before_tracing_gets_its_span_at_its_first_step() -> None:
    agent = FunctionCallingAgent.from_tools([], llm=ScriptedLLM(["done"]))
    task = agent.create_task("hi")  # created while untraced
    t = Traced()
    tracing.instrument(t.provider)
    try:
        agent.run_step(task)
        agent.finalize_response(task)
    finally:
        tracing.uninstrument()
    assert t.tree() == ["invoke_agent FunctionCallingAgent [AGENT]", "  step 1 [CHAIN]", "    chat scripted [LLM]"]
    (root,) = t.named("invoke_agent")
    assert root.attributes["gen_ai.conversation.id"] == task.task_id


def test_a_worker_that_steps_synchronously_is_traced_the_same(traced: Traced) -> None:
    from nbagent import AgentChatResponse, AgentRunner, CustomSimpleAgentWorker

    class Countdown(CustomSimpleAgentWorker):
        """Three sync steps (the engine's sync early exit runs them)."""

        def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
            return {"left": 3}

        def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
            state["left"] -= 1
            return AgentChatResponse(response=str(state["left"])), state["left"] == 0

        def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
            pass

    worker = Countdown(tools=[], llm=ScriptedLLM(["unused"]))
    assert worker.steps_synchronously
    runner = AgentRunner(worker)
    assert str(runner.chat("go")) == "0"
    assert traced.tree() == [
        "invoke_agent AgentRunner [AGENT]", "  step 1 [CHAIN]", "  step 2 [CHAIN]", "  step 3 [CHAIN]",
    ]


def test_one_workflow_run_can_be_traced_on_its_own() -> None:
    t = Traced()
    wf = _summariser(ScriptedLLM(["short."], model="tiny"))

    async def main() -> Any:
        handler = wf.run(text="a long text")
        tracing.trace_workflow(handler, t.provider)
        return await handler

    assert asyncio.run(main()) == "short."
    assert t.tree() == ["invoke_workflow Summariser [CHAIN]", "  chat tiny [LLM]"]
    (run,) = t.named("invoke_workflow")
    assert run.attributes["nbagent.workflow.status"] == "done"
    with pytest.raises(TypeError, match="needs a WorkflowHandler"):
        tracing.trace_workflow(wf, t.provider)


def test_observations_reach_only_listeners_that_name_them(traced: Traced, tmp_path: Any) -> None:
    """A model or tool call is no change of a task: a listener of every change (the panel, the
    live graph, autosave) never hears one, and alone makes the engine build none."""
    from nbagent import events

    agent = FunctionCallingAgent.from_tools(
        [FunctionTool.from_defaults(add)], llm=ScriptedLLM([tool_call("add", a=1, b=2), "3"] * 2),
        autosave=tmp_path / "run.db",
    )
    heard: list[str] = []
    agent.subscribe(lambda e: heard.append(type(e).__name__))
    agent.chat("go")  # traced: the tracer names them
    assert not {"ModelCalled", "ToolCalled"} & set(heard) and "StepCompleted" in heard
    assert len(traced.named("chat")) == 2 and len(traced.named("execute_tool")) == 1
    tracing.uninstrument()
    assert not agent.events.wants(events.ModelCalled) and not agent.events.wants(events.ToolCalled)
    assert agent.events.wants(events.StepCompleted)
    from nbagent import AgentRunner

    loaded = AgentRunner.load(tmp_path / "run.db", agent.agent_worker)  # the store kept the whole run
    assert [len(s.completed_steps) for s in loaded.tasks.values()] == [2]


def test_a_runner_class_that_is_not_hashable_still_works_and_is_traced_once_instrumented() -> None:
    class Comparable(FunctionCallingAgent):
        def __eq__(self, other: object) -> bool:
            return self is other

        __hash__ = None  # type: ignore[assignment]

    t = Traced()
    tracing.instrument(t.provider)
    try:
        agent = Comparable.from_tools([], llm=ScriptedLLM(["hi"], repeat_last=True))
        agent.chat("x")
    finally:
        tracing.uninstrument()
    agent.chat("y")  # not traced any more
    assert t.tree() == ["invoke_agent Comparable [AGENT]", "  step 1 [CHAIN]", "    chat scripted [LLM]"]


def test_a_step_still_streaming_when_tracing_stops_ends_as_interrupted() -> None:
    t = Traced()
    tracing.instrument(t.provider)
    agent = FunctionCallingAgent.from_tools([], llm=ScriptedLLM(["a long streamed answer"]))
    task = agent.create_task("hi")
    out = agent.stream_step(task)  # returns while the reply streams: the step is not over
    assert t.spans == []
    tracing.uninstrument()
    assert t.tree("nbagent.step.status", "nbagent.call.interrupted") == [
        "invoke_agent FunctionCallingAgent [AGENT]",
        "  step 1 [CHAIN] nbagent.step.status=interrupted",
        "    chat scripted [LLM] nbagent.call.interrupted=True",  # the model call had begun
    ]
    assert "".join(out.output.response_gen) == "a long streamed answer"  # the run itself goes on
