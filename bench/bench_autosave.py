"""Autosave cost per step as a task grows: the SQLite run store vs a plain step (budget: an
autosaved step <= 3x a plain step at 2,000 steps), the same with grouped commits
(``RunStore(path, commit_every=...)``), what the store encoder's early exits save (switched
off by ``Writer.early_exits = False``), and save / load time of a whole run (run file and
store) at 100 / 1,000 / 2,000 / 10,000 steps.

Every figure is the best of several windows of 20 steps, the runners' windows interleaved (a
busy machine slows them alike); the mean of the windows is in brackets. Grouped commits are
timed over windows of 1,500 steps instead (garbage collection off), so that every window holds
its share of commits: a window of 20 steps between two commits would show none of their cost."""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbagent import AgentChatResponse, AgentRunner, ChatMessage, CustomSimpleAgentWorker, MessageRole, Task, ToolOutput  # noqa: E402
from nbagent.store import RunStore  # noqa: E402

STEPS = int(os.environ.get("BENCH_AUTOSAVE_STEPS", "10000"))
MARKS = [m for m in (100, 1_000, 2_000, 10_000) if m <= STEPS]
BUDGET_MARK = 2_000  # the budget: an autosaved step <= BUDGET x a plain step here
BUDGET = 3.0
WINDOW = 100  # steps timed around each mark


class Counter(CustomSimpleAgentWorker):
    """A worker that does what a real one keeps: a message and a source per step."""

    def _initialize_state(self, task: Task, **kwargs: object) -> dict[str, object]:
        return {"count": 0}

    def _run_step(self, state, task, input=None):  # type: ignore[no-untyped-def]
        state["count"] += 1
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"step {state['count']}"))
        state["sources"].append(ToolOutput(content=str(state["count"]), tool_name="count"))
        return AgentChatResponse(response=f"count={state['count']}"), False

    def _finalize_task(self, state, **kwargs):  # type: ignore[no-untyped-def]
        pass


