"""A sync no-op ``run_step`` of a CustomSimpleAgentWorker at 2,000 steps, undo on (issue 22's
budget: <= 25 us). The worker only counts in its state, so the figure is the runner's own cost
per step: the step transaction, its snapshot for undo, the models it builds, events, and the
bridge from sync code to the async step.

The bridge steps such a worker in place (``run_sync(eager=True)``, an early exit of the
general path); the general path (``run_until_complete`` on the thread's loop) is measured too,
as is ``await arun_step``. Each figure is the best window of 20 steps just before step 2,000,
the runners taking turns, so that a busy moment of a shared machine spoils them alike.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbagent import AgentChatResponse, AgentRunner, CustomSimpleAgentWorker, _sync  # noqa: E402

MARK = 2_000
WINDOW = 200  # steps measured, just before MARK
SIZE = 20  # steps per window
BUDGET_US = 25.0


class Noop(CustomSimpleAgentWorker):
    """Counts, never finishes: a step that does next to nothing."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        return AgentChatResponse(response="ok"), False

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def _sync_window(runner: AgentRunner, task: Any, n: int, eager: bool) -> float:
    _sync._EAGER_OK = eager  # False: the general path, run_until_complete
    try:
        start = time.perf_counter()
        for _ in range(n):
            runner.run_step(task)
        return (time.perf_counter() - start) / n
    finally:
        _sync._EAGER_OK = sys.version_info >= (3, 11)


def _async_window(runner: AgentRunner, task: Any, n: int) -> float:
    async def go() -> float:
        start = time.perf_counter()
        for _ in range(n):
            await runner.arun_step(task)
        return (time.perf_counter() - start) / n

    loop = _sync._thread_loop()
    return loop.run_until_complete(go())


def measure() -> dict[str, float]:
    """Best window (us per step) of each way to step, runners alternating near MARK."""
    ways = {
        "run_step, stepped in place": lambda r, t, n: _sync_window(r, t, n, True),
        "run_step, on the event loop": lambda r, t, n: _sync_window(r, t, n, False),
        "await arun_step": _async_window,
    }
    runners = {}
    for name, way in ways.items():
        runner = AgentRunner(Noop())
        task = runner.create_task("go")
        way(runner, task, MARK - WINDOW)
        runners[name] = (runner, task)
    best = {name: float("inf") for name in ways}
    for _ in range(WINDOW // SIZE):
        for name, way in ways.items():
            runner, task = runners[name]
            best[name] = min(best[name], way(runner, task, SIZE))
    for runner, task in runners.values():
        state = runner.state_of(task)
        assert len(state.completed_steps) == MARK and len(state.history) == MARK  # undo kept every step
    return {name: us * 1e6 for name, us in best.items()}


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    figures = measure()
    print(f"no-op CustomSimpleAgentWorker step @{MARK} steps, undo on (best of {WINDOW // SIZE} x {SIZE}; load {load:.2f})")
    for name, us in figures.items():
        note = f"  (budget <= {BUDGET_US:.0f})" if name.endswith("in place") else ""
        print(f"  {name:30s} {us:6.1f} us{note}")


if __name__ == "__main__":
    main()
