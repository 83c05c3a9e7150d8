"""LlamaIndex's "Step-wise, Controllable Agents" and "Controllable Agents for RAG" notebooks,
ported (issue 23, item 10): a function-calling agent and a ReAct agent run end to end and step
by step (create_task, run_step, is_last, finalize_response), and a ReAct task steered in the
middle by input given to a step. The notebooks' OpenAIAgent is core's FunctionCallingAgent on
the reference side (llama-index-agent-openai is not part of core); the 10-Q indexes are
function tools. Models are scripted.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call


def multiply(a: int, b: int) -> int:
    """Multiple two integers and returns the result integer"""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers and returns the result integer"""
    return a + b


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _tools(api: DocsApi) -> list[Any]:
    return [api.FunctionTool.from_defaults(fn=multiply), api.FunctionTool.from_defaults(fn=add)]


def _sources(response: Any) -> list[tuple[Any, ...]]:
    return [(s.tool_name, s.content, s.raw_output) for s in response.sources]


FC_SCRIPT = ["Hello! How can I assist you today?", tool_call("multiply", a=121, b=3), tool_call("add", a=363, b=42), "The result of (121 * 3) + 42 is 405."]


def test_function_calling_agent_end_to_end_then_step_by_step() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(FC_SCRIPT + FC_SCRIPT[1:])
        agent = api.AgentRunner(api.FunctionCallingAgentWorker.from_tools(_tools(api), llm=llm, verbose=True))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            hi = agent.chat("Hi")
            response = agent.chat("What is (121 * 3) + 42?")
            task = agent.create_task("What is (121 * 3) + 42?")
            steps = []
            step_output = agent.run_step(task.task_id)
            steps.append((step_output.is_last, _sources(step_output.output), len(step_output.next_steps)))
            step_output = agent.run_step(task.task_id)
            steps.append((step_output.is_last, _sources(step_output.output), len(step_output.next_steps)))
            step_output = agent.run_step(task.task_id)
            steps.append((step_output.is_last, str(step_output.output), len(step_output.next_steps)))
            final = agent.finalize_response(task.task_id)
        seen.append(
            {
                "hi": (str(hi), hi.sources),
                "response": (str(response), _sources(response)),
                "steps": steps,
                "final": (str(final), _sources(final)),
                "printed": _UUID.sub("<id>", out.getvalue()),
                "memory": roles_contents(agent.memory.get_all()),
            }
        )
    ref, nb = seen
    assert ref["hi"] == ("Hello! How can I assist you today?", [])
    assert ref["response"] == ("The result of (121 * 3) + 42 is 405.", [("multiply", "363", 363), ("add", "405", 405)])
    assert [s[0] for s in ref["steps"]] == [False, False, True]
    assert ref["final"] == ref["response"]
    assert nb == ref


REACT_SCRIPT = [
    "Thought: The user has greeted me.\nAnswer: Hello! How can I assist you today?",
    'Thought: I need to multiply first.\nAction: multiply\nAction Input: {"a": 121, "b": 3}',
    'Thought: Now add 42.\nAction: add\nAction Input: {"a": 363, "b": 42}',
    "Thought: I can answer without using any more tools.\nAnswer: (121 * 3) + 42 equals 405.",
]


def _pythonish(text: str) -> str:
    """nbagent writes an action's input back as JSON, the reference as a Python dict (a
    deliberate difference, see test_oracle_runner): compare with that undone."""
    return re.sub(r'\{"a": (\d+), "b": (\d+)\}', r"{'a': \1, 'b': \2}", text)


def test_react_agent_end_to_end_then_step_by_step() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(REACT_SCRIPT + REACT_SCRIPT[1:], function_calling=False)
        agent = api.RunnerReActAgent.from_tools(_tools(api), llm=llm, verbose=True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            hi = agent.chat("Hi")
            response = agent.chat("What is (121 * 3) + 42?")
            task = agent.create_task("What is (121 * 3) + 42?")
            outputs = []
            while True:
                step_output = agent.run_step(task.task_id)
                outputs.append((str(step_output.output), step_output.is_last))
                if step_output.is_last:
                    break
            final = agent.finalize_response(task.task_id)
        seen.append(
            {
                "hi": str(hi),
                "response": (str(response), _sources(response)),
                "outputs": outputs,
                "final": str(final),
                "printed": _pythonish(_UUID.sub("<id>", out.getvalue())),
            }
        )
    ref, nb = seen
    assert ref["hi"] == "Hello! How can I assist you today?"
    assert ref["response"] == ("(121 * 3) + 42 equals 405.", [("multiply", "363", 363), ("add", "405", 405)])
    assert ref["outputs"] == [("Observation: 363", False), ("Observation: 405", False), ("(121 * 3) + 42 equals 405.", True)]
    assert "Action Input: {'a': 121, 'b': 3}" in ref["printed"]
    assert nb == ref


def march_2022(input: str) -> str:
    """Provides information about Uber quarterly financials ending March 2022"""
    return {"R&D expenditures": "R&D rose from $515M to $587M.", "revenue": "Revenue was $6,854M."}.get(input, "No data.")


def june_2022(input: str) -> str:
    """Provides information about Uber quarterly financials ending June 2022"""
    return {"R&D expenditures": "R&D was $667M.", "revenue": "Revenue was $8,073M."}.get(input, "No data.")


def test_a_react_task_steered_by_input_given_to_a_step() -> None:
    """The RAG notebook: run a step, look at it, then steer the task with ``input=`` and
    finish it; the model reads the steering text, the final answer is what it wrote after."""
    script = [
        'Thought: Start with March.\nAction: march_2022\nAction Input: {"input": "R&D expenditures"}',
        'Thought: Now June, as asked.\nAction: june_2022\nAction Input: {"input": "R&D expenditures"}',
        "Thought: I can answer without using any more tools.\nAnswer: R&D rose from $587M in March to $667M in June.",
    ]
    seen = []
    for api in docs_both():
        llm = api.llm(script, function_calling=False)
        tools = [api.FunctionTool.from_defaults(fn=march_2022), api.FunctionTool.from_defaults(fn=june_2022)]
        agent = api.RunnerReActAgent.from_tools(tools, llm=llm, verbose=False, max_iterations=20)
        task = agent.create_task("Analyze the changes in R&D expenditures and revenue")
        first = agent.run_step(task.task_id)
        second = agent.run_step(task.task_id, input="What about June? Use the june_2022 tool.")
        last = agent.run_step(task.task_id)
        response = agent.finalize_response(task.task_id)
        steered = [c for r, c in roles_contents(api.requests(llm)[1]) if "What about June?" in (c or "")]
        seen.append(
            (
                [str(first.output), str(second.output), str(last.output)],
                [first.is_last, second.is_last, last.is_last],
                str(response),
                _sources(response),
                len(steered) > 0,
                len(agent.get_completed_steps(task.task_id)),
            )
        )
    ref, nb = seen
    assert ref[0] == ["Observation: R&D rose from $515M to $587M.", "Observation: R&D was $667M.", "R&D rose from $587M in March to $667M in June."]
    assert ref[1] == [False, False, True] and ref[4] is True
    assert nb == ref
