"""``python -m nbagent.demo`` (``make demo``): the quick start, headless and offline.

It runs the README's quick start with its offline model (a tool call, an undo, a re-run, the
answer), then writes ``report.html`` (every step, the DAG, the transcript: one self-contained
file) and ``dag.svg`` (the step graph) into the output folder. The SVG needs Graphviz's
``dot``; without it the demo writes ``dag.dot`` instead and says how to get ``dot``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner
    from nbagent.schema import Task

__all__ = ["run_quickstart", "main"]

QUESTION = "What is 121 * 3?"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def run_quickstart() -> tuple[AgentRunner, Task]:
    """The README's quick start: step, undo, step again, answer, finalize (ids seeded)."""
    from nbagent import ReActAgent, ScriptedLLM
    from nbagent.ids import seeded_ids

    llm = ScriptedLLM([
        'Thought: I need to multiply.\nAction: multiply\nAction Input: {"a": 121, "b": 3}',
        'Thought: Let me check again.\nAction: multiply\nAction Input: {"a": 121, "b": 3}',
        "Thought: I can answer without using any more tools.\nAnswer: 121 * 3 is 363.",
    ])
    with seeded_ids(0):
        agent = ReActAgent.from_tools([multiply], llm=llm)
        task = agent.create_task(QUESTION)
        agent.run_step(task)
        agent.undo_step(task)
        agent.run_step(task)
        agent.run_step(task)
        agent.finalize_response(task)
    return agent, task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbagent.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_output", help="folder for report.html and dag.svg (default: demo_output)")
    args = parser.parse_args(argv)
    from nbagent.report import write_report
    from nbagent.viz.graph import find_dot

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    agent, task = run_quickstart()
    state = agent.state_of(task)
    print(f"task: {task.input}")
    print(f"answer: {state.final_response}")
    print(f"steps: {len(state.steps)} ({len(state.undone_outputs)} undone)")
    report = write_report(agent, task.task_id, out / "report.html", title="nbagent demo: the quick start")
    print(f"wrote {report}")
    graph = agent.graph(task)
    if find_dot() is None:
        dot_path = graph.save(out / "dag.dot")
        print(f"wrote {dot_path}")
        from nbagent.viz.graph import _missing_dot_message

        print(
            f"dag.svg was not written (the report shows the steps as a list instead): "
            f"{_missing_dot_message()}. Then run `make demo` again.",
            file=sys.stderr,
        )
        return 2
    print(f"wrote {graph.save(out / 'dag.svg')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
