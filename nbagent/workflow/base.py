"""The mark of a workflow, below everything that needs to recognise one.

``Context`` and the checkpoints check that they were given a workflow; ``Workflow`` lives
above them (it runs them), so they check for this base class instead of importing it.
"""

from __future__ import annotations

__all__ = ["WorkflowBase"]


class WorkflowBase:
    """Base of ``Workflow``: marks an object a ``Context`` can hold and a run can use."""

    __slots__ = ()
