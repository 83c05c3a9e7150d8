"""``nbagent``: a short offline self-check, and ``nbagent report run.json -o run.html``.

- ``nbagent`` (or ``python -m nbagent``): run an offline agent end to end;
- ``nbagent --version``: print the version;
- ``nbagent report RUN.json [-o RUN.html] [--task ID] [--title TEXT]``: write one
  self-contained HTML file of a saved run (``runner.save(...)``); no worker or model needed.
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbagent", description="nbagent: step-wise LLM agents for Jupyter.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="write a self-contained HTML report of a saved run",
        description="Write one self-contained HTML file (DAG, every step, transcript, tokens, "
        "timings, errors) of a run saved with runner.save(path). It opens offline in a browser.",
    )
    report.add_argument("run", help="the saved run (.json)")
    report.add_argument("-o", "--output", help="the HTML file to write (default: the run's name with .html)")
    report.add_argument("--task", help="only this task id (default: every task of the run)")
    report.add_argument("--title", help="the page title")
    return parser


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nbagent.persist import PersistError
    from nbagent.report import load_for_report, write_report

    output = args.output or str(Path(args.run).with_suffix(".html"))
    try:
        runner = load_for_report(args.run)
        path = write_report(runner, args.task, output, title=args.title)
    except (PersistError, KeyError, OSError) as err:
        print(f"nbagent report: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import nbagent

    if args.version:
        print(nbagent.__version__)
        return 0
    if args.command == "report":
        return _report(args)
    from nbagent import FnAgentWorker

    runner = FnAgentWorker(lambda s: (f"echo: {s['input']}", True)).as_agent()
    print(runner.chat("hello from nbagent"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
