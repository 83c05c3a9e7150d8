"""Retained bytes per CustomSimpleAgentWorker step (undo on; issue 22's budget: <= 2,000 B at
2,000 steps) and per finished task, and how an offline (scripted) tool loop's step time grows
over 1,000 steps.

The same workers run on the real LlamaIndex AgentRunner when ``llama_index.core`` is
importable (it keeps no undo history), so the figures compare like with like: "plain" steps
answer and count; "message + source" steps also put a ChatMessage into memory and a
ToolOutput into sources, which both runners rightly keep.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbagent import (  # noqa: E402
    AgentChatResponse,
    AgentRunner,
    ChatMessage,
    CustomSimpleAgentWorker,
    MessageRole,
    ReActAgentWorker,
    ScriptedLLM,
    ToolOutput,
)

STEPS = 5_000
MARK = 2_000  # where issue 22's budget is read
WARM = 200  # steps run once before measuring
CHATS = 500


class Plain(CustomSimpleAgentWorker):
    """One answer per step, a counter in its state: the runner's own cost per step."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        return AgentChatResponse(response="ok"), state["count"] >= 2

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def retained(fn: Any) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep = fn()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del keep
    return after - before


def long_step(state: dict[str, Any], keep: bool, chat: Any, tool: Any, role: Any, response: Any) -> Any:
    """One step of the never-ending worker (the same code on both runners)."""
    state["count"] += 1
    if keep:
        state["memory"].put(chat(role=role.ASSISTANT, content=f"step {state['count']}"))
        state["sources"].append(tool(content=str(state["count"]), tool_name="count", raw_input={}, raw_output=state["count"]))
    return response(response="ok"), False


def per_step(keep: bool = False, steps: int = STEPS, undo: bool = True) -> float:
    class Long(Plain):
        def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
            return long_step(state, keep, ChatMessage, ToolOutput, MessageRole, AgentChatResponse)  # type: ignore[no-any-return]

    def run() -> Any:
        runner = AgentRunner(Long(), keep_history=undo)
        task = runner.create_task("go")

        async def go() -> None:
            for _ in range(steps):
                await runner.arun_step(task)

        asyncio.run(go())
        return runner

    return retained(run) / steps


def llama_index_per_step(keep: bool = False, steps: int = STEPS) -> float | None:
    """The same worker on LlamaIndex's own AgentRunner (None: llama_index not installed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from llama_index.core import Settings
            from llama_index.core.agent import AgentRunner as LIRunner
            from llama_index.core.agent import CustomSimpleAgentWorker as LIWorker
            from llama_index.core.chat_engine.types import AgentChatResponse as LIResponse
            from llama_index.core.llms import ChatMessage as LIMessage
            from llama_index.core.llms import MessageRole as LIRole
            from llama_index.core.llms import MockLLM
            from llama_index.core.tools import ToolOutput as LIToolOutput
    except ImportError:
        return None
    Settings.tokenizer = str.split  # offline: its default tokenizer would download one

    class Long(LIWorker):  # type: ignore[misc, valid-type]
        def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
            return {"count": 0}

        def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> Any:
            return long_step(state, keep, LIMessage, LIToolOutput, LIRole, LIResponse)

        async def _arun_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> Any:
            return self._run_step(state, task, input)

        def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
            pass

    def run() -> Any:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")  # its deprecation notice forces "always": hush it
            runner = LIRunner(Long(tools=[], llm=MockLLM()))
        task = runner.create_task("go")

        async def go() -> None:
            for _ in range(steps):
                await runner.arun_step(task.task_id)

        asyncio.run(go())
        return runner

    return retained(run) / steps


def per_chat(max_finished: int | None) -> float:
    def run() -> Any:
        runner = AgentRunner(Plain(), max_finished_tasks=max_finished)
        for i in range(CHATS):
            runner.chat(f"question {i}")
        return runner

    return retained(run) / CHATS


def tool_loop_growth() -> tuple[float, float]:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    act = 'Thought: add.\nAction: add\nAction Input: {"a": 1, "b": 2}'
    replies = [act] * 1000 + ["Thought: done.\nAnswer: 3"]
    worker = ReActAgentWorker.from_tools([add], llm=ScriptedLLM(replies), max_iterations=2000)
    runner = AgentRunner(worker)
    task = runner.create_task("add many times")
    times = []
    for _ in range(1000):
        start = time.perf_counter()
        runner.run_step(task)
        times.append(time.perf_counter() - start)
    first = sorted(times[:100])[50]
    last = sorted(times[-100:])[50]
    return first, last


def react_tool_loop_per_step(steps: int) -> float:
    """Retained bytes per ReAct tool-loop step (undo on): each step's output shows every
    source so far, which must cost O(1) per step (a view), not a copy of them all."""
    act = 'Thought: add.\nAction: add\nAction Input: {"a": 1, "b": 2}'

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    worker = ReActAgentWorker.from_tools([add], llm=ScriptedLLM([act] * steps), max_iterations=steps + 1)

    def run() -> Any:
        runner = AgentRunner(worker)
        task = runner.create_task("add many times")
        for _ in range(steps):
            runner.run_step(task)
        return runner

    return retained(run) / steps


def main() -> None:
    retained(lambda: per_step.__name__)  # warm tracemalloc
    # a short run of each kind first: what the first steps of a process create once (pydantic
    # and nbagent caches, event-loop machinery) is not a cost per step
    per_step(keep=True, steps=WARM)
    print(f"retained per CustomSimpleAgentWorker step (undo on): {per_step(steps=MARK):7.0f} B/step over {MARK:,} steps "
          f"(issue 22's budget: <= 2000)")
    print(f"  over {STEPS:,} steps:                                {per_step():7.0f} B/step")
    print(f"  without undo history (keep_history=False):         {per_step(undo=False):7.0f} B/step")
    print(f"  with a message and a source per step:              {per_step(keep=True):7.0f} B/step")
    li_plain = llama_index_per_step(keep=True, steps=WARM)
    if li_plain is not None:
        li_plain = llama_index_per_step()
        li_keep = llama_index_per_step(keep=True)
        print(f"  LlamaIndex AgentRunner, same worker (no undo):     {li_plain:7.0f} B/step; "
              f"with a message and a source {li_keep:.0f} B/step")
    print(f"retained per finished 2-step chat:                   {per_chat(None):7.0f} B/task over {CHATS} chats")
    print(f"  with max_finished_tasks=10:                        {per_chat(10):7.0f} B/task")
    react_tool_loop_per_step(50)  # warm
    small, big = react_tool_loop_per_step(250), react_tool_loop_per_step(2_000)
    print(f"retained per ReAct tool-loop step (undo on): {small:7.0f} B/step at 250 steps, {big:7.0f} B/step "
          f"at 2,000 ({big / small:.2f}x; target <= 1.3x: flat)")
    try:
        first, last = tool_loop_growth()
    except TypeError:  # a worker without max_iterations
        print("offline tool loop: skipped (ReActAgentWorker has no max_iterations)")
        return
    print(f"offline ReAct tool loop (scripted model): step 1-100 {first * 1e6:7.1f} us, step 901-1000 "
          f"{last * 1e6:7.1f} us ({last / first:.2f}x; target <= 1.3x)")


if __name__ == "__main__":
    main()
