"""The records of a run store's log: one kind per change a transaction can make, each with
the builder the writer calls and the parser the reader replays it with.

A log row is a JSON list of records; a record is a list whose first item is its kind's code
(the codes on disk, unchanged since schema 2) and whose second names what it changes: an
object ``k`` (a memory, a log, a state dict: a number unique in the run) or a task's place
``t`` in its run (a task written again in full gets a new place; records of a place no task
holds any more are skipped). Values inside are the store's tagged JSON
(``nbagent.store.row_encoder``).

==========  ==============================  =============================================
code        kind                            fields
==========  ==============================  =============================================
``o``       ``ObjectRecord``                ``k, kind, rec``: a state dict, a memory's or a log's
                                            settings (``kind`` "dict", "mem", "log"), or
                                            ``k, "same", k1``: a dict holding the very
                                            objects dict ``k1`` holds at that point
``i``       ``ItemRecord``                  ``k, i, pos, rec``: item number ``i`` of container
                                            ``k``, at place ``pos`` of its list
``ic``      ``ItemsCut``                    ``k, [i...]``: items cut off the list (an undo)
``s``       ``StepRecord``                  ``t, place, rec``: a step of the task
``u``       ``OutputRecord``                ``t, n, [cpos, done, upos], rec``: its output ``n``
``p``       ``OutputsMoved``                ``t, slot, [[value, n]...]``: where outputs now stand
``pd``      ``NoneDone``                    ``t``: no output is done (every ``done`` 0)
``h``/``f`` ``HistoryRecord``/``FailureRecord``  ``t, i, rec``: an undo snapshot / a failure
``hx``/``fx`` ``HistoryCut``/``FailuresCut``  ``t, i``: that list cut at ``i``
==========  ==============================  =============================================

``apply`` raises ``LookupError``, ``TypeError`` or ``ValueError`` for a record that does not
fit what came before it: the reader then counts its object or task as damaged.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "Replayed", "RecordKind", "KINDS", "ObjectRecord", "ItemRecord", "ItemsCut", "StepRecord", "OutputRecord",
    "OutputsMoved", "NoneDone", "HistoryRecord", "FailureRecord", "HistoryCut", "FailuresCut",
]

Record = tuple[Any, ...]  # as the writer builds it (written as a JSON list)


class Replayed:
    """What a run's records add up to, replayed in the order they were written."""

    def __init__(self, damaged_objects: dict[int, str]) -> None:
        self.objects: dict[int, tuple[str, Any]] = {}  # k -> (kind, record)
        self.items: dict[int, dict[int, list[Any]]] = {}  # k -> i -> [pos now or None, record, pos written at]
        self.twins: dict[int, list[int]] = {}  # k -> the dicts written as "the same as k" since k was
        self.steps: dict[int, dict[int, Any]] = {}  # t -> step's place -> record
        self.outputs: dict[int, list[list[Any]]] = {}  # t -> [cpos, done, upos, record] by n
        self.lists: dict[str, dict[int, list[Any]]] = {"h": {}, "f": {}}  # history, failures: t -> records
        self.damaged_objects = damaged_objects  # k -> what is damaged (the reader fills it)


class RecordKind:
    """One kind of record: its code on disk, whether it changes an object or a task, and how
    replaying it changes what was replayed before."""

    code: ClassVar[str]
    of_object: ClassVar[bool]  # its second field is an object number (else a task's place)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        raise NotImplementedError


# ----- objects: memories, logs, state dicts --------------------------------------------------


class ObjectRecord(RecordKind):
    code = "o"
    of_object = True
    KINDS = ("dict", "same", "mem", "log")

    @staticmethod
    def build(k: int, kind: str, rec: Any) -> Record:
        return ("o", k, kind, rec)

    @staticmethod
    def same(k: int, twin: int) -> Record:
        """Dict ``k`` holds the very objects dict ``twin`` holds now."""
        return ("o", k, "same", twin)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        k, kind, rec = op[1], op[2], op[3]
        objects = r.objects
        if kind not in ObjectRecord.KINDS:
            raise ValueError(f"unknown kind of object {kind!r}")
        if kind == "same":
            if type(rec) is not int or objects[rec][0] not in ("dict", "same"):
                raise ValueError(f"object {rec!r} is not a dict")
            if rec in r.damaged_objects:
                raise ValueError(f"it copies damaged object {rec}")
        for other in r.twins.pop(k, ()):  # copies of what k held: now their own
            if objects.get(other) == ("same", k):
                objects[other] = objects[k]
                if objects[k][0] == "same":
                    r.twins.setdefault(objects[k][1], []).append(other)
        if kind == "same":
            r.twins.setdefault(rec, []).append(k)
        objects[k] = (kind, rec)


