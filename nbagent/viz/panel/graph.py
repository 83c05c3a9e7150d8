"""The DOT text of the task a panel shows, with no widget: what the panel's browser side lays
out with Graphviz compiled to WebAssembly.

Kept up to date in O(what changed) by ``LiveDot`` (the live graph's renderer, equal to
``task_to_dot``'s text), one per shown task state; computed when the panel redraws, so it
follows the panel's own throttle.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nbagent.text import html_text
from nbagent.viz.live import EMPTY_DOT

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState

__all__ = ["ShownGraph", "EMPTY_DOT"]

log = logging.getLogger("nbagent.viz")

class ShownGraph:
    """The step graph of one task at a time. ``options`` go to ``task_to_dot`` (``rankdir``,
    ``max_label``...; an unknown one is refused here, before anything is drawn)."""

    def __init__(self, **options: Any) -> None:
        from nbagent.viz.dot import check_options

        check_options(**options)
        self.options = dict(options)
        self._live: Any = None  # the LiveDot of the state drawn last

    def dot(self, state: TaskState | None) -> str:
        """``state``'s DOT text now (``EMPTY_DOT`` for no task). Never raises: a state the
        renderer cannot draw gives a one-node graph that says why."""
        if state is None:
            return EMPTY_DOT
        try:
            live = self._live
            if live is None or live.state is not state:
                from nbagent.viz.dot_live import LiveDot

                live = self._live = LiveDot(state, **self.options)
            return str(live.render())
        except Exception as err:  # noqa: BLE001 - an odd state is shown, not raised into a run
            log.exception("nbagent: the panel could not build the step graph's DOT text")
            self._live = None
            return _error_dot(err)

    def forget(self) -> None:
        """Draw the next state afresh (after the task was switched or reloaded)."""
        self._live = None


def _error_dot(err: BaseException) -> str:
    text = html_text(f"{type(err).__name__}: {err}", 200)
    return (
        "digraph task {\n"
        f'  error [shape="box", style="filled", fillcolor="#fee2e2", color="#b91c1c", fontcolor="#991b1b", '
        f"label=<{text}>];\n"
        "}\n"
    )
