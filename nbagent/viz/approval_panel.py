"""Old home of the panel's approval helpers: the rows are drawn by the panel's browser side
now (``nbagent.viz.panel``); ``parse_arguments`` lives in ``nbagent.viz.panel.commands``."""

from nbagent.viz.panel.commands import parse_arguments

__all__ = ["parse_arguments"]
