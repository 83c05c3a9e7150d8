"""The SQLite run store: faithful incremental saves, kill -9 at any moment, shared stores."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    FunctionCallingAgentWorker,
    ParallelAgentRunner,
    ScriptedLLM,
    seed_ids,
)
from nbagent import persist
from nbagent.llms.scripted import tool_call
from nbagent.persist import PersistError
from nbagent.runner.snapshot import AppendLog
from nbagent.store import RunStore, is_store_path
from nbagent.store.links import store_origin
from tests.helpers import CountingWorker
from tests.test_persist import REPLIES, add, react, stable

ROOT = Path(__file__).resolve().parents[1]


def plain(doc: Any) -> Any:
    """A run document with every shared object written out in full (no $id/$ref), and each
    memory snapshot cut to the messages it restores: what two equal runs have in common
    whichever way their objects are shared."""
    defs: dict[int, Any] = {}

    def walk(x: Any) -> Any:
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "$ref" in x:
            return defs[x["$ref"]]
        out: Any = {k: walk(v) for k, v in x.items() if k != "$id"}
        if out.get("$type") == "list":
            out = out["items"]
        elif out.get("$type") == "prefix":  # a step's view of a log: the log's first n items
            of = out["of"]
            out = (of["items"] if isinstance(of, dict) else of)[: out["n"]]
        elif out.get("$type") == "tuple":
            items = out["items"]
            if len(items) == 3 and isinstance(items[0], list) and isinstance(items[1], list) and isinstance(items[2], int):
                n = items[2]  # a memory snapshot (messages, counts, n): only the first n matter
                out = {"$type": "tuple", "items": [items[0][:n], items[1][:n], n]}
        if "$id" in x:
            defs[x["$id"]] = out
        return out

    return walk(doc)


def comparable(runner: AgentRunner) -> Any:
    doc = plain(stable(persist.runner_to_dict(runner)))
    for task in doc["tasks"]:
        for snap in task["history"]:
            for name in ("started", "ended"):  # a process-wide clock, rebased on loading
                snap.get("more", {}).pop(name, None)
    return doc


def same(a: AgentRunner, b: AgentRunner) -> None:
    assert comparable(a) == comparable(b)


def fc_worker(replies: list[Any]) -> FunctionCallingAgentWorker:
    return FunctionCallingAgentWorker.from_tools([add], llm=ScriptedLLM(replies))


# ----- faithful: what the store holds is what the runner holds, after any kind of change ------


def test_every_kind_of_change_is_saved_as_it_happens(tmp_path: Path) -> None:
    seed_ids(1)
    db = tmp_path / "runs.db"
    runner = AgentRunner(react(REPLIES), autosave=db)
    assert runner.autosave == db.absolute() and is_store_path(db)
    task = runner.create_task("Add 1+2, then 3+4, then 7+10")
    checks = [
        lambda: runner.run_step(task),
        lambda: runner.run_step(task),
        lambda: runner.undo_step(task, input="again"),
        lambda: runner.edit_step(task, runner.get_upcoming_steps(task)[0].step_id, input="edited"),
        lambda: runner.run_step(task),
        lambda: runner.run_step(task),
    ]
    for change in checks:
        change()
        same(runner, AgentRunner.load(db))
    mid = AgentRunner.load(db).state_of(task.task_id)
    assert mid.history[1].extra_state["reasoning"].value is mid.task.extra_state["reasoning"]
    runner.finalize_response(task)
    loaded = AgentRunner.load(db, react([]))
    same(runner, loaded)
    state = loaded.state_of(task.task_id)
    extra = state.task.extra_state
    # one object, however many rows hold it
    assert state.completed_steps[0].tool_outputs[0] is extra["sources"][0]
    assert state.task.memory is loaded.memory
    assert state.history == []  # a finalized task keeps no undo snapshots
    assert isinstance(extra["reasoning"], AppendLog)
    # an undone output keeps its own tool output, not the one that replaced it
    undone = state.undone_outputs[0]
    assert undone.tool_outputs[0].content == "7" and undone.tool_outputs[0] is not extra["sources"][1]


def test_a_loaded_run_undoes_and_continues_like_the_live_one(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    live = AgentRunner(CountingWorker(target=6), store=RunStore(db))  # type: ignore[arg-type]
    task = live.create_task("go")
    for _ in range(3):
        live.run_step(task)
    loaded = AgentRunner.load(db, CountingWorker(target=6))  # type: ignore[arg-type]
    for runner in (live, loaded):
        seed_ids(99)  # both make the same new step ids
        runner.undo_step(task.task_id)
        runner.undo_step(task.task_id)
        runner.run_step(task.task_id, input="x")
    same(live, loaded)
    st = loaded.state_of(task.task_id)
    assert st.task.extra_state["count"] == 2 and st.task.extra_state["seen_inputs"] == ["go", "x"]
    assert [m.text for m in st.task.scratch_memory.get_all()] == ["step 1", "step 2"]
    assert [s.content for s in st.task.extra_state["sources"]] == ["1", "2"]
    # the step state and the extra state are still one dict, as the worker made them
    assert st.steps[st.step_queue[0].step_id].step_state["sources"] is st.task.extra_state["sources"]


def test_failures_parallel_branches_and_finished_chats(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = ParallelAgentRunner(CountingWorker(target=4, fail_on={2}), max_concurrency=2, autosave=db)  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    loaded = ParallelAgentRunner.load(db, CountingWorker(target=4))  # type: ignore[arg-type]
    same(runner, loaded)
    assert type(loaded) is ParallelAgentRunner and loaded.max_concurrency == 2
    assert loaded.state_of(task.task_id).failures[0].message == "boom at 2"
    fc = AgentRunner(fc_worker([tool_call("add", a=2, b=3), "5", "again 5"]), autosave=db)
    fc.chat("What is 2+3?")
    fc.chat("And again?")
    back = AgentRunner.load(db, run=store_origin(fc)[1])
    same(fc, back)
    assert [m.text for m in back.memory.get_all()][-1] == "again 5"


def test_deleting_and_resetting_are_saved(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=2), autosave=db)  # type: ignore[arg-type]
    a = runner.create_task("a")
    b = runner.create_task("b")
    runner.run_step(a)
    runner.delete_task(a)
    assert list(AgentRunner.load(db).tasks) == [b.task_id]
    runner.reset()
    assert AgentRunner.load(db).tasks == {}
    runner.create_task("c")
    assert [s.task.input for s in AgentRunner.load(db).tasks.values()] == ["c"]


# ----- flat cost: a step writes the same rows at step 5 and at step 300 ---------------------------


def test_a_step_writes_only_what_it_changed(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    runner = AgentRunner(CountingWorker(target=10_000), store=store)  # type: ignore[arg-type]
    task = runner.create_task("go")
    changes = {}
    for n in range(1, 301):
        before = store._db.total_changes
        runner.run_step(task)
        changes[n] = store._db.total_changes - before
    assert changes[5] == changes[300] <= 16
    same(runner, AgentRunner.load(store.path))


# ----- kill -9 at any moment; several processes, one store ---------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from nbagent import AgentRunner
    from nbagent.store.links import store_origin
    from tests.helpers import CountingWorker

    runner = AgentRunner(CountingWorker(target=10**9), autosave={db!r})
    task = runner.create_task({name!r})
    print(store_origin(runner)[1], flush=True)
    n = 0
    while True:
        runner.run_step(task)
        n += 1
        if n % 7 == 0:
            runner.undo_step(task)
            runner.run_step(task, input="redo")
        print(n, flush=True)
    """
)


