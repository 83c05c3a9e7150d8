"""Old path of ``nbagent.engine.approvals``."""

from nbagent.engine.approvals import (
    AwaitingApprovalError,
    approve,
    check_decided,
    pending_approvals,
    reject,
)

__all__ = ["AwaitingApprovalError", "approve", "check_decided", "pending_approvals", "reject"]
