"""Views of agent state: pure renderers (DOT and HTML text) and a displayable step graph.

``dot`` and ``html`` are pure functions of model objects; ``graph.StepGraph`` renders DOT with
the ``dot`` binary when present and falls back to static HTML otherwise. Widgets live in
``panel``/``live`` and are imported only when asked for.
"""

from __future__ import annotations

from nbagent.viz.dot import status_summary, task_to_dot
from nbagent.viz.graph import GraphvizNotFoundError, StepGraph

__all__ = ["task_to_dot", "status_summary", "StepGraph", "GraphvizNotFoundError"]
