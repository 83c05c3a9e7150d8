"""Input on a task's first step (issue 29, item 2), on llama_index.core 0.12.52 and on nbagent.

``run_step(task_id, input="Hint: ...")`` on a new task: the reference puts the hint in the
step's input, which its workers send in place of the question (the model never sees the
question); nbagent sends the question, then the hint. The same code runs on both; only what
the model was sent differs, and this test says how.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.oracle.ref import both, reference, nbagent_api

QUESTION = "What is 121 * 3?"
HINT = "Hint: use the multiply tool."


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the result."""
    return a * b


def _first_request_users(api: SimpleNamespace, worker_name: str, script: list[Any], function_calling: bool) -> list[str]:
    llm = api.llm(script, function_calling=function_calling)
    worker = getattr(api, worker_name).from_tools([api.FunctionTool.from_defaults(fn=multiply)], llm=llm)
    agent = api.AgentRunner(worker)
    task = agent.create_task(QUESTION)
    agent.run_step(task.task_id, input=HINT)
    first = api.requests(llm)[0]
    return [str(m.content) for m in first if m.role == api.MessageRole.USER]


CASES = [
    ("FunctionCallingAgentWorker", ["363"], True),
    ("ReActAgentWorker", ["Thought: I can answer without using any more tools.\nAnswer: 363"], False),
]


@pytest.mark.parametrize("worker_name,script,function_calling", CASES, ids=["function_calling", "react"])
def test_first_step_input_replaces_the_question_on_the_reference_not_on_nbagent(
    worker_name: str, script: list[Any], function_calling: bool
) -> None:
    ref = _first_request_users(reference(), worker_name, script, function_calling)
    ours = _first_request_users(nbagent_api(), worker_name, script, function_calling)
    # the reference: the hint alone, the question is lost
    assert any(HINT in text for text in ref)
    assert not any(QUESTION in text for text in ref), ref
    # nbagent: the question first, then the hint
    assert QUESTION in ours[0] and HINT not in ours[0]
    assert any(HINT in text for text in ours[1:]), ours


@pytest.mark.parametrize("worker_name,script,function_calling", CASES, ids=["function_calling", "react"])
def test_without_input_both_send_the_question(worker_name: str, script: list[Any], function_calling: bool) -> None:
    for api in both():
        llm = api.llm(script, function_calling=function_calling)
        worker = getattr(api, worker_name).from_tools([api.FunctionTool.from_defaults(fn=multiply)], llm=llm)
        agent = api.AgentRunner(worker)
        agent.run_step(agent.create_task(QUESTION).task_id)
        users = [str(m.content) for m in api.requests(llm)[0] if m.role == api.MessageRole.USER]
        assert QUESTION in users[0] and len(users) == 1, (api.name, users)
