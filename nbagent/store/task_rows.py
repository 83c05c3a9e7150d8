"""One task in the store: the records of what changed in it since the writer last wrote it
(its steps, outputs and where they stand, undo snapshots, failures), and its row in the
``tasks`` table (what ``RunStore.tasks()`` lists, and its head: status, queue, references to
its memories and state).
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from nbagent import costs as _costs
from nbagent.engine.state import TaskState
from nbagent.schema import TaskStep, TaskStepOutput
from nbagent.store.codec import _failure_record, _step_record
from nbagent.store.mirrors import TaskMirror, common_prefix
from nbagent.store.records import (
    FailureRecord,
    FailuresCut,
    HistoryCut,
    HistoryRecord,
    NoneDone,
    OutputRecord,
    OutputsMoved,
    StepRecord,
)
from nbagent.store.sql import dumps, sql_text, task_seed

if TYPE_CHECKING:
    from nbagent.store.writer import Writer

__all__ = ["write_task", "task_head", "all_steps"]


def write_task(w: Writer, state: TaskState, dirty: Collection[str] | None) -> None:
    """Write what changed in ``state`` since ``w`` last wrote it (``dirty=None``: all of it;
    else the steps named, in the order they changed, are the ones that may have changed)."""
    tid = state.task_id
    m = w.mirrors.get(tid)
    if m is None:
        m = w.mirrors[tid] = TaskMirror(w.seq)
        m.seed = task_seed(w.seed, tid, m.seq)
        w.seq += 1
        dirty = None
    task = state.task
    steps = all_steps(state) if dirty is None else _changed_steps(state, m, dirty)
    new_outputs = _number_outputs(state, m, dirty)
    for out in new_outputs:
        for s in (out.task_step, *out.next_steps):
            if s.step_id not in m.steps:
                steps.setdefault(s.step_id, s)
    # state dicts, then the containers they (and the memories) hold
    extra_ref = w.dict_ref(task.extra_state)
    for s in steps.values():
        w.dict_ref(s.step_state)
    mem_ref = w.container(task.memory)
    scratch_ref = w.container(task.scratch_memory)
    w.write_dicts()
    w.sync_containers()
    # the records
    step_models = _costs.step_models(w.runner)
    known = StepIndex(state, m, steps)
    seq = m.seq
    registry, written_steps, order, dicts, add = state.steps, m.steps, m.order, w.dicts, w.ops.append
    for sid, s in steps.items():
        if sid not in written_steps:
            written_steps[sid] = s
        rec = _step_record(s, sid in registry)  # ids and text only: nothing to encode
        rec["state"] = {"$d": dicts[id(s.step_state)][0]}
        model = step_models.get(sid)
        if model is not None:
            rec["model"] = model
        place = order.get(sid)
        add(StepRecord.build(seq, m.place_of(sid) if place is None else place, rec))
    m.registered = len(state.steps)
    fresh = {m.out_n[id(out)]: [None, 0, None] for out in new_outputs}  # cpos, done, upos
    _positions(w, state, m, dirty, fresh)
    records = w.records
    for out in new_outputs:
        n = m.out_n[id(out)]
        rec = records.output_record(out, (((None, "task"), tid), ".output"), known, m.out_n)
        add(OutputRecord.build(seq, n, fresh[n], rec))
    _list_rows(w, True, m.history, state.history, tid, m, known)
    if m.failures or state.failures:  # (almost every task has none)
        _list_rows(w, False, m.failures, state.failures, tid, m, known)
    w.sync_containers()  # a snapshot may have named a container first
    # the task's own row
    final = state.final_response
    if final is not None:
        enc = w.encoder()
        enc.steps = known  # type: ignore[assignment]
        enc.output_index = m.out_n
        final = enc.done(enc.value(final, ((None, f"task {tid}"), ".final_response")))
    key = (tid, task.input, mem_ref, scratch_ref, extra_ref, state.keep_history, state.adds_to_memory)
    if m.fixed != key:  # what rarely changes is encoded once (the input may be long)
        m.fixed = key
        m.fixed_text = dumps(head_fixed(state, mem_ref, scratch_ref, extra_ref))[:-1]
    running = state.running
    rest = head_rest(state, sorted(running, key=m.place_of) if running else [], final)
    head = m.fixed_text + "," + dumps(rest)[1:]  # = dumps({**fixed, **rest})
    w.sync_containers()
    _task_row(w, state, m, head, rest["status"])


def task_head(
    state: TaskState, memory: Any, scratch: Any, extra: Any, running: list[str], final: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A task row's head, as the fields that rarely change and the rest (its JSON is that of
    the two dicts in one: ``{**fixed, **rest}``)."""
    return head_fixed(state, memory, scratch, extra), head_rest(state, running, final)


