"""Runner overhead per no-op step over a 1,000-step task, with undo snapshots on."""

from __future__ import annotations

import asyncio
import time

from _noop import NoopWorker

from nbagent import AgentRunner

STEPS = 1000


def sync_run() -> float:
    runner = AgentRunner(NoopWorker(STEPS))
    task = runner.create_task("go")
    start = time.perf_counter()
    for _ in range(STEPS):
        runner.run_step(task)
    elapsed = time.perf_counter() - start
    assert runner.get_task_output(task).is_last and len(runner.state_of(task).history) == STEPS
    return elapsed / STEPS


async def async_run() -> float:
    runner = AgentRunner(NoopWorker(STEPS))
    task = runner.create_task("go")
    start = time.perf_counter()
    for _ in range(STEPS):
        await runner.arun_step(task)
    elapsed = time.perf_counter() - start
    assert runner.get_task_output(task).is_last
    return elapsed / STEPS


def bare_worker() -> float:
    """The worker alone (building its output), to subtract from the runner's figure."""
    from nbagent import Task

    worker = NoopWorker(STEPS)
    task = Task(input="go")
    step = worker.initialize_step(task)

    async def loop() -> float:
        nonlocal step
        start = time.perf_counter()
        for _ in range(STEPS):
            out = await worker.arun_step(step, task)
            if out.next_steps:
                step = out.next_steps[0]
        return (time.perf_counter() - start) / STEPS

    return asyncio.run(loop())


def main() -> None:
    sync_run(); asyncio.run(async_run())  # warm up
    worker = min(bare_worker() for _ in range(3))
    s = min(sync_run() for _ in range(3))
    a = min(asyncio.run(async_run()) for _ in range(3))
    print(f"worker alone (builds TaskStep + output):  {worker * 1e6:6.1f} us/step")
    print(f"runner.arun_step, total:                   {a * 1e6:6.1f} us/step  -> runner overhead {(a - worker) * 1e6:5.1f} us (target <= 40)")
    print(f"runner.run_step (sync), total:             {s * 1e6:6.1f} us/step  -> runner overhead {(s - worker) * 1e6:5.1f} us")


if __name__ == "__main__":
    main()
