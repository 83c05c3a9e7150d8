"""Grouped commits (``RunStore(path, commit_every=s)``): steps that come faster than ``s`` are
committed together. What could go wrong: a group written differently from the same steps one
by one (a step placed out of order, an output or a snapshot missed), steps that wait and are
never committed (the end of a cell, a read, the loop going idle, the exit), a commit written
while a step is half done, and a slow step that waits although nothing comes after it."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, ParallelAgentRunner, Task, seed_ids
from nbagent.store import RunStore, flush_autosave
from nbagent.store import grouped as grouped_module
from nbagent.store import writer as writer_module
from nbagent.store.links import AutosaveWarning, store_origin
from nbagent.store.runstore import writer_of
from tests.helpers import CountingWorker
from tests.test_store import same
from tests.test_store_log import Flaky, FlakyFlat, goes_on_alike, random_change

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    """The writer's clock, moved by hand (``commit_every`` is measured on it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(grouped_module, "_clock", c)
    return c


def committed_steps(db: Path) -> list[int]:
    """Each task's completed steps as another connection sees them (plain sqlite3)."""
    with sqlite3.connect(db) as con:
        return [n for (n,) in con.execute("SELECT steps FROM tasks ORDER BY seq")]


def three_waiting_steps(db: Path, clock: Clock, worker: Any = None) -> tuple[AgentRunner, Task]:
    """A runner grouping commits (1 s) whose three steps wait, the clock standing still."""
    runner = AgentRunner(worker or CountingWorker(target=10**6), autosave=RunStore(db, commit_every=1.0))
    task = runner.create_task("go")
    clock.now += 0.1
    for _ in range(3):
        runner.run_step(task)
    return runner, task


def log_rows(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute("SELECT count(*) FROM log").fetchone()[0])


# ----- the same store, one commit per step or one per group ------------------------------------


@pytest.mark.parametrize(("runner_cls", "worker_cls"), [(AgentRunner, Flaky), (ParallelAgentRunner, Flaky), (AgentRunner, FlakyFlat)])
def test_random_changes_committed_in_groups_load_exactly_like_the_live_runner(
    tmp_path: Path, clock: Clock, runner_cls: type, worker_cls: type
) -> None:
    seed_ids(5)
    rng = random.Random(17)
    db = tmp_path / "runs.db"
    worker = worker_cls(target=10**6)
    runner = runner_cls(worker, autosave=RunStore(db, commit_every=1.0))
    tasks = [runner.create_task("first")]
    changes = loads = 0
    for i in range(160):
        random_change(runner, worker, tasks, rng, i)
        changes += 1
        clock.now += rng.choice([0.01] * 6 + [2.0])  # mostly faster than commit_every
        if rng.random() < 0.12:
            same(runner, runner_cls.load(db))  # a read commits what waits, then sees all of it
            loads += 1
    same(runner, runner_cls.load(db))
    assert loads > 5 and log_rows(db) < changes * 0.6, (log_rows(db), changes)  # steps were committed in groups
    assert any(s.failures for s in runner.tasks.values()) and any(s.undone_outputs for s in runner.tasks.values())
    goes_on_alike(runner, runner_cls.load(db, worker_cls(target=10**6)))  # and the loaded run goes on alike


def test_a_group_is_one_log_row_and_loads_like_steps_committed_one_by_one(tmp_path: Path, clock: Clock) -> None:
    one = AgentRunner(CountingWorker(target=10**6), autosave=tmp_path / "one.db")  # type: ignore[arg-type]
    grouped = AgentRunner(CountingWorker(target=10**6), autosave=RunStore(tmp_path / "grouped.db", commit_every=5))  # type: ignore[arg-type]
    for runner in (one, grouped):
        seed_ids(4)
        task = runner.create_task("go")
        for n in range(40):
            runner.run_step(task, input=f"{n}" if n % 3 else None)
            if n == 20:
                runner.undo_step(task)
    before = log_rows(tmp_path / "grouped.db")
    flush_autosave(grouped)
    assert log_rows(tmp_path / "grouped.db") == before + 1  # all 41 changes in one row
    assert log_rows(tmp_path / "one.db") >= 41
    same(AgentRunner.load(tmp_path / "one.db"), AgentRunner.load(tmp_path / "grouped.db"))
    same(grouped, AgentRunner.load(tmp_path / "grouped.db"))


# ----- when what waits is committed ---------------------------------------------------------------


