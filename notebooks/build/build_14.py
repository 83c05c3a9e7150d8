"""Build notebooks/14_tracing.ipynb: trace an offline run with OpenTelemetry, read the span
tree and its waterfall in the notebook, and send the same spans to Phoenix or any OTLP
collector.

Run from the repo root: ``.venv/bin/python notebooks/build/build_14.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "14_tracing"

CELLS = [
    md("""
# 14 · Trace a run with OpenTelemetry

The panel and the step graph show one run while you sit in front of it. To see runs in the
tools a team already uses (Phoenix, Langfuse, Logfire, Jaeger, any OpenTelemetry backend),
nbagent turns them into **OpenTelemetry spans** named by the GenAI semantic conventions:

| span | one per | what it carries |
| --- | --- | --- |
| `invoke_agent {agent}` | task | agent name, `gen_ai.conversation.id` = the task id |
| `step {n}` | step run | step id, number, status (a retry is a new span, an undo an event) |
| `chat {model}` | model call | model, provider, input/output tokens, finish reasons |
| `execute_tool {tool}` | tool call | tool name, call id; red when the tool failed; approvals |

OpenInference span kinds (`AGENT`, `CHAIN`, `LLM`, `TOOL`) ride along, so Phoenix and Arize
draw each kind its own way. Messages, tool arguments and results stay **off** the spans unless
you ask for them.

Tracing is an extra: `pip install "nbagent[otel]"`. Until you turn it on, nbagent does not even
import OpenTelemetry, and a step costs what it did.
"""),
    browser_cell(cannot="the OpenTelemetry SDK (the nbagent[otel] extra), which the browser site does not ship"),
    code("""
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nbagent.tracing
from nbagent import FunctionCallingAgent, FunctionTool, ScriptedLLM, seed_ids, tool_call
from nbagent.tracing import SpanTree

seed_ids(0)
"""),
    md("""
## Turn tracing on

A `TracerProvider` decides where spans go. Here they stay in memory, so the notebook can show
them without any server. `nbagent.tracing.instrument(provider)` traces every runner and
workflow of this kernel, made before or after the call: no change to the agent's code.
"""),
    code("""
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
nbagent.tracing.instrument(tracer_provider=provider)
nbagent.tracing.is_instrumented()
"""),
    md("""
## An agent to trace

A function-calling agent with two tools. The offline model asks for both tools in one reply
(parallel calls); one of them divides by zero.
"""),
    code("""
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


def divide(a: int, b: int) -> float:
    \"\"\"Divide a by b.\"\"\"
    return a / b


llm = ScriptedLLM([
    {"tool_calls": [
        {"name": "add", "arguments": {"a": 17, "b": 25}},
        {"name": "divide", "arguments": {"a": 42, "b": 0}},
    ]},
    "17 + 25 = 42. Dividing 42 by 0 is not possible.",
])
"""),
    *real_model_cells(note="The outputs stored below come from the offline model."),
    md("""
## Run it, then read the spans

`chat` runs the task to its end; its `invoke_agent` span ends when the answer is final.
"""),
    code("""
agent = FunctionCallingAgent.from_tools(
    [FunctionTool.from_defaults(add), FunctionTool.from_defaults(divide)], llm=llm
)
print(agent.chat("What is 17 + 25, and 42 / 0?"))
"""),
    md("""
`SpanTree` arranges finished spans by parent. As text: each span's name, its OpenInference
kind, and `!` where its status is an error.
"""),
    code("""
tree = SpanTree(exporter.get_finished_spans())
print(tree)
"""),
    md("""
