"""``nbagent``: a short offline self-check, and ``nbagent report run.json -o run.html``.

- ``nbagent`` (or ``python -m nbagent``): run an offline agent end to end;
- ``nbagent --version``: print the version;
- ``nbagent report RUN.json [-o RUN.html] [--task ID] [--title TEXT]``: write one
  self-contained HTML file of a saved run (``runner.save(...)``, or a run store); no worker or
  model needed. Exit status 0: written; 1: written, but damaged tasks of the run were left out
  (a warning line names them); 2: nothing written (one error line says why).
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
    report.add_argument("run", help="the saved run (.json) or run store (.db)")
    report.add_argument("-o", "--output", help="the HTML file to write (default: the run's name with .html)")
    report.add_argument("--task", help="only this task id (default: every task of the run)")
    report.add_argument("--title", help="the page title")
    report.add_argument("--run-id", help="in a run store (.db): this run (default: the newest)")
    return parser


def _report(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from nbagent.persist import PersistError
    from nbagent.report import load_for_report, write_report
    from nbagent.store.damage import one_line

    output = args.output or str(Path(args.run).with_suffix(".html"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runner = load_for_report(args.run, args.run_id)
            path = write_report(runner, args.task, output, title=args.title)
        except (PersistError, KeyError, OSError) as err:
            text = err.args[0] if isinstance(err, KeyError) and err.args else err
            return _say(f"error: {one_line(str(text), 2000)}{_other_runs(args.run, err)}", 2)
        except Exception as err:  # noqa: BLE001 - one line, never a traceback (a bug shows its type)
            return _say(f"error: {args.run}: could not be read ({type(err).__name__}: {one_line(str(err))})", 2)
    for w in caught:
        _say(f"warning: {one_line(str(w.message), 2000)}", 0)
    print(f"wrote {path}")
    return 1 if runner.skipped_tasks else 0


def _other_runs(path: str, err: BaseException) -> str:
    """For a damaged run of a store: the store's other runs, which --run-id reports."""
    from nbagent.store import DamagedRunError, RunStore, is_store_path

    if not isinstance(err, DamagedRunError) or err.run is None or not is_store_path(path):
        return ""
    try:
        with RunStore(path) as store:
            others = [r.run_id for r in store.runs() if r.run_id != err.run and r.damaged is None]
    except Exception:  # noqa: BLE001 - a hint only
        return ""
    return f"; its other runs: {', '.join(others)} (--run-id ID reports one)" if others else ""


def _say(text: str, status: int) -> int:
    print(f"nbagent report: {text}", file=sys.stderr)
    return status


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