def head_fixed(state: TaskState, memory: Any, scratch: Any, extra: Any) -> dict[str, Any]:
    """The fields of a task row's head that rarely change (written again when one of the
    task's id, input, memories, state dict, ``keep_history`` or ``adds_to_memory`` does)."""
    fixed = {
        "task_id": state.task_id,
        "input": state.task.input,
        "memory": memory,
        "scratch_memory": scratch,
        "extra_state": extra,
        "keep_history": state.keep_history,
    }
    if not state.adds_to_memory:
        fixed["adds_to_memory"] = False
    return fixed


def head_rest(state: TaskState, running: list[str], final: Any) -> dict[str, Any]:
    """The fields of a task row's head that a step changes."""
    edges = state.undone_edges
    undone = state.undone_ids
    return {
        "status": state.status.value,
        "queue": running + [s.step_id for s in state.step_queue],
        "undone_edges": [[a, b] for a, b in edges] if edges else [],
        "undone_ids": sorted(undone) if undone else [],
        "finalized": state.finalized,
        "abandoned": state.abandoned,
        "final_response": final,
    }


def _task_row(w: Writer, state: TaskState, m: TaskMirror, head: str, status: str) -> None:
    """Write the task's row (or, in one statement with the log row, hand its values over)."""
    response = getattr(state.final_response, "response", None)
    response = sql_text(response) if isinstance(response, str) else None
    tid = sql_text(state.task_id)  # (a caller's task id may hold a lone surrogate too)
    run = w.run_id
    head_crc = zlib.crc32(head.encode(), m.seed)
    steps = len(state.completed_steps)
    if m.row and w.row_update is not None:  # written with the log row, in one statement
        w.row_update[:] = (status, response, steps, time.time(), head, head_crc, m.row, tid, run)
        return
    if m.row:  # the row is there (this mirror wrote it): update it in place, found by its rowid
        w.cur.execute(
            "UPDATE tasks SET status=?, response=?, steps=?, updated=?, head=?, crc=? "
            "WHERE rowid=? AND task_id=? AND run_id=?",
            (status, response, steps, time.time(), head, head_crc, m.row, tid, run),
        )
        if w.cur.rowcount != 1:  # moved (a VACUUM renumbers rows): find it by its key
            m.row = 0
    if not m.row:
        db = w.db
        db.execute(
            "INSERT INTO tasks VALUES(?,?,?,NULL,NULL,?,?,?,?,?,?,?) ON CONFLICT(run_id, task_id) DO UPDATE SET "
            "seq=excluded.seq, status=excluded.status, response=excluded.response, steps=excluded.steps, "
            "updated=excluded.updated, head=excluded.head, crc=excluded.crc",
            (run, tid, m.seq, status, sql_text(state.task.input), response, steps, time.time(), head, head_crc),
        )
        m.row = db.execute("SELECT rowid FROM tasks WHERE run_id=? AND task_id=?", (run, tid)).fetchone()[0]


def _changed_steps(state: TaskState, m: TaskMirror, dirty: Collection[str]) -> dict[str, TaskStep]:
    """The steps to write: those named, the queue, the running ones, those registered since."""
    steps = {}
    for sid in dirty:
        s = state.steps.get(sid) or m.steps.get(sid)
        if s is not None:
            steps[sid] = s
    for s in state.step_queue:
        steps[s.step_id] = s
    for sid in state.running:
        s = state.steps.get(sid)
        if s is not None:
            steps[sid] = s
    need = len(state.steps) - m.registered  # steps registered since: at the end
    if need > 0:
        for sid in reversed(state.steps):
            if need <= 0:
                break
            need -= 1
            steps[sid] = state.steps[sid]
    return steps


def _number_outputs(state: TaskState, m: TaskMirror, dirty: Collection[str] | None) -> list[TaskStepOutput]:
    """The outputs not written yet, each given its number ``n``."""
    new_outputs: list[TaskStepOutput] = []
    out_n, outs = m.out_n, m.outs
    for lst in (state.completed_steps, state.undone_outputs):
        for out in (lst[-(2 + len(dirty)):] if dirty is not None else lst):  # (a step's, or a group's)
            if id(out) not in out_n:
                new_outputs.append(out)
                out_n[id(out)] = len(outs)
                outs.append(out)
    for sid in (dirty if dirty is not None else list(state.outputs)):
        out = state.outputs.get(sid)
        if out is not None and id(out) not in out_n:
            new_outputs.append(out)
            out_n[id(out)] = len(outs)
            outs.append(out)
    if len(out_n) < len(state.completed_steps):  # an odd change: number every output
        for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
            if id(out) not in out_n:
                new_outputs.append(out)
                out_n[id(out)] = len(outs)
                outs.append(out)
    return new_outputs


