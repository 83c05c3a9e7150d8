"""ReAct cost per step as one task grows: steps 1-100 against steps 901-1,000.

A scripted model calls a tool 1,000 times, then answers. If each step rebuilt the whole
scratchpad, the cost per step would grow with the task (the reference: 1.9 -> 16.2 ms).
"""

from __future__ import annotations

import asyncio
import time

from nbagent import AgentRunner, FunctionTool, ScriptedLLM
from nbagent.workers.react import ReActAgentWorker

STEPS = 1000
ACTION = 'Thought: I need the next number.\nAction: next_number\nAction Input: {"n": 1}'


def next_number(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def run() -> tuple[float, float]:
    llm = ScriptedLLM([ACTION] * STEPS + ["Thought: done.\nAnswer: finished"], keep_requests=False)
    worker = ReActAgentWorker.from_tools([FunctionTool.from_defaults(next_number)], llm=llm, max_iterations=STEPS + 5)
    runner = AgentRunner(worker)
    task = runner.create_task("Count to a thousand.")
    times: list[float] = []
    for _ in range(STEPS):
        start = time.perf_counter()
        await runner.arun_step(task)
        times.append(time.perf_counter() - start)
    out = await runner.arun_step(task)
    assert out.is_last, "the scripted task should end with an answer"
    first = sorted(times[:100])[50]  # medians: robust to a stray GC pause
    last = sorted(times[900:1000])[50]
    return first, last


def main() -> None:
    first, last = asyncio.run(run())
    print(f"ReAct step cost, steps 1-100 (median):      {first * 1000:6.3f} ms")
    print(f"ReAct step cost, steps 901-1000 (median):   {last * 1000:6.3f} ms")
    print(f"growth 100 -> 1,000 steps:                  {last / first:6.2f}x (target <= 3x)")


if __name__ == "__main__":
    main()
