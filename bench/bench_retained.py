"""Retained bytes per CustomSimpleAgentWorker step (undo on) and per finished task, and how an
offline (scripted) tool loop's step time grows over 1,000 steps."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbagent import AgentChatResponse, AgentRunner, CustomSimpleAgentWorker, ReActAgentWorker, ScriptedLLM  # noqa: E402

STEPS = 5_000
CHATS = 500


class Plain(CustomSimpleAgentWorker):
    """One answer per step, a counter in its state: the runner's own cost per step."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        return AgentChatResponse(response="ok"), state["count"] >= 2

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def retained(fn: Any) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep = fn()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del keep
    return after - before


def per_step() -> float:
    class Long(Plain):
        def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
            state["count"] += 1
            return AgentChatResponse(response="ok"), False

    def run() -> Any:
        runner = AgentRunner(Long())
        task = runner.create_task("go")

        async def go() -> None:
            for _ in range(STEPS):
                await runner.arun_step(task)

        asyncio.run(go())
        return runner

    return retained(run) / STEPS


def per_chat(max_finished: int | None) -> float:
    def run() -> Any:
        runner = AgentRunner(Plain(), max_finished_tasks=max_finished)
        for i in range(CHATS):
            runner.chat(f"question {i}")
        return runner

    return retained(run) / CHATS


def tool_loop_growth() -> tuple[float, float]:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    act = 'Thought: add.\nAction: add\nAction Input: {"a": 1, "b": 2}'
    replies = [act] * 1000 + ["Thought: done.\nAnswer: 3"]
    worker = ReActAgentWorker.from_tools([add], llm=ScriptedLLM(replies), max_iterations=2000)
    runner = AgentRunner(worker)
    task = runner.create_task("add many times")
    times = []
    for _ in range(1000):
        start = time.perf_counter()
        runner.run_step(task)
        times.append(time.perf_counter() - start)
    first = sorted(times[:100])[50]
    last = sorted(times[-100:])[50]
    return first, last


def main() -> None:
    retained(lambda: per_step.__name__)  # warm tracemalloc
    print(f"retained per CustomSimpleAgentWorker step (undo on): {per_step():7.0f} B/step over {STEPS:,} steps (target <= 1500)")
    print(f"retained per finished 2-step chat:                   {per_chat(None):7.0f} B/task over {CHATS} chats")
    print(f"  with max_finished_tasks=10:                        {per_chat(10):7.0f} B/task")
    try:
        first, last = tool_loop_growth()
    except TypeError:  # a worker without max_iterations
        print("offline tool loop: skipped (ReActAgentWorker has no max_iterations)")
        return
    print(f"offline ReAct tool loop (scripted model): step 1-100 {first * 1e6:7.1f} us, step 901-1000 "
          f"{last * 1e6:7.1f} us ({last / first:.2f}x; target <= 1.3x)")


if __name__ == "__main__":
    main()
