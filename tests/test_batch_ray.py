"""run_batch(backend="ray") on a local Ray instance (loopback only, 2 CPUs): the same API and
results as the asyncio backend; tasks come back as plain records and open in the notebook."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")


def make_agent() -> Any:
    """The factory Ray ships to each worker (defined here, pickled by value: nothing of the
    test module has to be importable on the workers)."""
    from nbagent import FunctionCallingAgent, FunctionLLM, FunctionTool, MessageRole, tool_call

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def brain(messages: Any, tools: Any) -> Any:
        last = messages[-1]
        if last.role == MessageRole.TOOL:
            return f"The answer is {last.text}"
        if "boom" in last.text:
            raise ValueError(f"the model broke on {last.text!r}")
        a, b = [int(x) for x in last.text.replace("?", " ").split() if x.isdigit()][:2]
        return tool_call("add", a=a, b=b)

    return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=FunctionLLM(brain, model="m1"))


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's wait for its own node to register is a fixed 30 s (ray/_private/node.py, not a
    # setting): a busy machine can miss that once, so that one error is tried a second time
    for attempt in (1, 2):
        try:
            ray.init(
                num_cpus=2, include_dashboard=False, log_to_driver=False,
                # a loaded machine starts worker processes slowly and answers health checks
                # late: give registration, GCS reconnects and health checks room (RayConfig)
                _system_config={
                    "worker_register_timeout_seconds": 300,
                    "gcs_rpc_server_reconnect_timeout_s": 300,
                    "health_check_timeout_ms": 60_000,
                    "health_check_failure_threshold": 20,
                },
            )
            break  # workers inherit this process's environment: NBAGENT_BLOCK_NETWORK=1 holds there too
        except Exception as err:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(err):
                raise
    try:
        yield
    finally:
        ray.shutdown()


INPUTS = [f"what is {i} + {i * 10} ?" for i in range(8)] + ["boom 1 2"]


def test_ray_gives_the_asyncio_backends_results_and_tasks_open_here(local_ray: None, tmp_path: Path) -> None:
    here = make_agent()
    here.pricing = {"m1": (1.0, 2.0)}
    local = make_agent().run_batch(INPUTS, progress=False)
    batch = here.run_batch(INPUTS, backend="ray", factory=make_agent, max_concurrency=3, progress=False,
                           store=tmp_path / "ray.db")
    assert batch.backend == "ray"
    assert [getattr(r, "response", None) for r in batch.results] == [
        getattr(r, "response", None) for r in local.results
    ]
    assert [(it.status, it.steps, it.total_tokens) for it in batch] == [
        (it.status, it.steps, it.total_tokens) for it in local
    ]
    failed = batch.results[-1]
    from nbagent import BatchTaskError

    assert isinstance(failed, BatchTaskError) and failed.error_type == "ValueError"
    assert "the model broke on 'boom 1 2'" in str(failed) and "Traceback" in failed.traceback
    pid = str(os.getpid())
    assert all(it.worker and not it.worker.endswith(":" + pid) for it in batch)  # ran elsewhere
    for it in batch:  # plain records became the runner's own tasks: open, draw, cost them here
        state = here.tasks[it.task_id]
        assert state.task.input == it.input
        assert it.cost == pytest.approx(here.cost(it.task_id).total.amount) if it.status == "done" else True
    assert "add" in here.graph(batch[2].task_id).source
    assert batch.state(8).failures[-1].error_type == "ValueError"  # the failed task came back too

    # the store works the same on Ray: a second run only re-runs the failure
    again = make_agent().run_batch(INPUTS, backend="ray", factory=make_agent, progress=False,
                                   store=tmp_path / "ray.db")
    assert [it.index for it in again if not it.resumed] == [8]
    assert [r.response for r in again.results[:8]] == [r.response for r in batch.results[:8]]


def test_a_factory_that_does_not_build_a_runner_fails_each_task_clearly(local_ray: None) -> None:
    def not_a_runner() -> Any:
        return "oops"

    batch = make_agent().run_batch(INPUTS[:2], backend="ray", factory=not_a_runner, progress=False)
    assert [it.status for it in batch] == ["failed", "failed"]
    assert "must return an AgentRunner" in str(batch.results[0])


def _task_trees(exporter: Any) -> tuple[list[list[str]], Any]:
    """Each task's span tree as lines (names, kinds, error marks and the attributes a backend
    reads), sorted by the task's input; and the batch span."""
    from nbagent.tracing import SpanTree

    spans = exporter.get_finished_spans()
    tree = SpanTree(spans)
    batch = [r for r in tree.roots if r.name.startswith("batch ")]
    tasks = [r for r in tree.roots if r.name.startswith("invoke_agent")]
    keys = ("gen_ai.usage.input_tokens", "gen_ai.tool.name", "nbagent.step.status", "nbagent.task.status",
            "nbagent.batch.index", "error.type")

    def lines(root: Any) -> list[str]:
        return [
            "  " * depth + node.name + " " + repr({k: node.attributes[k] for k in keys if k in node.attributes})
            + (" ERROR" if node.status == "ERROR" else "")
            for depth, node in root.walk()
        ]

    by_index = sorted(tasks, key=lambda r: r.attributes["nbagent.batch.index"])
    return [lines(r) for r in by_index], (batch[0] if len(batch) == 1 else batch)


