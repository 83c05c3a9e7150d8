"""Cold import time of nbagent (fresh interpreter each run; the interpreter's own start is subtracted)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def _time(code: str, runs: int = 7) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    base = _time("pass")
    bare = _time("import nbagent") - base
    api = _time("from nbagent import AgentRunner, ReActAgent, FunctionTool, ScriptedLLM; import nbagent.agents, nbagent.workers.react") - base
    heavy = _time("import nbagent, sys; assert not {'openai','ipywidgets','graphviz'} & set(sys.modules)")
    print(f"import nbagent (cold):                         {bare * 1000:7.1f} ms")
    print(f"import AgentRunner+ReActAgent+FunctionTool:    {api * 1000:7.1f} ms   (target <= 150 ms)")
    print(f"(no openai/ipywidgets/graphviz at import: checked, {heavy * 1000:.0f} ms incl. interpreter)")


if __name__ == "__main__":
    main()
