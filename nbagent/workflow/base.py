"""The mark of a workflow, below everything that needs to recognise one.

``Context`` and the checkpoints check that they were given a workflow; ``Workflow`` lives
above them (it runs them), so they check for this base class instead of importing it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WorkflowBase", "as_workflow"]


class WorkflowBase:
    """Base of ``Workflow``: marks an object a ``Context`` can hold and a run can use."""

    __slots__ = ()


def as_workflow(obj: Any) -> Any:
    """A workflow agent stands for the one-agent workflow it runs in (``Context(agent)``)."""
    method = getattr(obj, "_as_workflow", None)
    return method() if callable(method) else obj
