"""Build notebooks/03_function_calling.ipynb and its cassette: parallel tool calls, streaming.

The notebook's model replays ``notebooks/cassettes/03_function_calling.json``. This builder
first records that cassette by running the notebook with the model cell swapped for a
recording one (a ScriptedLLM stands in for the real model, and the notebook says so), so the
cassette always holds exactly the requests the notebook makes. Then it runs the notebook as
shipped, replaying. Run from the repo root: ``.venv/bin/python notebooks/build/build_03.py``.
"""

from __future__ import annotations

from tutorial_kit import NOTEBOOKS, browser_cell, build, code, execute, md, new_tutorial, real_model_cells

NAME = "03_function_calling"
CASSETTE = "cassettes/03_function_calling.json"
REPLAY_ONLY = "replay-only"  # cells left out while recording (they show a replay miss)

# What the stand-in model says, in order, while the cassette is recorded.
SCRIPT = """[
    {"tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_paris"},
        {"name": "get_weather", "arguments": {"city": "Tokyo"}, "id": "call_tokyo"},
    ]},
    "Paris has 18 °C and light rain; Tokyo has 24 °C and sun.",
    "Tokyo is warmer today: 24 °C against 18 °C in Paris, and it is sunny there too.",
]"""

MODEL_CELL = f"""
from nbagent import ReplayLLM

llm = ReplayLLM("{CASSETTE}")
llm
"""

RECORD_CELL = f"""
from nbagent import ReplayLLM, ScriptedLLM

llm = ReplayLLM("{CASSETTE}", llm=ScriptedLLM({SCRIPT}), mode="record")
"""

CELLS = [
    md("""
# 03 · Function calling: parallel tool calls and streaming

Models with a **tools API** (OpenAI's function calling, and the OpenAI-compatible servers that
copy it) do not write "Action:" in text: they return structured tool calls, and may ask for
**several at once**. nbagent runs the calls of one reply concurrently, then sends all the
results back in the next step. The final answer can be **streamed** token by token.
"""),
    browser_cell(),
    md("""
## A recorded model (a cassette)

This notebook's model replies come from a **cassette**, `notebooks/cassettes/03_function_calling.json`:
`ReplayLLM` looks each request up there and returns the reply recorded for it, with no
network and no key.

To be honest about it: this cassette was **not** recorded from a real model. It was recorded
by `notebooks/build/build_03.py` from a `ScriptedLLM` standing in for one, so the replies are
prepared ones. Everything else is what a real recording holds: the requests, their keys, the
tool-call ids and the token counts. You can record your own against any OpenAI-compatible
model (see the end of this notebook).
"""),
    code("""
import asyncio

from nbagent import OpenAIAgent, seed_ids

seed_ids(0)
"""),
    code(MODEL_CELL),
    *real_model_cells(
        note="With a real model nothing is replayed: the cells below talk to it directly."
    ),
    md("""
## An async tool that takes its time

The tool writes to a log when it starts and ends, and waits a little as a web request would
(Paris is slower than Tokyo).
"""),
    code('''
WEATHER = {"paris": (18, "light rain"), "tokyo": (24, "sunny")}
DELAY = {"paris": 0.2, "tokyo": 0.1}
log = []


async def get_weather(city: str) -> str:
    """Today's weather in a city: temperature in Celsius and the sky."""
    log.append(f"start {city}")
    await asyncio.sleep(DELAY[city.lower()])
    log.append(f"end   {city}")
    celsius, sky = WEATHER[city.lower()]
    return f"{city}: {celsius} °C, {sky}"
'''),
    code("""
agent = OpenAIAgent.from_tools([get_weather], llm=llm)
task = agent.create_task("What's the weather in Paris and in Tokyo?")
"""),
    md("""
## Parallel tool calls

The model answers the first step with two tool calls in one reply. Both run at once: the log
shows both starts before either end, and Tokyo (the faster one) ends first.
"""),
    code("""
step = agent.run_step(task)
for call in step.tool_outputs:
    print(f"{call.tool_call_id}: {call.tool_name}({call.raw_input}) -> {call.content}")
print()
print("\\n".join(log))
"""),
    md("""
The results go back in call order, each tied to its call by the `tool_call_id`. The graph
shows the two calls on the step:
"""),
    code("""
agent.graph(task)
"""),
    code("""
step = agent.run_step(task)
print(agent.finalize_response(task))
"""),
    md("""
## Streaming

`stream_chat` returns at once; the answer's tokens arrive as you read `response_gen`. Here
each token is printed with a `|` after it, so you can see the pieces. (The replayed model
streams its recorded text word by word; a real one streams what the server sends.)
"""),
    code("""
response = agent.stream_chat("Which city is warmer today?")
for token in response.response_gen:
    print(token, end="|")
"""),
    code("""
for message in agent.chat_history:
    calls = [f"{c.tool_name}({c.tool_kwargs})" for c in message.tool_calls]
    print(f"{message.role.value:>9}: {message.text or calls}")
"""),
    md("""
## Inside the cassette

A cassette is readable JSON: one entry per distinct request, in the order first seen, with a
summary of the request beside its recorded replies. The key is a hash of everything the
model was sent: the model name, every message, the tools' names and schemas, and
`tool_choice`.
"""),
    code("""
import json
from pathlib import Path

cassette = json.loads(Path("cassettes/03_function_calling.json").read_text(encoding="utf-8"))
for entry in cassette["interactions"]:
    request = entry["request"]
    print(entry["key"][:12], f"{request['n_messages']} messages, last: {request['last_message']!r}")
    for reply in entry["replies"]:
        message = reply["message"]
        print("    reply:", message["content"] or [c["name"] for c in message["tool_calls"]])
"""),
    md("""
A request that was never recorded is an error that says which request it was, where the
cassette is and how to record it:
"""),
    code(
        """
from nbagent.llms import ReplayMissError

try:
    agent.chat("And in Oslo?")
except ReplayMissError as error:
    print(error)
""",
        tags=[REPLAY_ONLY],
    ),
    md("""
## Record your own cassette

With a real model set up (the optional cell above), wrap it once in record mode and run the
notebook; from then on the cassette replays offline:

```python
from nbagent import OpenAILLM, ReplayLLM

llm = ReplayLLM("cassettes/mine.json", llm=OpenAILLM(model="gpt-4o-mini"), mode="record")
# ... run the agent ...
llm = ReplayLLM("cassettes/mine.json")            # later: offline, same replies
```

`mode="auto"` replays what is recorded and records only what is missing. A request asked
more than once (after an `undo_step`, say) gets its recorded replies in order.

Next: [04 · Write your own worker](04_custom_workers.ipynb).
"""),
]


def record_cassette() -> None:
    """Run the notebook once with a recording model, writing the cassette from scratch."""
    recording = [c for c in CELLS if REPLAY_ONLY not in c.metadata.get("tags", [])]
    recording = [code(RECORD_CELL) if c.source == MODEL_CELL.strip("\n") else c for c in recording]
    path = NOTEBOOKS / CASSETTE
    if path.exists():
        path.unlink()
    execute(new_tutorial(recording))
    if not path.exists():
        raise SystemExit(f"recording did not write {path}")


if __name__ == "__main__":
    build(NAME, CELLS, before=record_cassette)
