"""Live graph cost per step: a step with a LiveGraph listening vs a plain step, at 100 / 1,000 /
2,000 steps, at the default throttle (0.1 s: at most ten redraws a second, the last one never
dropped; budget <= 1.3x a plain step at 2,000 steps) and at throttle 0 (a redraw after every
step; budget <= 3x); the same after an undo and a failure (the redraws stay incremental); the
HTML fallback (DOT text per redraw, no `dot`); and a full task_to_dot redraw for comparison.

Each figure is the best of WINDOW // SIZE windows of SIZE steps, the two runners alternating (a
busy machine spoils some windows). At the default throttle a window seldom holds a redraw (one
per 0.1 s, on a timer thread here: no event loop runs), so whole runs of 2,000 steps are timed
too, every redraw included, in CPU time of the process (a busy machine inflates wall time),
each from a clean heap: a runner with a task is cyclic garbage once dropped (about 40,000
objects at 2,000 steps), and the full collection that frees it would otherwise land on
whichever run comes next (it was 60-140 ms of CPU, more than doubling a whole run)."""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_autosave import Counter  # noqa: E402

from nbagent import AgentRunner  # noqa: E402
from nbagent.viz.dot import task_to_dot  # noqa: E402
from nbagent.viz.dot_live import LiveDot  # noqa: E402

MARKS = (100, 1_000, 2_000)
WINDOW = 100
SIZE = 10  # steps per window: best of WINDOW // SIZE windows (a busy machine spoils some)
RUNS = 3  # whole runs at the default throttle (best of)


class Failing(Counter):
    """Counter that raises while ``fail`` is set (a failed attempt changes nothing)."""

    fail: bool = False

    def _run_step(self, state, task, input=None):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RuntimeError("the model timed out")
        return super()._run_step(state, task, input)


