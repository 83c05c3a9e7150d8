"""Retained bytes per completed step over 10,000 steps (undo snapshots on)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from _noop import NoopWorker

from nbagent import AgentRunner

STEPS = 10_000


async def run(runner: AgentRunner, steps: int) -> None:
    task = runner.create_task("go")
    for _ in range(steps):
        await runner.arun_step(task)


def main() -> None:
    runner = AgentRunner(NoopWorker(STEPS))
    asyncio.run(run(AgentRunner(NoopWorker(50)), 50))  # warm caches outside the measurement
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    asyncio.run(run(runner, STEPS))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_step = (after - before) / STEPS
    print(f"retained per completed step:  {per_step:7.0f} B/step over {STEPS} steps (target <= 1500)")


if __name__ == "__main__":
    main()
