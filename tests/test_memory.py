"""ChatMemoryBuffer: token window, offline counter, O(1) snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent import ChatMemoryBuffer, ChatMessage, MessageRole
from nbagent.memory import count_tokens


def msg(text: str, role: MessageRole = MessageRole.USER) -> ChatMessage:
    return ChatMessage(role=role, content=text)


def test_put_get_all_set_reset() -> None:
    mem = ChatMemoryBuffer.from_defaults()
    mem.put(msg("a"))
    mem.put_messages([msg("b"), msg("c")])
    assert [m.content for m in mem.get_all()] == ["a", "b", "c"]
    mem.set([msg("z")])
    assert [m.content for m in mem.get()] == ["z"]
    mem.reset()
    assert mem.get_all() == [] and len(mem) == 0
    with pytest.raises(TypeError):
        mem.put("not a message")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token_limit"):
        ChatMemoryBuffer(token_limit=0)


def test_get_keeps_newest_messages_within_limit() -> None:
    mem = ChatMemoryBuffer(token_limit=30)
    for i in range(20):
        mem.put(msg(f"message number {i}"))
    window = mem.get()
    assert window[-1].content == "message number 19"
    assert sum(4 + count_tokens(m.text) for m in window) <= 30
    assert len(window) < 20
    assert len(mem.get(input="a long new input " * 3)) < len(window)


def test_window_never_starts_with_an_orphan_tool_reply_or_an_answer() -> None:
    mem = ChatMemoryBuffer(token_limit=16)
    mem.put(msg("question " * 10))
    mem.put(ChatMessage(role=MessageRole.TOOL, content="result", tool_call_id="1"))
    mem.put(msg("ok", MessageRole.ASSISTANT))
    assert mem.get() == []  # as on the reference: no window starts on a tool reply or an answer
    mem.put(msg("next"))
    assert [m.text for m in mem.get()] == ["next"]
    whole = ChatMemoryBuffer(token_limit=100, chat_history=[msg("hello", MessageRole.ASSISTANT), msg("hi")])
    assert len(whole.get()) == 2  # nothing left out: the history stays as it is


def test_counter_is_offline_and_roughly_bpe_sized() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello, world!") == 6  # hell o , worl d ! -> chunks of <= 4 word chars
    assert 8 <= count_tokens("The quick brown fox jumps over the lazy dog.") <= 14


def test_custom_tokenizer() -> None:
    mem = ChatMemoryBuffer(token_limit=10, tokenizer_fn=len)
    mem.put(msg("x" * 5))
    mem.put(msg("y" * 5))
    assert [m.content for m in mem.get()] == ["yyyyy"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30), st.integers(min_value=0, max_value=30), st.integers(1, 200))
def test_snapshot_restore_round_trip(texts: list[str], cut: int, limit: int) -> None:
    mem = ChatMemoryBuffer(token_limit=limit)
    cut = min(cut, len(texts))
    for t in texts[:cut]:
        mem.put(msg(t))
    snap = mem.snapshot()
    expected = mem.get_all()
    for t in texts[cut:]:
        mem.put(msg(t))
    if texts:
        mem.set([msg("replaced")])
    mem.restore(snap)
    assert mem.get_all() == expected
    window = mem.get()
    assert window == expected[len(expected) - len(window):]