def test_steps_faster_than_commit_every_wait_for_the_next_late_change_or_a_read(tmp_path: Path, clock: Clock) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=10**6), autosave=RunStore(db, commit_every=0.5))  # type: ignore[arg-type]
    task = runner.create_task("go")
    clock.now += 0.1
    runner.run_step(task)
    runner.run_step(task)
    assert committed_steps(db) == [0]  # both wait: the last commit (the task's creation) was 0.1 s ago
    clock.now += 0.5
    runner.run_step(task)
    assert committed_steps(db) == [3]  # a step 0.5 s after the last commit: committed with those waiting
    runner.run_step(task)
    assert committed_steps(db) == [3]
    assert [t.steps for t in RunStore(db).tasks()] == [4]  # a read through nbagent commits first
    assert committed_steps(db) == [4]
    runner.run_step(task)
    other = runner.create_task("other")  # a change that is not a step commits what waits, with it
    assert committed_steps(db) == [5, 0]
    runner.run_step(other)
    runner.autosave = None  # stopping autosave commits what waits
    assert committed_steps(db) == [5, 1]


def test_steps_slower_than_commit_every_are_each_committed_before_run_step_returns(tmp_path: Path, clock: Clock) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=10**6), autosave=RunStore(db, commit_every=0.05))  # type: ignore[arg-type]
    task = runner.create_task("go")
    for n in range(1, 8):
        clock.now += 0.06  # a model call's time, say
        runner.run_step(task)
        assert committed_steps(db) == [n]


def test_an_awaited_run_is_committed_by_a_timer_on_its_loop(tmp_path: Path, clock: Clock) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=10**6), autosave=RunStore(db, commit_every=0.2))  # type: ignore[arg-type]
    task = runner.create_task("go")
    seen: list[list[int]] = []

    async def main() -> None:
        for _ in range(3):
            await runner.arun_step(task)  # the clock stands still: all three wait
        seen.append(committed_steps(db))
        await asyncio.sleep(0.6)  # the loop is idle; its timer commits them
        seen.append(committed_steps(db))

    asyncio.run(main())
    assert seen == [[0], [3]]


