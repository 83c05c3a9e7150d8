"""Runs inside Pyodide (tests/pyodide/run_pyodide.mjs): ``OpenAILLM`` against an
OpenAI-compatible server on 127.0.0.1 (the test's scripted fake), over the JavaScript
runtime's ``fetch`` (the openai client's httpx2 takes its fetch transport on emscripten).
``js.scenarioParams`` gives the server's ``base_url``; ``main()`` returns plain facts for
``test_pyodide_openai.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

KEY = "sk-test-browser-0123456789abcdef"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _outcome(fn: Any) -> Any:
    try:
        return {"ok": fn()}
    except Exception as error:  # noqa: BLE001 - the fact is which error
        return {"error": type(error).__name__, "message": str(error)}


async def main() -> dict[str, Any]:
    import js
    from pyodide.ffi import can_run_sync

    from nbagent import ChatMessage, FunctionCallingAgent, FunctionTool, OpenAILLM

    base_url = json.loads(js.scenarioParams)["base_url"]
    llm = OpenAILLM(model="fake-model", base_url=base_url, api_key=KEY, max_retries=0)
    facts: dict[str, Any] = {"platform": sys.platform, "jspi": can_run_sync(), "repr": repr(llm)}
    reply = await llm.achat([ChatMessage(role="user", content="Say hello.")])
    facts["achat"] = {"text": reply.message.text, "tokens": reply.usage.total_tokens if reply.usage else None}
    chunks = [chunk.delta async for chunk in llm.astream_chat([ChatMessage(role="user", content="Stream it.")])]
    facts["stream"] = {"chunks": len(chunks), "text": "".join(d or "" for d in chunks)}
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm)
    task = agent.create_task("What is 2 + 3?")
    first = await agent.arun_step(task)
    last = await agent.arun_step(task)
    facts["agent"] = {
        "tool": [(t.tool_name, t.content) for t in first.tool_outputs],
        "answer": str(last.output),
        "is_last": last.is_last,
    }
    facts["sync_chat"] = _outcome(lambda: str(agent.chat("And 3 + 2?")))
    try:
        await llm.achat([ChatMessage(role="user", content="This one fails.")])
        facts["error"] = None
    except Exception as error:  # noqa: BLE001 - its text must not carry the key
        facts["error"] = {"type": type(error).__name__, "text": str(error) + repr(error)}
    return facts