def step_time(runner: AgentRunner, task: object, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        runner.run_step(task)
    return (time.perf_counter() - start) / max(n, 1)


def windows(plain_runner: AgentRunner, plain_task: object, runner: AgentRunner, task: object,
            window: int = WINDOW, size: int = SIZE) -> tuple[list[float], list[float]]:
    """``window // size`` windows of ``size`` steps each, the two runners alternating: the times per step."""
    p, q = [], []
    for _ in range(window // size):
        p.append(step_time(plain_runner, plain_task, size))
        q.append(step_time(runner, task, size))
    return p, q


def best_windows(plain_runner: AgentRunner, plain_task: object, runner: AgentRunner, task: object) -> tuple[float, float]:
    """Best of WINDOW // SIZE windows of SIZE steps each, the two runners alternating."""
    p, q = windows(plain_runner, plain_task, runner, task)
    return min(p), min(q)


def at_default_throttle() -> None:
    """The live graph as people use it: ``runner.live_graph(task)`` (throttle 0.1 s)."""
    plain_runner = AgentRunner(Counter())
    plain_task = plain_runner.create_task("go")
    live_runner = AgentRunner(Counter())
    task = live_runner.create_task("go")
    graph = live_runner.live_graph(task)
    done = 0
    print(f"live graph (default throttle {graph.throttle_s} s, {'in-browser view' if graph.in_browser else 'HTML fallback'}), "
          f"best of {WINDOW // SIZE} windows of {SIZE} steps before each mark:")
    for mark in MARKS:
        step_time(plain_runner, plain_task, mark - WINDOW - done)
        step_time(live_runner, task, mark - WINDOW - done)
        p, q = best_windows(plain_runner, plain_task, live_runner, task)
        done = mark - WINDOW + SIZE * (WINDOW // SIZE)
        print(f"  at {mark:5,d} steps: plain {p * 1e6:7.1f} us   with live graph {q * 1e6:7.1f} us "
              f"({q / p:.2f}x; target <= 1.3x)")
    graph.close()
    # a window seldom holds a redraw (one per 0.1 s): whole runs count them all, in CPU time of
    # the process (the timer thread's redraws included; other programs' load left out)
    plain_s = live_s = float("inf")
    redraws = 0
    for _ in range(RUNS):
        plain_runner = AgentRunner(Counter())
        plain_task = plain_runner.create_task("go")
        gc.collect()  # the runs before left cyclic garbage: a full collection of it is theirs
        start = time.process_time()
        step_time(plain_runner, plain_task, MARKS[-1])
        plain_s = min(plain_s, (time.process_time() - start) / MARKS[-1])
        live_runner = AgentRunner(Counter())
        task = live_runner.create_task("go")
        graph = live_runner.live_graph(task)
        gc.collect()
        start = time.process_time()
        step_time(live_runner, task, MARKS[-1])
        graph.flush()  # the last drawing, as a notebook cell's end shows it
        live_s = min(live_s, (time.process_time() - start) / MARKS[-1])
        assert graph.source == task_to_dot(live_runner.state_of(task))
        redraws = graph.redraws
        graph.close()
    print(f"  a whole run of {MARKS[-1]:,d} steps, every redraw included ({redraws}), CPU time, best of {RUNS}: "
          f"plain {plain_s * 1e6:.1f} us per step, with live graph {live_s * 1e6:.1f} us ({live_s / plain_s:.2f}x)")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    at_default_throttle()
    plain_runner = AgentRunner(Failing())
    plain_task = plain_runner.create_task("go")
    worker = Failing()
    live_runner = AgentRunner(worker)
    task = live_runner.create_task("go")
    graph = live_runner.live_graph(task, throttle_s=0)
    plain: dict[int, float] = {}
    live: dict[int, float] = {}
    done = 0
    for mark in MARKS:  # both runners advance together; windows alternate (a busy machine is fair to both)
        step_time(plain_runner, plain_task, mark - WINDOW - done)
        step_time(live_runner, task, mark - WINDOW - done)
        plain[mark], live[mark] = best_windows(plain_runner, plain_task, live_runner, task)
        done = mark - WINDOW + SIZE * (WINDOW // SIZE)
    state = live_runner.state_of(task)
    assert graph.source == task_to_dot(state)
    print(f"live graph (throttle 0, {'in-browser view' if graph.in_browser else 'HTML fallback'}), best of "
          f"{WINDOW // SIZE} windows of {SIZE} steps before each mark (load average {load:.2f} when it started):")
    for mark in MARKS:
        print(f"  at {mark:5,d} steps: plain {plain[mark] * 1e6:7.1f} us   with live graph {live[mark] * 1e6:7.1f} us "
              f"({live[mark] / plain[mark]:.2f}x; target <= 3x)")

    # an undo and a failure: the next redraws stay incremental (the settled steps are kept)
    n = len(state.steps)
    undo_plain = time.perf_counter()
    plain_runner.undo_step(plain_task)
    undo_plain = time.perf_counter() - undo_plain
    undo_live = time.perf_counter()
    live_runner.undo_step(task)
    undo_live = time.perf_counter() - undo_live
    worker.fail = True
    try:
        live_runner.run_step(task)
    except RuntimeError:
        pass
    worker.fail = False
    after_plain, after_live = best_windows(plain_runner, plain_task, live_runner, task)
    assert graph.source == task_to_dot(state) and graph._live.full_renders == 0
    probe = LiveDot(state)
    probe.render()
    incremental = full_s = float("inf")
    for _ in range(5):  # more undos, each drawn by a LiveDot alone: incremental vs full text
        live_runner.undo_step(task)
        start = time.perf_counter()
        text = probe.render()
        incremental = min(incremental, time.perf_counter() - start)
        start = time.perf_counter()
        full = task_to_dot(state)
        full_s = min(full_s, time.perf_counter() - start)
        assert text == full
    print(f"  after an undo and a failed step at {n:,d} steps: undo plain {undo_plain * 1e6:.0f} us, with live graph "
          f"{undo_live * 1e6:.0f} us; the steps after: plain {after_plain * 1e6:.1f} us, with live graph "
          f"{after_live * 1e6:.1f} us ({after_live / after_plain:.2f}x)")
    print(f"  the redraw after an undo: {incremental * 1e6:.0f} us incremental vs {full_s * 1e3:.2f} ms for a full "
          "task_to_dot")
    graph.close()

    # the HTML fallback sends the DOT text; `dot` draws only when the redraws pause
    html_runner = AgentRunner(Counter())
    html_task = html_runner.create_task("go")
    html_graph = html_runner.live_graph(html_task, throttle_s=0, renderer="html")
    step_time(html_runner, html_task, MARKS[-1] - WINDOW)
    per_step = min(step_time(html_runner, html_task, SIZE) for _ in range(WINDOW // SIZE))
    print(f"  HTML fallback at {MARKS[-1]:,d} steps: {per_step * 1e6:.1f} us per step; `dot` ran "
          f"{html_graph.svg_draws} times during the run")
    html_graph.close()

    big = plain_runner.state_of(plain_task)
    start = time.perf_counter()
    for _ in range(10):
        task_to_dot(big)
    print(f"  a full task_to_dot redraw at {len(big.steps):,d} steps: {(time.perf_counter() - start) / 10 * 1e3:.2f} ms "
          "(what every redraw cost before)")


if __name__ == "__main__":
    main()
