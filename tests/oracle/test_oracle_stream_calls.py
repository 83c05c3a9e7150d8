"""A streamed reply with text, then tool calls (issue 29, item 1): llama_index.core 0.12.52 and
nbagent.

On the reference, ``FunctionCallingAgentWorker`` does not stream at all (``stream_chat`` raises
NotImplementedError, see test_oracle_runner.py). Its streamed agent response, the one its
OpenAI agent streams through, decides at the first chunk without a tool call that the reply is
the answer (``is_function_false_event``), so the reader gets the text as the answer; at the
end it puts the message with its tool calls in memory, runs none of them and skips its
end-of-stream hook (the task is never finalized). Right on the reference: ``stream_chat`` runs
steps until the last one. nbagent follows that, and lets the end of the reply decide the step:
the calls run, the step is not the last one, the stream goes on to the answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.oracle.ref import _reference_modules, nbagent_api

WORDS = "Two files look old; I will delete them."
REPLY = {
    "content": WORDS,
    "tool_calls": [
        {"name": "delete_file", "arguments": {"name": "a.txt"}},
        {"name": "delete_file", "arguments": {"name": "b.txt"}},
    ],
}


def test_the_reference_takes_the_text_for_the_answer_and_drops_the_calls() -> None:
    m = _reference_modules()
    from llama_index.core.chat_engine.types import StreamingAgentChatResponse

    pieces = ["Two ", "files ", "look ", "old; ", "I ", "will ", "delete ", "them."]
    calls = [m.ToolSelection(tool_id=f"call_{i}", tool_name="delete_file", tool_kwargs={"name": n})
             for i, n in enumerate(("a.txt", "b.txt"))]
    decided_at: list[int] = []
    box: list[Any] = []

    async def chunks() -> Any:
        so_far = ""
        for i, piece in enumerate(pieces):
            so_far += piece
            yield m.ChatResponse(message=m.ChatMessage(role="assistant", content=so_far), delta=piece)
            if box[0].is_function_false_event.is_set() and not decided_at:
                decided_at.append(i)
        yield m.ChatResponse(
            message=m.ChatMessage(role="assistant", content=so_far, additional_kwargs={"tool_calls": calls}),
            delta="",
        )

    ended: list[bool] = []
    memory = m.ChatMemoryBuffer.from_defaults()

    async def main() -> str:
        response = StreamingAgentChatResponse(achat_stream=chunks())
        box.append(response)
        response._ensure_async_setup()
        await response.awrite_response_to_history(memory, on_stream_end_fn=lambda: ended.append(True))
        return "".join([t async for t in response.async_response_gen()])

    text = asyncio.run(main())
    assert decided_at == [0]  # the answer was decided at the first chunk of text
    assert text == WORDS  # the reader gets the text as the answer
    (stored,) = memory.get_all()
    assert len(stored.additional_kwargs["tool_calls"]) == 2  # the calls are kept, never run
    assert ended == []  # and the end-of-stream hook (the reference finalizes there) never runs


def test_nbagent_runs_the_calls_and_goes_on_to_the_answer() -> None:
    api = nbagent_api()
    ran: list[str] = []

    def delete_file(name: str) -> str:
        """Delete a file."""
        ran.append(name)
        return f"deleted {name}"

    llm = api.llm([REPLY, "Deleted a.txt and b.txt."])
    agent = api.AgentRunner(api.FunctionCallingAgentWorker.from_tools([api.FunctionTool.from_defaults(fn=delete_file)], llm=llm))
    response = agent.stream_chat("Clean up.")
    tokens = list(response.response_gen)
    assert "".join(tokens) == WORDS + "\n\nDeleted a.txt and b.txt."
    assert response.response == "Deleted a.txt and b.txt." and ran == ["a.txt", "b.txt"]
    assert [m.role.value for m in agent.chat_history] == ["user", "assistant", "tool", "tool", "assistant"]
