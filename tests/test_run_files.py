"""Bad run files and checkpoints: a clear PersistError naming the field and what is allowed.

Also: temporary files a killed save left are cleaned up by the next save, a big value set
once in ``extra_state`` is not written again with every undo snapshot, and workflow
checkpoints rebuild only nbagent's classes and ``allow_type`` ones, like run files.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nbagent import AgentRunner
from nbagent.persist import PersistError, allow_type
from tests.helpers import CountingWorker


def saved(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    worker = CountingWorker(target=5, fail_on={2})
    runner = AgentRunner(worker)  # type: ignore[arg-type]
    task = runner.create_task("go")
    runner.run_step(task)
    with pytest.raises(ValueError):
        runner.run_step(task)
    worker.fail_on = set()
    runner.run_step(task)
    runner.undo_step(task)
    path = tmp_path / "run.json"
    runner.save(path)
    doc = json.loads(path.read_text())
    assert doc["tasks"][0]["failures"] and doc["tasks"][0]["outputs"]
    return path, doc


def load(path: Path, doc: dict[str, Any]) -> AgentRunner:
    path.write_text(json.dumps(doc))
    return AgentRunner.load(path, CountingWorker(target=5))  # type: ignore[arg-type]


def _output(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["tasks"][0]["outputs"][0]  # type: ignore[no-any-return]


def _failure(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["tasks"][0]["failures"][0]  # type: ignore[no-any-return]


CASES = [
    (lambda d: _output(d).__setitem__("latency_s", "fast"), r"outputs\[0\]\.latency_s must be a number of seconds"),
    (lambda d: _output(d).__setitem__("latency_s", True), r"latency_s must be"),
    (lambda d: _output(d).__setitem__("latency_s", [1]), r"latency_s must be"),
    (lambda d: _output(d).__setitem__("usage", 12), r"outputs\[0\]\.usage must be null or an object with prompt_tokens"),
    (lambda d: _output(d).__setitem__("usage", {"prompt_tokens": 1}), r"usage lacks 'completion_tokens'"),
    (lambda d: _output(d).__setitem__("usage", {"prompt_tokens": "1", "completion_tokens": 2}), r"usage\.prompt_tokens must be a whole number >= 0"),
    (lambda d: _output(d).__setitem__("usage", {"prompt_tokens": -3, "completion_tokens": 2}), r"prompt_tokens must be a whole number >= 0"),
    (lambda d: d["tasks"][0].__setitem__("undone_ids", [1, 2]), r"undone_ids must be a list of step ids \(strings\)"),
    (lambda d: d["tasks"][0].__setitem__("undone_ids", "abc"), r"undone_ids should be list"),
    (lambda d: _failure(d).__setitem__("at", "yesterday"), r"failures\[0\]\.at must be a time in seconds"),
    (lambda d: _failure(d).__setitem__("at", None), r"failures\[0\]\.at must be"),
    (lambda d: _failure(d).__setitem__("attempt", "2"), r"failures\[0\]\.attempt must be a whole number >= 1"),
    (lambda d: _failure(d).__setitem__("attempt", 0), r"failures\[0\]\.attempt must be a whole number >= 1"),
    (lambda d: _failure(d).__setitem__("attempt", 2.5), r"attempt must be a whole number"),
]


@pytest.mark.parametrize(("corrupt", "message"), CASES)
def test_wrong_types_are_persist_errors_naming_the_field(tmp_path: Path, corrupt: Any, message: str) -> None:
    path, doc = saved(tmp_path)
    load(path, json.loads(json.dumps(doc)))  # the file as saved loads
    corrupt(doc)
    with pytest.raises(PersistError, match=message) as info:
        load(path, doc)
    assert str(path) in str(info.value)


def test_nesting_too_deep_for_the_json_decoder(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"format": "nbagent-run", "version": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(PersistError, match="nested too deeply"):
        AgentRunner.load(path)


def test_nesting_too_deep_to_rebuild(tmp_path: Path) -> None:
    path, doc = saved(tmp_path)
    deep: Any = 1
    for _ in range(sys.getrecursionlimit() // 3):  # json reads it; rebuilding it recursed too far
        deep = {"$type": "tuple", "items": [deep]}
    doc["tasks"][0]["extra_state"]["deep"] = deep
    with pytest.raises(PersistError, match="nested too deeply"):
        load(path, doc)


def test_a_killed_save_leaves_temp_files_that_the_next_save_removes(tmp_path: Path) -> None:
    path, _ = saved(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    killed = tmp_path / f".run.json.{dead_pid}.k1ll3d.tmp"
    killed.write_text('{"format": "nbagent-run", "trunc')
    old_style = tmp_path / ".run.json.oldstyle.tmp"
    old_style.write_text("{")
    hour_ago = time.time() - 7200
    os.utime(old_style, (hour_ago, hour_ago))
    live = tmp_path / f".run.json.{os.getpid()}.writing.tmp"  # a save in progress: kept
    live.write_text("{")
    other = tmp_path / f".other.json.{dead_pid}.x.tmp"  # another file's: not ours to remove
    other.write_text("{")
    runner = AgentRunner.load(path, CountingWorker(target=5))  # type: ignore[arg-type]
    runner.save(path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert killed.name not in left and old_style.name not in left
    assert live.name in left and other.name in left and "run.json" in left


@pytest.mark.parametrize("kind", ["str", "list", "dict"])
def test_a_big_value_set_once_is_not_saved_again_with_every_snapshot(tmp_path: Path, kind: str) -> None:
    blob: Any = {
        "str": "x" * 1_000_000,
        "list": ["y" * 100] * 10_000,
        "dict": {str(i): "z" * 100 for i in range(10_000)},
    }[kind]
    runner = AgentRunner(CountingWorker(target=100))  # type: ignore[arg-type]
    task = runner.create_task("go")
    task.extra_state["blob"] = blob
    for _ in range(30):
        runner.run_step(task)
    path = tmp_path / "run.json"
    runner.save(path)
    size = path.stat().st_size
    assert size < 3_000_000, f"{size / 1e6:.1f} MB for 1 MB set once (31.6 MB before)"
    again = AgentRunner.load(path, CountingWorker(target=100))  # type: ignore[arg-type]
    state = again.state_of(task.task_id)
    assert state.task.extra_state["blob"] == blob
    for _ in range(30):  # every undo snapshot still restores it
        again.undo_step(task.task_id)
        assert state.task.extra_state["blob"] == blob
    assert not state.completed_steps


# ----- workflow checkpoints -----------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


class Outside(BaseModel):
    x: int


def test_checkpoints_rebuild_only_nbagent_and_allowed_classes() -> None:
    from nbagent.workflow import Context, StartEvent, StopEvent, Workflow, step
    from nbagent.workflow.errors import CheckpointError

    class Flow(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result="ok")

    wf = Flow()
    ctx = Context(wf)
    good = ctx.to_dict()
    for value, name in [
        ({"__nb__": "model", "class": "pathlib:PurePosixPath", "fields": {}}, "pathlib:PurePosixPath"),
        ({"__nb__": "enum", "class": "signal:Signals", "value": 9}, "signal:Signals"),
        ({"__nb__": "model", "class": f"{__name__}:Outside", "fields": {"x": 1}}, "Outside"),
    ]:
        doc = json.loads(json.dumps(good))
        doc["state"] = {**doc.get("state", {}), "v": value}
        with pytest.raises(CheckpointError, match=f"{name}.*not an nbagent class.*allow_type"):
            Context.from_dict(wf, doc)
    allow_type(Outside)
    allow_type(Colour)
    doc = json.loads(json.dumps(good))
    doc["state"] = {
        **doc.get("state", {}),
        "m": {"__nb__": "model", "class": f"{__name__}:Outside", "fields": {"x": 1}},
        "c": {"__nb__": "enum", "class": f"{__name__}:Colour", "value": "red"},
    }
    loaded = Context.from_dict(wf, doc)
    assert loaded is not None
