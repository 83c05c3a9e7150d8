"""LocalLLM: the real small model on llama.cpp's server, and what nbagent adds to a real step.

Prints: the model file's sha256 check, the server's start (process up, model loaded, port
open), generation speed (tokens/s, one thread), and nbagent's overhead per ReAct step: a step's
wall time minus the time spent inside the model call (``LLM._achat``: the openai client, HTTP,
llama.cpp), as a share of the step (target: under 2%). Steps are real ReAct tool calls (a
grammar keeps the model on the format, so every step is the same kind of work). Asserts nothing.
"""

from __future__ import annotations

import statistics
import time

from nbagent import ChatMessage, ReActAgent
from nbagent.llms import local
from nbagent.llms.local import LocalLLM

N_STEPS = 12
CALL_ADD = (
    'root ::= "Thought: " [a-z ]{1,30} "\\nAction: add\\nAction Input: {\\"a\\": " [0-9]{1,2} '
    '", \\"b\\": " [0-9]{1,2} "}"'
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> None:
    entry = local.LOCAL_MODELS["smollm2-135m"]
    t0 = time.perf_counter()
    local.resolve_model(entry.name)
    print(f"model file sha256 check (cold, {entry.filename}): {time.perf_counter() - t0:.3f} s")
    t0 = time.perf_counter()
    llm = LocalLLM(max_tokens=64)
    total = time.perf_counter() - t0
    print(f"server start to ready (child process, load, port): {llm.load_seconds:.2f} s; LocalLLM() total {total:.2f} s")
    try:
        msgs = [ChatMessage(role="user", content="Write a long story about a robot.")]
        llm.chat(msgs, max_tokens=8)  # warm
        speeds = []
        for _ in range(3):
            r = llm.chat(msgs, max_tokens=96, extra_body={"ignore_eos": True})
            assert r.usage is not None and r.latency_s
            speeds.append(r.usage.completion_tokens / r.latency_s)
        print(f"generation, 96 tokens, threads={llm.threads}: {statistics.median(speeds):.1f} tokens/s "
              "(median of 3, prompt processing included)")

        inner: list[float] = []
        achat = llm._achat

        async def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return await achat(*args, **kwargs)
            finally:
                inner.append(time.perf_counter() - start)

        llm._achat = timed  # type: ignore[method-assign]
        llm.additional_kwargs["extra_body"] = {"grammar": CALL_ADD}
        agent = ReActAgent.from_tools([add], llm=llm, max_iterations=N_STEPS + 5)
        task = agent.create_task("What is 17 + 25?")
        agent.run_step(task)  # warm: first prompt, imports
        inner.clear()
        walls = []
        for _ in range(N_STEPS):
            t0 = time.perf_counter()
            agent.run_step(task)
            walls.append(time.perf_counter() - t0)
        over = [w - m for w, m in zip(walls, inner)]
        share = [o / w for o, w in zip(over, walls)]
        print(f"ReAct step against the server: median {statistics.median(walls) * 1000:.0f} ms, "
              f"of which nbagent {statistics.median(over) * 1000:.2f} ms = "
              f"{statistics.median(share) * 100:.2f}% (max {max(share) * 100:.2f}%, {N_STEPS} steps; target < 2%)")
    finally:
        llm.close()


if __name__ == "__main__":
    main()
