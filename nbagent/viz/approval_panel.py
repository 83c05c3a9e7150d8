"""Old home of the panel's approval rows: see ``nbagent.viz.panel.approvals``."""

from nbagent.viz.panel.approvals import ApprovalRows, parse_arguments

__all__ = ["ApprovalRows", "parse_arguments"]
