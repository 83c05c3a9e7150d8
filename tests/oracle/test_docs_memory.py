"""LlamaIndex 0.12.52's ``Memory`` (``llama_index.core.memory.Memory``), the default memory of its
workflow agents, as the docs use it, and its archive rule (issue 23, item 7)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both


def _pairs(messages: Any) -> list[tuple[str, Any]]:
    return [(m.role.value, m.content) for m in messages]


def test_item7_memory_on_its_own() -> None:
    seen = []
    for api in docs_both():
        memory = api.Memory.from_defaults(session_id="my_session", token_limit=40000)
        memory.put(api.ChatMessage(role="user", content="Hello, how are you?"))

        async def go(memory: Any = memory, api: DocsApi = api) -> None:
            await memory.aput(api.ChatMessage(role="assistant", content="I'm doing well, thank you!"))

        asyncio.run(go())
        got, got_all = _pairs(memory.get()), _pairs(memory.get_all())
        memory.reset()
        seen.append((got, got_all, _pairs(memory.get_all()), memory.session_id))
    both_messages = [("user", "Hello, how are you?"), ("assistant", "I'm doing well, thank you!")]
    assert seen[0] == (both_messages, both_messages, [], "my_session")
    assert seen[1] == seen[0]


def test_item7_memory_given_to_an_agents_run() -> None:
    seen = []
    for api in docs_both():
        memory = api.Memory.from_defaults(session_id="my_session", token_limit=40000)
        llm = api.llm(["Hi!", "You said hello."])
        agent = api.FunctionAgent(tools=[], llm=llm)

        async def go(agent: Any = agent, memory: Any = memory) -> list[str]:
            first = await agent.run("Hello", memory=memory)
            second = await agent.run("What did I say?", memory=memory)
            return [str(first), str(second)]

        answers = asyncio.run(go())
        seen.append((answers, _pairs(memory.get_all()), [_pairs(m) for m in api.requests(llm)]))
    assert seen[0][0] == ["Hi!", "You said hello."]
    assert seen[0][1] == [("user", "Hello"), ("assistant", "Hi!"), ("user", "What did I say?"), ("assistant", "You said hello.")]
    assert seen[0][2][1] == [("user", "Hello"), ("assistant", "Hi!"), ("user", "What did I say?")]
    assert seen[1] == seen[0]


def _words(text: str) -> list[str]:
    return text.split()


def test_item7_past_the_limit_the_oldest_turns_are_archived_and_kept() -> None:
    """A small limit and the same tokenizer on both sides: after each message, what ``get``
    gives (the active queue) and what ``get_all`` keeps (archived ones too) are the same; the
    queue is cut in chunks of ``token_flush_size`` and always starts on a user message."""
    seen = []
    for api in docs_both():
        memory = api.Memory.from_defaults(
            session_id="s", token_limit=20, tokenizer_fn=_words, token_flush_size=4
        )
        trace = []
        for i in range(5):
            memory.put(api.ChatMessage(role="user", content=f"question {i} with five words"))
            trace.append(len(memory.get()))
            memory.put(api.ChatMessage(role="assistant", content=f"answer {i} is short"))
            trace.append(len(memory.get()))
        seen.append((trace, _pairs(memory.get()), len(memory.get_all())))
    assert seen[0][2] == 10 and seen[0][0][-1] < 10  # archived, not lost
    assert seen[0][1][0][0] == "user"
    assert seen[1] == seen[0]


def test_item7_a_flush_size_over_the_limit_and_a_history_given_up_front() -> None:
    seen = []
    for api in docs_both():
        history = [
            api.ChatMessage(role="user", content="one two three four five six"),
            api.ChatMessage(role="assistant", content="seven eight nine ten"),
        ]
        memory = api.Memory.from_defaults(
            session_id="s", chat_history=history, token_limit=8, tokenizer_fn=_words, token_flush_size=50
        )
        before = _pairs(memory.get())  # given up front: all active until the next message
        memory.put(api.ChatMessage(role="user", content="eleven"))
        seen.append((memory.token_flush_size, before, _pairs(memory.get()), len(memory.get_all())))
    assert seen[0][0] == 5  # 70% of the limit
    assert seen[0][3] == 3
    assert seen[1] == seen[0]


def test_item7_archived_and_active_messages_by_status() -> None:
    from llama_index.core.storage.chat_store.sql import MessageStatus

    seen = []
    for api in docs_both():
        memory = api.Memory.from_defaults(session_id="s", token_limit=12, tokenizer_fn=_words, token_flush_size=2)
        for i in range(3):
            memory.put(api.ChatMessage(role="user", content=f"question {i} of four"))
            memory.put(api.ChatMessage(role="assistant", content=f"answer {i}"))
        by_status = [_pairs(memory.get_all(status=s)) for s in (MessageStatus.ACTIVE, MessageStatus.ARCHIVED)]

        async def go(memory: Any = memory) -> tuple[Any, Any]:
            await memory.areset(status=MessageStatus.ARCHIVED)
            after_archived_reset = (_pairs(await memory.aget()), _pairs(await memory.aget_all()))
            await memory.areset(status=MessageStatus.ACTIVE)
            return after_archived_reset, _pairs(await memory.aget_all())

        seen.append((by_status, *asyncio.run(go())))
    assert seen[0][0][1] and seen[0][0][0]  # some archived, some active
    assert seen[0][1][0] == seen[0][1][1] == seen[0][0][0]
    assert seen[0][2] == []
    assert seen[1] == seen[0]
