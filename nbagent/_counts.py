"""Counted nouns for labels, so that no view or message says "1 steps"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "step")`` is ``"1 step"``, ``counted(2, "step")`` ``"2 steps"``;
    ``"reply"`` becomes ``"replies"``; pass ``plural`` for any other irregular noun."""
    if n == 1:
        return f"{n} {noun}"
    if plural is None:
        plural = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{n} {plural}"
