"""The store's encoder builds the records of a worker's usual pieces (an item of a memory or a
log, a state dict, a step's output, an undo snapshot) by an early exit that resets no encoder
state. The early exit must write exactly what the general path writes, numbered alike: here a
second writer with the early exits switched off follows the same runner through random changes
(steps, undos, failures, edits, new and finalized tasks, state values the early exit leaves to
the general path), and the two stores must hold the very same text; every record is also
compared one by one. The runs load back exactly."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, ChatMessage, MessageRole, Task, ToolOutput
from nbagent.runner.snapshot import AppendLog
from nbagent.store import RunStore
from nbagent.store.links import store_origin
from nbagent.store.row_encoder import StoreEncoder
from nbagent.store.writer import Writer
from tests.test_store import same
from tests.test_store_log import Flaky, FlakyFlat


class Chatty(Flaky):
    """Keeps what a real worker keeps (a message in its memory and a tool output per step),
    and a float, a short text and a flag in its state."""

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0, "score": 0.5, "note": "", "odd": False, "seen_inputs": AppendLog()}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        response, done = super()._run_step(state, task, input)
        state["score"] = state["count"] / 3
        state["note"] = f"step {state['count']}"
        state["odd"] = state["count"] % 2 == 1
        return response, done


class Odd(Chatty):
    """Now and then a value the early exits leave to the general path: a float that is not
    finite, a long text, a nested list, a "$" key, a tool output in a step's output, a message
    with a long text; else what Chatty keeps."""

    rng: Any = None

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        response, done = super()._run_step(state, task, input)
        roll = self.rng.random()
        state.pop("$odd", None)
        state["score"] = math.inf if roll < 0.1 else state["score"]
        state["long"] = "x" * 5000 if 0.1 <= roll < 0.2 else "short"
        state["nested"] = [1, [2]] if 0.2 <= roll < 0.3 else 3
        if 0.3 <= roll < 0.35:
            state["$odd"] = 1
        if 0.35 <= roll < 0.45:
            response = AgentChatResponse(response=response.response, sources=[ToolOutput(content="t", tool_name="x")])
        if 0.45 <= roll < 0.5:
            state["memory"].put(ChatMessage(role=MessageRole.USER, content="y" * 5000))
        return response, done


def _store_text(path: Path) -> tuple[list[Any], list[Any]]:
    with sqlite3.connect(path) as db:
        log = db.execute("SELECT id, ops, crc FROM log ORDER BY id").fetchall()
        tasks = db.execute("SELECT task_id, seq, status, steps, head, crc FROM tasks ORDER BY seq").fetchall()
    return log, tasks


def _compare_each_record(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Every record the early exits build is compared with the general path's, numbered
    alike (the general path runs first; what it changed is put back). Counts [taken, left]."""
    hits = {name: [0, 0] for name in ("item_record", "dict_record", "output_record", "snapshot_record")}
    calls = {"general": 0}
    real_encoder = Writer.encoder

    def counting_encoder(self: Writer) -> StoreEncoder:
        calls["general"] += 1
        return real_encoder(self)

    monkeypatch.setattr(Writer, "encoder", counting_encoder)

    def compare(name: str) -> Any:
        method = getattr(StoreEncoder, name)

        def run(self: StoreEncoder, *args: Any) -> Any:
            w = self.w
            if not w.early_exits:
                return method(self, *args)
            start, touched = w.counter, set(w.touched)
            w.early_exits = False
            try:
                want = method(self, *args)
            finally:
                w.early_exits = True
            after, touched_after = w.counter, set(w.touched)
            w.counter, w.touched = start, touched
            before = calls["general"]
            got = method(self, *args)
            hits[name][0 if calls["general"] == before else 1] += 1
            assert got == want
            assert w.counter == after  # the same numbers for what comes next
            assert w.touched == touched_after
            return got

        return run

    for name in hits:
        monkeypatch.setattr(StoreEncoder, name, compare(name))
    return hits


