"""Traced batches: every task's span ends, and tasks that ran elsewhere (Ray) come back as
events the calling side draws. The Ray run itself is in tests/test_batch_ray.py; here, the
parts that need no cluster: the events' round trip through a plain record, a damaged record,
and a batch's unfinished tasks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import nbagent.tracing as tracing  # noqa: E402
from nbagent import FunctionCallingAgent, FunctionLLM, FunctionTool, MessageRole, tool_call  # noqa: E402
from nbagent import events as ev  # noqa: E402
from nbagent.batch.remote_events import EventLog, decode_events, encode_events  # noqa: E402


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def brain(messages: Any, tools: Any) -> Any:
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"The answer is {last.text}"
    if "boom" in last.text:
        raise ValueError("the model broke")
    return tool_call("add", a=2, b=3)


def agent() -> Any:
    return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=FunctionLLM(brain, model="m1"))


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    tracing.instrument(provider)
    try:
        yield exp
    finally:
        tracing.uninstrument()


def test_a_batch_task_that_failed_ends_its_span_failed_when_it_failed(exporter: InMemorySpanExporter) -> None:
    batch = agent().run_batch(["what is 2 + 3", "boom"], progress=False)
    assert [it.status for it in batch] == ["done", "failed"]
    tasks = {s.attributes["nbagent.batch.index"]: s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")}
    assert sorted(tasks) == [0, 1]  # the failed task's span ended too (it stayed open before)
    assert tasks[0].attributes["nbagent.task.status"] == "finalized"
    assert tasks[1].attributes["nbagent.task.status"] == "failed"
    failed_step = next(s for s in exporter.get_finished_spans()
                       if s.name.startswith("step") and s.parent.span_id == tasks[1].context.span_id)
    assert tasks[1].end_time == failed_step.end_time  # when it failed, not when the batch ended


def test_a_tasks_events_survive_a_plain_json_record() -> None:
    runner = agent()
    log = EventLog(runner)
    runner.chat("what is 2 + 3")
    log.close()
    task_id = log.events[0].task_id
    sent = json.loads(json.dumps(encode_events(log.of(task_id))))  # what Ray carries: plain data
    back = decode_events(sent, "a batch record")
    assert [type(e).__name__ for e in back] == [
        "TaskCreated", "StepStarted", "ModelCalled", "ToolCalled", "StepCompleted", "StepStarted", "ModelCalled",
        "StepCompleted", "TaskFinalized",
    ]
    assert back == tuple(log.of(task_id))  # every field, content and times included
    runner.chat("again")  # the log stopped listening
    assert len(log.events) == len(back)


def test_content_of_a_type_a_record_cannot_keep_goes_without_it() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque result"

    from nbagent import ToolOutput

    out = ToolOutput(content="opaque result", tool_name="probe", raw_output=Opaque(), is_error=False)
    call = ev.ToolCalled("t1", step_id="s1", call_id="c1", tool_call_id="x", started_at=1.0, latency_s=0.5, output=out)
    (back,) = decode_events(json.loads(json.dumps(encode_events([call]))), "a batch record")
    assert (back.call_id, back.started_at, back.latency_s) == ("c1", 1.0, 0.5)
    assert (back.output.content, back.output.tool_name, back.output.is_error) == ("opaque result", "probe", False)
    assert back.output.raw_output is None


@pytest.mark.parametrize(
    ("records", "says"),
    [
        ({"not": "a list"}, "not a list"),
        ([{"type": "TaskDeleted", "fields": {}}], "of kind 'TaskDeleted'"),
        ([{"type": "StepStarted", "fields": {"task_id": "t"}}], "does not fit"),
    ],
)
def test_a_damaged_events_record_is_refused_naming_what_is_wrong(records: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode_events(records, "a batch record")


def test_a_ray_record_with_damaged_events_is_still_adopted_only_its_trace_is_lost(
    exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """The calling side of the Ray backend, fed a record as a worker sends it back."""
    import asyncio

    from nbagent.batch import ray_backend

    record = ray_backend.run_task_remote(agent, "key", "what is 2 + 3", None, True)
    assert record["events"]
    record["events"][1]["type"] = "Nonsense"
    here = agent()
    batch = here.run_batch([], progress=False)
    from nbagent.batch.results import BatchItem

    item = BatchItem(0, "what is 2 + 3", "k0")
    loop = asyncio.new_event_loop()
    fut = loop.create_future()
    fut.set_result(record)
    with caplog.at_level(logging.WARNING, logger="nbagent.batch"):
        ray_backend._finish(batch, item, fut, 0.0)
    loop.close()
    assert item.error is None and str(item.response) == "The answer is 5"
    assert "its events could not be read" in caplog.text and "Nonsense" in caplog.text
