"""A typed answer streamed as 0.12.52 streams it: an ``AgentStreamStructuredOutput`` event with
the answer's data, and ``get_pydantic_model`` on it and on the result (LlamaIndex's own
``test_agent_with_structured_output.py`` checks the same). ``structured_output_fn`` makes the
typed answer from the conversation, so no model call differs between the two sides (with
``output_cls`` each library asks its model in its own way: nbagent reads the answer's JSON or
asks for a ``final_result`` call, the reference asks for a call named after the class).
"""

import asyncio
from typing import Any

from pydantic import BaseModel

from tests.oracle.docs_api import DocsApi, docs_both


class Structure(BaseModel):
    hello: str
    world: int


def from_conversation(messages: list) -> dict:
    """The typed answer, made from what was said (the last message's text)."""
    return {"hello": str(messages[-1].content).split()[0].lower(), "world": len(messages)}


async def afrom_conversation(messages: list) -> dict:
    return from_conversation(messages)


def test_a_typed_answer_is_streamed_then_returned() -> None:
    seen = []
    for api in docs_both():
        for fn in (from_conversation, afrom_conversation):
            agent = api.FunctionAgent(tools=[], llm=api.llm(["Bonjour tout le monde."]), structured_output_fn=fn)

            async def go(agent: Any = agent, api: DocsApi = api) -> tuple[Any, ...]:
                handler = agent.run(user_msg="Say hello.")
                streamed = [ev async for ev in handler.stream_events() if isinstance(ev, api.AgentStreamStructuredOutput)]
                response = await handler
                return (
                    [ev.output for ev in streamed],
                    [ev.get_pydantic_model(Structure) for ev in streamed],
                    str(response),
                    response.get_pydantic_model(Structure),
                )

            seen.append(asyncio.run(go()))
    ref_sync, ref_async, nb_sync, nb_async = seen
    assert ref_sync == ref_async == (
        [{"hello": "bonjour", "world": 2}],
        [Structure(hello="bonjour", world=2)],
        "Bonjour tout le monde.",
        Structure(hello="bonjour", world=2),
    )
    assert nb_sync == nb_async == ref_sync
