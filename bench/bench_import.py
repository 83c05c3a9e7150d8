"""Cold import time of nbagent: ``import nbagent`` and the first names people use, minus pydantic.

Each figure is a fresh interpreter, timed on the wall clock and in CPU time (user + system, the
figure to read on a busy machine, where the wall clock also counts waiting for a core). The four commands (nothing, pydantic, nbagent, nbagent and
its first names) run interleaved, so a busy moment of the machine spoils all four alike; the
median and the minimum of the runs are printed. Bytecode is cached in a temporary directory
first, as it is on a user's machine (a machine that sets PYTHONDONTWRITEBYTECODE would
otherwise time the compiling of every module). Issue 22's budget: nbagent and its first names
in <= 60 ms over pydantic's own import. That import defines no pydantic model and loads no
pydantic at all (checked: the first task, message or tool made does), so subtracting pydantic's
import gives less than nothing; the row above it is the whole import, minus only the interpreter.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 15
CODES = {
    "python": "pass",
    "pydantic": "import pydantic",
    "nbagent": "import nbagent",
    "api": "import nbagent; from nbagent import AgentRunner, ReActAgent, FunctionTool",
}
HEAVY = (
    "import nbagent, sys; from nbagent import AgentRunner, ReActAgent, FunctionTool;"
    " assert not {'openai', 'ipywidgets', 'graphviz', 'sqlite3', 'asyncio', 'pydantic', 'pydantic.main'}"
    " & set(sys.modules)"
)


def _run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nbagent-pyc-") as cache:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for code in (CODES["api"], CODES["pydantic"], HEAVY):  # compiles once; checks nothing heavy loads
            _run(code, env)
        wall: dict[str, list[float]] = {name: [] for name in CODES}
        cpu: dict[str, list[float]] = {name: [] for name in CODES}
        for _ in range(RUNS):
            for name, code in CODES.items():
                w, c = _run(code, env)
                wall[name].append(w * 1e3)
                cpu[name].append(c * 1e3)
    print(f"cold import, median of {RUNS} interleaved runs, bytecode cached, the interpreter's start subtracted")
    print(f"load average {os.getloadavg()[0]:.2f}{' '*16}wall ms   CPU ms")
    rows = [
        ("import pydantic", "pydantic", "python"),
        ("import nbagent", "nbagent", "python"),
        ("+ AgentRunner, ReActAgent, FunctionTool", "api", "python"),
        ("the same minus pydantic (budget <= 60)", "api", "pydantic"),
    ]
    # (nbagent's first names load no pydantic now: the last row can go below zero; the budget
    # reads "the whole import at most 60 ms more than import pydantic alone")
    for label, name, base in rows:
        w = statistics.median(wall[name]) - statistics.median(wall[base])
        c = statistics.median(cpu[name]) - statistics.median(cpu[base])
        print(f"  {label:<40} {w:7.1f}  {c:7.1f}")
    print("  (no openai, ipywidgets, graphviz, sqlite3, asyncio or pydantic loaded by that import: checked)")
    whole = statistics.median(wall["api"]) - statistics.median(wall["python"])
    alone = statistics.median(wall["pydantic"]) - statistics.median(wall["python"])
    verdict = "met" if whole <= alone + 60 else "NOT met"
    print(f"budget: the whole import {whole:.1f} ms <= import pydantic alone {alone:.1f} ms + 60 ms: {verdict}")


if __name__ == "__main__":
    main()
