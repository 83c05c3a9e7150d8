"""The control panel: a controller with no widget (``controller``), the widget bound to it
(``widget``), and its pictures as pure HTML (``status``). ``AgentPanel`` is what
``runner.panel(task)`` returns; the widget module is imported only when it is asked for, so
the controller runs (and is tested) where no widget library is installed."""

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
