"""Build notebooks/05_control_panel.ipynb: the control panel, for a workshop.

Run from the repo root: ``.venv/bin/python notebooks/build/build_05.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "05_control_panel"

CELLS = [
    md("""
# 05 · The control panel: an agent loop with buttons

For a workshop, or to explore a model by hand: `agent.panel(task)` shows the agent's loop as
a panel of buttons, a live step graph, the streamed tokens of the running step, a step
inspector and the chat transcript.

- **Run step** runs the next step, **Run to end** keeps going until the task is done (press
  **Stop** to pause), **Undo** takes the last step back, **Retry** runs a failed step again,
  **Abandon** drops the task.
- Text typed in the box beside the buttons becomes the **input of the next step**.
- **Click a step in the graph** (or Tab to it and press Enter) to inspect it; from the
  inspector you can undo back to it, fork from it, edit a queued step's input, or approve
  and reject the tool calls it waits on.
- **New task** starts another task; the **Task** picker switches between them.

Every button has a Python twin (`panel.step()` does what a click on **Run step** does), which
is how this notebook drives it below, so it also runs unattended. Runs happen in the
background: the notebook stays responsive while the agent works.

The model is a `ScriptedLLM` (offline); it fails once on purpose so there is something to retry.
When its script is used up it hands over to a tiny rule-based shop assistant (`then=`), so after
the lesson you can keep playing with the panel (new tasks, steps, undo) without a real model.
"""),
    browser_cell(),
    code("""
from nbagent import ReActAgent, ScriptedLLM, seed_ids

seed_ids(0)
"""),
    code('''
PRICES = {"apple": 0.5, "bread": 2.25, "cheese": 4.0}


def price(item: str) -> float:
    """The price of one item, in euros."""
    return PRICES[item.lower()]


def total(amounts: list[float]) -> float:
    """Add up a list of amounts."""
    return round(sum(amounts), 2)
'''),
    code(r'''
import json
import re

from nbagent import MessageRole

COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def shop_assistant(messages, tools):
    """Plays the model after the script: prices each item the user asked for, then adds up."""
    # this task's turns: after the last final answer (earlier tasks are in the agent's memory)
    start = max((i + 1 for i, m in enumerate(messages) if m.role == MessageRole.ASSISTANT
                 and ("Answer:" in m.text or not m.text.startswith("Thought"))), default=0)
    turns = messages[start:]
    asked = " ".join(m.text for m in turns if m.role == MessageRole.USER and not m.text.startswith("Observation"))
    wanted = {}
    for count, item in re.findall(r"\b(?:(\d+|an?|one|two|three|four|five)\s+)?(apple|bread|cheese)s?\b", asked.lower()):
        wanted[item] = wanted.get(item, 0) + (int(count) if count.isdigit() else COUNTS.get(count, 1))
    seen = {}  # tool name and input -> what it returned
    for call, result in zip(turns, turns[1:]):
        action = re.search(r"Action: (\w+)\nAction Input: (\{.*\})", call.text)
        if action and result.text.startswith("Observation:"):
            seen[action.group(1), action.group(2)] = result.text.split(":", 1)[1].strip()
    if not wanted:
        return ("Thought: Nothing I can price.\nAnswer: I only know the prices of apples, bread and "
                "cheese. Try: How much for two apples and a bread?")
    prices = {}
    for item in wanted:
        args = json.dumps({"item": item})
        if ("price", args) not in seen:
            return f"Thought: I need the price of {item}.\nAction: price\nAction Input: {args}"
        prices[item] = float(seen["price", args])
    args = json.dumps({"amounts": [prices[item] for item, n in wanted.items() for _ in range(n)]})
    if ("total", args) not in seen:
        return f"Thought: Now I add it up.\nAction: total\nAction Input: {args}"
    things = ", ".join(f"{n} {item}" for item, n in wanted.items())
    return f"Thought: I have the total.\nAnswer: {things}: {seen['total', args]} euros."
'''),
    code("""
llm = ScriptedLLM([
    'Thought: I need the price of bread.\\nAction: price\\nAction Input: {"item": "bread"}',
    'Thought: Now the cheese.\\nAction: price\\nAction Input: {"item": "cheese"}',
    'Thought: The user also wants apples; I need their price.\\nAction: price\\nAction Input: {"item": "apple"}',
    ConnectionError("the model's server went away"),
    'Thought: The user also wants apples; I need their price.\\nAction: price\\nAction Input: {"item": "apple"}',
    'Thought: Two apples, bread and cheese.\\nAction: total\\nAction Input: {"amounts": [0.5, 0.5, 2.25, 4.0]}',
    "Thought: I have the total.\\nAnswer: Bread, cheese and two apples cost 7.25 euros.",
], then=shop_assistant)
"""),
    *real_model_cells(
        note="With a real model, run the panel by hand: the scripted failure below will not happen."
    ),
    md("""
