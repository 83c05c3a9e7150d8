"""run_batch: flat per-task cost over 10,000 tasks, wall time under concurrency, memory per task.

1. 10,000 scripted two-step tasks (a function-calling agent: call add(a, b), then answer with
   the result), max_concurrency=16, no progress view. The time per task of each block of a
   thousand finished tasks; the target: the last thousand costs no more than the first
   (the last three thousand against the first three, <= 1.25x on a noisy shared machine; in
   wall time and in this process's CPU time), i.e. nothing in a batch grows with its length.
2. 200 tasks whose model awaits 50 ms per call (two calls per task) at max_concurrency=50.
   Ideal: 200/50 = 4 waves x 2 calls x 50 ms = 400 ms; the target is within 1.2x. Best and
   median of several runs (a shared machine is noisy).
3. Memory per finished task (tracemalloc over 2,000 tasks; each task keeps its steps,
   outputs, transcript and undo snapshots in the runner, so it can be opened afterwards).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nbagent import ChatMessage, FunctionCallingAgent, FunctionLLM, FunctionTool, MessageRole, tool_call  # noqa: E402
from nbagent.llms.base import ChatResponse  # noqa: E402

N_FLAT = 10_000
N_WAIT, WAIT_S, CONCURRENCY_WAIT, RUNS = 200, 0.050, 50, 5
N_MEM = 2_000


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def brain(messages: list[ChatMessage], tools: Any) -> Any:
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"The answer is {last.text}"
    a, b = (int(x) for x in last.text.split()[2::2][:2])
    return tool_call("add", a=a, b=b)


class WaitingLLM(FunctionLLM):
    """Answers like ``brain`` after awaiting ``delay`` seconds (a remote model's latency)."""

    def __init__(self, delay: float) -> None:
        super().__init__(brain, model="m", keep_requests=False)
        self.delay = delay

    async def _achat(self, messages: list[ChatMessage], tools: Any, tool_choice: Any, **kw: Any) -> ChatResponse:
        await asyncio.sleep(self.delay)
        return await super()._achat(messages, tools, tool_choice, **kw)


def agent(delay: float = 0.0, **kw: Any) -> FunctionCallingAgent:
    llm = WaitingLLM(delay) if delay else FunctionLLM(brain, model="m", keep_requests=False)
    return FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm, **kw)


def questions(n: int) -> list[str]:
    return [f"what is {i} + {i % 97}" for i in range(n)]


def flat_cost(gc_on: bool = True) -> None:
    """``gc_on=False``: the same with Python's cyclic GC off, which separates nbagent's own
    per-task cost from the collector's passes over the growing heap of kept tasks."""
    if not gc_on:
        gc.collect()
        gc.disable()
    runner = agent()
    stamps: list[float] = []
    cpu: list[float] = []

    def on_change(batch: Any, item: Any) -> None:
        if item is not None and item.status in ("done", "failed"):
            stamps.append(time.perf_counter())
            cpu.append(time.thread_time())

    from nbagent.batch import BatchRun

    batch = BatchRun(runner, questions(N_FLAT), max_concurrency=16)
    batch.subscribe(on_change)
    t0, c0 = time.perf_counter(), time.thread_time()  # the loop runs in this thread
    asyncio.run(batch._arun())
    total = time.perf_counter() - t0
    assert batch.counts()["done"] == N_FLAT, batch
    assert batch[N_FLAT - 1].response.response == f"The answer is {N_FLAT - 1 + (N_FLAT - 1) % 97}"
    gc.enable()
    print(f"{N_FLAT} two-step tasks in {total:.2f} s ({total / N_FLAT * 1e6:.0f} us per task, "
          f"{N_FLAT * 2} model calls){'' if gc_on else ', cyclic GC off'}")
    # CPU time of this thread (the loop's) per block: what the batch costs, whatever else the machine runs
    for name, marks, start in (("wall", stamps, t0), ("cpu", cpu, c0)):
        blocks = []
        prev = start
        for k in range(1000, N_FLAT + 1, 1000):
            blocks.append((marks[k - 1] - prev) / 1000 * 1e6)
            prev = marks[k - 1]
        head, tail = statistics.mean(blocks[:3]), statistics.mean(blocks[-3:])  # 3 blocks: less noise
        verdict = "ok" if tail / head <= 1.25 else "MISSED"
        print(f"  {name} us per task, by thousand: " + " ".join(f"{b:.0f}" for b in blocks)
              + f"; last 3000 / first 3000: {tail / head:.2f}x (target <= 1.25x: {verdict})")


def wall_time() -> None:
    ideal = -(-N_WAIT // CONCURRENCY_WAIT) * 2 * WAIT_S
    times = []
    cpus = []
    for _ in range(RUNS):
        runner = agent(WAIT_S)
        t0, c0 = time.perf_counter(), time.process_time()
        batch = runner.run_batch(questions(N_WAIT), max_concurrency=CONCURRENCY_WAIT, progress=False)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        assert batch.counts()["done"] == N_WAIT, batch
    best, med = min(times), statistics.median(times)
    print(f"{N_WAIT} tasks, model waits {WAIT_S * 1000:.0f} ms per call, max_concurrency={CONCURRENCY_WAIT}: "
          f"ideal {ideal * 1000:.0f} ms; best {best * 1000:.0f} ms ({best / ideal:.2f}x), "
          f"median {med * 1000:.0f} ms ({med / ideal:.2f}x) of {RUNS} runs "
          f"(target <= 1.20x: {'ok' if best / ideal <= 1.2 else 'MISSED'}); CPU per run "
          f"{statistics.median(cpus) * 1000:.0f} ms ({statistics.median(cpus) / N_WAIT * 1e6:.0f} us per task)")


def memory_per_task() -> None:
    for label, kw in (("with undo history", {}), ("keep_history=False", {"keep_history": False})):
        runner = agent(**kw)
        runner.run_batch(questions(50), progress=False)  # warm up caches and imports
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        batch = runner.run_batch(questions(N_MEM), max_concurrency=16, progress=False)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert batch.counts()["done"] == N_MEM
        print(f"memory per finished task (2 steps, kept in the runner with its transcript; {label}): "
              f"{(after - before) / N_MEM / 1024:.1f} KiB ({N_MEM} tasks)")


if __name__ == "__main__":
    wall_time()
    flat_cost()
    flat_cost(gc_on=False)
    memory_per_task()
