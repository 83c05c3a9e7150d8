"""The SQLite run store writes a step's view of its sources in O(1), and loads it exactly.

A ReAct step's output shows the task's sources so far as a ``PrefixView`` of one
``AppendLog``. The store writes it as ``{"$c": k, "v": [last item's number, n]}``: n item
references per step made an autosaved tool loop O(N) per step (and the store O(N^2) bytes).
A row outlives later cuts of the log, so loading must give each output what it showed at its
step even after undo, different steps, a failed step or a fork cut the log below its view:
compared here with the in-memory runner after every change.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, ReActAgentWorker, ScriptedLLM
from nbagent._prefix import PrefixView
from nbagent.persist import PersistError
from nbagent.store import RunStore
from nbagent.store import sql as store_sql


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


def act(tool: str, a: int, b: int) -> str:
    return f'Thought: use {tool}.\nAction: {tool}\nAction Input: {{"a": {a}, "b": {b}}}'


class FailsOnce(ReActAgentWorker):
    """Fails once, when told, after its tool ran and its output (with its view) was built:
    the runner rolls the sources log back (a cut) and keeps the step queued."""

    fail_next = False

    def _after_call(self, *args: Any, **kwargs: Any) -> Any:
        result = super()._after_call(*args, **kwargs)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom after the call")
        return result


def worker(n: int, seed: int = 0) -> FailsOnce:
    rnd = random.Random(seed)
    replies = [act(rnd.choice(["add", "mul"]), i, rnd.randint(1, 9)) for i in range(n)]
    return FailsOnce.from_tools([add, mul], llm=ScriptedLLM(replies), max_iterations=n + 10)


def outputs(runner: AgentRunner, task_id: str) -> dict[str, Any]:
    """Every output the task keeps, with the sources it shows (each source in full)."""
    st = runner.state_of(task_id)

    def shows(out: Any) -> list[Any]:
        return [(s.content, s.tool_name, s.raw_input, s.raw_output) for s in out.output.sources]

    return {
        "completed": [(o.task_step.step_id, shows(o)) for o in st.completed_steps],
        "undone": [(o.task_step.step_id, shows(o)) for o in st.undone_outputs],
        "by_step": sorted((sid, shows(o)) for sid, o in st.outputs.items()),
        "log": [s.content for s in st.task.extra_state["sources"]],
    }


def check(runner: AgentRunner, path: Path, task_id: str) -> AgentRunner:
    loaded = AgentRunner.load(path)
    assert outputs(loaded, task_id) == outputs(runner, task_id)
    return loaded


def view_records(path: Path) -> list[Any]:
    """Every view record the store's log holds ({"$c": k, "v": [last, n]})."""
    found: list[Any] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "$c" in x and "v" in x:
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    with sqlite3.connect(path) as db:
        for (text,) in db.execute("SELECT ops FROM log ORDER BY id"):
            walk(json.loads(text))
    return found