def _positions(w: Writer, state: TaskState, m: TaskMirror, dirty: Collection[str] | None, fresh: dict[int, list[Any]]) -> None:
    """Which outputs are completed (in order), done (by step) and undone (in order).
    Rows about to be written (``fresh``: n -> [cpos, done, upos]) get theirs there."""
    out_n = m.out_n
    moved: tuple[list[Any], list[Any], list[Any]] = ([], [], [])  # by slot: [value, n] of rows written before

    def place(slot: int, value: Any, n: int) -> None:
        row = fresh.get(n)
        if row is not None:
            row[slot] = value
        else:
            moved[slot].append([value, n])

    for slot, written, live in ((0, m.completed, state.completed_steps), (2, m.undone, state.undone_outputs)):
        k = len(written)
        if k == len(live) and (not k or (live[k - 1] is written[k - 1] and live[0] is written[0])):
            continue  # unchanged (the undone list of almost every step)
        p = common_prefix(written, live)
        if p < len(written):
            for o in written[p:]:
                place(slot, None, out_n[id(o)])
            del written[p:]
        if len(live) > p:
            for i in range(p, len(live)):
                place(slot, i, out_n[id(live[i])])
            written.extend(live[p:])
    outputs, done = state.outputs, m.done
    for sid in (outputs if dirty is None else dirty):
        live_out = outputs.get(sid)
        old = done.get(sid)
        if live_out is not old:
            if old is not None:
                place(1, 0, out_n[id(old)])
                del done[sid]
            if live_out is not None:
                place(1, 1, out_n[id(live_out)])
                done[sid] = live_out
    stale = len(done) != len(outputs)
    if not stale:
        for sid in itertools.islice(reversed(done), 2):
            if outputs.get(sid) is not done[sid]:
                stale = True
                break
    if stale:
        w.ops.append(NoneDone.build(m.seq))  # done=0 for every output
        moved[1].clear()
        for row in fresh.values():
            row[1] = 0
        for o in outputs.values():
            place(1, 1, out_n[id(o)])
        m.done = dict(outputs)
    for slot in (0, 1, 2):
        if moved[slot]:
            w.ops.append(OutputsMoved.build(m.seq, slot, moved[slot]))


def _list_rows(
    w: Writer, history: bool, written: list[Any], live: Sequence[Any], tid: str, m: TaskMirror, known: Any
) -> None:
    """The new undo snapshots (``history``) or failures of the task, and a cut where an undo
    took some back."""
    seq = m.seq
    p = common_prefix(written, live)
    if p < len(written):
        w.ops.append(HistoryCut.build(seq, p) if history else FailuresCut.build(seq, p))  # cut the list at p
        del written[p:]
    records = w.records
    for i in range(p, len(live)):
        item = live[i]
        if history:
            rec = records.snapshot_record(item, (((None, "task"), tid), ".history"), known, m.out_n)
            w.ops.append(HistoryRecord.build(seq, i, rec))
        else:
            w.ops.append(FailureRecord.build(seq, i, _failure_record(item)))
        written.append(item)


class StepIndex(dict):  # type: ignore[type-arg]
    """The steps a value may refer to: the task's, the ones written before, the ones now."""

    __slots__ = ("sources",)

    def __init__(self, state: TaskState, m: TaskMirror, steps: dict[str, TaskStep]) -> None:
        self.sources = (state.steps, m.steps, steps)  # (the dict itself stays empty)

    def get(self, key: Any, default: Any = None) -> Any:
        for src in self.sources:
            found = src.get(key)
            if found is not None:
                return found
        return default

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Any:
        seen: set[str] = set()
        for src in self.sources:
            for sid in src:
                if sid not in seen:
                    seen.add(sid)
                    yield sid


def all_steps(state: TaskState) -> dict[str, TaskStep]:
    """Every step the task can reach (as the run file saves them)."""
    steps = dict(state.steps)
    for step in state.step_queue:
        steps.setdefault(step.step_id, step)
    for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
        steps.setdefault(out.task_step.step_id, out.task_step)
        for nxt in out.next_steps:
            steps.setdefault(nxt.step_id, nxt)
    for snap in state.history:
        for s in snap.queue or ():
            steps.setdefault(s.step_id, s)
    pending = list(steps.values())
    while pending:
        s = pending.pop()
        for linked in [*s.next_steps.values(), *s.prev_steps.values()]:
            if linked.step_id not in steps:
                steps[linked.step_id] = linked
                pending.append(linked)
    return steps
