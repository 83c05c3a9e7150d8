"""Empty and odd replies as LlamaIndex 0.12.52's workflow agents handle them (issue 23, item 8):
a model stream with no chunk at all is an empty reply (a FunctionAgent's run ends with no
content, a ReActAgent's fails with "Got empty message"), and a handoff to an agent that does
not exist, or that the agent may not hand off to, is an answer the model reads (the run goes
on), not an error. LlamaIndex's own tests ``test_workflow_execution_empty``,
``test_workflow_handoff_empty`` and ``test_invalid_handoff`` check the same."""

import asyncio
from typing import Any

import pytest

from tests.oracle.docs_api import DocsApi, docs_both
from tests.oracle.ref import tool_call
from tests.oracle.test_docs_react_return_direct import add


def _silent_llm(api: DocsApi, function_calling: bool) -> Any:
    """A model whose stream ends without a single chunk (the reference's scripted model does
    that for an empty reply; nbagent's streams one empty chunk, so its side overrides that)."""
    if api.is_reference:
        return api.llm([""], function_calling=function_calling)
    import nbagent

    class Silent(nbagent.ScriptedLLM):
        async def _astream(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> Any:
            if False:
                yield None

    return Silent([""], function_calling=function_calling)


def test_item8_a_stream_without_chunks_ends_a_function_agent_run_with_content_none() -> None:
    seen = []
    for api in docs_both():
        agent = api.FunctionAgent(tools=[add], llm=_silent_llm(api, True))

        async def go(agent: Any = agent) -> Any:
            output = await agent.run("q")
            return output.response.content, output.tool_calls, str(output)

        seen.append(asyncio.run(go()))
    assert seen[0] == (None, [], "")
    assert seen[1] == seen[0]


def test_item8_a_stream_without_chunks_fails_a_react_run_with_got_empty_message() -> None:
    seen = []
    for api in docs_both():
        agent = api.ReActAgent(tools=[add], llm=_silent_llm(api, False))

        async def go(agent: Any = agent) -> str:
            with pytest.raises(Exception) as err:
                await agent.run("q")
            return f"{type(err.value).__name__}: {err.value}"

        seen.append(asyncio.run(go()))
    assert all(s.startswith("WorkflowRuntimeError: ") and "Got empty message" in s for s in seen), seen


def _handoff_run(api: DocsApi, to_agent: str) -> tuple[str, list[Any], str]:
    a_llm = api.llm([tool_call("handoff", to_agent=to_agent, reason="why not"), "I will answer myself."])
    a = api.FunctionAgent(name="a", description="a agent", tools=[], llm=a_llm, can_handoff_to=["b"])
    b = api.FunctionAgent(name="b", description="b agent", tools=[], llm=api.llm([]))
    c = api.FunctionAgent(name="c", description="c agent", tools=[], llm=api.llm([]))
    workflow = api.AgentWorkflow(agents=[a, b, c], root_agent="a")

    async def go() -> tuple[str, list[Any], str]:
        handler = workflow.run(user_msg="q")
        outputs = [
            (ev.tool_output.content, ev.tool_output.is_error, ev.return_direct)
            async for ev in handler.stream_events()
            if isinstance(ev, api.ToolCallResult)
        ]
        result = await handler
        return str(result), outputs, result.current_agent_name

    return asyncio.run(go())


def test_item8_a_handoff_to_an_unknown_agent_answers_in_the_references_words() -> None:
    seen = [_handoff_run(api, "Nobody") for api in docs_both()]
    assert seen[0] == (
        "I will answer myself.",
        [("Agent Nobody not found. Please select a valid agent to hand off to. Valid agents: b, c", False, True)],
        "a",
    )
    assert seen[1] == seen[0]


def test_item8_a_handoff_that_is_not_allowed_is_an_answer_too() -> None:
    """The model reads why, the run goes on with the same agent. The words differ on purpose:
    the reference says "Agent c cannot hand off to a" (the names swapped); nbagent says which
    agent may not hand off to which, and lists the agents it may hand off to."""
    ref, nb = (_handoff_run(api, "c") for api in docs_both())
    assert ref == (
        "I will answer myself.",
        [("Agent c cannot hand off to a. Please select a valid agent to hand off to.", False, True)],
        "a",
    )
    assert nb == (
        "I will answer myself.",
        [("Agent a cannot hand off to c. Please select a valid agent to hand off to. Valid agents: b", False, True)],
        "a",
    )
