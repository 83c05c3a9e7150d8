"""Errors of the workflow engine: each says what went wrong and what to do about it."""

from __future__ import annotations

__all__ = [
    "WorkflowError",
    "WorkflowValidationError",
    "WorkflowRuntimeError",
    "WorkflowTimeoutError",
    "WorkflowCancelledError",
    "CheckpointError",
]


class WorkflowError(Exception):
    """Base of the engine's own errors (a step's own exception is raised as it is)."""


class WorkflowValidationError(WorkflowError, TypeError):
    """A workflow class whose steps do not fit together (found when it is instantiated)."""


class WorkflowRuntimeError(WorkflowError, RuntimeError):
    """A run that cannot go on: an event no step takes, or nothing left to do and no result."""


class WorkflowTimeoutError(WorkflowError, TimeoutError):
    """A run took longer than the workflow's ``timeout``; its context can still be resumed."""


class WorkflowCancelledError(WorkflowError):
    """A run was stopped with ``handler.stop()`` / ``await handler.cancel_run()``."""


class CheckpointError(WorkflowError, ValueError):
    """A context that cannot be saved to JSON, or a checkpoint that cannot be loaded."""
