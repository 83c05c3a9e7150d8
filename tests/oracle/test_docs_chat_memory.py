"""LlamaIndex's "Chat Memory Buffer" notebook, ported (issue 23, item 10): the buffer on its own
(put a list, get what fits, get all, reset) and given to an agent's ``run``. Each scenario runs
on llama-index-core 0.12.52 and on nbagent. ``Memory``, the newer class the notebook points
to, is compared in ``test_docs_memory.py`` (issue 23, item 7)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both


def _pairs(messages: Any) -> list[tuple[str, Any]]:
    return [(m.role.value, m.content) for m in messages]


def test_the_buffer_on_its_own() -> None:
    seen = []
    for api in docs_both():
        memory = api.ChatMemoryBuffer.from_defaults(token_limit=40000)
        chat_history = [
            api.ChatMessage(role="user", content="Hello, how are you?"),
            api.ChatMessage(role="assistant", content="I'm doing well, thank you!"),
        ]
        memory.put_messages(chat_history)
        history = _pairs(memory.get())
        all_history = _pairs(memory.get_all())
        memory.reset()
        seen.append((history, all_history, _pairs(memory.get_all())))
    assert seen[0] == (
        [("user", "Hello, how are you?"), ("assistant", "I'm doing well, thank you!")],
        [("user", "Hello, how are you?"), ("assistant", "I'm doing well, thank you!")],
        [],
    )
    assert seen[1] == seen[0]


def test_the_buffer_given_to_an_agents_run() -> None:
    seen = []
    for api in docs_both():
        memory = api.ChatMemoryBuffer.from_defaults(token_limit=40000)
        llm = api.llm(["Hello! I'm here and ready to help you."])
        agent = api.FunctionAgent(tools=[], llm=llm)

        async def go(agent: Any = agent, api: DocsApi = api, memory: Any = memory) -> str:
            ctx = api.Context(agent)
            return str(await agent.run("Hello, how are you?", ctx=ctx, memory=memory))

        seen.append((asyncio.run(go()), _pairs(memory.get_all())))
    assert seen[0] == (
        "Hello! I'm here and ready to help you.",
        [("user", "Hello, how are you?"), ("assistant", "Hello! I'm here and ready to help you.")],
    )
    assert seen[1] == seen[0]


def test_a_chat_memory_window_never_starts_on_an_answer() -> None:
    """A small limit: ``get`` drops the oldest messages, ``get_all`` keeps them, and the window
    the model gets starts on a user message (an assistant message or a tool reply left first is
    dropped as well). How many messages fit differs on purpose: the two count tokens
    differently (nbagent adds 4 per message), so only the rule is compared; at this limit
    nbagent's window would start on ``answer 2`` without the rule."""
    seen = []
    for api in docs_both():
        memory = api.ChatMemoryBuffer.from_defaults(token_limit=22)
        for i in range(4):
            memory.put(api.ChatMessage(role="user", content=f"question number {i} here"))
            memory.put(api.ChatMessage(role="assistant", content=f"answer {i}"))
        seen.append((_pairs(memory.get()), len(memory.get_all())))
    for window, total in seen:
        assert total == 8 and 0 < len(window) < 8
        assert window[0][0] == "user" and window[-1] == ("assistant", "answer 3")
    assert seen[1][0] == [("user", "question number 3 here"), ("assistant", "answer 3")]
