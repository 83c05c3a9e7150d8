"""LlamaIndex's own ``ChatMessage`` objects given to nbagent, as code written for the reference
passes them: a chat history for ``chat`` or a workflow run, a memory's ``put`` (LlamaIndex's
agent tests do; not one of issue 23's items, found by running them). nbagent takes them as its
own messages; what the model reads is compared with llama-index-core 0.12.52."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.oracle.docs_api import docs_both, roles_contents
from tests.oracle.ref import reference


def _history() -> list[Any]:
    """A history written with LlamaIndex's classes: a question, a tool call, its reply, an answer."""
    ref = reference()
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.core.llms.llm import ToolSelection

    del ref
    return [
        ChatMessage(role=MessageRole.USER, content="What is 2 * 3?"),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content=None,
            additional_kwargs={"tool_calls": [ToolSelection(tool_id="call_9", tool_name="multiply", tool_kwargs={"a": 2, "b": 3})]},
        ),
        ChatMessage(role=MessageRole.TOOL, content="6", additional_kwargs={"tool_call_id": "call_9", "name": "multiply"}),
        ChatMessage(role=MessageRole.ASSISTANT, content="It is 6."),
    ]


def test_a_llamaindex_history_given_to_chat_reaches_the_model() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(["You asked about 2 * 3."])
        agent = api.FunctionCallingAgent.from_tools([], llm=llm)
        response = agent.chat("What did I ask?", chat_history=_history())
        seen.append((str(response), roles_contents(api.requests(llm)[0]), roles_contents(agent.chat_history)))
    assert seen[0][1] == [
        ("user", "What is 2 * 3?"), ("assistant", None), ("tool", "6"), ("assistant", "It is 6."), ("user", "What did I ask?")
    ]
    assert seen[1] == seen[0]


def test_llamaindex_messages_put_into_a_memory() -> None:
    seen = []
    for api in docs_both():
        memory = api.ChatMemoryBuffer.from_defaults(token_limit=1000)
        for message in _history():
            memory.put(message)
        seen.append(roles_contents(memory.get_all()))
    assert seen[1] == seen[0]


def test_a_llamaindex_history_starts_a_workflow_run() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(["You asked about 2 * 3."])
        workflow = api.AgentWorkflow(agents=[api.FunctionAgent(tools=[], llm=llm)])

        async def go(workflow: Any = workflow) -> str:
            return str(await workflow.run(chat_history=_history()))

        seen.append((asyncio.run(go()), roles_contents(api.requests(llm)[0])))
    assert seen[0][0] == seen[1][0] == "You asked about 2 * 3."
    # the same messages; 0.12.52 moves the history's first message (the question) last, nbagent
    # keeps the history's order (noticed, not followed)
    assert seen[0][1][-1] == ("user", "What is 2 * 3?") and seen[1][1][0] == ("user", "What is 2 * 3?")
    assert sorted(seen[1][1], key=repr) == sorted(seen[0][1], key=repr)


def test_the_tool_call_and_its_reply_keep_their_ids_on_nbagent() -> None:
    import nbagent

    from nbagent.messages import as_chat_message

    messages = [as_chat_message(m) for m in _history()]
    assert nbagent.ChatMemoryBuffer(chat_history=_history()).get_all() == messages
    assert [(c.tool_id, c.tool_name, c.tool_kwargs) for c in messages[1].tool_calls] == [("call_9", "multiply", {"a": 2, "b": 3})]
    assert (messages[2].tool_call_id, messages[2].name, messages[2].additional_kwargs) == ("call_9", "multiply", {})
