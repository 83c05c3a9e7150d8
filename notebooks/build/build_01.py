"""Build notebooks/01_quickstart.ipynb: create a task, run steps, look at the DAG, finalize.

Run from the repo root: ``.venv/bin/python notebooks/build/build_01.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "01_quickstart"

CELLS = [
    md("""
# 01 · Quick start: an agent, one step at a time

nbagent runs an LLM agent **one step at a time** so you can look at every step, steer it,
take it back, and see the steps grow as a graph.

In this notebook you will create a task, run its steps by hand, look at its step graph (a DAG),
and finalize the answer. It runs offline in a second or two: the model is a
`ScriptedLLM`, an offline model that gives prepared replies in order. One marked cell below
switches to a real model.
"""),
    browser_cell(),
    md("""
`seed_ids(0)` makes task and step ids the same on every run, so this notebook's outputs
do not change from one run to the next.
"""),
    code("""
from nbagent import FunctionTool, ReActAgent, ScriptedLLM, seed_ids

seed_ids(0)
"""),
    md("""
## A tool

A tool is a plain Python function. Its name, docstring and type hints become what the model
is told about it.
"""),
    code('''
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


tool = FunctionTool.from_defaults(multiply)
tool
'''),
    md("""
## An offline model

A `ScriptedLLM` plays the model: each call returns the next reply of its script. These
replies use the ReAct format (`Thought` / `Action` / `Action Input`, then `Answer`) that the
ReAct agent asks a model to follow.
"""),
    code("""
llm = ScriptedLLM([
    'Thought: I need to multiply.\\nAction: multiply\\nAction Input: {"a": 121, "b": 3}',
    "Thought: I can answer without using any more tools.\\nAnswer: 121 * 3 is 363.",
    "Thought: The user wants it doubled; I know 363 * 2.\\nAnswer: Twice that is 726.",
])
llm
"""),
    *real_model_cells(note="The outputs stored below come from the offline model."),
    md("""
## The agent and a task

`ReActAgent.from_tools` builds an `AgentRunner` (it owns the tasks and the conversation) around
a ReAct worker (it turns one step into an output). `create_task` only queues the first step:
nothing has run yet. A task displays itself as a card with its graph.
"""),
    code("""
agent = ReActAgent.from_tools([tool], llm=llm)
task = agent.create_task("What is 121 * 3?")
print("queued steps:", len(agent.get_upcoming_steps(task)))
task
"""),
    md("""
## Watch it grow: the live graph

`agent.live_graph(task)` is the task's step graph as a live view: display it once, and it
redraws itself whenever a step runs, is undone or fails, from any cell. Keep it in sight while
you run the next cells (in JupyterLab: right-click it, **Create New View for Output**, to pin it
beside the notebook). Right now it holds one queued step.
"""),
    code("""
live = agent.live_graph(task)
live
"""),
    md("""
## Run one step

`run_step` runs the next queued step and returns its output. Here the model asked for the
tool, the tool ran, and the observation came back. The task is not done: another step is
queued.
"""),
    code("""
step = agent.run_step(task)
print("thought:    ", step.reasoning)
print("tool call:  ", step.tool_outputs[0].tool_name, step.tool_outputs[0].raw_input)
print("observation:", step.tool_outputs[0].content)
print("is_last:    ", step.is_last)
"""),
    md("""
The step output also displays itself as a card (tokens and time included):
"""),
    code("""
step
"""),
    md("""
## Look at the DAG

`agent.graph(task)` draws the task's steps: done in green, the next one queued in grey.
The labels show each step's input, thought, tool call and observation.
"""),
    code("""
agent.graph(task)
"""),
    md("""
## Run to the answer and finalize

The next step gets the model's answer, so it is the last one. `finalize_response` closes
the task and puts the question and answer into the agent's memory.
"""),
    code("""
step = agent.run_step(task)
print("is_last:", step.is_last)
response = agent.finalize_response(task)
print(response)
"""),
    code("""
for message in agent.chat_history:
    print(message)
"""),
    md("""
The live graph above has followed along: it now shows both steps, the answer ringed. Its
text form says the same:
"""),
    code("""
print(live)
"""),
    code("""
agent.graph(task)
"""),
    md("""
## The same in one call

`agent.chat(...)` does all of the above: create a task, run steps until the last one, finalize.
The memory now holds the first exchange, so a follow-up question can refer to it.
"""),
    code("""
print(agent.chat("Now double it."))
print(len(agent.chat_history), "messages in memory")
"""),
    md("""
## Next

- [02 · ReAct step by step](02_react_step_by_step.ipynb): read the reasoning, steer, undo, retry.
- [03 · Function calling](03_function_calling.ipynb): parallel tool calls and streaming, from a recorded cassette.
- [04 · Write your own worker](04_custom_workers.ipynb).
- [05 · The control panel](05_control_panel.ipynb): buttons for a workshop.
- [06 · Memory, abandon and chat](06_memory_abandon_chat.ipynb).
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
