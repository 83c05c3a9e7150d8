"""The store's writer builds the records of a worker's usual pieces (a flat state dict, its undo
snapshot, a message or tool output, a step's output) without an encoder, to keep an autosaved
step cheap. Each must be exactly the record the encoder writes, numbered alike: here every such
record of a run of random changes is checked against the encoder's, and the run loads exactly."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, Task
from nbagent.runner.snapshot import AppendLog
from nbagent.store import sqlite as S
from nbagent.store.codec import _output_record, _snapshot_to_dict
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


def _checked(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Wrap each encoder-free path: compute the encoder's record too, and compare."""
    hits = {"model": 0, "output": 0, "dict": 0, "snapshot": 0}

    def compare(name: str, fast: Any, slow: Any) -> Any:
        def run(self: S._Writer, obj: Any) -> Any:
            start, touched = self.counter, set(self.touched)
            want = slow(self, obj)
            after, touched_after = self.counter, set(self.touched)
            self.counter, self.touched = start, touched
            got = fast(self, obj)
            if got is not None:
                hits[name] += 1
                assert got == want
                assert self.counter == after  # the same numbers for what comes next
                assert self.touched == touched_after
            return got

        return run

    def slow_model(self: S._Writer, item: Any) -> Any:
        enc = self.encoder()
        return enc.done(enc.root(item, None))

    def slow_output(self: S._Writer, out: Any) -> Any:
        m = next(m for m in self.mirrors.values() if id(out) in m.out_n)
        enc = self.encoder()
        enc.steps = {**m.steps}
        for s in (out.task_step, *out.next_steps):
            enc.steps.setdefault(s.step_id, s)
        enc.output_index = m.out_n
        return enc.done(_output_record(enc, out, None))

    def slow_dict(self: S._Writer, d: Any) -> Any:
        enc = self.encoder()
        rec = enc.root(d, None)
        if rec.get("$id") is not None and rec["$id"] not in enc.used:
            del rec["$id"]
        return enc.done(rec)

    def slow_snapshot(self: S._Writer, snap: Any) -> Any:
        enc = self.encoder()
        return enc.done(_snapshot_to_dict(enc, snap, None))

    for name, attr, slow in (
        ("model", "_flat_model", slow_model),
        ("output", "_flat_output", slow_output),
        ("dict", "_flat_record", slow_dict),
        ("snapshot", "_flat_snapshot", slow_snapshot),
    ):
        monkeypatch.setattr(S._Writer, attr, compare(name, getattr(S._Writer, attr), slow))
    return hits


@pytest.mark.parametrize("worker_cls", [Chatty, FlakyFlat])
def test_encoder_free_records_are_the_encoders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_cls: type) -> None:
    hits = _checked(monkeypatch)
    rng = random.Random(11)
    db = tmp_path / "runs.db"
    worker = worker_cls(target=10**6)
    runner = AgentRunner(worker, autosave=db)
    tasks = [runner.create_task("first")]
    for _ in range(60):
        task = rng.choice(tasks)
        roll = rng.random()
        if roll < 0.15 and runner.state_of(task).completed_steps:
            runner.undo_step(task.task_id)
        elif roll < 0.22:
            worker.fail_next = True
            with pytest.raises(RuntimeError):
                runner.run_step(task.task_id)
        elif roll < 0.27:
            tasks.append(runner.create_task(f"task {len(tasks)}"))
        else:
            runner.run_step(task.task_id)
    runner.autosave = None
    for name, count in hits.items():
        assert count >= 30, hits  # the paths were taken (else this test checks nothing)
    same(AgentRunner.load(db, worker_cls(target=10**6)), runner)
