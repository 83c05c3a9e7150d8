"""Old path of ``nbagent.engine.txn`` (the step transaction lives in the step engine now)."""

from nbagent.engine.txn import (
    Checkpoint,
    Claim,
    CommitMark,
    StepAttempt,
    claim,
    claims,
    committed_on_top,
    mark_commit,
    release,
    retry,
    undo_commit,
)

__all__ = [
    "Checkpoint", "Claim", "CommitMark", "StepAttempt", "claim", "claims", "committed_on_top", "mark_commit",
    "release", "retry", "undo_commit",
]
