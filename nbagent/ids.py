"""Step and task ids: uuid4 by default, reproducible when seeded.

A notebook that calls ``seed_ids(0)`` at the top produces the same ids on every run, so its
stored outputs (and nbval) stay stable.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["new_id", "seed_ids", "seeded_ids"]

_rng: random.Random | None = None
_CLEAR_VERSION = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_VERSION_4 = (0x4 << 76) | (0x2 << 62)


def new_id() -> str:
    """Return a new id: a random uuid4, or the next one of the seeded sequence."""
    if _rng is None:
        n = int.from_bytes(os.urandom(16), "big")
    else:
        n = _rng.getrandbits(128)
    n = (n & _CLEAR_VERSION) | _VERSION_4  # RFC 4122 version 4, variant 1
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def seed_ids(seed: int | None) -> None:
    """Make ids reproducible from ``seed``; ``None`` goes back to random uuid4 ids."""
    global _rng
    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"seed_ids() takes an int or None, got {type(seed).__name__}: {seed!r}")
    _rng = None if seed is None else random.Random(seed)


@contextmanager
def seeded_ids(seed: int) -> Iterator[None]:
    """Seed ids inside a ``with`` block and restore the previous generator afterwards."""
    global _rng
    saved = _rng
    seed_ids(seed)
    try:
        yield
    finally:
        _rng = saved