In a notebook the same tree is a **waterfall**: one row per span, a bar where it ran on one
time axis, its duration on the right. Red rows failed; hover a row for its attributes and
events (the failing tool's message is there).
"""),
    code("""
tree
"""),
    md("""
The attributes are what a backend reads. The model call:
"""),
    code("""
chat = next(span for span in exporter.get_finished_spans() if span.name.startswith("chat"))
for key in sorted(chat.attributes):
    print(f"{key:34} {chat.attributes[key]}")
"""),
    md("""
And the tool that failed: an `ERROR` status, `error.type`, and the tool's message. The step
itself did not fail: the model saw the error and answered with it.
"""),
    code("""
failed = next(span for span in exporter.get_finished_spans() if span.name == "execute_tool divide")
print(failed.status.status_code.name, "|", failed.attributes["error.type"], "|", failed.status.description)
print({key: failed.attributes[key] for key in ("gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.operation.name")})
"""),
    md("""
## Your own spans go under the call that made them

While a step runs, its span is the *current* span, and while a tool or a model call runs, its
`execute_tool` or `chat` span is. So a span your tool makes with the usual
`tracer.start_as_current_span(...)` lands under that tool call, and one an instrumented HTTP
client makes inside a model call under that `chat` span: in the same trace, instead of
starting a trace of its own.
"""),
    code("""
tracer = provider.get_tracer("my notebook")

def lookup(city: str) -> str:
    \"\"\"Look up the weather of a city.\"\"\"
    with tracer.start_as_current_span("weather database"):
        return f"{city}: 12 degrees"

exporter.clear()
weather = FunctionCallingAgent.from_tools(
    [FunctionTool.from_defaults(lookup)], llm=ScriptedLLM([tool_call("lookup", city="Oslo"), "12 degrees in Oslo."])
)
print(weather.chat("Weather in Oslo?"))
print(SpanTree(exporter.get_finished_spans()))
"""),
    md("""
## Content, only when you ask

By default no message, argument or result is on a span: traces often leave the machine.
`instrument(..., capture_content=True)` (or the standard environment variable
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`) puts them there, as
`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.tool.call.arguments` and
`gen_ai.tool.call.result`.
"""),
    code("""
exporter.clear()
nbagent.tracing.instrument(tracer_provider=provider, capture_content=True)
again = FunctionCallingAgent.from_tools(
    [FunctionTool.from_defaults(add)], llm=ScriptedLLM([tool_call("add", a=2, b=3), "It is 5."])
)
print(again.chat("What is 2 + 3?"))
tool = next(span for span in exporter.get_finished_spans() if span.name == "execute_tool add")
print(tool.attributes["gen_ai.tool.call.arguments"], "->", tool.attributes["gen_ai.tool.call.result"])
"""),
    md("""
## Send the same spans to Phoenix, or any OTLP collector

Nothing in nbagent changes: give the provider an exporter that sends spans over OTLP/HTTP,
with a `BatchSpanProcessor` so that export happens on a background thread (a slow or stopped
collector then never holds up a step, and an exporter that fails is logged, not raised).
`pip install opentelemetry-exporter-otlp-proto-http`, then:

```python
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint="http://localhost:6006/v1/traces")))
nbagent.tracing.instrument(tracer_provider=provider)
```

- **Phoenix** (`pip install arize-phoenix`, `phoenix serve`) listens on
  `http://localhost:6006/v1/traces`; it reads the OpenInference kinds.
- **Any OpenTelemetry Collector, Jaeger, Grafana Tempo**: their OTLP/HTTP port is 4318,
  `http://localhost:4318/v1/traces`.
- **Langfuse, Logfire** and other hosted backends take OTLP/HTTP too: use the endpoint and
  the `headers={...}` (API key) their docs give.
- If your code already set a global provider (`opentelemetry.trace.set_tracer_provider`, or a
  backend's own `register()`), call `nbagent.tracing.instrument()` with no argument.
- One runner only: `AgentRunner(worker, tracer_provider=provider)`.

`AgentWorkflow` runs are traced the same way: one `invoke_workflow` span, an `invoke_agent` span
per agent turn, with the handoffs named. Batches (`run_batch`) are a span each task links to,
also when the tasks run on Ray (`backend="ray"`): the workers send their tasks' events back.
"""),
    md("""
## Turn it off

`uninstrument()` stops tracing; spans of tasks still open end now.
"""),
    code("""
nbagent.tracing.uninstrument()
provider.shutdown()
nbagent.tracing.is_instrumented()
"""),
    md("""
## Next

- [11 · Run an agent over a dataset](11_batch_eval.ipynb): a batch, traced, is one span per task.
- [08 · AgentWorkflow](08_agent_workflow.ipynb): multi-agent runs and their handoffs.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