def test_kill_9_at_random_moments_leaves_every_committed_step_loadable(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    rng = random.Random(13)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for round_ in range(3):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD.format(root=str(ROOT), db=str(db), name=f"r{round_}p{i}")],
                stdout=subprocess.PIPE, text=True, env=env,
            )
            for i in range(2)  # two runners writing into one store at once
        ]
        run_ids = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
        time.sleep(rng.uniform(0.05, 0.6))
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p, run_id in zip(procs, run_ids):
            p.wait()
            lines = p.stdout.read().split()  # type: ignore[union-attr]
            reported = int(lines[-1]) if lines else 0  # the child had finished this many steps
            loaded = AgentRunner.load(db, CountingWorker(target=10**9), run=run_id)  # type: ignore[arg-type]
            state = next(iter(loaded.tasks.values()))
            n = len(state.completed_steps)
            assert reported <= n <= reported + 1
            extra = state.task.extra_state
            # (killed before the first step committed: the state is still empty)
            assert extra.get("count", 0) == n == len(extra.get("sources", ())) == len(state.task.scratch_memory)
            assert len(state.history) == n
            # and it goes on: undo, then steps, as if never interrupted
            if n:
                loaded.undo_step(state.task_id)
                assert extra.get("count", 0) == n - 1  # before step 1 the state was empty
            loaded.run_step(state.task_id)
            assert state.task.extra_state["count"] == len(state.completed_steps)
    assert len(RunStore(db).runs()) == 6