## The panel

Create an agent and a task, then display the panel. In JupyterLab, Notebook 7, VS Code or
Colab this is the live panel (in marimo: `mo.ui.anywidget(agent.panel(task))`): try its
buttons and click its graph. Where widgets cannot run (GitHub, nbconvert), a static picture of
it is shown instead.
"""),
    code("""
agent = ReActAgent.from_tools([price, total], llm=llm)
task = agent.create_task("How much for a bread and a cheese?")
panel = agent.panel(task)
panel
"""),
    md("""
## Drive it from Python

Each twin starts the work in the background and returns at once; `await panel.wait()` waits
for it (top-level `await` works in a notebook cell). The panel above redraws as it goes.
"""),
    code("""
panel.step()
await panel.wait()
print(panel)
"""),
    code("""
panel.step()
await panel.wait()
print(panel.last_output.tool_outputs[0].content if panel.last_output else None)
"""),
    md("""
**Inject input**: what `panel.inject(...)` (or the text box) holds becomes the next step's
input, here a change of mind from the user.
"""),
    code("""
panel.inject("Add two apples to that, please.")
panel.step()
await panel.wait()
print(panel.last_output.tool_outputs[0].content if panel.last_output else None)
print(panel)
"""),
    md("""
**Undo** takes that step back (greyed in the graph): its model call, its tool call and the
injected message are gone from the task, and the step is queued again with its own input.
"""),
    code("""
panel.undo()
print(panel)
step = agent.get_upcoming_steps(task)[0]
print("queued again:", step.step_id[:8], "· input:", step.input or "none (the injected text is gone)")
"""),
    md("""
**A failure**: inject the text again and run the step; this time the model call fails. The
panel does not raise: it shows the error (red node, status line) and the twin returns the
exception. Nothing is lost: the injected text is back in the box, and **Retry** runs the same
step again.
"""),
    code("""
panel.inject("Add two apples to that, please.")
panel.step()
result = await panel.wait()
print("the step returned:", type(result).__name__, "-", result)
print("in the input box:", panel.inject_text)
print(panel)
"""),
    code("""
panel.retry()
await panel.wait()
print(panel)
"""),
    md("""
**Run to end** keeps stepping until the answer (the answer streams into the panel's
*Streaming* box as it arrives). With `auto_finalize` (the default), the finished task's
messages join the agent's memory, as `agent.chat` does.
"""),
    code("""
panel.run()
await panel.wait()
print(panel)
print(agent.state_of(task).final_response)
"""),
    md("""
The task's whole history: the undone step and the retried one included.
"""),
    code("""
agent.graph(task)
"""),
    md("""
A click on a node of the panel's graph shows that step in the inspector; `panel.inspect`
does the same from Python (`panel.goto(step_id)` would undo back to it, `panel.fork(step_id)`
fork from it):
"""),
    code("""
first = agent.get_completed_steps(task)[0].task_step.step_id
panel.inspect(first)
print(panel.inspector["head"], "·", panel.inspector["input"])
"""),
    md("""
The panel once more, as it is now (a second view of the same widget):
"""),
    code("""
panel
"""),
    md("""
## Keep playing

The script is used up; from here the shop assistant plays the model, so every button keeps
working offline. A new task from Python (the **New task** box does the same):
"""),
    code("""
panel.new_task("How much for three apples and a cheese?")
panel.run()
await panel.wait()
print(panel)
print(agent.state_of(panel.task_id).final_response)
"""),
    md("""
## Running a workshop

- **Setup, once per machine**: `make lab` in a clone of the repository installs everything
  into `.venv` and opens JupyterLab here. No key and no network are needed: every notebook
  runs on offline models.
- **Everyone** opens this notebook, runs it top to bottom, then plays with the buttons:
  `panel.new_task("...")` or the **New task** box starts a fresh task on the same agent.
- **With a real model**: set `OPENAI_API_KEY` (or `OPENAI_BASE_URL` for a local server such as
  Ollama) and `NBAGENT_MODEL` before `make lab`, and run the optional cell above.
- **Long runs**: **Stop** pauses after the running step (`panel.stop(cancel=True)` also
  cancels it, and **Retry** runs it again).
- `panel.close()` stops the panel listening to the agent.

Next: [06 · Memory, abandon and chat](06_memory_abandon_chat.ipynb).
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
