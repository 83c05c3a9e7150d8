"""The run store's log (schema 2): each autosaved change is one row of records; loading replays
them. What could go wrong is the replay: a record applied in the wrong place, a cut list not cut,
a stale task's records picked up. Each test compares the store with the live runner exactly."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, ParallelAgentRunner, Task, seed_ids
from nbagent.persist import DamagedRunError, PersistError
from nbagent.runner.snapshot import AppendLog
from nbagent.store import RunStore, flush_autosave
from nbagent.store.links import AutosaveWarning
from nbagent.store.links import store_origin
from tests.helpers import CountingWorker
from tests.test_store import same


class Flaky(CountingWorker):
    """Counts; fails the next step when told to (once), so failures come at any point of a
    run; an input of "stop" makes the step the last one."""

    fail_next: bool = False

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        if self.fail_next:
            self.fail_next = False
            state["count"] += 1  # a change the failed step must not leave behind
            raise RuntimeError("told to fail")
        response, done = super()._run_step(state, task, input)
        return response, done or input == "stop"


class FlakyFlat(Flaky):
    """The same, with a state of scalars and objects with rows of their own: its step state
    and the task's extra state hold the very same objects, and are written as twins."""

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0, "seen_inputs": AppendLog()}


def random_change(runner: AgentRunner, worker: Flaky, tasks: list[Task], rng: random.Random, i: int) -> str:
    """One change of a random kind to one of ``tasks`` (which it keeps up to date); its kind."""
    task = rng.choice(tasks)
    state = runner.state_of(task.task_id)
    roll = rng.random()
    if state.finalized or roll < 0.05:
        tasks.append(runner.create_task(f"task {i}"))
        return "created"
    if roll < 0.45:
        runner.run_step(task, input=rng.choice([None, f"in {i}"]))
        return "step"
    if roll < 0.6 and state.completed_steps:
        runner.undo_step(task, input=rng.choice([None, f"branch {i}"]))  # the next step makes a branch
        return "undone"
    if roll < 0.68:
        worker.fail_next = True
        with pytest.raises(RuntimeError):
            runner.run_step(task)
        return "failed"
    if roll < 0.74 and runner.get_upcoming_steps(task):
        runner.edit_step(task, runner.get_upcoming_steps(task)[0].step_id, input=f"edited {i}")
        return "edited"
    if roll < 0.8:
        runner.run_step(task, input="stop")
        runner.finalize_response(task)
        return "finalized"
    if roll < 0.84 and len(tasks) > 1:
        runner.delete_task(task)
        tasks.remove(task)
        return "deleted"
    runner.run_step(task)
    return "step"


def _run_id(runner: AgentRunner) -> str:
    return store_origin(runner)[1]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("runner_cls", "worker_cls"), [(AgentRunner, Flaky), (ParallelAgentRunner, Flaky), (AgentRunner, FlakyFlat)])
def test_random_changes_load_exactly_like_the_live_runner(tmp_path: Path, runner_cls: type, worker_cls: type) -> None:
    seed_ids(5)
    rng = random.Random(7)
    db = tmp_path / "runs.db"
    worker = worker_cls(target=10**6)
    runner = runner_cls(worker, autosave=db)
    tasks = [runner.create_task("first")]
    done = 0
    for i in range(70):
        done += random_change(runner, worker, tasks, rng, i) == "finalized"
        same(runner, runner_cls.load(db))  # after every change, exactly the live runner
    assert done and len(runner.tasks) > 1  # the walk went through every kind of change
    assert any(s.failures for s in runner.tasks.values()) and any(s.undone_outputs for s in runner.tasks.values())
    goes_on_alike(runner, runner_cls.load(db, worker_cls(target=10**6)))


def goes_on_alike(runner: AgentRunner, loaded: AgentRunner) -> None:
    """A loaded run goes on like the live one: an undo and a step in every open task."""
    for r in (runner, loaded):
        seed_ids(11)
        for state in list(r.tasks.values()):
            if not state.finalized:
                if state.completed_steps:
                    r.undo_step(state.task_id)
                r.run_step(state.task_id, input="after")
    same(runner, loaded)


def test_another_connection_sees_each_step_as_soon_as_run_step_returns(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=10**6), autosave=db)  # type: ignore[arg-type]
    task = runner.create_task("go")
    reader = sqlite3.connect(db)  # plain sqlite3, not nbagent: what any other process sees
    for n in range(1, 31):
        runner.run_step(task)
        (steps,) = reader.execute("SELECT steps FROM tasks WHERE task_id=?", (task.task_id,)).fetchone()
        assert steps == n
        if n % 10 == 0:
            state = RunStore(db).load().state_of(task.task_id)
            assert state.task.extra_state["count"] == n == len(state.completed_steps)
    reader.close()


