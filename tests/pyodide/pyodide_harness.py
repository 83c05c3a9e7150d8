"""Run a Python scenario in Pyodide under Node, offline, with nbagent installed from its wheel.

``run_scenario(path)`` collects the wheels (``lite/collect_wheels.py``: npm's Pyodide, nbagent's
wheel built from this checkout, the pinned dependency wheels, cached in ``build/lite/wheels``),
then runs ``run_pyodide.mjs``, which blocks the network, installs them with micropip and
awaits the scenario's ``main()``. Returns the runner's record: the scenario's value (or its
error), the network attempts, the probe results, what micropip installed and timings.

``python tests/pyodide/pyodide_harness.py SCENARIO.py`` prints that record as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUNNER = HERE / "run_pyodide.mjs"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lite.collect_wheels import Wheelhouse, collect  # noqa: E402

REQUIRED = os.environ.get("REQUIRE_PYODIDE") == "1"
NODE_MAJOR_MIN = 18


def node_problem() -> str | None:
    """Why Node cannot run Pyodide here, or None."""
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        return "node and npm are not on PATH (Node.js 18+ runs the Pyodide test)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < NODE_MAJOR_MIN:
        return f"node {version} is too old: Pyodide needs Node.js {NODE_MAJOR_MIN}+"
    return None


def wheelhouse() -> Wheelhouse:
    return collect()


#: Node 20 runs WebAssembly stack switching (JSPI: ``pyodide.ffi.run_sync``) only behind this
#: flag; Chromium has it on. Without it ``can_run_sync()`` is False: the path with no JSPI.
JSPI_NODE_ARGS = ("--experimental-wasm-stack-switching",)


def run_scenario(
    scenario: Path,
    house: Wheelhouse | None = None,
    *,
    only: str | None = None,
    node_args: tuple[str, ...] = (),
    timeout_s: float = 240.0,
    allow: tuple[str, ...] = (),
    params: Any = None,
) -> dict[str, Any]:
    """``allow``: loopback origins (``http://127.0.0.1:PORT``) fetch may reach, a test's own
    server; ``params``: a JSON value the scenario reads as ``js.scenarioParams`` (JSON text)."""
    house = house or wheelhouse()
    with tempfile.TemporaryDirectory(prefix="nbagent-pyodide-") as tmp:
        out = Path(tmp) / "result.json"
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({
            "pyodide": str(house.pyodide_dir),
            "wheels": str(house.folder),
            "scenario": str(Path(scenario).resolve()),
            "out": str(out),
            "only": only,
            "allow": list(allow),
            "params": params,
        }))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HTTP_PROXY", "HTTPS_PROXY"))}
        start = time.monotonic()
        proc = subprocess.run(
            ["node", *node_args, str(RUNNER), str(config)], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp
        )
        wall = time.monotonic() - start
        if not out.is_file():
            raise RuntimeError(
                f"node exited with {proc.returncode} and wrote no result:\n{proc.stderr[-4000:]}"
            )
        record: dict[str, Any] = json.loads(out.read_text())
        record["wall_s"] = round(wall, 2)
        record["node_exit"] = proc.returncode
        return record


def probe_names(scenario: Path) -> list[str]:
    """The names a probe scenario runs, read from its ``probes`` list (``("name", fn)`` pairs)."""
    import ast

    names = []
    for node in ast.walk(ast.parse(scenario.read_text(encoding="utf-8"))):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "probes":
            names = [elt.elts[0].value for elt in node.value.elts]  # type: ignore[union-attr]
    return names


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Run a scenario in Pyodide under Node, offline.")
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--each", action="store_true", help="run each probe in a fresh Pyodide")
    parser.add_argument("--jspi", action="store_true", help=f"node {' '.join(JSPI_NODE_ARGS)}: run_sync works")
    args = parser.parse_args(argv)
    node_args = JSPI_NODE_ARGS if args.jspi else ()
    if not args.each:
        record = run_scenario(args.scenario, node_args=node_args)
        if record.get("error") is None:
            record.pop("logs", None)
        print(json.dumps(record, indent=2))
        return 0 if record.get("error") is None else 1
    house = wheelhouse()
    merged: dict[str, Any] = {}
    for name in probe_names(args.scenario):
        record = run_scenario(args.scenario, house, only=name, node_args=node_args)
        part = record.get("value") or record.get("partial") or {}
        merged[name] = part.get(name, record.get("error"))
        print(f"{name}: {merged[name]}", file=sys.stderr, flush=True)
    print(json.dumps(merged, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
