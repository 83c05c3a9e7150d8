"""HTML views of nbagent objects: pure functions returning self-contained HTML strings.

These are the bodies of the core objects' ``_repr_html_``. Each returns one card
``<div class="nbagent ...">`` with its own ``<style>`` (every rule scoped under ``.nbagent``,
colours from JupyterLab's CSS variables with light fallbacks, so dark themes stay readable), no
external assets and no JavaScript: details fold with ``<details>``. Every piece of text that came
from a user, a model or a tool is cleaned and HTML-escaped (quotes too).

One module per subject: ``base`` (CSS and the card builders), ``chat`` (messages, transcripts,
tools, answers), ``steps``, ``task`` (timeline, step graph, task), ``agents`` (model, worker,
runner), ``costs`` and ``branches``. Every public view is re-exported here, the views' one
address; the private card builders are imported from their own module (``base``).
"""

from __future__ import annotations

from nbagent.viz.html.agents import llm_html, runner_html, worker_html
from nbagent.viz.html.base import _ROLE_COLORS, CSS, error_html  # _ROLE_COLORS: the panel's tests read it here
from nbagent.viz.html.branches import comparison_html
from nbagent.viz.html.chat import (
    chat_response_html,
    memory_html,
    message_html,
    tool_html,
    tool_output_html,
    transcript_html,
)
from nbagent.viz.html.costs import task_cost_html
from nbagent.viz.html.steps import approval_html, step_html, step_output_html
from nbagent.viz.html.task import graph_html, task_html, timeline_html

__all__ = [
    "CSS",
    "transcript_html",
    "tool_output_html",
    "task_html",
    "step_html",
    "step_output_html",
    "chat_response_html",
    "tool_html",
    "llm_html",
    "worker_html",
    "runner_html",
    "timeline_html",
    "graph_html",
    "error_html",
    "message_html",
    "memory_html",
    "task_cost_html",
    "comparison_html",
    "approval_html",
]
