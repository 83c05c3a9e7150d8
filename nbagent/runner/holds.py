"""Old path of ``nbagent.engine.holds``."""

from nbagent.engine.holds import (
    hold_step,
    release_step,
)

__all__ = ["hold_step", "release_step"]
