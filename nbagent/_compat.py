"""Parameters of the reference API that nbagent accepts but does not use, said out loud."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["warn_callback_manager", "pop_callback_manager"]


def warn_callback_manager(where: str, stacklevel: int = 3) -> None:
    """Warn that a ``callback_manager`` was given: nbagent has events instead."""
    warnings.warn(
        f"{where}: callback_manager is accepted for compatibility and has no effect in "
        "nbagent; listen to steps with runner.subscribe(listener) instead",
        UserWarning,
        stacklevel=stacklevel,
    )


def pop_callback_manager(kwargs: dict[str, Any], where: str) -> None:
    """Remove ``callback_manager`` from ``kwargs``, warning if one was really given."""
    if kwargs.pop("callback_manager", None) is not None:
        warn_callback_manager(where, stacklevel=4)
