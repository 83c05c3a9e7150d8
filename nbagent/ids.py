"""Step and task ids: uuid4 by default, reproducible when seeded.

A notebook that calls ``seed_ids(0)`` at the top produces the same ids on every run, so its
stored outputs (and nbval) stay stable.
"""

from __future__ import annotations

import contextvars
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["new_id", "seed_ids", "seeded_ids"]

_rng: random.Random | None = None
# ``seeded_ids`` binds its generator to the calling context (and the asyncio tasks and
# ``run_sync`` calls it starts), not to the process: another thread that makes ids meanwhile
# (a leftover timer, a panel run, a background loop) must not draw from, and so change, the
# block's sequence; before this, such a thread made ``make demo``'s ids differ between runs
_scoped: contextvars.ContextVar[random.Random | None] = contextvars.ContextVar("nbagent_seeded_ids", default=None)
# RFC 4122 version 4, variant 1, set on the 32 hex digits of 128 random bits: the version
# digit (bits 76-79) is 4, the variant's two bits (62-63, the top of digit 16) are 10
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


_BATCH = 64  # random ids drawn from the OS at a time (one system call, not one per step)
_random_ids: Iterator[str] = iter(())


def _forget_random_ids() -> None:
    """A forked process must not hand out the ids its parent will (``os.register_at_fork``)."""
    global _random_ids
    _random_ids = iter(())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_random_ids)


def _uuid4(h: str) -> str:
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def new_id() -> str:
    """Return a new id: a random uuid4, or the next one of the seeded sequence.

    Example:

    >>> from nbagent import new_id, seeded_ids
    >>> with seeded_ids(0):
    ...     first = new_id()
    >>> with seeded_ids(0):
    ...     new_id() == first
    True
    """
    rng = current_rng()
    if rng is not None:
        return _uuid4(f"{rng.getrandbits(128):032x}")
    # uuid4s from os.urandom, drawn _BATCH at a time; taking one is next() on a list's
    # iterator, which no two threads can both get the same item of
    found = next(_random_ids, None)
    return found if found is not None else _more_random_ids()


def _more_random_ids() -> str:
    global _random_ids
    raw = os.urandom(16 * _BATCH).hex()
    fresh = iter([_uuid4(raw[i : i + 32]) for i in range(0, 32 * _BATCH, 32)])
    _random_ids = fresh
    return next(fresh)


def current_rng() -> random.Random | None:
    """The generator ``new_id`` draws from here: the ``seeded_ids`` block's, else the
    process-wide one of ``seed_ids``, else None (random uuid4)."""
    return _scoped.get() or _rng


def set_current_rng(rng: random.Random | None) -> None:
    """Replace the generator ``current_rng`` returns (a loaded run continues its sequence)."""
    global _rng
    if _scoped.get() is not None:
        _scoped.set(rng)
    else:
        _rng = rng


def seed_ids(seed: int | None) -> None:
    """Make ids reproducible from ``seed``; ``None`` goes back to random uuid4 ids."""
    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"seed_ids() takes an int or None, got {type(seed).__name__}: {seed!r}")
    set_current_rng(None if seed is None else random.Random(seed))


@contextmanager
def seeded_ids(seed: int) -> Iterator[None]:
    """Seed ids inside a ``with`` block (for this context only: other threads keep their own
    ids) and restore the previous generator afterwards.

    Example:

    >>> from nbagent import ReActAgent, ScriptedLLM, seeded_ids
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> with seeded_ids(7):
    ...     task = agent.create_task("2 + 2?")
    >>> with seeded_ids(7):
    ...     agent.create_task("again").task_id == task.task_id
    True
    """
    if not isinstance(seed, int):
        raise TypeError(f"seeded_ids() takes an int, got {type(seed).__name__}: {seed!r}")
    token = _scoped.set(random.Random(seed))
    try:
        yield
    finally:
        _scoped.reset(token)
