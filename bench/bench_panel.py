"""The control panel's cost while a task runs from code: whole runs of 100 / 1,000 / 2,000 steps
with an ``AgentPanel`` listening (no browser: the traitlets are set, nothing is sent) at its
default throttle (0.1 s), against the same runs with no panel, in CPU time of the process per
step, best of RUNS, each run from a clean heap. Also what one full redraw of the panel's state
costs at each size: it grows with the task's steps (the step picker lists every step), which is
why the panel spaces its redraws by ten times what the last one took.

Without that spacing (issue 25's first anywidget panel) the 2,000-step run cost about 36,500 us
of CPU per step: a redraw of ~100 ms ten times a second, plus a note of the token view rebuilt
from the whole task twice per step. With it (on a shared 2-core machine): about 2x a plain
step at every size, ~50 us; in a profile the panel's own event handling is ~10% of a step, the
rest is the runner building its step events once anyone listens."""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_autosave import Counter  # noqa: E402

from nbagent import AgentRunner  # noqa: E402
from nbagent.viz.panel import AgentPanel  # noqa: E402

MARKS = (100, 1_000, 2_000)
RUNS = 3


def run(steps: int, with_panel: bool) -> float:
    """CPU seconds per step of a whole run of ``steps`` steps (the panel's pending redraw included)."""
    runner = AgentRunner(Counter())
    task = runner.create_task("count")
    panel = AgentPanel(runner, task) if with_panel else None
    gc.collect()
    start = time.process_time()
    for _ in range(steps):
        runner.run_step(task)
    if panel is not None:
        panel.controller.flush()  # the last redraw is part of the run
    spent = time.process_time() - start
    if panel is not None:
        panel.close()
    return spent / steps


def redraw(steps: int) -> float:
    """Seconds of one full redraw of a panel showing a task of ``steps`` steps."""
    runner = AgentRunner(Counter())
    task = runner.create_task("count")
    for _ in range(steps):
        runner.run_step(task)
    panel = AgentPanel(runner, task)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        panel._sync_all()
        best = min(best, time.perf_counter() - start)
    panel.close()
    return best


def main() -> None:
    print(f"{'steps':>6} {'plain us/step':>14} {'panel us/step':>14} {'ratio':>6} {'one redraw ms':>14}")
    for steps in MARKS:
        plain = min(run(steps, False) for _ in range(RUNS))
        paneled = min(run(steps, True) for _ in range(RUNS))
        print(f"{steps:>6} {plain * 1e6:>14.1f} {paneled * 1e6:>14.1f} {paneled / plain:>6.2f} "
              f"{redraw(steps) * 1e3:>14.1f}")


if __name__ == "__main__":
    main()