@pytest.mark.parametrize("worker_cls", [Chatty, FlakyFlat, Odd])
def test_early_exits_write_what_the_general_path_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_cls: type
) -> None:
    hits = _compare_each_record(monkeypatch)
    rng = random.Random(11)
    worker = worker_cls(target=10**6)
    if worker_cls is Odd:
        worker.rng = random.Random(5)
    runner = AgentRunner(worker, autosave=tmp_path / "early.db")
    general = Writer(RunStore(tmp_path / "general.db"), runner, store_origin(runner)[1])
    general.early_exits = False
    general.rewrite()
    runner.subscribe(general.on_event)
    tasks = [runner.create_task("first")]
    for _ in range(80):
        task = rng.choice(tasks)
        state = runner.state_of(task)
        roll = rng.random()
        if state.finalized:
            tasks.remove(task)
            if not tasks:
                tasks.append(runner.create_task("again"))
        elif roll < 0.15 and state.completed_steps:
            runner.undo_step(task.task_id)
        elif roll < 0.22:
            worker.fail_next = True
            with pytest.raises(RuntimeError):
                runner.run_step(task.task_id)
        elif roll < 0.27:
            tasks.append(runner.create_task(f"task {len(tasks)}"))
        elif roll < 0.3 and state.step_queue:
            runner.edit_step(task.task_id, state.step_queue[0].step_id, input=f"edited {rng.random()}")
        elif roll < 0.33 and state.completed_steps:
            runner.run_step(task.task_id, input="stop")
            runner.finalize_response(task.task_id)
        else:
            runner.run_step(task.task_id)
    runner.autosave = None
    assert not general.broken
    early_text, general_text = _store_text(tmp_path / "early.db"), _store_text(tmp_path / "general.db")
    assert early_text == general_text
    assert len(early_text[0]) > 80
    for name, (taken, left) in hits.items():
        assert taken >= 20, hits  # the early exits were taken (else this test checks little)
        if worker_cls is Odd and name != "output_record":
            assert left >= 1, hits  # and left, now and then, to the general path
    same(AgentRunner.load(tmp_path / "early.db", worker_cls(target=10**6)), runner)
    same(AgentRunner.load(tmp_path / "general.db", worker_cls(target=10**6)), runner)


def test_the_switch_turns_the_early_exits_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``Writer.early_exits`` False every record goes through the general path (what the
    benchmark measures as "off")."""
    taken = []
    real = StoreEncoder.quick_model

    def spy(self: StoreEncoder, v: Any) -> Any:
        taken.append(v)
        return real(self, v)

    monkeypatch.setattr(StoreEncoder, "quick_model", spy)
    monkeypatch.setattr(Writer, "early_exits", False)
    runner = AgentRunner(Chatty(target=10**6), autosave=tmp_path / "runs.db")
    task = runner.create_task("go")
    for _ in range(5):
        runner.run_step(task)
    assert taken == []
    monkeypatch.setattr(Writer, "early_exits", True)
    runner.run_step(task)
    assert taken


def test_the_row_encoder_made_once_writes_what_json_encode_writes(tmp_path: Path) -> None:
    """Rows go through the json module's C encoder made once (``sql.ROW_JSON``) instead of
    ``JSONEncoder.encode`` (which makes one per call): the same text for every row of a run
    and for values that test the encoder's edges, and the same errors."""
    from nbagent.store import sql

    assert sql.ROW_JSON is not None  # CPython has it (else every row takes JSONEncoder.encode)
    worker = Odd(target=10**6)
    worker.rng = random.Random(3)
    runner = AgentRunner(worker, autosave=tmp_path / "runs.db")
    task = runner.create_task("go \udcff \u2028 é")
    for _ in range(30):
        runner.run_step(task)
    runner.autosave = None
    db = sqlite3.connect(tmp_path / "runs.db")
    rows = [json.loads(text) for (text,) in db.execute("SELECT ops FROM log UNION ALL SELECT head FROM tasks")]
    db.close()
    edges: list[Any] = [
        "\udc80 lone \ud800 halves", "é \u2028 \x00 \" \\ /", -0.0, 1e308, 5e-324, 2**70, -(2**63), True, None,
        ("tuple", [1, {"k": ("v",)}]), {"": {"nested": [[[]]]}}, [],
    ]
    for value in rows + edges:
        assert sql.dumps(value) == sql._JSON.encode(value)
    for bad in (math.nan, [math.inf], {"x": object()}, [b"bytes"]):
        with pytest.raises((ValueError, TypeError)) as fast:
            sql.dumps(bad)
        with pytest.raises(type(fast.value)) as slow:
            sql._JSON.encode(bad)
        assert str(fast.value) == str(slow.value)
