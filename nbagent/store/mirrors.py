"""What a store's writer remembers of what the store holds (its mirrors), so that a change
writes only the difference: per container (a memory or an ``AppendLog`` whose items have rows
of their own) the items its rows hold, per task the pieces its records hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbagent.schema import TaskStep, TaskStepOutput

__all__ = ["Container", "TaskMirror", "common_prefix"]


class Container:
    """A memory or a log whose items are rows of their own: what those rows hold, in order."""

    __slots__ = ("k", "obj", "kind", "items", "ids", "next_i", "lst", "counts", "meta")

    def __init__(self, k: int, obj: Any, kind: str) -> None:
        self.k = k  # its object number in the run
        self.obj = obj
        self.kind = kind  # "mem" or "log"
        self.items: list[Any] = []  # what the rows hold, in order
        self.ids: list[int] = []  # their item numbers (never reused: references stay valid)
        self.next_i = 0
        self.lst: Any = None  # the memory's message list the rows mirror
        self.counts: Any = None  # and its token counts
        self.meta: Any = None  # what its settings record was written from


class TaskMirror:
    """What the store holds of one task, to write only the difference."""

    def __init__(self, seq: int) -> None:
        self.seq = seq  # its place in the run (its records name it)
        self.steps: dict[str, TaskStep] = {}
        self.registered = 0
        self.out_n: dict[int, int] = {}  # id(output) -> n
        self.outs: list[TaskStepOutput] = []
        self.completed: list[TaskStepOutput] = []
        self.done: dict[str, TaskStepOutput] = {}
        self.undone: list[TaskStepOutput] = []
        self.history: list[Any] = []
        self.failures: list[Any] = []
        self.order: dict[str, int] = {}  # step id -> its place among the task's step rows
        self.row = 0  # the rowid of the task's row in ``tasks``, once this mirror wrote it
        self.fixed: Any = None  # what the task row's fixed part was written from
        self.fixed_text = ""  # and that part's JSON (without its closing brace)
        self.seed = 0  # its row's checksum starts here (its run, id and place)

    def place_of(self, sid: str) -> int:
        """A step's place among the task's steps (new ones go last)."""
        n = self.order.get(sid)
        if n is None:
            n = self.order[sid] = len(self.order)
        return n


def common_prefix(written: list[Any], live: Sequence[Any]) -> int:
    """How many leading items ``live`` still shares with ``written`` (by identity): O(1) when
    ``live`` only grew or shrank at its end, the usual case."""
    n = len(written)
    m = len(live)
    if m >= n and (n == 0 or (live[n - 1] is written[n - 1] and live[0] is written[0])):
        return n
    if m < n and (m == 0 or live[m - 1] is written[m - 1]) and all(a is b for a, b in zip(live, written)):
        return m
    p = 0
    for a, b in zip(live, written):
        if a is not b:
            break
        p += 1
    return p