def test_readable_while_a_run_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=50), autosave=db)  # type: ignore[arg-type]
    task = runner.create_task("go")
    reader = RunStore(db)  # another connection, as another kernel would have
    for n in range(1, 6):
        runner.run_step(task)
        assert reader.tasks()[0].steps == n
        same(runner, reader.load())


# ----- the public API the batch runner uses ------------------------------------------------------


def test_tasks_are_labelled_listed_and_loaded_by_key(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    runner = AgentRunner(CountingWorker(target=1))  # type: ignore[arg-type]
    saved = []
    for key in ("row-1", "row-2"):
        runner.chat(f"item {key}")
        task_id = next(reversed(runner.tasks))
        saved.append(store.save_task(runner, task_id, key=key, tag="batch-A"))
    pending = runner.create_task("row-3")
    store.save_task(runner, pending, key="row-3", tag="batch-A")
    info = store.task(key="row-2", tag="batch-A")
    assert info is not None and info.status == "finalized" and info.response == "count=1 input=item row-2"
    assert info.steps == 1 and info.input == "item row-2"
    done = store.tasks(tag="batch-A", status="finalized")
    assert [t.key for t in done] == ["row-1", "row-2"]
    assert [t.key for t in store.tasks(tag="batch-A", status=["pending", "active"])] == ["row-3"]
    assert store.task(key="row-9") is None and store.tasks(tag="other") == []
    only = store.load(run=info.run_id, tasks=[info.task_id])
    assert list(only.tasks) == [info.task_id]
    assert only.state_of(info.task_id).final_response.response == info.response
    with pytest.raises(PersistError, match="no task"):
        store.load(run=info.run_id, tasks=["nope"])
    # an autosaved task is labelled in place
    auto = AgentRunner(CountingWorker(target=3), store=store)  # type: ignore[arg-type]
    t = auto.create_task("x")
    store.label(auto, t, key="k", tag="batch-B")
    auto.run_step(t)
    assert store.task(key="k", tag="batch-B").steps == 1  # type: ignore[union-attr]
    assert {r.run_id for r in store.runs()} == {info.run_id, store_origin(auto)[1]}


def test_report_and_save_accept_a_store(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = AgentRunner(CountingWorker(target=2))  # type: ignore[arg-type]
    runner.chat("hello")
    runner.save(db)
    runner.save(tmp_path / "run.json")  # the shareable file is still JSON
    assert json.loads((tmp_path / "run.json").read_text())["format"] == "nbagent-run"
    out = tmp_path / "r.html"
    result = subprocess.run(
        [sys.executable, "-m", "nbagent", "report", str(db), "-o", str(out)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "count=2 input=None" in out.read_text()


def test_bad_stores_are_refused_clearly(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES('format', 'something-else')")
    con.commit()
    con.close()
    with pytest.raises(PersistError, match="not an nbagent run store"):
        RunStore(other)
    text = tmp_path / "notes.db"
    text.write_text("hello")
    with pytest.raises(PersistError, match="not an nbagent run store|not a SQLite"):
        RunStore(text)
    newer = tmp_path / "newer.db"
    RunStore(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value='99' WHERE name='schema'")
    con.commit()
    con.close()
    with pytest.raises(PersistError, match="newer nbagent"):
        RunStore(newer)
    with pytest.raises(PersistError, match="no run yet"):
        RunStore(tmp_path / "empty.db").load()
    with pytest.raises(PersistError, match="no such run store"):
        AgentRunner.load(tmp_path / "missing.db")


def test_json_autosave_is_spaced_out_once_saving_gets_slow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.store import autosave

    monkeypatch.setattr(autosave, "JSON_SMALL_BYTES", 0)  # every file counts as big
    monkeypatch.setattr(autosave, "JSON_SPACING", 10**6)
    path = tmp_path / "auto.json"
    runner = AgentRunner(CountingWorker(target=50), autosave=path)  # type: ignore[arg-type]
    task = runner.create_task("go")
    for _ in range(5):
        runner.run_step(task)
    assert json.loads(path.read_text())["tasks"] == []  # put off: only the first save happened
    autosave.flush_autosave(runner)
    assert len(json.loads(path.read_text())["tasks"][0]["completed"]) == 5
    runner.run_step(task)
    runner.autosave = None  # stopping writes what was put off
    assert len(json.loads(path.read_text())["tasks"][0]["completed"]) == 6


# ----- lean memory -------------------------------------------------------------------------------


def test_finished_tasks_drop_their_undo_history_and_only_the_newest_are_kept() -> None:
    runner = AgentRunner(CountingWorker(target=2), max_finished_tasks=2)  # type: ignore[arg-type]
    for i in range(4):
        runner.chat(f"chat {i}")
    assert [s.task.input for s in runner.tasks.values()] == ["chat 2", "chat 3"]
    assert all(s.history == [] for s in runner.tasks.values())
    # the conversation memory keeps what the forgotten tasks said
    assert [m.text for m in runner.memory.get_all()].count("step 2") == 4
    running = runner.create_task("open")
    runner.run_step(running)
    assert len(runner.state_of(running).history) == 1  # an open task still undoes
    with pytest.raises(ValueError, match="max_finished_tasks"):
        AgentRunner(CountingWorker(), max_finished_tasks=-1)  # type: ignore[arg-type]


def test_a_merged_step_state_is_snapshotted_once() -> None:
    runner = AgentRunner(CountingWorker(target=5))  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    runner.run_step(task)
    snap = runner.state_of(task).history[-1]
    assert snap.step_state is snap.extra_state  # one snapshot serves both dicts
    runner.undo_step(task)
    state = runner.state_of(task)
    assert state.task.extra_state["count"] == 1
    assert state.step_queue[0].step_state["count"] == 1
    assert state.step_queue[0].step_state["sources"] is state.task.extra_state["sources"]


def _word_count(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("name", ["run.json", "runs.db"])
def test_a_memory_whose_token_counter_is_not_registered_is_refused_by_name(tmp_path: Path, name: str) -> None:
    from nbagent.memory import ChatMemoryBuffer
    from nbagent.store import values

    persist.allow_type(_word_count)
    runner = AgentRunner(CountingWorker(target=2), memory=ChatMemoryBuffer(token_limit=500, tokenizer_fn=_word_count))
    runner.chat("hello there")
    runner.save(tmp_path / name)
    assert AgentRunner.load(tmp_path / name, CountingWorker(target=2)).memory.tokenizer_fn is _word_count
    ref = next(k for k, v in values._ALLOWED.items() if v is _word_count)
    del values._ALLOWED[ref]
    with pytest.raises(PersistError, match=r"counts tokens with '.*_word_count'.*allow_type"):
        AgentRunner.load(tmp_path / name, CountingWorker(target=2))


OPENER = """\
import sys, time
sys.path.insert(0, {root!r})
from nbagent.store import RunStore
start = {start!r}
while time.time() < start:  # every process opens the new file at the same instant
    pass
RunStore({db!r}).runs()
print("opened")
"""


def test_processes_opening_one_new_store_at_the_same_instant_all_get_it(tmp_path: Path) -> None:
    """Switching a new file to WAL can fail at once with "database is locked" while another
    process does the same (SQLite's busy timeout does not wait there): the store retries."""
    for round_ in range(4):
        db = tmp_path / f"new{round_}.db"
        start = time.time() + 2.0  # after every child has imported nbagent
        procs = [
            subprocess.Popen([sys.executable, "-c", OPENER.format(root=str(ROOT), db=str(db), start=start)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        results = [p.communicate(timeout=120) for p in procs]
        failed = [err.strip().splitlines()[-1] for out, err in results if out.strip() != "opened"]
        assert not failed, failed
        assert RunStore(db).runs() == []
