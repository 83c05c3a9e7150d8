"""``python -m nbagent``: a short self-check that runs an offline agent end to end."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nbagent", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    import nbagent

    if args.version:
        print(nbagent.__version__)
        return 0
    from nbagent import FnAgentWorker

    runner = FnAgentWorker(lambda s: (f"echo: {s['input']}", True)).as_agent()
    print(runner.chat("hello from nbagent"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
