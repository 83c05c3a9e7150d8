"""A real OTLP/HTTP export: the SDK's exporter posts protobuf to a small receiver on 127.0.0.1,
which decodes it with opentelemetry-proto; the same span tree arrives. A collector that is
down changes nothing for the run."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402

import nbagent.tracing as tracing  # noqa: E402
from nbagent import FunctionCallingAgent, FunctionTool, ScriptedLLM, tool_call  # noqa: E402
from nbagent.tracing import SpanNode, SpanTree  # noqa: E402


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every decoded request."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                outer.requests.append(request)
                outer.paths.append(self.path)
                outer.content_types.append(self.headers.get("Content-Type", ""))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[Any]:
        return [
            (span, scope.scope.name)
            for r in self.requests
            for rs in r.resource_spans
            for scope in rs.scope_spans
            for span in scope.spans
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _node(span: Any) -> SpanNode:
    attrs = {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}
    return SpanNode(
        name=span.name,
        span_id=int.from_bytes(span.span_id, "big"),
        parent_id=int.from_bytes(span.parent_span_id, "big") if span.parent_span_id else None,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        kind=str(attrs.get("openinference.span.kind", "")),
        status="ERROR" if span.status.code == 2 else "UNSET",
        attributes=attrs,
    )


def test_spans_arrive_over_otlp_http_as_the_same_tree(receiver: Receiver) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url, timeout=5)))
    tracing.instrument(provider)
    try:
        llm = ScriptedLLM([tool_call("add", a=2, b=3), "5"])
        agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
        assert str(agent.chat("2 + 3?")) == "5"
    finally:
        tracing.uninstrument()
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert set(receiver.paths) == {"/v1/traces"} and set(receiver.content_types) == {"application/x-protobuf"}
    got = receiver.spans()
    assert {scope for _, scope in got} == {"nbagent"}
    tree = SpanTree([_node(s) for s, _ in got])
    assert tree.lines(("gen_ai.operation.name",)) == [
        "invoke_agent FunctionCallingAgent [AGENT] gen_ai.operation.name=invoke_agent",
        "  step 1 [CHAIN]",
        "    chat scripted [LLM] gen_ai.operation.name=chat",
        "    execute_tool add [TOOL] gen_ai.operation.name=execute_tool",
        "  step 2 [CHAIN]",
        "    chat scripted [LLM] gen_ai.operation.name=chat",
    ]
    (task,) = agent.list_tasks()
    root = tree.roots[0]
    assert root.attributes["gen_ai.conversation.id"] == task.task_id
    tool = next(n for _, n in tree if n.name == "execute_tool add")
    assert tool.attributes["gen_ai.tool.name"] == "add" and tool.attributes["gen_ai.tool.call.id"] == "call_1"
    chat = next(n for _, n in tree if n.name.startswith("chat"))
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert len({s.trace_id for s, _ in got}) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_collector_that_is_down_never_breaks_a_run() -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{_closed_port()}/v1/traces", timeout=1)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=10))
    tracing.instrument(provider)
    try:
        llm = ScriptedLLM([tool_call("add", a=2, b=3), "5"] * 3)
        agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
        for _ in range(3):
            assert str(agent.chat("2 + 3?")) == "5"
    finally:
        tracing.uninstrument()
        provider.shutdown()
    assert len(agent.list_tasks()) == 3
