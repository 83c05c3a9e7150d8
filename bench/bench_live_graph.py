"""Live graph cost per step (throttle 0): a step with a LiveGraph listening vs a plain step, at
100 / 1,000 / 2,000 steps; and a full task_to_dot redraw at the same sizes, for comparison."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_autosave import Counter  # noqa: E402

from nbagent import AgentRunner  # noqa: E402
from nbagent.viz.dot import task_to_dot  # noqa: E402

MARKS = (100, 1_000, 2_000)
WINDOW = 100


def step_time(runner: AgentRunner, task: object, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        runner.run_step(task)
    return (time.perf_counter() - start) / max(n, 1)


def main() -> None:
    plain_runner = AgentRunner(Counter())
    plain_task = plain_runner.create_task("go")
    live_runner = AgentRunner(Counter())
    task = live_runner.create_task("go")
    graph = live_runner.live_graph(task, throttle_s=0)
    plain: dict[int, float] = {}
    live: dict[int, float] = {}
    done = 0
    for mark in MARKS:  # both runners advance together; windows alternate (a busy machine is fair to both)
        step_time(plain_runner, plain_task, mark - WINDOW - done)
        step_time(live_runner, task, mark - WINDOW - done)
        p, q = [], []
        for _ in range(WINDOW // 20):
            p.append(step_time(plain_runner, plain_task, 20))
            q.append(step_time(live_runner, task, 20))
        plain[mark], live[mark] = min(p), min(q)
        done = mark - WINDOW + 20 * (WINDOW // 20)
    assert graph.source == task_to_dot(live_runner.state_of(task))
    print(f"live graph (throttle 0, {'in-browser view' if graph.in_browser else 'HTML fallback'}), best of {WINDOW // 20} windows of 20 steps before each mark:")
    for mark in MARKS:
        print(f"  at {mark:5,d} steps: plain {plain[mark] * 1e6:7.1f} us   with live graph {live[mark] * 1e6:7.1f} us "
              f"({live[mark] / plain[mark]:.2f}x; target <= 2x)")
    state = plain_runner.state_of(next(iter(plain_runner.tasks)))
    start = time.perf_counter()
    for _ in range(10):
        task_to_dot(state)
    print(f"  a full task_to_dot redraw at {len(state.steps):,d} steps: {(time.perf_counter() - start) / 10 * 1e3:.2f} ms "
          "(what every redraw cost before)")
    graph.close()


if __name__ == "__main__":
    main()
