"""Damaged run stores and run files, damaged by hand with the sqlite3 module and by flipping
bytes of the real file: never a raw exception, never a hang, every error names the file, the
damaged task is skipped (named in a warning; the runner knows) and the intact ones load
exactly; ``nbagent report`` says it in one line and exits non-zero.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentRunner, seed_ids
from nbagent.__main__ import main
from nbagent.persist import DamagedRunError, DamagedRunWarning, PersistError
from nbagent.report import report_html
from nbagent.store import RunStore
from tests.helpers import CountingWorker
from tests.test_persist import REPLIES, react
from tests.test_store import comparable

# ----- a real store, made once: two runs, five tasks of every shape ---------------------------


@dataclass
class Pristine:
    db: bytes  # the store file's bytes (its log checkpointed into it)
    json: bytes  # run A as a run file
    run_a: str
    run_b: str
    tasks_a: list[str]  # in the order they were created
    tasks_b: list[str]
    docs: dict[str, Any]  # task id -> what the task loads as (comparable)


def _build(root: Path) -> Pristine:
    seed_ids(7)
    path = root / "runs.db"
    store = RunStore(path)
    worker = CountingWorker(target=4, fail_on={2})
    a = AgentRunner(worker, store=store)  # type: ignore[arg-type]
    t0, t1, t2 = (a.create_task(f"task {i}") for i in range(3))
    a.run_step(t0)
    with pytest.raises(ValueError):
        a.run_step(t0)  # a failure record
    worker.fail_on = set()
    a.run_step(t0)
    a.run_step(t0)
    a.undo_step(t0)  # an undo snapshot used, an undone output
    for _ in range(4):
        a.run_step(t1)
    a.finalize_response(t1)  # the conversation memory holds it
    a.run_step(t2)
    b = AgentRunner(react(REPLIES), store=store)
    u0 = b.create_task("Add 1+2, then 3+4, then 7+10")
    for _ in range(4):
        b.run_step(u0)  # tool outputs, views of the log of sources
    b.finalize_response(u0)
    u1 = b.create_task("later")
    run_a, run_b = store.runs()[0].run_id, store.runs()[1].run_id
    a.autosave = None
    b.autosave = None
    store.close()  # the last connection: the log is checkpointed into the file
    assert not Path(f"{path}-wal").exists()
    docs = {}
    with RunStore(path) as again:
        for run in (run_a, run_b):
            for doc in comparable(again.load(run=run))["tasks"]:
                docs[doc["task_id"]] = doc
    json_path = a.save(root / "a.json")
    return Pristine(
        path.read_bytes(), json_path.read_bytes(), run_a, run_b,
        [t0.task_id, t1.task_id, t2.task_id], [u0.task_id, u1.task_id], docs,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    return _build(tmp_path_factory.mktemp("pristine"))


def copy_of(pristine: Pristine, tmp_path: Path, name: str = "runs.db") -> Path:
    path = tmp_path / name
    path.write_bytes(pristine.db if name.endswith(".db") else pristine.json)
    return path


def sql(path: Path, *statements: str, args: tuple[Any, ...] = ()) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s, args) if args else con.execute(s)
    con.commit()
    con.close()


# ----- what every outcome must be ----------------------------------------------------------------


@dataclass
class Outcome:
    runner: Any = None
    error: BaseException | None = None
    warnings: tuple[str, ...] = ()


def attempt(path: Path, fn: Callable[[], Any]) -> Outcome:
    """Run ``fn``: it returns, or raises a PersistError whose one line names ``path``."""
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = Outcome(runner=fn())
        except PersistError as err:  # anything else fails the test, with its traceback
            out = Outcome(error=err)
    assert time.monotonic() - start < 30, "reading a damaged file must not hang"
    out.warnings = tuple(str(w.message) for w in caught if issubclass(w.category, DamagedRunWarning))
    if out.error is not None:
        text = str(out.error)
        assert str(path) in text and "\n" not in text, text
        if isinstance(out.error, DamagedRunError):
            assert out.error.path == str(path)
    for w in out.warnings:
        assert str(path) in w and "\n" not in w, w
    return out


def report_cli(path: Path, capsys: pytest.CaptureFixture[str], *more: str) -> int:
    """``nbagent report``: 0 written, 1 written without damaged tasks (one warning line),
    2 not written (one error line); never a traceback."""
    capsys.readouterr()
    out = path.with_name(path.name + ".html")
    start = time.monotonic()
    status = main(["report", str(path), "-o", str(out), *more])
    assert time.monotonic() - start < 60
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "Traceback" not in err and all(line.startswith("nbagent report: ") for line in lines), err
    if status == 2:
        assert len(lines) == 1 and lines[0].startswith("nbagent report: error: ") and str(path) in lines[0], err
    else:
        assert status in (0, 1) and out.exists()
        assert (status == 1) == any(line.startswith("nbagent report: warning: ") for line in lines), err
    return status


def assert_exact(pristine: Pristine, runner: Any, task_ids: list[str]) -> None:
    got = {doc["task_id"]: doc for doc in comparable(runner)["tasks"]}
    assert sorted(got) == sorted(task_ids)
    for tid in task_ids:
        assert got[tid] == pristine.docs[tid], f"task {tid} did not load as it was saved"


# ----- damage to one task: that task is skipped, the others load exactly ---------------------


def _head(path: Path, task_id: str) -> Any:
    con = sqlite3.connect(path)
    (head,) = con.execute("SELECT head FROM tasks WHERE task_id=?", (task_id,)).fetchone()
    con.close()
    return json.loads(head)


def _seq(path: Path, task_id: str) -> int:
    con = sqlite3.connect(path)
    (seq,) = con.execute("SELECT seq FROM tasks WHERE task_id=?", (task_id,)).fetchone()
    con.close()
    return int(seq)


def _rewrite_last(
    path: Path, match: Callable[[list[Any]], bool], change: Callable[[list[Any]], list[Any]], last: bool = True
) -> None:
    """Replace the last log record of run A (the first run) ``match`` picks (the one that
    counts: a later record of the same piece would supersede an earlier one) by ``change(record)``."""
    con = sqlite3.connect(path)
    found = None
    (no,) = con.execute("SELECT min(no) FROM runs").fetchone()
    rows = con.execute("SELECT id, ops FROM log WHERE id>=? AND id<? ORDER BY id", (no << 36, (no + 1) << 36)).fetchall()
    for row_id, text in rows:
        for i, op in enumerate(json.loads(text)):
            if match(op) and (last or found is None):
                found = (row_id, text, i)
    assert found is not None, "no such record to damage"
    row_id, text, i = found
    ops = json.loads(text)
    ops[i] = change(ops[i])
    con.execute("UPDATE log SET ops=?, crc=NULL WHERE id=?", (json.dumps(ops), row_id))
    con.execute(UNCHECKED)
    con.commit()
    con.close()


# Rows rewritten by hand get no checksum (crc NULL), as rows an older nbagent wrote (the store
# marked as one that was upgraded: "checksums" is not "all"): what is checked then is what they
# hold. A row whose bytes changed under its checksum, or that lost it: see the cases below.
UNCHECKED = "DELETE FROM meta WHERE name='checksums'"


def head_is_a_list(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET head='[1, 2, 3]', crc=NULL WHERE task_id=?", args=(tid,))
    sql(path, UNCHECKED)


def head_cut_short(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET head=substr(head, 1, 40), crc=NULL WHERE task_id=?", args=(tid,))
    sql(path, UNCHECKED)


def head_not_utf8(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET head=CAST(x'7b2274617366ff22' AS TEXT), crc=NULL WHERE task_id=?", args=(tid,))
    sql(path, UNCHECKED)


def head_lacks_its_queue(path: Path, tid: str) -> None:
    head = _head(path, tid)
    del head["queue"]
    sql(path, "UPDATE tasks SET head=?, crc=NULL WHERE task_id=?", args=(json.dumps(head), tid))
    sql(path, UNCHECKED)


def head_refers_to_a_missing_object(path: Path, tid: str) -> None:
    head = _head(path, tid)
    head["extra_state"] = {"$d": 987654}
    sql(path, "UPDATE tasks SET head=?, crc=NULL WHERE task_id=?", args=(json.dumps(head), tid))
    sql(path, UNCHECKED)


def head_changed_under_its_checksum(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET head=replace(head, '\"task 0\"', '\"task 9\"') WHERE task_id=?", args=(tid,))


def head_lost_its_checksum(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET crc=NULL WHERE task_id=?", args=(tid,))


def place_is_text(path: Path, tid: str) -> None:
    sql(path, "UPDATE tasks SET seq='seven' WHERE task_id=?", args=(tid,))


def step_record_is_a_number(path: Path, tid: str) -> None:
    seq = _seq(path, tid)
    _rewrite_last(path, lambda op: op[:2] == ["s", seq], lambda op: ["s", seq, op[2], 42])


def output_out_of_order(path: Path, tid: str) -> None:
    seq = _seq(path, tid)
    _rewrite_last(path, lambda op: op[:2] == ["u", seq], lambda op: ["u", seq, 99, op[3], op[4]])


def failure_record_of_the_wrong_shape(path: Path, tid: str) -> None:
    seq = _seq(path, tid)
    _rewrite_last(path, lambda op: op[:2] == ["f", seq], lambda op: ["f", seq, op[2], {"step_id": 5}])


def scratch_item_misplaced(path: Path, tid: str) -> None:
    k = _head(path, tid)["scratch_memory"]["$c"]  # an object only this task refers to
    _rewrite_last(path, lambda op: op[:2] == ["i", k], lambda op: ["i", k, op[2], 5000, op[4]])


def scratch_item_not_a_message(path: Path, tid: str) -> None:
    k = _head(path, tid)["scratch_memory"]["$c"]
    # (the first item: the last one was cut off by the undo, and nothing loads it)
    _rewrite_last(path, lambda op: op[:2] == ["i", k], lambda op: ["i", k, op[2], op[3], [7, 1]], last=False)


ONE_TASK = [
    head_changed_under_its_checksum,
    head_lost_its_checksum,
    head_is_a_list,
    head_cut_short,
    head_not_utf8,
    head_lacks_its_queue,
    head_refers_to_a_missing_object,
    place_is_text,
    step_record_is_a_number,
    output_out_of_order,
    failure_record_of_the_wrong_shape,
    scratch_item_misplaced,
    scratch_item_not_a_message,
]


@pytest.mark.parametrize("damage", ONE_TASK, ids=lambda f: f.__name__)
def test_a_damaged_task_is_skipped_by_name_and_the_others_load_exactly(
    pristine: Pristine, tmp_path: Path, damage: Callable[[Path, str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy_of(pristine, tmp_path)
    victim = pristine.tasks_a[0]  # failed, undone, retried: records of every kind
    damage(path, victim)
    out = attempt(path, lambda: RunStore(path).load(run=pristine.run_a))
    assert out.error is None, out.error
    assert list(out.runner.skipped_tasks) == [victim]
    assert len(out.warnings) == 1 and victim in out.warnings[0] and pristine.run_a in out.warnings[0]
    assert_exact(pristine, out.runner, pristine.tasks_a[1:])
    other = attempt(path, lambda: RunStore(path).load(run=pristine.run_b))  # the other run is untouched
    assert not other.warnings and not other.runner.skipped_tasks
    assert_exact(pristine, other.runner, pristine.tasks_b)
    only = attempt(path, lambda: RunStore(path).load(run=pristine.run_a, tasks=[victim]))
    assert isinstance(only.error, DamagedRunError) and only.error.task == victim and only.error.run == pristine.run_a
    html = report_html(out.runner)
    assert "could not be loaded" in html and victim in html
    # the report of the newest run (run B) is whole; run A's (through its own file) skips one
    assert report_cli(path, capsys) == 0


def test_a_runner_loaded_without_a_damaged_task_never_saves_over_it(pristine: Pristine, tmp_path: Path) -> None:
    path = copy_of(pristine, tmp_path)
    victim = pristine.tasks_a[1]
    head_is_a_list(path, victim)
    with pytest.warns(DamagedRunWarning, match=victim):
        runner = AgentRunner.load(path, CountingWorker(target=4), run=pristine.run_a)  # type: ignore[arg-type]
    runner.run_step(pristine.tasks_a[2])
    with RunStore(path) as store:
        before = store._db.execute("SELECT head FROM tasks WHERE task_id=?", (victim,)).fetchone()
        new_run = store.save(runner)  # a new run: the damaged one stays as it is
        assert new_run != pristine.run_a
        assert store._db.execute("SELECT head FROM tasks WHERE task_id=?", (victim,)).fetchone() == before
        assert {r.run_id for r in store.runs()} == {pristine.run_a, pristine.run_b, new_run}
    runner.autosave = path  # the same: a new run
    assert runner.autosave == path
    # a run file loaded without a damaged task is not written over
    file = copy_of(pristine, tmp_path, "a.json")
    doc = json.loads(file.read_text())
    doc["tasks"][0]["queue"] = "not a list"
    file.write_text(json.dumps(doc))
    with pytest.warns(DamagedRunWarning):
        loaded = AgentRunner.load(file)
    assert list(loaded.skipped_tasks) == [pristine.tasks_a[0]]
    assert_exact(pristine, loaded, pristine.tasks_a[1:])  # though they share objects it wrote first
    with pytest.raises(PersistError, match="without its damaged task"):
        loaded.save(file)
    with pytest.raises(PersistError, match="without its damaged task"):
        loaded.autosave = file
    assert json.loads(file.read_text())["tasks"][0]["queue"] == "not a list"
    loaded.save(tmp_path / "elsewhere.json")  # anywhere else is fine


def test_store_listing_leaves_out_an_unreadable_row_and_says_so(pristine: Pristine, tmp_path: Path) -> None:
    path = copy_of(pristine, tmp_path)
    sql(path, "UPDATE tasks SET input=CAST(x'41ff42' AS TEXT) WHERE task_id=?", args=(pristine.tasks_a[0],))
    with RunStore(path) as store, pytest.warns(DamagedRunWarning, match="1 damaged task row"):
        listed = store.tasks()
    assert sorted(t.task_id for t in listed) == sorted(pristine.tasks_a[1:] + pristine.tasks_b)
    loaded = attempt(path, lambda: RunStore(path).load(run=pristine.run_a))  # the row's head is intact
    assert_exact(pristine, loaded.runner, pristine.tasks_a)


def test_a_class_not_registered_is_refused_not_skipped(pristine: Pristine, tmp_path: Path) -> None:
    """A run naming a class from outside nbagent that was not registered is a choice to make
    (allow_type), not damage: the load is refused whole, naming it; nothing is skipped."""
    from nbagent.store.values import NotAllowedError

    file = copy_of(pristine, tmp_path, "a.json")
    doc = json.loads(file.read_text())
    doc["tasks"][0]["extra_state"]["p"] = {"$type": "model", "class": "os:system", "data": {}}
    file.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NotAllowedError, match="'os:system', which is not an nbagent class"):
            AgentRunner.load(file)


# ----- damage whose reach cannot be told: the run (or the store) is refused by name -----------


def _last_row_of(path: Path, run: str) -> int:
    con = sqlite3.connect(path)
    (no,) = con.execute("SELECT no FROM runs WHERE run_id=?", (run,)).fetchone()
    (row,) = con.execute("SELECT max(id) FROM log WHERE id>=? AND id<?", (no << 36, (no + 1) << 36)).fetchone()
    con.close()
    return int(row)


RUN_DAMAGE = {
    # (still valid JSON: each string gains a space)
    "log row changed under its checksum": "UPDATE log SET ops=replace(ops, '\"', ' \"') WHERE id={row}",
    "log row lost its checksum": "UPDATE log SET crc=NULL WHERE id={row}",
    "log row not UTF-8": "UPDATE log SET ops=CAST(x'5b5b226fff' AS TEXT), crc=NULL WHERE id={row}",
    "log row cut short": "UPDATE log SET ops=substr(ops, 1, length(ops) / 2), crc=NULL WHERE id={row}",
    "log row an object": "UPDATE log SET ops='{{\"a\": 1}}', crc=NULL WHERE id={row}",
    "record of unknown kind": "UPDATE log SET ops='[[\"zz\", 1]]', crc=NULL WHERE id={row}",
    "a log row lost": "DELETE FROM log WHERE id={row} - 1",
    "a log row moved to the other run": "UPDATE log SET id=(SELECT max(id) + 1 FROM log) WHERE id={row} - 1",
    "the other run's row moved here": "UPDATE log SET id={row} + 1 WHERE id=(SELECT max(id) FROM log WHERE id < ({row} >> 36) << 36)",
    "header changed under its checksum": "UPDATE runs SET header=replace(header, 'ReAct', 'React') WHERE run_id='{run}'",
    "header cut short": "UPDATE runs SET header=substr(header, 1, 20), crc=NULL WHERE run_id='{run}'",
    "header a list": "UPDATE runs SET header='[]', crc=NULL WHERE run_id='{run}'",
    "its log rows lost": "UPDATE runs SET no=no+1000 WHERE run_id='{run}'",
}


def statement_name(statement: str) -> str:
    return next(name for name, s in RUN_DAMAGE.items() if s == statement)


@pytest.mark.parametrize("statement", list(RUN_DAMAGE.values()), ids=list(RUN_DAMAGE))
def test_damage_to_a_run_as_a_whole_refuses_that_run_by_name(
    pristine: Pristine, tmp_path: Path, statement: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy_of(pristine, tmp_path)
    sql(path, statement.format(row=_last_row_of(path, pristine.run_b), run=pristine.run_b))
    if "crc=NULL," in statement:
        sql(path, UNCHECKED)
    out = attempt(path, lambda: RunStore(path).load(run=pristine.run_b))
    assert isinstance(out.error, DamagedRunError) and out.error.run == pristine.run_b, out.error
    intact = attempt(path, lambda: RunStore(path).load(run=pristine.run_a))
    if "moved here" not in statement_name(statement):  # (that one took run A's last row away)
        assert intact.error is None and not intact.warnings
        assert_exact(pristine, intact.runner, pristine.tasks_a)
    with RunStore(path) as store:
        runs = {r.run_id: r for r in store.runs()}  # listing them never raises
    assert set(runs) == {pristine.run_a, pristine.run_b}
    status = report_cli(path, capsys)  # the newest run is run B
    assert status == 2
    if "moved here" not in statement_name(statement):
        # its one line names the intact other run, and how to report it
        capsys.readouterr()
        main(["report", str(path), "-o", str(tmp_path / "b.html")])
        line = capsys.readouterr().err
        assert f"its other runs: {pristine.run_a} (--run-id ID reports one)" in line, line
        assert report_cli(path, capsys, "--run-id", pristine.run_a) == 0


STORE_DAMAGE = {
    "schema mark is text": ["UPDATE meta SET value='three' WHERE name='schema'"],
    "schema mark missing": ["DELETE FROM meta WHERE name='schema'"],
    "format mark missing": ["DELETE FROM meta WHERE name='format'"],
    "log table lost": ["DROP TABLE log"],
    "tasks table lost": ["DROP TABLE tasks"],
    "runs table lost": ["DROP VIEW step_commit2", "DROP TABLE runs"],
    "meta table lost": ["DROP TABLE meta"],
    # SQLite's own error message then holds bytes that are not UTF-8 (sqlite3 raises UnicodeDecodeError)
    "schema table damaged": [
        "PRAGMA writable_schema=ON",
        "UPDATE sqlite_master SET name=CAST(x'7461736b73ff' AS TEXT), sql='CREATE INDEX' WHERE name='tasks_by_label'",
    ],
}


@pytest.mark.parametrize("statements", list(STORE_DAMAGE.values()), ids=list(STORE_DAMAGE))
def test_damage_to_the_store_itself_is_one_error_naming_the_file(
    pristine: Pristine, tmp_path: Path, statements: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy_of(pristine, tmp_path)
    sql(path, *statements)
    size = path.stat().st_size
    out = attempt(path, lambda: RunStore(path))
    assert isinstance(out.error, DamagedRunError) and out.error.run is None, out.error
    assert path.stat().st_size == size and "CREATE TABLE" not in str(out.error)  # nothing was made afresh
    assert report_cli(path, capsys) == 2


def test_files_that_are_not_a_store_or_are_cut_short(pristine: Pristine, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases: dict[str, bytes] = {
        "text.db": b"these are my notes" * 100,
        "magic.db": b"\0" * 16 + pristine.db[16:],
        "tiny.db": pristine.db[:10],
        "header.db": pristine.db[:100],
        "page.db": pristine.db[:4096],
        "half.db": pristine.db[: len(pristine.db) // 2],
        "short.db": pristine.db[:-1000],
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        out = attempt(path, lambda: RunStore(path).load())
        assert isinstance(out.error, DamagedRunError), (name, out.error)
        assert report_cli(path, capsys) == 2, name
    other = tmp_path / "other.db"
    sql(other, "CREATE TABLE notes(x)")
    out = attempt(other, lambda: RunStore(other))
    assert isinstance(out.error, PersistError) and "not an nbagent run store" in str(out.error)
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]


# ----- the fuzz: real bytes of the real file flipped, pages wiped, the file cut ----------------


def _damaged_copies(pristine: Pristine, tmp_path: Path, rounds: int, seed: int) -> Iterator[tuple[Path, str]]:
    rng = random.Random(seed)
    data = pristine.db
    page = 4096
    for i in range(rounds):
        buf = bytearray(data)
        kind = rng.choice(["flip", "flip", "flip", "page", "cut", "zero run"])
        if kind == "flip":  # a few bytes anywhere (the header included, now and then)
            for _ in range(rng.randint(1, 8)):
                at = rng.randrange(len(buf)) if rng.random() < 0.9 else rng.randrange(100)
                buf[at] ^= 1 << rng.randrange(8)
        elif kind == "page":  # one page of the file overwritten with noise
            start = rng.randrange(len(buf) // page) * page
            buf[start : start + page] = bytes(rng.randrange(256) for _ in range(page))
        elif kind == "cut":
            del buf[rng.randrange(1, len(buf)) :]
        else:
            start = rng.randrange(len(buf))
            buf[start : start + rng.randint(1, 300)] = bytes(min(300, len(buf) - start))
        path = tmp_path / f"fuzz{i}.db"
        path.write_bytes(bytes(buf))
        yield path, kind


def _read_everything(path: Path) -> list[Outcome]:
    """Everything a person does with a store file: open, list, load each run, report it."""
    outcomes = []
    opened = attempt(path, lambda: RunStore(path))
    outcomes.append(opened)
    if opened.error is not None:
        return outcomes
    store = opened.runner
    try:
        outcomes.append(attempt(path, store.tasks))
        runs = attempt(path, store.runs)
        outcomes.append(runs)
        for info in runs.runner or []:
            loaded = attempt(path, lambda run=info.run_id: store.load(run=run))
            outcomes.append(loaded)
            if loaded.runner is not None:
                report_html(loaded.runner)  # draws whatever loaded, raising nothing
    finally:
        store.close()
    return outcomes


@pytest.mark.timeout(600)  # (a hang fails the test; each read is also held to 30 s by attempt)
def test_fuzz_damaged_store_files_give_clear_errors_or_load(pristine: Pristine, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, int] = {}
    changed: list[tuple[str, str]] = []
    for path, kind in _damaged_copies(pristine, tmp_path, rounds=300, seed=2024):
        outcomes = _read_everything(path)
        outcome = kind + (": error" if any(o.error is not None for o in outcomes) else ": read")
        seen[outcome] = seen.get(outcome, 0) + 1
        for o in outcomes:
            if o.runner is not None and hasattr(o.runner, "skipped_tasks"):
                # a load that skipped tasks says so, and the runner knows which
                assert bool(o.warnings) == bool(o.runner.skipped_tasks)
                # and what it did load is what was saved (checksums catch changed bytes)
                for doc in comparable(o.runner)["tasks"]:
                    if doc != pristine.docs.get(doc["task_id"]):
                        changed.append((kind, doc["task_id"]))
        report_cli(path, capsys)
        path.unlink()
    # the damage reached both outcomes: some files refused, some read (a flip in free space)
    assert any(k.endswith("error") for k in seen) and any(k.endswith("read") for k in seen), seen
    # (a lost task row, or a run's newest log rows lost, is not always seen: the README's
    # limit; one such was in ~20,000 rounds of this mix, so more than one here is a fault)
    assert len(changed) <= 1, changed


# ----- the run file: the same faults ------------------------------------------------------------


def test_damaged_run_files_are_one_clear_error_or_skip_the_damaged_task(
    pristine: Pristine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = pristine.json.decode()
    doc = json.loads(text)
    errors: dict[str, bytes] = {
        "empty": b"",
        "cut": pristine.json[: len(pristine.json) // 3],
        "not utf8": pristine.json[:50] + b"\xff\xfe" + pristine.json[50:],
        "a list": b"[1, 2]",
        "version text": json.dumps({**doc, "version": "one"}).encode(),
        "no tasks": json.dumps({k: v for k, v in doc.items() if k != "tasks"}).encode(),
        "runner memory a number": json.dumps({**doc, "runner": {**doc["runner"], "memory": 5}}).encode(),
    }
    for name, data in errors.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_bytes(data)
        out = attempt(path, lambda: AgentRunner.load(path))
        assert isinstance(out.error, DamagedRunError), (name, out.error)
        assert report_cli(path, capsys) == 2, name
    ids = [t["task_id"] for t in doc["tasks"]]
    victim = ids[0]

    def shared_ref(d: Any) -> Any:
        d["tasks"][0]["extra_state"] = {"$ref": 99999}
        return d

    skips: dict[str, Callable[[Any], Any]] = {
        "missing object": shared_ref,
        "memory a string": lambda d: d["tasks"][0].__setitem__("scratch_memory", "x") or d,
        "step not an object": lambda d: d["tasks"][0]["steps"].__setitem__(0, 3) or d,
        "failure of the wrong shape": lambda d: d["tasks"][0]["failures"].__setitem__(0, {"step_id": 1}) or d,
        # the whole record gone: so is what it wrote first (a run file writes a shared object
        # once), and a task that refers to that is skipped too, by name
        "task a list": lambda d: d["tasks"].__setitem__(0, [1]) or d,
    }
    for name, change in skips.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(json.dumps(change(json.loads(text))))
        out = attempt(path, lambda: AgentRunner.load(path))
        assert out.error is None, (name, out.error)
        skipped = out.runner.skipped_tasks
        assert len(out.warnings) == 1 and all(tid in out.warnings[0] for tid in skipped), name
        assert (victim if name != "task a list" else "tasks[0]") in skipped
        if name != "task a list":
            assert len(skipped) == 1, (name, skipped)
        assert_exact(pristine, out.runner, [t for t in ids if t not in skipped and t != victim])
        assert report_cli(path, capsys) == 1, name
    rng = random.Random(5)
    for i in range(40):  # and the fuzz: flipped bytes, cuts
        buf = bytearray(pristine.json)
        if i % 4 == 3:
            del buf[rng.randrange(len(buf)) :]
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        path = tmp_path / f"fuzz{i}.json"
        path.write_bytes(bytes(buf))
        out = attempt(path, lambda: AgentRunner.load(path))
        if out.runner is not None:
            report_html(out.runner)
        report_cli(path, capsys)


# ----- a batch resumes around a damaged task ------------------------------------------------------


def test_a_batch_runs_again_only_the_finished_task_whose_record_is_damaged(tmp_path: Path) -> None:
    from tests.test_batch import SlowLLM, brain, make_agent, questions

    db = tmp_path / "batch.db"
    first = make_agent(SlowLLM(brain, model="m1")).run_batch(questions(4), store=db, progress=False)
    assert not first.failed
    victim = first[2].task_id
    sql(db, "UPDATE tasks SET head=substr(head, 1, 30) WHERE task_id=?", args=(victim,))
    llm = SlowLLM(brain, model="m1")
    with pytest.warns(DamagedRunWarning, match=victim):
        again = make_agent(llm).run_batch(questions(4), store=db, progress=False)
    assert [it.index for it in again if not it.resumed] == [2]
    assert llm.calls == 2  # the one damaged task, two model calls; nothing else ran twice
    assert [r.response for r in again.results] == [r.response for r in first.results]