class ItemRecord(RecordKind):
    code = "i"
    of_object = True

    @staticmethod
    def build(k: int, i: int, pos: int, rec: Any) -> Record:
        return ("i", k, i, pos, rec)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        k, i, pos = op[1], op[2], op[3]
        found = r.items.setdefault(k, {})
        if type(i) is not int or type(pos) is not int or not 0 <= pos <= len(found):
            raise ValueError(f"item {i!r} at place {pos!r} of a list that had {len(found)} items")
        found[i] = [pos, op[4], pos]


class ItemsCut(RecordKind):
    code = "ic"
    of_object = True

    @staticmethod
    def build(k: int, numbers: list[int]) -> Record:
        return ("ic", k, numbers)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        found = r.items[op[1]]
        for i in op[2]:
            found[i][0] = None  # the row stays, out of the list, for what still refers to it


# ----- a task's pieces -------------------------------------------------------------------------


class StepRecord(RecordKind):
    code = "s"
    of_object = False

    @staticmethod
    def build(t: int, place: int, rec: Any) -> Record:
        return ("s", t, place, rec)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        if type(op[2]) is not int:
            raise ValueError(f"a step's place {op[2]!r} is not a number")
        r.steps.setdefault(op[1], {})[op[2]] = op[3]


class OutputRecord(RecordKind):
    code = "u"
    of_object = False

    @staticmethod
    def build(t: int, n: int, places: list[Any], rec: Any) -> Record:
        """Output ``n``, with its places ``[cpos, done, upos]``: among the completed outputs,
        done (1) or not (0), among the undone ones (None: not there)."""
        return ("u", t, n, places, rec)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        outs = r.outputs.setdefault(op[1], [])
        n, place = op[2], op[3]
        if type(place) is not list or len(place) != 3:
            raise ValueError(f"an output's places {place!r} are not [completed, done, undone]")
        if type(n) is not int or not 0 <= n <= len(outs):
            raise ValueError(f"output {n!r} follows output {len(outs) - 1}")
        if n == len(outs):
            outs.append([*place, op[4]])
        else:
            outs[n] = [*place, op[4]]


class OutputsMoved(RecordKind):
    code = "p"
    of_object = False

    @staticmethod
    def build(t: int, slot: int, moves: list[list[Any]]) -> Record:
        """Outputs written before now stand at ``[[value, n]...]`` in ``slot`` (0 completed,
        1 done, 2 undone)."""
        return ("p", t, slot, moves)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        outs = r.outputs[op[1]]
        slot = op[2]
        if slot not in (0, 1, 2) or type(slot) is not int:
            raise ValueError(f"slot {slot!r}")
        for value, n in op[3]:
            if type(n) is not int or n < 0:
                raise IndexError(n)
            outs[n][slot] = value


class NoneDone(RecordKind):
    code = "pd"
    of_object = False

    @staticmethod
    def build(t: int) -> Record:
        return ("pd", t)

    @staticmethod
    def apply(r: Replayed, op: list[Any]) -> None:
        for out in r.outputs.get(op[1], ()):
            out[1] = 0


class _ListRecord(RecordKind):
    """Item ``i`` of one of a task's lists (undo snapshots, failures)."""

    of_object = False

    @classmethod
    def build(cls, t: int, i: int, rec: Any) -> Record:
        return (cls.code, t, i, rec)

    @classmethod
    def apply(cls, r: Replayed, op: list[Any]) -> None:  # type: ignore[override]
        lst = r.lists[cls.code].setdefault(op[1], [])
        i = op[2]
        if type(i) is not int or not 0 <= i <= len(lst):
            raise ValueError(f"record {i!r} follows record {len(lst) - 1}")
        if i == len(lst):
            lst.append(op[3])
        else:
            lst[i] = op[3]


class _ListCut(RecordKind):
    """One of a task's lists cut at ``i`` (an undo)."""

    of_object = False

    @classmethod
    def build(cls, t: int, i: int) -> Record:
        return (cls.code, t, i)

    @classmethod
    def apply(cls, r: Replayed, op: list[Any]) -> None:  # type: ignore[override]
        if type(op[2]) is not int or op[2] < 0:
            raise ValueError(f"a cut at {op[2]!r}")
        del r.lists[cls.code[0]].get(op[1], [])[op[2]:]


class HistoryRecord(_ListRecord):
    code = "h"


class FailureRecord(_ListRecord):
    code = "f"


class HistoryCut(_ListCut):
    code = "hx"


class FailuresCut(_ListCut):
    code = "fx"


KINDS: dict[str, type[RecordKind]] = {
    kind.code: kind
    for kind in (
        ObjectRecord, ItemRecord, ItemsCut, StepRecord, OutputRecord, OutputsMoved, NoneDone,
        HistoryRecord, FailureRecord, HistoryCut, FailuresCut,
    )
}