def test_a_step_appends_one_log_row_of_the_same_size_at_step_10_and_step_600(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = RunStore(db)
    runner = AgentRunner(FlakyFlat(target=10**6), store=store)  # type: ignore[arg-type]
    task = runner.create_task("go")
    reader = sqlite3.connect(db)
    sizes = {}
    for n in range(1, 601):
        rows_before = reader.execute("SELECT count(*) FROM log").fetchone()[0]
        changes = store._db.total_changes
        runner.run_step(task)
        assert store._db.total_changes - changes == 2  # the log row and the task's row
        assert reader.execute("SELECT count(*) FROM log").fetchone()[0] == rows_before + 1
        if n in (10, 600):
            sizes[n] = reader.execute("SELECT length(ops) FROM log ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert sizes[600] <= sizes[10] * 1.1  # a few more digits in the numbers, nothing that grows
    ops = json.loads(reader.execute("SELECT ops FROM log ORDER BY id DESC LIMIT 1").fetchone()[0])
    assert sorted({op[0] for op in ops}) == ["h", "i", "o", "s", "u"]  # what a step changes
    reader.close()


def test_saving_in_full_compacts_the_log_and_loads_the_same(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = RunStore(db)
    runner = AgentRunner(CountingWorker(target=10**6), store=store)  # type: ignore[arg-type]
    task = runner.create_task("go")
    for n in range(40):
        runner.run_step(task)
        if n % 5 == 4:
            runner.undo_step(task)
    assert store._db.execute("SELECT count(*) FROM log").fetchone()[0] > 40
    store.save(runner)  # the same run, written again in full
    assert store._db.execute("SELECT count(*) FROM log").fetchone()[0] == 1
    same(runner, store.load())
    runner.run_step(task)  # autosave goes on from there
    same(runner, store.load())


def test_a_stale_task_s_records_are_not_picked_up_again(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = RunStore(db)
    runner = AgentRunner(CountingWorker(target=3), store=store)  # type: ignore[arg-type]
    a = runner.create_task("a")
    for _ in range(3):
        runner.run_step(a)
    runner.finalize_response(a)  # written again in full, under a new place in the run
    b = runner.create_task("b")
    runner.run_step(b)
    loaded = store.load()
    same(runner, loaded)
    assert len(loaded.state_of(a.task_id).completed_steps) == 3  # not 3 + the 3 written before


def test_old_and_damaged_stores_are_refused_by_name(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    RunStore(old).close()
    con = sqlite3.connect(old)
    con.execute("UPDATE meta SET value='1' WHERE name='schema'")
    con.commit()
    con.close()
    with pytest.raises(PersistError, match="older nbagent .*schema 1"):
        RunStore(old)
    bad = tmp_path / "bad.db"
    runner = AgentRunner(CountingWorker(target=10), autosave=bad)  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    con = sqlite3.connect(bad)
    # (crc=NULL: as a row written before checksums; a row whose bytes changed fails its checksum)
    con.execute("UPDATE log SET ops='[[\"zz\",1,2]]', crc=NULL WHERE id=(SELECT max(id) FROM log)")
    con.execute("DELETE FROM meta WHERE name='checksums'")  # (a store upgraded from schema 3)
    con.commit()
    with pytest.raises(DamagedRunError, match="log row 1 holds a record of unknown kind 'zz'"):
        RunStore(bad).load()
    con.execute("UPDATE log SET ops='[[\"u\",0,7,[null,0,null],{}]]', crc=NULL WHERE id=(SELECT max(id) FROM log)")
    con.commit()
    with pytest.raises(PersistError, match="output 7 follows"):
        RunStore(bad).load()
    con.close()


def test_a_dict_written_as_a_twin_keeps_what_its_twin_held_then(tmp_path: Path) -> None:
    """A step state written as "the same as the extra state" must not follow the extra state's
    later changes (replayed directly: the runner rewrites both together)."""
    from nbagent.store.reader import read_rows, run_range

    store = RunStore(tmp_path / "runs.db")
    db = store._db
    db.execute("INSERT INTO runs(run_id, created, updated, header) VALUES('r', 0, 0, '{}')")
    no = db.execute("SELECT no FROM runs").fetchone()[0]
    lo = run_range(no)[0]
    rows = [
        [["o", 1, "dict", {"$id": 1, "n": 1}], ["o", 2, "same", 1], ["o", 3, "same", 2]],
        [["o", 1, "dict", {"$id": 5, "n": 2}]],  # 1 changes: 2 (and 3, a copy of 2) keep n=1
        [["o", 4, "same", 1]],
    ]
    for i, ops in enumerate(rows):
        db.execute("INSERT INTO log(id, ops) VALUES(?, ?)", (lo + i, json.dumps(ops)))
    got = read_rows(db, store.path, "r", no, None).objects
    assert got[1] == ("dict", {"$id": 5, "n": 2}) and got[4] == ("same", 1)
    assert got[2] == ("dict", {"$id": 1, "n": 1})
    assert got[3] == ("same", 2)
    db.execute("INSERT INTO log(id, ops) VALUES(?, ?)", (lo + 3, json.dumps([["o", 5, "same", 99]])))
    damaged = read_rows(db, store.path, "r", no, None).damaged_objects  # a copy of what is not there
    assert list(damaged) == [5] and "99" in damaged[5]


def test_a_renumbered_task_row_is_found_again(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=10**6), autosave=db)  # type: ignore[arg-type]
    tasks = [runner.create_task(f"t{i}") for i in range(3)]
    for task in tasks:
        runner.run_step(task)
    runner.delete_task(tasks[0])
    other = sqlite3.connect(db)
    # another process renumbers the rows (VACUUM may: the table has no INTEGER PRIMARY KEY)
    other.execute("UPDATE tasks SET rowid = rowid + 100")
    other.commit()
    for _ in range(2):
        runner.run_step(tasks[2])
        runner.run_step(tasks[1])
    assert {i.input: i.steps for i in RunStore(db).tasks()} == {"t1": 3, "t2": 3}
    assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2
    same(runner, AgentRunner.load(db))
    other.close()


def test_a_task_written_again_in_full_keeps_its_place_among_the_run_s_tasks(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(Flaky(target=10**6), autosave=db)
    a, b, c = (runner.create_task(name) for name in "abc")
    for task in (a, b, c):
        runner.run_step(task)
    runner.run_step(b, input="stop")
    runner.finalize_response(b)  # finalizing writes the task again in full, at a new place (seq)
    runner.run_step(a)
    loaded = AgentRunner.load(db)
    assert [s.task.input for s in loaded.tasks.values()] == ["a", "b", "c"]
    same(runner, loaded)


def test_saving_a_runner_into_the_store_it_autosaves_to_keeps_the_run_loadable(tmp_path: Path) -> None:
    """``runner.save("runs.db")`` opens the file again (another ``RunStore``): the save must go
    through the autosave's own writer, not rewrite the run under it."""
    db = tmp_path / "runs.db"
    runner = AgentRunner(Flaky(target=10**6), autosave=db)
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    runner.save(db)
    for _ in range(3):
        runner.run_step(task)
    same(runner, AgentRunner.load(db))
    other = RunStore(db)  # a label and a task saved in full through another object for the file
    other.label(runner, task, key="k", tag="t")
    other.save_task(runner, runner.create_task("second"), key="k2")
    runner.run_step(task)
    same(runner, AgentRunner.load(db))
    assert sorted((t.key, t.steps) for t in other.tasks()) == [("k", 7), ("k2", 0)]
    assert len(other.runs()) == 1


@pytest.mark.parametrize("commit_every", [0, 30])
def test_two_runners_autosaving_one_run_never_damage_it(tmp_path: Path, commit_every: float) -> None:
    """A runner loaded from a run with autosave (here, or in another kernel) while the runner
    that made it still autosaves it: the first to notice goes on as a new run, with a warning;
    both runs load exactly like their runners. Before, the run was left with a gap in its log
    and refused as damaged."""
    db = tmp_path / "runs.db"
    first = AgentRunner(Flaky(target=10**6), autosave=RunStore(db, commit_every=commit_every))
    task = first.create_task("go")
    for _ in range(3):
        first.run_step(task)
    second = AgentRunner.load(db, Flaky(target=10**6), autosave=True)  # the same run, rewritten
    for _ in range(3):  # as many log rows as the first wrote: only the last row's checksum tells
        second.run_step(task.task_id)
    with pytest.warns(AutosaveWarning, match=rf"run '{_run_id(second)}' was written by another runner"):
        first.run_step(task)
        flush_autosave(first)
    assert _run_id(first) != _run_id(second)
    for runner in (first, second, first):
        runner.run_step(task.task_id)
    runs = RunStore(db).runs()
    assert sorted(r.run_id for r in runs) == sorted([_run_id(first), _run_id(second)])
    assert not any(r.damaged for r in runs)
    same(first, AgentRunner.load(db, run=_run_id(first)))
    same(second, AgentRunner.load(db, run=_run_id(second)))
    assert len(first.state_of(task.task_id).completed_steps) == 6


def test_a_task_saved_in_full_into_a_run_another_writer_took_over_is_refused_then_the_runner_goes_on_as_a_new_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    first = AgentRunner(Flaky(target=10**6), autosave=db)
    task = first.create_task("go")
    first.run_step(task)
    second = AgentRunner.load(db, Flaky(target=10**6), autosave=True)
    second.run_step(task.task_id)
    with pytest.raises(PersistError, match="the run moved: run '.*' was written by another writer since"):
        RunStore(db).save_task(first, task, key="mine")
    with pytest.warns(AutosaveWarning, match="this runner goes on as run"):
        first.run_step(task)
    assert _run_id(first) != _run_id(second)
    same(first, AgentRunner.load(db, run=_run_id(first)))
    same(second, AgentRunner.load(db, run=_run_id(second)))
