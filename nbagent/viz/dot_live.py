"""The live graph's DOT text (``LiveDot``), kept up to date in O(what changed): an old import
path; the renderer lives in ``nbagent.viz.dot.live_state`` (what it keeps of the task) and
``nbagent.viz.dot.live_text`` (the text)."""

from __future__ import annotations

from nbagent.viz.dot.live_text import LiveDot

__all__ = ["LiveDot"]
