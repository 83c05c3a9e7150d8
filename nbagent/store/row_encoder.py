"""The store's encoder: the run file's encoder (``nbagent.store.encoder``), plus references to
the objects that live in rows of their own, and the records a writer builds with it.

References (the reader's ``nbagent.store.row_decoder`` resolves them): ``{"$c": k}`` a
``ChatMemoryBuffer`` or ``AppendLog`` whose items are rows of their own; ``{"$d": k}`` a task's
``extra_state`` or a step's ``step_state`` dict; ``{"$i": [k, i]}`` item ``i`` of container
``k`` (a tool output that a step's output and the state both hold stays one object);
``{"$c": k, "t": n}`` a memory's snapshot (its first n messages); ``{"$c": k, "s": token}`` a
memory's or log's own snapshot; ``{"$c": k, "v": [i, n]}`` a step's view of the first n items
of log k, ``i`` the number of its item n-1 (O(1) per step however long the log).

Each record (an item, a state dict, a step's output, an undo snapshot) is built by one method
that starts with an **early exit**: a worker's usual pieces hold JSON scalars, short texts and
references only, and their record is built with no encoder state to reset (the one object
numbered is the record's own: a model, or a snapshot's state dict). The early exit builds the
record with the same functions as the general path (``plain_items``, ``model_data``,
``output_fields``, ``snapshot_fields``) and encodes values with ``quick``, which gives what
``value`` gives, or raises ``NotQuick``: then the general path builds the record.
``Writer.early_exits = False`` turns the early exits off (tests compare the two; the
benchmark measures what they save).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nbagent._prefix import PrefixView
from nbagent.memory import ChatMemoryBuffer
from nbagent.session_memory import Memory
from nbagent.schema import TaskStep, TaskStepOutput
from nbagent.snapshot import AppendLog, _Saved, plain_snapshot
from nbagent.engine.state import StepSnapshot
from nbagent.store.codec import _output_record, _snapshot_to_dict, output_fields, snapshot_fields
from nbagent.store.encoder import (
    _HANDLERS,
    _MODEL_PLANS,
    SHARED_STR_CHARS,
    Path_,
    ValueEncoder,
    model_data,
    model_node,
    plain_items,
)

if TYPE_CHECKING:
    from nbagent.store.writer import Writer

__all__ = ["StoreEncoder", "NotQuick"]


class NotQuick(Exception):
    """A value an early exit leaves to the general path."""


_EMPTY: tuple[Any, ...] = ()
_CONTAINERS = (ChatMemoryBuffer, AppendLog, Memory)  # the kinds whose items are rows of their own


class StoreEncoder(ValueEncoder):
    """The run file's encoder, plus references to the objects that live in rows of their own."""

    views_by_reference = False  # a view of a log with rows of its own: {"$c": k, "v": [...]} (see _view_ref)

    def __init__(self, writer: Writer) -> None:
        super().__init__()
        self.w = writer
        self.base = writer.counter
        self.busy = True

    def again(self) -> StoreEncoder:
        """This encoder, emptied for the next record (a step encodes several: one is reused)."""
        self.numbers.clear()
        self.keep.clear()
        self.used.clear()
        self.building.clear()
        self.steps = {}
        self.output_index = {}
        self.base = self.w.counter
        self.busy = True
        return self

    def _number(self, obj: Any) -> tuple[int, bool]:
        # numbers unique across the whole run: every row is decoded with one table
        key = id(obj)
        n = self.numbers.get(key)
        if n is not None:
            self.used.add(n)
            return n, False
        n = self.base + len(self.keep)
        self.numbers[key] = n
        self.keep.append(obj)
        return n, True

    def value(self, v: Any, path: Path_) -> Any:
        t = type(v)
        if v is None or t is str or t is bool or t is int or t is float:
            return ValueEncoder.value(self, v, path)
        ref = self.row_ref(v, self.value, path)
        if ref is not None:
            return ref
        if t is PrefixView:
            ref = self._view_ref(v)
            if ref is not None:
                return ref
        return ValueEncoder.value(self, v, path)

    def row_ref(self, v: Any, token: Any, path: Path_) -> dict[str, Any] | None:
        """The reference that stands for ``v`` when it (or what it snapshots) lives in rows of
        its own, else None; a container met for the first time gets its rows (``token``: how
        a snapshot's token is encoded)."""
        w = self.w
        refs = w.refs
        found = refs.get(id(v))
        if found is not None and found[1] is v:
            w.touched.add(found[2])
            return found[0]  # type: ignore[no-any-return]
        t = type(v)
        if t is tuple:
            size = len(v)
            if (size == 3 or (size == 4 and type(v[3]) is int)) and type(v[2]) is int:
                # a memory's snapshot (its message list, its counts, how many; a session
                # Memory's also how many are archived): {"$c": k, "t": n} / {..., "a": archived}
                m, c = refs.get(id(v[0])), refs.get(id(v[1]))
                if m is not None and c is not None and m[1] is v[0] and c[1] is v[1] and m[2] == c[2] \
                        and m[0].get("p") == "m" and c[0].get("p") == "c":
                    k = m[2]
                    w.touched.add(k)
                    return {"$c": k, "t": v[2]} if size == 3 else {"$c": k, "t": v[2], "a": v[3]}
        elif t is _Saved:
            obj = v.value
            if not v.is_copy and type(obj) in _CONTAINERS:
                # a memory's or log's own snapshot: {"$c": k, "s": its token}
                return {"$c": w.container(obj)["$c"], "s": token(v.token, path)}
        elif t in _CONTAINERS:
            return w.container(v)
        return None

    def _view_ref(self, v: PrefixView[Any]) -> dict[str, Any] | None:
        """A step's view of the first n items of a log the store keeps in rows (synced in
        this change, so its rows mirror it): ``{"$c": k, "v": [number of item n-1, n]}``, O(1).
        A row outlives later cuts of the log, so it names the last item, not just n: loading
        takes the first n items when that item is still at n-1, else rebuilds the view from
        the item rows. None (written as its items): a view of an undo's frozen copy, or of a
        log not written in this change."""
        log = v.log
        w = self.w
        found = w.refs.get(id(log))
        if found is None or found[1] is not log or found[2] not in w.synced:
            return None
        c = w.containers.get(found[2])
        n = len(v)
        if c is None or c.kind != "log" or len(c.items) < n or (n and c.items[n - 1] is not log[n - 1]):
            return None
        return {"$c": c.k, "v": [c.ids[n - 1] if n else -1, n]}

    def root(self, v: Any, path: Path_) -> Any:
        """Encode ``v`` itself (it is the row), not a reference to it."""
        return super().value(v, path)

    def done(self, node: Any) -> Any:
        # the "$id" marks nobody refers to stay: harmless, and stripping them would cost a
        # second walk over every row
        self.w.counter = self.base + len(self.keep)
        self.busy = False
        return node

    # ----- the early exits' encoding ---------------------------------------------------------
    def quick(self, v: Any, path: Path_) -> Any:
        """What ``value`` gives for ``v`` when that numbers nothing (a JSON scalar, a short
        text, a reference to rows of its own); else raises ``NotQuick``."""
        t = type(v)
        if v is None or t is bool or t is int or (t is str and len(v) < SHARED_STR_CHARS):
            return v
        if t is float:
            if math.isfinite(v):
                return v
            raise NotQuick
        ref = self.row_ref(v, self.quick, path)
        if ref is not None:
            return ref
        raise NotQuick

    def quick_model(self, v: Any) -> dict[str, Any] | None:
        """``root(v)``'s record of a model whose fields ``quick`` encodes (a message, a tool
        output), or None. The model is the one object numbered."""
        cls = type(v)
        plan = _MODEL_PLANS.get(cls)
        if plan is None or plan[0] is None or _HANDLERS.get(cls) is not ValueEncoder._model:
            return None  # (the general path makes the plan the first time, or checks the class)
        if getattr(v, "__pydantic_extra__", None):
            return None
        try:
            data = model_data(v, plan, self.quick, None)
        except NotQuick:
            return None
        w = self.w
        n = w.counter
        w.counter = n + 1
        return model_node(n, plan[0], data)

    # ----- records ---------------------------------------------------------------------------
    def item_record(self, item: Any, count: int | None, path: Path_) -> Any:
        """The record of an item of a container: the item (a message with its token count)."""
        w = self.w
        value = self.quick_model(item) if w.early_exits else None
        if value is None:
            enc = w.encoder()
            value = enc.root(item, path)
            return enc.done([value, count] if count is not None else value)
        return [value, count] if count is not None else value

    def dict_record(self, d: dict[str, Any], path: Path_) -> Any:
        """The record of a state dict with a row of its own (its "$id" only if something in it
        refers to it)."""
        w = self.w
        if w.early_exits:
            try:
                rec = plain_items(d, {}, self.quick, path)
            except NotQuick:
                rec = None
            if rec is not None:
                w.counter += 1  # the number the encoder gives the dict itself (unused: not written)
                return rec
        enc = w.encoder()
        rec = enc.root(d, path)
        n = rec.get("$id")
        if n is not None and n not in enc.used:
            del rec["$id"]  # nothing in the record refers to the dict: unchanged, it reads the same
        return enc.done(rec)

    def output_record(
        self, out: TaskStepOutput, path: Path_, steps: dict[str, TaskStep], outputs: dict[int, int]
    ) -> dict[str, Any]:
        """The record of a step's output (``steps``, ``outputs``: the task's, that it may name)."""
        w = self.w
        if w.early_exits:
            tools = out.tool_outputs
            answer = out.output
            refs = w.refs
            if type(tools) is tuple and not tools and not _has_row(refs, answer) and not _has_row(refs, tools):
                model = self.quick_model(answer)
                if model is not None:
                    return output_fields(out, model, self._tuple(_EMPTY, path))
        enc = w.encoder()
        enc.steps = steps
        enc.output_index = outputs
        return enc.done(_output_record(enc, out, path))  # type: ignore[no-any-return]

    def snapshot_record(
        self, snap: Any, path: Path_, steps: dict[str, TaskStep], outputs: dict[int, int]
    ) -> dict[str, Any]:
        """The record of an undo snapshot."""
        w = self.w
        if w.early_exits and type(snap) is StepSnapshot and snap.step_state is snap.extra_state:
            rec = self._quick_snapshot(snap, path)
            if rec is not None:
                return rec
        enc = w.encoder()
        enc.steps = steps
        enc.output_index = outputs
        return enc.done(_snapshot_to_dict(enc, snap, path))  # type: ignore[no-any-return]

    def _quick_snapshot(self, snap: StepSnapshot, path: Path_) -> dict[str, Any] | None:
        """``_snapshot_to_dict``'s record of a snapshot of one plain dict (the task's and the
        step's state at once) whose values ``quick`` encodes: the dict is the one object
        numbered, its second mention a ``$ref``."""
        extra = plain_snapshot(snap.extra_state)
        w = self.w
        if type(extra) is not dict or _has_row(w.refs, extra):
            return None
        n = w.counter
        try:
            values = plain_items(extra, {"$id": n}, self.quick, path)
            scratch = self.quick(snap.scratch, path)
        except NotQuick:
            return None
        if values is None:
            return None
        w.counter = n + 1
        return snapshot_fields(snap, values, {"$ref": n}, scratch)


def _has_row(refs: dict[int, tuple[Any, Any, int]], obj: Any) -> bool:
    """Whether ``obj`` lives in a row of its own (it is written as a reference)."""
    found = refs.get(id(obj))
    return found is not None and found[1] is obj