def test_a_sync_step_in_a_running_loop_waits_for_the_cell_s_end_not_a_timer(tmp_path: Path) -> None:
    """In a notebook a sync ``run_step`` runs its step on nbagent's own loop in another thread,
    while the cell's code goes on: no timer there (it would write while the cell changes the
    runner); IPython's end of the cell commits. Here: a real IPython shell, in a child process."""
    db = tmp_path / "runs.db"
    code = textwrap.dedent(
        f"""
        import sqlite3, sys
        sys.path.insert(0, {str(ROOT)!r})
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.user_ns["committed"] = lambda: committed()

        def committed():
            with sqlite3.connect({str(db)!r}) as con:
                return con.execute("SELECT steps FROM tasks").fetchone()[0]

        cell = '''
        import asyncio, time
        from nbagent import AgentRunner
        from nbagent.store import RunStore
        from tests.helpers import CountingWorker

        async def in_a_cell():  # a loop runs, as in Jupyter: the sync call goes through nbagent's own
            runner = AgentRunner(CountingWorker(target=10**6), autosave=RunStore({str(db)!r}, commit_every=30))
            task = runner.create_task("go")
            for _ in range(5):
                runner.run_step(task)
            time.sleep(0.2)
            return runner

        runner = asyncio.run(in_a_cell())
        during = committed()
        '''
        result = shell.run_cell(cell)
        result.raise_error()
        print(shell.user_ns["during"], committed(), flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "5"]  # waiting during the cell; committed when it ended


def test_the_exit_commits_what_waits_and_kill_9_leaves_a_consistent_run(tmp_path: Path) -> None:
    child = textwrap.dedent(
        """
        import sys, time
        sys.path.insert(0, {root!r})
        from nbagent import AgentRunner
        from nbagent.store import RunStore
        from nbagent.store.links import store_origin
        from tests.helpers import CountingWorker

        runner = AgentRunner(CountingWorker(target=10**9), autosave=RunStore({db!r}, commit_every={every}))
        task = runner.create_task("go")
        print(store_origin(runner)[1], flush=True)
        for n in range(1, {steps} + 1):
            runner.run_step(task)
            if n % 7 == 0:
                runner.undo_step(task)
                runner.run_step(task, input="redo")
            print(n, time.monotonic(), flush=True)
        """
    )
    env_root = str(ROOT)
    # a normal exit: everything committed, though the last commit was less than 30 s before
    db = tmp_path / "exit.db"
    out = subprocess.run(
        [sys.executable, "-c", child.format(root=env_root, db=str(db), every=30, steps=60)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    state = next(iter(AgentRunner.load(db, CountingWorker(target=10**9)).tasks.values()))  # type: ignore[arg-type]
    assert len(state.completed_steps) == 60 == state.task.extra_state["count"]
    # kill -9: what was committed loads whole, and steps reported long enough before the kill are in
    every = 0.02
    for round_ in range(3):
        db = tmp_path / f"kill{round_}.db"
        p = subprocess.Popen(
            [sys.executable, "-c", child.format(root=env_root, db=str(db), every=every, steps=10**9)],
            stdout=subprocess.PIPE, text=True,
        )
        run_id = p.stdout.readline().strip()  # type: ignore[union-attr]
        time.sleep(0.2 + 0.2 * round_)
        killed_at = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait()
        lines = [line.split() for line in p.stdout.read().splitlines()]  # type: ignore[union-attr]
        reported = [(int(n), float(t)) for n, t in lines]
        loaded = AgentRunner.load(db, CountingWorker(target=10**9), run=run_id)  # type: ignore[arg-type]
        state = next(iter(loaded.tasks.values()))
        n = len(state.completed_steps)
        extra = state.task.extra_state
        assert extra.get("count", 0) == n == len(extra.get("sources", ())) == len(state.task.scratch_memory)
        assert len(state.history) == n
        # a step waits at most commit_every, plus the time the next step takes to come
        sure = [k for k, t in reported if t < killed_at - every - 0.25]
        assert not sure or n >= sure[-1]  # (each 7th step was undone and run again: n steps after n)
        assert n <= (reported[-1][0] if reported else 0) + 1
        if n:
            loaded.undo_step(state.task_id)
        loaded.run_step(state.task_id)
        assert state.task.extra_state["count"] == len(state.completed_steps)


# ----- never half a step; a failed commit -------------------------------------------------------


REACHED, RELEASE = threading.Event(), threading.Event()


class Gate(CountingWorker):
    """Counts; a step told to hold waits, half done (its message is in memory, its output not
    made yet), until the test lets it go."""

    hold: bool = False

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        response, done = super()._run_step(state, task, input)
        if self.hold:
            REACHED.set()
            assert RELEASE.wait(10)
        return response, done


def test_a_read_on_another_thread_never_commits_a_step_half_done(tmp_path: Path, clock: Clock) -> None:
    db = tmp_path / "runs.db"
    worker = Gate(target=10**6)
    runner = AgentRunner(worker, autosave=RunStore(db, commit_every=1.0))  # type: ignore[arg-type]
    task = runner.create_task("go")
    clock.now += 0.1
    runner.run_step(task)
    runner.run_step(task)  # both wait
    worker.hold = True
    REACHED.clear()
    RELEASE.clear()
    stepping = threading.Thread(target=runner.run_step, args=(task,))
    stepping.start()
    try:
        assert REACHED.wait(10)  # the third step is half done
        reader = RunStore(db)
        assert [t.steps for t in reader.tasks()] == [0]  # the read does not write the runner now
    finally:
        RELEASE.set()
        stepping.join(10)
    assert [t.steps for t in reader.tasks()] == [3]  # and does once the step is over
    same(runner, AgentRunner.load(db))


def test_a_failed_group_commit_warns_then_the_run_is_written_in_full(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    runner, task = three_waiting_steps(db, clock)
    real = writer_module.write_task

    def broken(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(writer_module, "write_task", broken)
    with pytest.warns(AutosaveWarning, match="disk full"):
        flush_autosave(runner)
    assert committed_steps(db) == [0]
    monkeypatch.setattr(writer_module, "write_task", real)
    runner.run_step(task)  # still within commit_every: waits, like the others
    flush_autosave(runner)  # the next commit writes the whole run again
    assert committed_steps(db) == [4]
    same(runner, AgentRunner.load(db))


# ----- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-0.1, 61, float("nan"), float("inf"), "0.1", True, None])
def test_commit_every_must_be_seconds_from_0_to_60(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match=r"commit_every must be a number of seconds from 0 to 60 .* got"):
        RunStore(tmp_path / "runs.db", commit_every=bad)
    assert not (tmp_path / "runs.db").exists()  # refused before the file is made


def test_the_default_commits_every_step_and_the_setting_shows_in_the_repr(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    assert store.commit_every == 0 and "commit_every" not in repr(store)
    grouped = RunStore(tmp_path / "runs.db", commit_every=0.01)
    assert repr(grouped).endswith("commit_every=0.01)")
    runner = AgentRunner(CountingWorker(target=10**6), autosave=store)  # type: ignore[arg-type]
    task = runner.create_task("go")
    for n in range(1, 4):
        runner.run_step(task)
        assert committed_steps(tmp_path / "runs.db") == [n]
    assert store_origin(runner) is not None


def test_a_runner_dropped_while_its_steps_wait_still_has_them_committed(tmp_path: Path, clock: Clock) -> None:
    import gc

    db = tmp_path / "runs.db"
    runner, task = three_waiting_steps(db, clock)
    assert writer_of(runner).waiting.timer is None  # (no loop runs in plain code: nothing parked on one)
    del runner, task
    gc.collect()
    assert committed_steps(db) == [0]
    RunStore(db).flush()  # (as the cell's end or the exit would)
    assert committed_steps(db) == [3]
