"""Memory: a session's FIFO queue whose oldest messages are archived past the limit (the
reference's archive rule itself is compared with LlamaIndex in tests/oracle/test_docs_memory.py)."""

from __future__ import annotations

import asyncio

import pytest

from nbagent import ChatMemoryBuffer, ChatMessage, FunctionCallingAgent, Memory, MessageRole, ScriptedLLM


def msg(text: str, role: MessageRole = MessageRole.USER) -> ChatMessage:
    return ChatMessage(role=role, content=text)


def words(text: str) -> list[str]:
    return text.split()


def test_a_memory_goes_where_a_chat_memory_buffer_goes() -> None:
    memory = Memory.from_defaults(token_limit=100)
    assert isinstance(memory, ChatMemoryBuffer)
    assert memory.session_id.startswith("chat_store_key_")
    assert Memory.from_defaults().session_id != memory.session_id
    assert repr(memory).startswith("Memory(session_id='chat_store_key_")


def test_the_oldest_messages_are_archived_not_lost() -> None:
    memory = Memory.from_defaults(token_limit=10, tokenizer_fn=words, token_flush_size=2)
    for i in range(4):
        memory.put(msg(f"question {i} here"))
        memory.put(msg(f"answer {i}", MessageRole.ASSISTANT))
    active, archived = memory.get(), memory.archived
    assert archived + active == memory.get_all() and len(memory.get_all()) == 8
    assert archived and active[0].role == MessageRole.USER
    assert sum(len(words(m.text)) for m in active) <= 7  # 70% of the limit
    assert memory.get(input="a long input that does not change the active queue") == active


def test_a_tokenizer_may_count_or_list_its_tokens() -> None:
    counting = Memory(token_limit=10, tokenizer_fn=lambda text: len(text.split()), token_flush_size=2)
    listing = Memory(token_limit=10, tokenizer_fn=words, token_flush_size=2)
    for memory in (counting, listing):
        for i in range(6):
            memory.put(msg(f"q {i} a b"))
    assert counting.get() == listing.get() and len(counting.get()) < 6
    with pytest.raises(TypeError, match="tokenizer_fn must return an int or a list of tokens, got NoneType"):
        Memory(tokenizer_fn=lambda text: None).put(msg("x"))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="token_limit must be a positive int, got 0"):
        Memory.from_defaults(token_limit=0)
    with pytest.raises(ValueError, match=r"chat_history_token_ratio must be a number in \(0, 1\], got 2"):
        Memory(chat_history_token_ratio=2)
    with pytest.raises(TypeError, match=r"\['memory_blocks', 'async_database_uri'\]: nbagent's Memory .* no memory blocks or SQL store"):
        Memory.from_defaults(memory_blocks=[object()], async_database_uri="sqlite+aiosqlite:///x.db")
    with pytest.raises(TypeError, match="unexpected keyword argument 'chat_store'"):
        Memory.from_defaults(chat_store=None)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="insert_method must be 'system' or 'user', got 'middle'"):
        Memory.from_defaults(insert_method="middle")
    with pytest.raises(ValueError, match="status must be None, 'active' or 'archived', got 'old'"):
        Memory().get_all(status="old")
    with pytest.raises(ValueError, match="image_token_size_estimate must be an int >= 0, got -1"):
        Memory(image_token_size_estimate=-1)
    with pytest.raises(TypeError, match="put\\(\\) takes a ChatMessage, got str"):
        Memory().put("hello")  # type: ignore[arg-type]


def test_the_async_interface() -> None:
    memory = Memory.from_defaults(session_id="s")

    async def go() -> list[list[ChatMessage]]:
        await memory.aput(msg("a"))
        await memory.aput_messages([msg("b", MessageRole.ASSISTANT), msg("c")])
        seen = [await memory.aget(), await memory.aget_all()]
        await memory.aset([msg("z")])
        seen.append(await memory.aget_all())
        await memory.areset()
        seen.append(await memory.aget_all())
        return seen

    got = [[m.content for m in ms] for ms in asyncio.run(go())]
    assert got == [["a", "b", "c"], ["a", "b", "c"], ["z"], []]


def test_a_snapshot_restores_the_archive_boundary_too() -> None:
    memory = Memory(token_limit=10, tokenizer_fn=words, token_flush_size=2)
    for i in range(3):
        memory.put(msg(f"question {i} here"))
    before_active, before_all = memory.get(), memory.get_all()
    snap = memory.snapshot()
    for i in range(3, 6):
        memory.put(msg(f"question {i} here"))
    assert memory.get() != before_active
    memory.restore(snap)
    assert memory.get() == before_active and memory.get_all() == before_all
    memory.set([msg("fresh")])
    memory.restore(snap)  # a snapshot of the list before set() still restores it
    assert memory.get() == before_active


def test_a_runner_keeps_its_conversation_in_a_memory() -> None:
    llm = ScriptedLLM(["Hi!", "You said hello."])
    memory = Memory.from_defaults(session_id="chat")
    agent = FunctionCallingAgent.from_tools([], llm=llm, memory=memory)
    agent.chat("Hello")
    agent.chat("What did I say?")
    assert agent.memory is memory
    assert [m.content for m in memory.get_all()] == ["Hello", "Hi!", "What did I say?", "You said hello."]
    assert [m.content for m in llm.requests[1].messages if m.role != MessageRole.SYSTEM] == [
        "Hello",
        "Hi!",
        "What did I say?",
    ]


def test_image_and_audio_parts_count_their_estimate() -> None:
    memory = Memory(token_limit=800, tokenizer_fn=words, image_token_size_estimate=300)
    picture = ChatMessage(
        role=MessageRole.USER,
        content=[{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
    )
    assert memory._count(picture) == len(words(picture.text)) + 300
    memory.put(picture)
    memory.put(msg("and this one please", MessageRole.ASSISTANT))
    memory.put(picture)  # over 70% of the limit: the oldest turn is archived
    assert memory.archived == [picture, msg("and this one please", MessageRole.ASSISTANT)]
    assert memory.get() == [picture]
