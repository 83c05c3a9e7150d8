"""What a press in the panel's browser side asks for: a message ``{"cmd": name, ...}``, checked
here and turned into a call of the controller's Python twin.

``run_command(controller, content)`` raises a clear error for a message that is not one of
``COMMANDS`` or lacks what it needs; the widget shows that error in the status line (a press
never raises into the kernel).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbagent.viz.panel.controller import PanelController

__all__ = ["COMMANDS", "parse_arguments", "run_command"]


def parse_arguments(text: str) -> dict[str, Any]:
    """Edited arguments typed in the panel: a JSON object (clear error otherwise)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"edited arguments must be a JSON object, e.g. {{\"path\": \"a.txt\"}}: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"edited arguments must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _text(content: Mapping[str, Any], key: str) -> str:
    value = content.get(key)
    if not isinstance(value, str):
        raise ValueError(f"command {content.get('cmd')!r} needs {key!r} as a string, got {value!r}")
    return value


def _optional(content: Mapping[str, Any], key: str) -> str | None:
    """A string the command may leave out ('' counts as left out)."""
    if content.get(key) is None:
        return None
    return _text(content, key) or None


def _with_input(twin: Callable[[], Any]) -> Callable[[PanelController, Mapping[str, Any]], Any]:
    """Run step / Run to end / Retry carry the input box's text: it becomes the next step's."""

    def run(c: PanelController, content: Mapping[str, Any]) -> Any:
        text = _optional(content, "input")
        if text is not None:
            c.inject(text)
        return twin(c)

    return run


#: command name -> what it does (each one a Python twin of the controller).
COMMANDS: dict[str, Callable[[PanelController, Mapping[str, Any]], Any]] = {
    "new_task": lambda c, m: c.new_task(_text(m, "text")),
    "select_task": lambda c, m: c.select(_optional(m, "task")),
    "step": _with_input(lambda c: c.step()),
    "run": _with_input(lambda c: c.run()),
    "retry": _with_input(lambda c: c.retry()),
    "stop": lambda c, m: c.stop(bool(m.get("cancel", False))),
    "undo": lambda c, m: c.undo(),
    "skip": lambda c, m: c.skip(),
    "abandon": lambda c, m: c.abandon(),
    "release": lambda c, m: c.release(_optional(m, "step")),
    "inspect": lambda c, m: c.inspect(_optional(m, "step")),
    "goto": lambda c, m: c.goto(_text(m, "step")),
    "fork": lambda c, m: c.fork(_text(m, "step"), _optional(m, "input")),
    "edit_input": lambda c, m: c.edit_input(_text(m, "step"), _text(m, "input")),
    "approve": lambda c, m: c.approve(_text(m, "call")),
    "edit": lambda c, m: c.edit(_text(m, "call"), parse_arguments(_text(m, "arguments"))),
    "reject": lambda c, m: c.reject(_text(m, "call"), _optional(m, "reason")),
}


def run_command(controller: PanelController, content: Any) -> Any:
    """Do what the message ``content`` asks (see ``COMMANDS``); raises for a bad message."""
    if not isinstance(content, dict) or not isinstance(content.get("cmd"), str):
        raise ValueError(f"a panel command is a dict with a 'cmd' string, got {content!r}")
    handler = COMMANDS.get(content["cmd"])
    if handler is None:
        raise ValueError(f"unknown panel command {content['cmd']!r}; allowed: {sorted(COMMANDS)}")
    return handler(controller, content)
