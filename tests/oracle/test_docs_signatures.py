"""Small signatures the docs notebooks use (issue 23, item 5): ``partial_dict`` of the function
components, a task's ``callback_manager`` (passed on to a ToolRunnerComponent in the
query-pipeline notebook; no effect in nbagent), ``AgentChatResponse("text")``; and what the
notebooks print of a tool (found while porting them): calling a tool gives a ToolOutput, a
tool's ``fn_schema_str``, the very objects given in an FnAgentWorker's ``initial_state``. Each
runs on llama-index-core 0.12.52 and on nbagent; two differences kept on purpose are asserted
as such (a ToolOutput's repr, a tool's default description)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.oracle.docs_api import docs_both
from tests.oracle.test_docs_query_pipeline_agent import QUESTION, sql_tool
from tests.oracle.test_docs_react_return_direct import multiply  # (a module without postponed annotations)


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


def test_other_calling_a_function_tool_gives_a_tool_output() -> None:
    """``tool(input=...)`` returns a ToolOutput on the reference (the notebooks print it);
    nbagent's returns the function's raw value."""
    seen = []
    for api in docs_both():
        out = api.FunctionTool.from_defaults(fn=sql_tool)(input="x")
        seen.append((type(out).__name__, getattr(out, "content", None), str(out)))
    assert seen[0] == ("ToolOutput", sql_tool("x"), sql_tool("x"))
    assert seen[1] == seen[0]


def test_other_fn_agent_worker_uses_the_objects_given_in_initial_state() -> None:
    """The custom-agent notebook puts its ``llm`` and router in ``initial_state``: the
    reference's function gets those very objects (the model the user holds sees the calls);
    nbagent deep-copies ``initial_state`` per task, so the function gets copies."""
    from tests.oracle.test_docs_custom_agent import run_fn_agent

    seen = []
    for api in docs_both():
        _answer, _printed, llm = run_fn_agent(api)
        seen.append(len(api.requests(llm)))
    assert seen == [2, 2]


def test_other_a_tools_fn_schema_str_as_the_llm_compiler_notebook_prints_it() -> None:
    """The LLM-compiler notebook's one cell that needs no pack: ``tool.metadata.fn_schema_str``
    (and ``get_parameters_dict()``, which the reference's agents send as the tool's schema)."""
    seen = []
    for api in docs_both():
        md = api.FunctionTool.from_defaults(fn=multiply).metadata
        seen.append((md.fn_schema_str, md.get_parameters_dict()))
    schema = {"properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}}, "required": ["a", "b"], "type": "object"}
    assert seen[0] == ('{"properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}}, "required": ["a", "b"], "type": "object"}', schema)
    assert seen[1] == seen[0]


def test_a_tool_outputs_repr_differs_on_purpose() -> None:
    """The query-pipeline notebook observes ``str({"output": ToolOutput(...)})``. The reference's
    repr lists ``blocks=[TextBlock(...)]`` and ``raw_input={'args': (), 'kwargs': {...}}``;
    nbagent's lists ``content=`` and ``raw_input`` is the call's arguments (README: kept
    different on purpose). The rest of the repr says the same."""
    seen = []
    for api in docs_both():
        tool = api.FunctionTool.from_defaults(fn=sql_tool)
        seen.append(repr(api.ToolRunnerComponent([tool]).run_component(tool_name="sql_tool", tool_input={"input": "x"})))
    ref, nb = seen
    text = repr(sql_tool("x"))
    assert ref.startswith(f"{{'output': ToolOutput(blocks=[TextBlock(block_type='text', text={text})], tool_name='sql_tool', raw_input={{'args': (), 'kwargs': {{'input': 'x'}}}}")
    assert nb.startswith(f"{{'output': ToolOutput(content={text}, tool_name='sql_tool', raw_input={{'input': 'x'}}")
    assert ref.endswith("is_error=False)}") and f"raw_output={text}" in ref and f"raw_output={text}" in nb


def test_a_function_tools_default_description_differs_on_purpose() -> None:
    """The reference's default description starts with the function's signature; nbagent's is
    the docstring alone: the model gets the arguments from the tool's JSON schema, sent with
    it, so the signature would say the same twice (and change what every prompt shows)."""
    ref, nb = (api.FunctionTool.from_defaults(fn=multiply).metadata.description for api in docs_both())
    assert ref == "multiply(a: int, b: int) -> int\nMultiply two integers and returns the result integer"
    assert nb == "Multiply two integers and returns the result integer"
