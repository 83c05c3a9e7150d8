"""Run every benchmark and print its figures (``make bench``)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent

for name in ["bench_import.py", "bench_runner.py", "bench_step.py", "bench_react.py", "bench_memory.py", "bench_parallel.py", "bench_hostile.py", "bench_mcp.py",
             "bench_autosave.py", "bench_live_graph.py", "bench_panel.py", "bench_retained.py", "bench_local.py", "bench_tracing.py"]:
    print(f"== {name}")
    subprocess.run([sys.executable, str(HERE / name)], check=True, cwd=HERE)
