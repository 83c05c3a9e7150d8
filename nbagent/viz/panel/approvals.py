"""The control panel's approval rows: one row per tool call waiting for a decision, with
Approve / Edit / Reject buttons. Each button calls a panel method (``panel.approve``,
``panel.edit``, ``panel.reject``) that does the same from code; the rows only listen."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nbagent.viz.escape import args_preview, html_text, preview

if TYPE_CHECKING:
    from nbagent.approval import PendingCall
    from nbagent.engine.state import TaskState

__all__ = ["ApprovalRows", "parse_arguments"]


def parse_arguments(text: str) -> dict[str, Any]:
    """Edited arguments typed in the panel: a JSON object (clear error otherwise)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"edited arguments must be a JSON object, e.g. {{\"path\": \"a.txt\"}}: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"edited arguments must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


class _Row:
    """The widgets of one waiting call."""

    def __init__(self, panel: Any, call: PendingCall) -> None:
        import ipywidgets as W

        self.call = call
        label = f"{call.tool_name}({args_preview(call.arguments)})"
        # the call's text takes the room left and wraps; the two groups of controls keep
        # their size and move to the next line whole when the row is too narrow
        self.label = W.HTML(
            f'<span class="nbagent-approval-call"><b>approve?</b> <code>{html_text(preview(label, 200))}</code></span>',
            layout=W.Layout(flex="1 1 16em", min_width="12em"),
        )
        self.arguments = W.Text(value=json.dumps(call.arguments, ensure_ascii=False), layout=W.Layout(width="16em"))
        self.arguments.add_class("nbagent-approval-args")
        self.reason = W.Text(placeholder="reason (for Reject)", layout=W.Layout(width="12em"))
        self.reason.add_class("nbagent-approval-reason")
        cid = call.call_id
        self.approve_button = W.Button(description="Approve", icon="check", button_style="success",
                                       tooltip="Run this call as the model asked", layout=W.Layout(width="auto"))
        self.edit_button = W.Button(description="Edit", icon="pencil", tooltip="Run it with the arguments in the box",
                                    layout=W.Layout(width="auto"))
        self.reject_button = W.Button(description="Reject", icon="ban", button_style="danger",
                                      tooltip="Do not run it; the model gets the reason", layout=W.Layout(width="auto"))
        self.approve_button.add_class("nbagent-btn-approve")
        self.edit_button.add_class("nbagent-btn-edit")
        self.reject_button.add_class("nbagent-btn-reject")
        self.approve_button.on_click(lambda _: panel._click(lambda: panel.approve(cid)))
        self.edit_button.on_click(
            lambda _: panel._click(lambda: panel.edit(cid, parse_arguments(self.arguments.value)))
        )
        self.reject_button.on_click(lambda _: panel._click(lambda: panel.reject(cid, self.reason.value or None)))
        # the row wraps between groups, never inside one: Reject stays beside its reason box
        # and Approve / Edit beside the arguments they use
        def group(*children: Any) -> Any:
            return W.HBox(list(children), layout=W.Layout(flex="0 0 auto", flex_flow="row nowrap",
                                                           align_items="center"))

        self.widget = W.HBox(
            [self.label, group(self.arguments, self.approve_button, self.edit_button),
             group(self.reason, self.reject_button)],
            layout=W.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.widget.add_class("nbagent-approval-row")


class ApprovalRows:
    """A box that shows a row per waiting call of the panel's task (empty when none waits)."""

    def __init__(self, panel: Any) -> None:
        import ipywidgets as W

        self.panel = panel
        self.rows: dict[str, _Row] = {}
        self.widget = W.VBox([])
        self.widget.add_class("nbagent-approvals")

    def sync(self, state: TaskState | None) -> None:
        """Rebuild the rows when the set of waiting calls changed."""
        pending: list[PendingCall] = []
        if state is not None and not (state.finalized or state.abandoned):
            pending = self.panel.runner.pending_approvals(state.task_id)
        if [p.call_id for p in pending] == list(self.rows) and all(
            self.rows[p.call_id].call == p for p in pending
        ):
            return
        self.rows = {p.call_id: _Row(self.panel, p) for p in pending}
        self.widget.children = tuple(r.widget for r in self.rows.values())
