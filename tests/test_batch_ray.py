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
