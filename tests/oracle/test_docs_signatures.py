"""Small signatures the docs notebooks use (issue 23, item 5): ``partial_dict`` of the function
components, a task's ``callback_manager`` (passed on to a ToolRunnerComponent in the
query-pipeline notebook; no effect in nbagent), ``AgentChatResponse("text")``. Each runs on
llama-index-core 0.12.52 and on nbagent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.oracle.docs_api import docs_both
from tests.oracle.test_docs_query_pipeline_agent import QUESTION, sql_tool


def test_item5_stateful_fn_component_takes_partial_dict() -> None:
    seen = []
    for api in docs_both():
        def fn(state: dict[str, Any], input: str, tools: list[str]) -> str:
            return f"{input} with {tools}"

        component = api.StatefulFnComponent(fn=fn, partial_dict={"tools": ["a", "b"]})
        seen.append(component.run_component(input="x")["output"])
    assert seen[0] == "x with ['a', 'b']"
    assert seen[1] == seen[0]


def test_item5_a_task_has_a_callback_manager() -> None:
    seen = []
    for api in docs_both():
        agent = api.RunnerReActAgent.from_tools([api.FunctionTool.from_defaults(fn=sql_tool)], llm=api.llm([], function_calling=False))
        task = agent.create_task(QUESTION)
        seen.append(hasattr(task, "callback_manager"))
    assert seen == [True, True]


def test_item5_agent_chat_response_takes_the_response_positionally() -> None:
    seen = []
    for api in docs_both():
        r = api.AgentChatResponse("The answer.")
        s = api.AgentChatResponse("Two.", [])
        seen.append((str(r), r.response, r.sources, str(s), s.sources))
    assert seen[0] == ("The answer.", "The answer.", [], "Two.", [])
    assert seen[1] == seen[0]


def test_item5_an_answer_given_twice_is_an_error_on_nbagent() -> None:
    import nbagent

    with pytest.raises(TypeError, match="got response twice"):
        nbagent.AgentChatResponse("a", response="b")
    with pytest.raises(TypeError, match="takes response and sources by position, got 3"):
        nbagent.AgentChatResponse("a", [], {})
