"""Runs inside Pyodide (tests/pyodide/run_pyodide.mjs): the part of nbagent that works there
with no browser runtime yet, i.e. everything that needs no thread.

``main()`` returns plain facts; ``test_pyodide.py`` asserts on them. The sync API
(``run_step``, ``chat``, ...) is not here: it needs a thread today (see probe_sync_api.py).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from typing import Any

HOSTILE = '<script>alert("x")</script> & "quotes"'


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def shout(text: str) -> str:
    """Return text a model or tool could send: markup must stay text in every view."""
    return HOSTILE


def _react_llm(replies: list[str]) -> Any:
    from nbagent import ScriptedLLM

    return ScriptedLLM(replies)


def _call(name: str, args: str) -> str:
    return f"Thought: I need {name}.\nAction: {name}\nAction Input: {args}"


async def quick_start(facts: dict[str, Any]) -> None:
    """The quick start with the async API: a tool step, undo it, steer it, finish."""
    from nbagent import FunctionTool, ReActAgent, seed_ids

    seed_ids(0)
    llm = _react_llm([
        _call("multiply", '{"a": 121, "b": 3}'),
        _call("multiply", '{"a": 121, "b": 4}'),
        "Thought: I can answer without using any more tools.\nAnswer: 121 * 4 is 484.",
    ])
    agent = ReActAgent.from_tools([FunctionTool.from_defaults(multiply)], llm=llm)
    task = agent.create_task("What is 121 * 3?")
    first = await agent.arun_step(task)
    facts["first_step"] = {
        "tool": first.tool_outputs[0].tool_name,
        "observation": first.tool_outputs[0].content,
        "is_last": first.is_last,
        "upcoming": len(agent.get_upcoming_steps(task)),
    }
    requeued = agent.undo_step(task, input="Make it 121 * 4.")
    facts["after_undo"] = {
        "completed": len(agent.get_completed_steps(task)),
        "upcoming": len(agent.get_upcoming_steps(task)),
        "requeued_is_first": requeued.step_id == first.task_step.step_id,
        "input": requeued.input,
    }
    again = await agent.arun_step(task)
    last = await agent.arun_step(task)
    response = agent.finalize_response(task)
    facts["finished"] = {
        "observation": again.tool_outputs[0].content,
        "is_last": last.is_last,
        "response": str(response),
        "memory": [m.role.value for m in agent.chat_history],
    }
    graph = agent.graph(task)
    facts["dot"] = graph.source
    facts["graph_mimetypes"] = sorted(graph._repr_mimebundle_())
    facts["task_html"] = agent.get_task(task.task_id)._repr_html_()
    facts["step_html"] = last._repr_html_()
    facts["runner_html"] = agent._repr_html_()
    facts["live_text"] = str(agent.live_graph(task))


async def hostile_text(facts: dict[str, Any]) -> None:
    """A tool's markup is escaped in the HTML views and in DOT."""
    from nbagent import FunctionTool, ReActAgent

    agent = ReActAgent.from_tools(
        [FunctionTool.from_defaults(shout)], llm=_react_llm([_call("shout", '{"text": "hi"}')])
    )
    task = agent.create_task("Say it.")
    out = await agent.arun_step(task)
    facts["hostile"] = {
        "observation": out.tool_outputs[0].content,
        "step_html": out._repr_html_(),
        "task_html": agent.get_task(task.task_id)._repr_html_(),
        "dot": agent.graph(task).source,
    }


def _worker_and_llm(replies: list[str]) -> Any:
    from nbagent import FunctionTool, ReActAgentWorker

    return ReActAgentWorker.from_tools([FunctionTool.from_defaults(multiply)], llm=_react_llm(replies))


async def save_and_load(facts: dict[str, Any], folder: str) -> None:
    """A run saved to JSON mid-task is loaded by a new runner and finished there; a run with
    autosave to SQLite is read back from the file."""
    from nbagent import AgentRunner

    replies = [_call("multiply", '{"a": 6, "b": 7}'), "Thought: Done.\nAnswer: 42."]
    runner = AgentRunner(_worker_and_llm(replies))
    task = runner.create_task("What is 6 * 7?")
    await runner.arun_step(task)
    path = os.path.join(folder, "run.json")
    runner.save(path)
    loaded = AgentRunner.load(path, _worker_and_llm(replies[1:]))
    state = loaded.state_of(task.task_id)
    done = await loaded.arun_step(task.task_id)
    facts["json"] = {
        "file_starts": open(path, encoding="utf-8").read(1),
        "loaded_completed": len(state.completed_steps) - 1,  # before the step run after loading
        "observation": state.completed_steps[0].tool_outputs[0].content,
        "continued_is_last": done.is_last,
        "response": str(loaded.finalize_response(task.task_id)),
    }

    db = os.path.join(folder, "runs.db")
    stored = AgentRunner(_worker_and_llm(replies), autosave=db)
    task2 = stored.create_task("What is 6 * 7?")
    await stored.arun_step(task2)
    await stored.arun_step(task2)
    stored.finalize_response(task2)
    back = AgentRunner.load(db)
    state2 = back.state_of(task2.task_id)
    with sqlite3.connect(db) as conn:
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    facts["sqlite"] = {
        "steps": len(state2.completed_steps),
        "response": str(state2.final_response),
        "finalized": state2.finalized,
        "journal_mode": journal,
        "sqlite_version": sqlite3.sqlite_version,
    }


async def main() -> dict[str, Any]:
    facts: dict[str, Any] = {"platform": sys.platform, "python": sys.version.split()[0]}
    await quick_start(facts)
    await hostile_text(facts)
    with tempfile.TemporaryDirectory() as folder:
        await save_and_load(facts, folder)
    return facts