def test_an_autosaved_tool_loop_loads_exactly_after_undo_failure_and_fork(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    w = worker(60)
    runner = AgentRunner(w, autosave=path)
    task = runner.create_task("go")
    tid = task.task_id
    for _ in range(6):
        runner.run_step(task)
        check(runner, path, tid)
    for _ in range(3):  # undo: the log is cut below the views of the three undone outputs
        runner.undo_step(task)
        check(runner, path, tid)
    for _ in range(4):  # different steps (the model's next replies) take the cut places
        runner.run_step(task)
        check(runner, path, tid)
    w.fail_next = True
    with pytest.raises(RuntimeError, match="boom"):
        runner.run_step(task)  # appended a source, then rolled back: a cut at the tail
    check(runner, path, tid)
    runner.run_step(task)
    check(runner, path, tid)
    second = runner.get_completed_steps(task)[1].task_step.step_id
    runner.fork(task, second, input="try again")  # back to before step 2: cut to one source
    check(runner, path, tid)
    for _ in range(3):
        runner.run_step(task)
        check(runner, path, tid)
    runner.undo_step(task)
    loaded = check(runner, path, tid)

    # the undone views really were cut below (the loaded log no longer holds their last item)
    st = loaded.state_of(tid)
    live = st.task.extra_state["sources"]
    cut = [o.output.sources for o in st.undone_outputs if len(o.output.sources) > 1]
    assert cut and any(not isinstance(v, PrefixView) or v.log is not live for v in cut)
    kept = [o.output.sources for o in st.completed_steps]
    assert all(type(v) is PrefixView and v.log is live for v in kept)  # O(1) each, on the loaded log
    # and every view was written as a reference, not a list of items
    records = view_records(path)
    assert len(records) >= 6 + 4 + 1 + 3 - 1

    # the loaded run undoes on its own: what its earlier outputs show does not move
    before = outputs(loaded, tid)
    loaded.undo_step(tid)
    loaded.undo_step(tid)
    after = outputs(loaded, tid)
    assert after["completed"] == before["completed"][:-2]
    assert [s for _, s in after["undone"]][: len(before["undone"])] == [s for _, s in before["undone"]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_undo_fail_fork_runs_load_as_they_ran(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    path = tmp_path / f"r{seed}.db"
    w = worker(200, seed)
    runner = AgentRunner(w, autosave=path)
    task = runner.create_task("go")
    tid = task.task_id
    for _ in range(40):
        done = runner.get_completed_steps(task)
        op = rnd.choice(["run", "run", "run", "undo", "fail", "fork"])
        if op == "undo" and done:
            for _ in range(rnd.randint(1, min(3, len(done)))):
                runner.undo_step(task)
        elif op == "fork" and len(done) > 1:
            runner.fork(task, rnd.choice(done[1:]).task_step.step_id, input="again")
        elif op == "fail":
            w.fail_next = True
            with pytest.raises(RuntimeError, match="boom"):
                runner.run_step(task)
        else:
            runner.run_step(task)
        check(runner, path, tid)
    # a run saved in full (a compacted store) loads the same
    with RunStore(tmp_path / "full.db") as store:
        store.save(runner)
        assert outputs(store.load(), tid) == outputs(runner, tid)


def log_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT coalesce(sum(length(ops)), 0) FROM log").fetchone()[0])


def test_bytes_per_autosaved_step_stay_flat_from_200_to_2000_steps(tmp_path: Path) -> None:
    # measured by size: a view written as its n item references made a step's record grow by
    # ~15 bytes per source (~30 KB at step 2,000); written as a reference it stays flat
    path = tmp_path / "runs.db"
    steps = 2000
    act_ = act("add", 1, 2)
    w = ReActAgentWorker.from_tools([add], llm=ScriptedLLM([act_] * steps), max_iterations=steps + 1)
    runner = AgentRunner(w, autosave=path)
    task = runner.create_task("add many times")
    marks: dict[int, int] = {}
    for i in range(1, steps + 1):
        runner.run_step(task)
        if i in (200, 400, 1800, 2000):
            marks[i] = log_bytes(path)
    early = (marks[400] - marks[200]) / 200
    late = (marks[2000] - marks[1800]) / 200
    assert late < 1.15 * early, (early, late)  # (item numbers gain a digit: not exactly equal)
    runner.autosave = None
    loaded = AgentRunner.load(path)
    out = loaded.get_completed_steps(task.task_id)
    assert [len(o.output.sources) for o in out[::250]] == list(range(1, steps + 1, 250))
    assert out[-1].output.sources == runner.get_completed_steps(task)[-1].output.sources


# ----- the store's schema: an older reader refuses, never misreads ----------------------------


def schema_of(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return str(db.execute("SELECT value FROM meta WHERE name='schema'").fetchone()[0])


def test_a_store_with_view_records_is_schema_4_and_a_schema_2_reader_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    runner = AgentRunner(worker(5), autosave=path)
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    assert view_records(path) and schema_of(path) == "4"
    # the nbagent before view records read schema 2 only: it would take {"$c": k, "v": ...}
    # for the whole log; it refuses the store by name instead
    monkeypatch.setattr(store_sql, "SCHEMA", 2)
    monkeypatch.setattr(store_sql, "READS", (2,))
    with pytest.raises(PersistError, match=r"newer nbagent \(store schema 4\).*upgrade nbagent"):
        RunStore(path)


def _as_written_before_checksums(path: Path, schema: str) -> None:
    """The store as an nbagent of schema 2 or 3 left it: no checksum columns."""
    with sqlite3.connect(path) as db:
        db.execute("DROP VIEW step_commit2")
        for table in ("log", "tasks", "runs"):
            db.execute(f"ALTER TABLE {table} DROP COLUMN crc")
        db.execute("UPDATE meta SET value=? WHERE name='schema'", (schema,))
        db.execute("DELETE FROM meta WHERE name='checksums'")


@pytest.mark.parametrize("schema", ["2", "3"])
def test_an_older_store_loads_and_is_marked_4_once_opened(tmp_path: Path, schema: str) -> None:
    path = tmp_path / "runs.db"
    runner = AgentRunner(worker(5), autosave=path)
    task = runner.create_task("go")
    runner.run_step(task)
    runner.autosave = None
    _as_written_before_checksums(path, schema)  # 2: what the nbagent before view records wrote
    assert schema_of(path) == schema
    loaded = AgentRunner.load(path, worker(5), autosave=True)
    assert outputs(loaded, task.task_id) == outputs(runner, task.task_id)
    assert schema_of(path) == "4"  # from now on it may hold view records and checksums
    loaded.run_step(task.task_id)  # rows with a checksum after rows without one
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM log WHERE crc IS NOT NULL").fetchone()[0] >= 1
    again = AgentRunner.load(path)
    assert outputs(again, task.task_id) == outputs(loaded, task.task_id)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='5' WHERE name='schema'")
    with pytest.raises(PersistError, match=r"newer nbagent \(store schema 5\)"):
        AgentRunner.load(path)


def test_a_view_naming_an_item_the_log_never_had_there_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    runner = AgentRunner(worker(5), autosave=path)
    task = runner.create_task("go")
    for _ in range(3):
        runner.run_step(task)
    runner.autosave = None
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, ops FROM log").fetchall()
        for rid, text in rows:
            if '"v":[' in text:
                db.execute("UPDATE log SET ops=?, crc=NULL WHERE id=?", (text.replace('"v":[', '"v":[99', 1), rid))
                db.execute("DELETE FROM meta WHERE name='checksums'")  # (as a row written before checksums)
                break
    with pytest.raises(PersistError, match="a view of .* items of log"):
        AgentRunner.load(path)


def test_a_task_finalized_after_an_undo_is_written_again_and_loads_exactly(tmp_path: Path) -> None:
    # finalizing writes the task again in full: the undone outputs' views then read the undo's
    # frozen copy of the log (written as their items); the others are references again
    path = tmp_path / "runs.db"
    replies = [act("add", i, 1) for i in range(5)] + [act("mul", 7, 7), "Thought: done.\nAnswer: 49"]
    w = ReActAgentWorker.from_tools([add, mul], llm=ScriptedLLM(replies), max_iterations=20)
    runner = AgentRunner(w, autosave=path)
    task = runner.create_task("go")
    for _ in range(4):
        runner.run_step(task)
    runner.undo_step(task)
    runner.undo_step(task)
    while not runner.get_completed_steps(task)[-1].is_last:
        runner.run_step(task)
    runner.finalize_response(task.task_id)
    assert runner.state_of(task).finalized
    loaded = check(runner, path, task.task_id)
    assert str(loaded.state_of(task.task_id).final_response) == "49"
    assert sorted(len(o.output.sources) for o in loaded.state_of(task.task_id).undone_outputs) == [3, 4]
