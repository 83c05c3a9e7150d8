"""Model-written text that used to be slow: how long parsing it takes now.

- an 80 KB ReAct reply streamed token by token through ``ReActAgentWorker.astream_step``
  (re-searching the whole text per chunk made it quadratic: 5-10 s);
- an 80 KB fenced reply of blanks (a lazy regex before the closing fence backtracked: 4.9 s);
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


if __name__ == "__main__":
    print(f"80 KB ReAct reply streamed through a step: {streamed_reply():.3f} s")
    print(f"80 KB fenced reply of blanks parsed:       {fenced_blanks():.3f} s")