def test_a_traced_ray_batch_draws_each_task_as_the_asyncio_backend_does(local_ray: None) -> None:
    """Tasks that ran on Ray workers reach the calling side's tracer (their events come back
    with the record): the same span trees as the asyncio backend, linked to the batch span,
    with the workers' own times, and no task span left open."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import nbagent.tracing as tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(provider)
    try:
        local = make_agent().run_batch(INPUTS, progress=False)
        local_trees, _ = _task_trees(exporter)
        exporter.clear()
        here = make_agent()
        batch = here.run_batch(INPUTS, backend="ray", factory=make_agent, max_concurrency=3, progress=False)
        ray_trees, batch_span = _task_trees(exporter)
    finally:
        tracing.uninstrument()
    assert [it.status for it in batch] == [it.status for it in local]
    assert len(ray_trees) == len(INPUTS)
    assert ray_trees == local_trees  # same spans, same attributes, the failure an error as here
    assert any(" ERROR" in line for line in ray_trees[-1])
    spans = exporter.get_finished_spans()
    tasks = [s for s in spans if s.name.startswith("invoke_agent")]
    assert {s.attributes["gen_ai.conversation.id"] for s in tasks} == {it.task_id for it in batch}
    assert all(link.context.span_id == batch_span.span_id for s in tasks for link in s.links)
    assert all(len(s.links) == 1 for s in tasks)
    for s in spans:  # the workers' times: every span inside the batch's, children inside parents
        assert batch_span.start_ns <= s.start_time <= s.end_time <= batch_span.end_ns
    by_id = {s.context.span_id: s for s in spans}
    for s in spans:
        if s.parent is not None and s.parent.span_id in by_id:
            parent = by_id[s.parent.span_id]
            assert parent.start_time <= s.start_time and s.end_time <= parent.end_time


def test_an_untraced_ray_batch_sends_no_events_back(local_ray: None) -> None:
    from nbagent.batch import ray_backend

    record = ray.get(ray.remote(ray_backend.run_task_remote).remote(make_agent, "k1", INPUTS[0], None))
    assert "events" not in record and record["doc"] is not None
    traced = ray.get(ray.remote(ray_backend.run_task_remote).remote(make_agent, "k2", INPUTS[0], None, True))
    assert [e["type"] for e in traced["events"]] == [
        "TaskCreated", "StepStarted", "ModelCalled", "ToolCalled", "StepCompleted", "StepStarted", "ModelCalled",
        "StepCompleted", "TaskFinalized",
    ]
