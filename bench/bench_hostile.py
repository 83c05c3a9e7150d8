"""Model-written text that used to be slow: how long parsing it takes now.

- an 80 KB ReAct reply streamed token by token through ``ReActAgentWorker.astream_step``
  (re-searching the whole text per chunk made it quadratic: 5-10 s);
- an 80 KB fenced reply of blanks (a lazy regex before the closing fence backtracked: 4.9 s);
- a plan argument ``1+1+...`` (a RecursionError before) and a plan of 3,000 chained calls.
"""

from __future__ import annotations

import time

from nbagent import AgentRunner, ScriptedLLM
from nbagent.workers.react import ReActAgentWorker, ReActOutputParser

SIZE = 80_000


def streamed_reply() -> float:
    thought = "Thought: I am thinking about it at some length.\n" * (SIZE // 49)
    llm = ScriptedLLM([thought + "Answer: done"], keep_requests=False)
    runner = AgentRunner(ReActAgentWorker.from_tools([], llm=llm))
    task = runner.create_task("Think hard.")
    start = time.perf_counter()
    out = runner.stream_step(task)
    text = out.output.get_response().response if hasattr(out.output, "get_response") else str(out.output)
    took = time.perf_counter() - start
    assert text.strip().endswith("done"), text[-40:]
    return took


def fenced_blanks() -> float:
    start = time.perf_counter()
    try:
        ReActOutputParser().parse("```\n" + " " * SIZE + "\nx")
    except ValueError:
        pass
    return time.perf_counter() - start


def plans() -> tuple[float, float]:
    from nbagent import FunctionTool
    from nbagent.workers.planner_parser import PlanError, parse_plan

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    tools = {"add": FunctionTool.from_defaults(add)}
    start = time.perf_counter()
    try:
        parse_plan("1. add(a=" + "+".join(["1"] * 20_000) + ", b=1)", tools)
    except PlanError:
        pass
    deep = time.perf_counter() - start
    chain = "\n".join(["1. add(a=1, b=2)"] + [f"{i}. add(a=${i - 1}, b=1)" for i in range(2, 3001)])
    start = time.perf_counter()
    parse_plan(chain + "\n3001. join()", tools)
    return deep, time.perf_counter() - start


if __name__ == "__main__":
    print(f"80 KB ReAct reply streamed through a step: {streamed_reply():.3f} s")
    print(f"80 KB fenced reply of blanks parsed:       {fenced_blanks():.3f} s")
    deep, chain = plans()
    print(f"plan argument 1+1+... (20,000 terms):      {deep:.3f} s (a PlanError)")
    print(f"plan of 3,000 chained calls parsed:        {chain:.3f} s")
