"""The control panel, in four parts: ``controller`` (``PanelController``: the Python twins, the
run loop, Stop, events, tokens; no widget), ``widget`` (``AgentPanel``: one anywidget bound to
a controller, what ``runner.panel(task)`` returns), ``data`` and ``commands`` (what crosses to
and from the browser), ``status`` (the static picture as HTML). The widget module is imported
only when ``AgentPanel`` is asked for, so the controller runs where no widget library is
installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.viz.panel.controller import PanelController
    from nbagent.viz.panel.widget import AgentPanel

__all__ = ["AgentPanel", "PanelController"]


def __getattr__(name: str) -> Any:
    if name == "AgentPanel":
        from nbagent.viz.panel.widget import AgentPanel

        return AgentPanel
    if name == "PanelController":
        from nbagent.viz.panel.controller import PanelController

        return PanelController
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
