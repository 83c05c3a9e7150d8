"""Build notebooks/02_react_step_by_step.ipynb: read the reasoning, steer, undo, retry.

Run from the repo root: ``.venv/bin/python notebooks/build/build_02.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "02_react_step_by_step"

CELLS = [
    md("""
# 02 · ReAct step by step: read, steer, undo, retry

A ReAct agent works in a loop: the model writes a **Thought**, picks an **Action** (a tool),
reads the **Observation** (the tool's result), and repeats until it can **Answer**. nbagent
runs that loop one step at a time, so you can:

1. read the model's reasoning and the prompt it was sent,
2. inject your own input between two steps,
3. undo a step and take another path,
4. retry a step that failed, with nothing lost.

The model is a `ScriptedLLM` (offline, prepared replies, one of them a failure on purpose).
"""),
    browser_cell(),
    code("""
from nbagent import ReActAgent, ScriptedLLM, seed_ids

seed_ids(0)
"""),
    md("""
## Two tools

A weather lookup (from a small table, so it works offline) and a unit conversion.
"""),
    code('''
WEATHER = {"paris": (18, "light rain"), "tokyo": (24, "sunny")}


def get_weather(city: str) -> str:
    """Today's weather in a city: temperature in Celsius and the sky."""
    celsius, sky = WEATHER[city.lower()]
    return f"{city}: {celsius} °C, {sky}"


def to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)
'''),
    md("""
## The model's replies

Four replies, used in order. The third is an exception: the scripted model raises it, as a
real one might time out.
"""),
    code("""
llm = ScriptedLLM([
    'Thought: I need the weather in Paris.\\nAction: get_weather\\nAction Input: {"city": "Paris"}',
    'Thought: The user wants Fahrenheit.\\nAction: to_fahrenheit\\nAction Input: {"celsius": 18}',
    TimeoutError("the model did not answer in time"),
    "Thought: It rains in Paris, so an umbrella helps.\\n"
    "Answer: It is 18 °C with light rain in Paris: take an umbrella.",
])
"""),
    *real_model_cells(
        note="With a real model the replies differ from the stored ones, and the failure "
        "below does not happen by itself."
    ),
    code("""
agent = ReActAgent.from_tools([get_weather, to_fahrenheit], llm=llm)
task = agent.create_task("What's the weather in Paris today?")
"""),
    md("""
## 1 · Read the reasoning

Run one step. The output carries the model's thought and the tool call it made.
"""),
    code("""
step = agent.run_step(task)
print("thought:", step.reasoning)
for call in step.tool_outputs:
    print(f"action:  {call.tool_name}({call.raw_input})")
    print(f"observation: {call.content}")
"""),
    md("""
What did the model see? `ScriptedLLM` keeps every request it got. The first message is the
ReAct system prompt (tools and reply format), then the user's question:
"""),
    code("""
request = llm.requests[-1]
for message in request.messages:
    first_line = message.text.splitlines()[0]
    print(f"{message.role.value:>9}: {first_line}")
print()
print(request.messages[0].text[:400], "...")
"""),
    md("""
## 2 · Inject your own input

`run_step(task, input=...)` hands your text to the next step: the agent adds it to the
conversation as a user message before the model's next call.
"""),
    code("""
step = agent.run_step(task, input="Please give me the temperature in Fahrenheit.")
print("thought:", step.reasoning)
print("observation:", step.tool_outputs[0].content)
print()
print("what the model was sent, after the system prompt:")
for message in llm.requests[-1].messages[1:]:
    print(f"{message.role.value:>9}: {message.text}")
"""),
    md("""
## 3 · Undo a step

Changed your mind? `undo_step` takes the last step back: the conversation, the agent's state
and the queue are as they were before it ran, and the step is queued again. With `input=...`
it is queued with new input. The undone branch stays in the graph, dashed and grey.
"""),
    code("""
agent.undo_step(task, input="Actually, keep Celsius. Do I need an umbrella?")
print("queued:", [s.input for s in agent.get_upcoming_steps(task)])
agent.graph(task)
"""),
    md("""
## 4 · Retry after a failure

This time the model call fails (the scripted `TimeoutError`). The exception reaches you, and
nothing else changes: the step is back at the head of the queue with the same input, and
the task's state is what it was. The graph marks the failed step in red.
"""),
    code("""
try:
    agent.run_step(task)
except TimeoutError as error:
    print("step failed:", error)

state = agent.state_of(task)
print("task status:", state.status.value)
print("queued again:", [s.input for s in agent.get_upcoming_steps(task)])
agent.graph(task)
"""),
    md("""
Retrying is just calling `run_step` again.
"""),
    code("""
step = agent.run_step(task)
print("is_last:", step.is_last)
print(agent.finalize_response(task))
"""),
    md("""
## The whole story

The final graph keeps everything that happened: the undone Fahrenheit step (dashed), the
retried step (it notes its earlier failure) and the answer (double border).
"""),
    code("""
agent.graph(task)
"""),
    md("""
The reasoning log holds the steps that count, in order (undone ones are gone from it):
"""),
    code("""
for item in task.extra_state["reasoning"]:
    print(f"[{item.kind}]", item.content.replace("\\n", " | "))
"""),
    md("""
Next: [03 · Function calling](03_function_calling.ipynb), where the model calls tools through
the OpenAI tools API, several at once.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