def step_time(runner: AgentRunner, task: Task, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        runner.run_step(task)
    return (time.perf_counter() - start) / max(n, 1)


def react_tool_loop(tmp: Path, marks: tuple[int, ...] = (250, 2_000)) -> None:
    """An autosaved ReAct tool-loop step (scripted model, one tool): each step's output shows
    every source so far (a view of one log), written to the store as one reference, not n."""
    import sqlite3

    from nbagent import ReActAgentWorker, ScriptedLLM

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    act = 'Thought: add.\nAction: add\nAction Input: {"a": 1, "b": 2}'
    steps = max(marks)

    def make(**kw: object) -> tuple[AgentRunner, Task]:
        worker = ReActAgentWorker.from_tools([add], llm=ScriptedLLM([act] * (steps + 1)), max_iterations=steps + 1)
        r = AgentRunner(worker, **kw)  # type: ignore[arg-type]
        return r, r.create_task("add many times")

    path = tmp / "react.db"
    plain_r, plain_t = make()
    auto_r, auto_t = make(autosave=path)
    db = sqlite3.connect(path)

    def log_bytes() -> int:
        return int(db.execute("SELECT coalesce(sum(length(ops)), 0) FROM log").fetchone()[0])

    out, done = [], 0
    for mark in marks:
        step_time(plain_r, plain_t, mark - WINDOW - done)
        step_time(auto_r, auto_t, mark - WINDOW - done)
        before = log_bytes()
        p, q = [], []
        for _ in range(WINDOW // 20):
            p.append(step_time(plain_r, plain_t, 20))
            q.append(step_time(auto_r, auto_t, 20))
        out.append((mark, min(p), min(q), (log_bytes() - before) / WINDOW))
        done = mark
    db.close()
    print("autosaved ReAct tool-loop step (scripted model, one tool; each output's sources a view), best of "
          f"{WINDOW // 20} windows of 20 steps before each mark:")
    for mark, p_, q_, b in out:
        print(f"  at {mark:6,d} steps: plain {p_ * 1e6:7.1f} us   autosave to runs.db {q_ * 1e6:7.1f} us  "
              f"(+{(q_ - p_) * 1e6:6.1f} us, {q_ / p_:.1f}x)   {b / 1e3:5.1f} KB of log per step")
    print(f"  store after {steps:,d} steps: {path.stat().st_size / 1e6:.1f} MB")


def early_exits(tmp: Path, rounds: int = 10) -> None:
    """At 2,000 steps: a plain step, an autosaved one, one with the store encoder's early exits
    off (each record through the general path), and one whose rows go through
    ``JSONEncoder.encode`` instead of the C encoder made once (``sql.ROW_JSON``), windows
    interleaved."""
    from nbagent.store import sql
    from nbagent.store.writer import Writer

    plain, auto = AgentRunner(Counter()), AgentRunner(Counter(), store=RunStore(tmp / "exits.db"))
    pt, at = plain.create_task("go"), auto.create_task("go")
    start = BUDGET_MARK - rounds * 60 // 2  # the windows straddle the mark
    step_time(plain, pt, start)
    step_time(auto, at, start)
    times: dict[str, list[float]] = {"plain": [], "on": [], "off": [], "encode": []}
    row_json = sql.ROW_JSON
    for _ in range(rounds):
        times["plain"].append(step_time(plain, pt, 20))
        times["on"].append(step_time(auto, at, 20))
        Writer.early_exits = False
        try:
            times["off"].append(step_time(auto, at, 20))
        finally:
            Writer.early_exits = True
        sql.ROW_JSON = None
        try:
            times["encode"].append(step_time(auto, at, 20))
        finally:
            sql.ROW_JSON = row_json
        step_time(plain, pt, 40)  # (the plain runner keeps up)
    best = {k: min(v) for k, v in times.items()}
    print(f"the store encoder's early exits at {BUDGET_MARK:,d} steps (best of {rounds} windows of 20 steps):")
    print(f"  plain {best['plain'] * 1e6:6.1f} us   autosaved {best['on'] * 1e6:6.1f} us ({best['on'] / best['plain']:.2f}x)"
          f"   early exits off {best['off'] * 1e6:6.1f} us ({best['off'] / best['plain']:.2f}x): they save "
          f"{(best['off'] - best['on']) * 1e6:.1f} us = {(best['off'] - best['on']) / best['plain'] * 100:.0f}% of a plain step"
          " (kept if > 5%)")
    print(f"  rows through JSONEncoder.encode {best['encode'] * 1e6:6.1f} us: the C encoder made once saves "
          f"{(best['encode'] - best['on']) * 1e6:.1f} us = {(best['encode'] - best['on']) / best['plain'] * 100:.0f}% of a "
          "plain step (kept if > 5%)")


GROUPED_EVERY = (0.002, 0.01)  # seconds (commit_every)
GROUPED_WINDOW = 1_500  # steps: about 60 ms, six commit periods of 10 ms or more


def grouped(tmp: Path, rounds: int = 4) -> None:
    """Around 2,000 steps, windows of ``GROUPED_WINDOW`` steps: a plain step and steps autosaved
    with one commit per step and with grouped commits, windows interleaved."""
    runners = {"plain": AgentRunner(Counter()), "per step": AgentRunner(Counter(), store=RunStore(tmp / "g0.db"))}
    for every in GROUPED_EVERY:
        runners[f"commit_every={every:g}"] = AgentRunner(Counter(), store=RunStore(tmp / f"g{every}.db", commit_every=every))
    tasks = {name: r.create_task("go") for name, r in runners.items()}
    start = max(0, BUDGET_MARK - rounds * GROUPED_WINDOW // 2)  # the windows straddle the mark
    for name, r in runners.items():
        step_time(r, tasks[name], start)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, r in runners.items():
            gc.collect()
            gc.disable()  # (the windows of 20 steps above mostly miss a collection; these would not)
            try:
                times[name].append(step_time(r, tasks[name], GROUPED_WINDOW))
            finally:
                gc.enable()
    for r in runners.values():
        r.autosave = None  # (commits what waits)
    plain = min(times["plain"])
    print(f"grouped commits around {BUDGET_MARK:,d} steps (best of {rounds} windows of {GROUPED_WINDOW:,d} steps, "
          "commits and checkpoints included, garbage collection not):")
    print(f"  plain {plain * 1e6:6.1f} us")
    for name in list(runners)[1:]:
        best = min(times[name])
        verdict = "met" if best / plain <= BUDGET else "NOT met"
        print(f"  {name:20s} {best * 1e6:6.1f} us  ({best / plain:.2f}x a plain step; budget <= {BUDGET:g}x: {verdict})")
    print("  (with commit_every=s, a step that ends s or more after the last commit is committed before run_step "
          "returns; faster steps wait at most about s: a killed process loses those)")


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    react_tool_loop(tmp)
    runner = AgentRunner(Counter())
    task = runner.create_task("go")
    store = RunStore(tmp / "runs.db")
    auto = AgentRunner(Counter(), store=store)
    auto_task = auto.create_task("go")
    plain: dict[int, float] = {}
    stored: dict[int, float] = {}
    means: dict[int, tuple[float, float]] = {}
    done = 0
    for mark in MARKS:  # both advance together; windows alternate (a busy machine is fair to both)
        step_time(runner, task, mark - WINDOW - done)
        step_time(auto, auto_task, mark - WINDOW - done)
        p, q = [], []
        for _ in range(WINDOW // 20):
            p.append(step_time(runner, task, 20))
            q.append(step_time(auto, auto_task, 20))
        plain[mark], stored[mark] = min(p), min(q)
        means[mark] = (sum(p) / len(p), sum(q) / len(q))
        done = mark
    print(f"autosave cost per step (CustomSimpleAgentWorker, undo on), best of {WINDOW // 20} windows of 20 steps "
          "before each mark (mean of the windows in brackets: it includes garbage collection and checkpoints):")
    for mark in MARKS:
        ratio = stored[mark] / plain[mark]
        budget = f"; budget <= {BUDGET:g}x: {'met' if ratio <= BUDGET else 'NOT met'}" if mark == BUDGET_MARK else ""
        print(f"  at {mark:6,d} steps: plain {plain[mark] * 1e6:7.1f} us   autosave to runs.db "
              f"{stored[mark] * 1e6:7.1f} us  ({ratio:.2f}x a plain step{budget})"
              f"   [mean: {means[mark][0] * 1e6:.1f} / {means[mark][1] * 1e6:.1f} us, "
              f"{means[mark][1] / means[mark][0]:.1f}x]")
    print(f"  (load average when it ended: {os.getloadavg()[0]:.2f}; on a busy machine the ratio varies)")
    grouped(tmp)
    early_exits(tmp)
    print("save / load of a whole run (one task):")
    for mark in MARKS:
        r = AgentRunner(Counter())
        t = r.create_task("go")
        for _ in range(mark):
            r.run_step(t)
        start = time.perf_counter()
        r.save(tmp / f"r{mark}.json")
        json_save = time.perf_counter() - start
        start = time.perf_counter()
        AgentRunner.load(tmp / f"r{mark}.json")
        json_load = time.perf_counter() - start
        start = time.perf_counter()
        r.save(tmp / f"r{mark}.db")
        db_save = time.perf_counter() - start
        start = time.perf_counter()
        AgentRunner.load(tmp / f"r{mark}.db")
        db_load = time.perf_counter() - start
        size = (tmp / f"r{mark}.json").stat().st_size
        print(f"  {mark:6,d} steps: run.json save {json_save * 1e3:7.1f} ms, load {json_load * 1e3:7.1f} ms "
              f"({size / 1e6:.1f} MB)   runs.db save {db_save * 1e3:7.1f} ms, load {db_load * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
