"""Raise ``KeyboardInterrupt`` at every executed line of nbagent during a call.

``sweep(setup, call, ...)`` runs ``call`` once per interrupt point k = 1, 2, ...: a trace
function counts the line events of frames in the nbagent package and raises
``KeyboardInterrupt`` at the k-th one (a raising trace function is then removed by Python, so
each run gets exactly one interrupt). It stops at the first k the call survives uninterrupted.
After each interrupted run the caller's ``check`` compares the state with what it was before.

``dump`` is the full structural picture of a task that those checks compare: queue, running
set, completed outputs, the step registry with links, inputs and states, undo history,
undone edges and ids, extra state, scratch memory, the runner's memory, flags. Step ids are
replaced by their position in the registry, so two runs that made different ids compare.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

import nbagent

PACKAGE_DIR = os.path.dirname(os.path.abspath(nbagent.__file__)) + os.sep


class Interrupter:
    """Context manager: raise KeyboardInterrupt at the k-th nbagent line executed inside it."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.count = 0
        self.where: str | None = None
        self._saved: Any = None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.count += 1
            if self.count == self.k:
                code = frame.f_code
                self.where = f"{os.path.relpath(code.co_filename, PACKAGE_DIR)}:{frame.f_lineno} ({code.co_name})"
                raise KeyboardInterrupt(f"injected at {self.where}")
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        # lambdas are skipped: nbagent's are callbacks Python calls from where it swallows an
        # exception (a weakref callback during deallocation) or one-line forwarders whose
        # callee is traced
        if code.co_filename.startswith(PACKAGE_DIR) and code.co_name != "<lambda>":
            return self._local
        return None

    def __enter__(self) -> Interrupter:
        self._gc = gc.isenabled()
        gc.disable()  # collection at random moments would move the k-th line between runs
        self._saved = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.settrace(self._saved)
        if self._gc:
            gc.enable()


@dataclasses.dataclass
class SweepResult:
    """How many interrupt points a call went through, and the ones whose check failed."""

    name: str
    tried: int = 0
    broken: list[str] = dataclasses.field(default_factory=list)

    @property
    def survived(self) -> int:
        return self.tried - len(self.broken)

    def __str__(self) -> str:
        return f"{self.name}: {self.survived}/{self.tried} interrupt points survived"


def sweep(
    name: str,
    setup: Callable[[], Any],
    call: Callable[[Any], Any],
    check: Callable[[Any, Any, Any], None],
    *,
    snapshot: Callable[[Any], Any],
    limit: int = 20_000,
) -> SweepResult:
    """Interrupt ``call(ctx)`` at every nbagent line; ``check(ctx, before, where)`` after each."""
    result = SweepResult(name)
    for k in range(1, limit + 1):
        ctx = setup()
        before = snapshot(ctx)
        inter = Interrupter(k)
        raised = False
        try:
            with inter:
                call(ctx)
        except KeyboardInterrupt:
            raised = True
        if inter.where is None:  # ran to the end: every point has been tried
            return result
        result.tried += 1
        try:
            if not raised:
                raise AssertionError("the interrupt was swallowed: the call returned normally")
            check(ctx, before, inter.where)
        except AssertionError as error:
            result.broken.append(f"k={k} at {inter.where}: {str(error)[:300]}")
    raise AssertionError(f"{name}: still being interrupted after {limit} points")


# ----- the structural dump --------------------------------------------------------------------


def _plain(value: Any, ids: dict[str, str], depth: int = 0) -> Any:
    if depth > 30:
        return "..."
    if isinstance(value, str):
        return ids.get(value, value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, BaseModel):
        return [type(value).__name__, _plain(dict(value.__dict__), ids, depth + 1)]
    if isinstance(value, dict):
        return {str(_plain(k, ids)): _plain(v, ids, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, deque)):
        return [type(value).__name__, [_plain(v, ids, depth + 1) for v in value]]
    if isinstance(value, (set, frozenset)):
        return sorted(repr(_plain(v, ids, depth + 1)) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, _plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, ids, depth + 1)]
    if hasattr(value, "get_all") and hasattr(value, "snapshot"):  # a memory buffer
        return ["memory", _plain(value.get_all(), ids, depth + 1)]
    return type(value).__name__


def _output(out: Any, ids: dict[str, str]) -> Any:
    return {
        "step": ids.get(out.task_step.step_id),
        "output": str(out.output),
        "is_last": out.is_last,
        "next": [ids.get(s.step_id, "?") for s in out.next_steps],
        "tools": [(t.tool_name, t.content, t.is_error) for t in out.tool_outputs],
    }


def dump(runner: Any, task_id: str, *, identity: bool = False) -> dict[str, Any]:
    """The whole state of one task (and the runner's memory), ids made positional.

    ``identity=True`` also records which output and snapshot objects are where, for comparing
    a task with itself (a rollback must put back the same objects, not copies).
    """
    state = runner.state_of(task_id)
    ids = {sid: f"s{i}" for i, sid in enumerate(state.steps)}
    ids[state.task_id] = "task"
    steps = {
        ids[sid]: {
            "input": s.input,
            "state": _plain(s.step_state, ids) if s.step_state is not state.task.extra_state else "extra",
            "next": [ids.get(n, n) for n in s.next_steps],
            "prev": [ids.get(p, p) for p in s.prev_steps],
            "is_ready": s.is_ready,
        }
        for sid, s in state.steps.items()
    }
    out: dict[str, Any] = {
        "status": state.status.value,
        "queue": [ids.get(s.step_id, s.step_id) for s in state.step_queue],
        "running": sorted(ids.get(s, s) for s in state.running),
        "completed": [_output(o, ids) for o in state.completed_steps],
        "outputs": {ids.get(k, k): _output(o, ids) for k, o in state.outputs.items()},
        "history": [ids.get(h.step_id, h.step_id) for h in state.history],
        "undone_outputs": [_output(o, ids) for o in state.undone_outputs],
        "undone_edges": [(ids.get(a, a), ids.get(b, b)) for a, b in state.undone_edges],
        "undone_ids": sorted(ids.get(s, s) for s in state.undone_ids),
        "steps": steps,
        "extra_state": _plain(state.task.extra_state, ids),
        "scratch": _plain(state.task.scratch_memory.get_all(), ids),
        "memory": _plain(runner.memory.get_all(), ids),
        "finalized": state.finalized,
        "abandoned": state.abandoned,
    }
    if identity:
        out["identity"] = {
            "completed": [id(o) for o in state.completed_steps],
            "outputs": {k: id(o) for k, o in state.outputs.items()},
            "history": [id(h) for h in state.history],
            "steps": {k: id(s) for k, s in state.steps.items()},
            "queue": [id(s) for s in state.step_queue],
        }
    return out


def diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The keys whose values differ, shortly."""
    keys = [k for k in {**a, **b} if a.get(k) != b.get(k)]
    return "; ".join(f"{k}: {str(a.get(k))[:120]} != {str(b.get(k))[:120]}" for k in keys)
