"""Build notebooks/08_agent_workflow.ipynb: two agents hand off, a live view of the run, a person
in the loop, and a run saved as JSON and resumed.

Run from the repo root: ``.venv/bin/python notebooks/build/build_08.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "08_agent_workflow"

CELLS = [
    md("""
# 08 · Agents that hand off: `AgentWorkflow`

Some requests need more than one agent. In an `AgentWorkflow` each agent has its own prompt,
model and tools, and a `handoff` tool to pass the conversation on. One agent works at a time.

In this notebook a **researcher** looks facts up and hands off to a **writer**. You will watch
the run as a graph, answer a question a tool asks in the middle of a run, save a waiting run
as JSON and resume it, and run a workflow one step at a time, from a cell and from a panel. It runs offline with a scripted model; one marked cell switches to a
real model.
"""),
    browser_cell(),
    md("""
`seed_ids(0)` makes the ids the same on every run, so the outputs below do not change.
"""),
    code("""
import json

from nbagent import ScriptedLLM, seed_ids, tool_call
from nbagent.viz.workflow_live import WorkflowLiveView
from nbagent.workflow import AgentWorkflow, Context, FunctionAgent, ask_human

seed_ids(0)
"""),
    md("""
## Tools

Tools are plain functions. `publish` takes the run's `Context` as `ctx` (the model never sees
that argument) and uses it to ask the person before it acts.
"""),
    code('''
NOTES = {
    "paris": "Paris: 2.1 million people, on the Seine. Today: sunny, 24 °C.",
    "oslo": "Oslo: 0.7 million people, on a fjord. Today: light rain, 12 °C.",
}


def search_notes(topic: str) -> str:
    """Look a topic up in the team's notes."""
    return NOTES.get(topic.lower(), f"No notes about {topic}.")


async def publish(ctx: Context, title: str) -> str:
    """Publish the last summary under a title, once the person approves."""
    answer = await ask_human(ctx, f"Publish the summary as '{title}'? (yes/no)")
    if answer.strip().lower() != "yes":
        return f"Not published: the person said {answer!r}."
    return f"Published '{title}'."
'''),
    md("""
## An offline model

A `ScriptedLLM` plays the model: every call returns the next reply of its script. Both agents
share it here, so the script lists their replies in the order the run asks for them. A reply
made with `tool_call(...)` asks for a tool, like a real model's tool call. Past the end of the
script, `then=` plays the model: here it reports what the last tool said (you will meet it
when you answer a question yourself).
"""),
    code("""
def report_the_tool(messages, tools):
    \"\"\"The model's reply once the script is used up: what the last tool answered.\"\"\"
    return f"The publish tool says: {messages[-1].text}"


llm = ScriptedLLM([
    # the researcher
    tool_call("search_notes", topic="Paris"),
    tool_call("handoff", to_agent="writer", reason="the facts are in; a summary is needed"),
    # the writer
    "Paris today: sunny and 24 °C in a city of 2.1 million on the Seine.",
    tool_call("publish", title="Paris today"),
    "Done: the summary is published as 'Paris today'.",
    tool_call("publish", title="Paris tonight"),  # your turn, at the end of the next part
], then=report_the_tool)
"""),
    *real_model_cells(note="The outputs stored below come from the offline model; a real model chooses its own tool calls and words."),
    md("""
## Two agents

`can_handoff_to` says who an agent may hand off to; `root_agent` says who starts. The drawing
shows the agents and the handoffs they may make.
"""),
    code("""
researcher = FunctionAgent(
    name="researcher",
    description="Looks facts up in the team's notes.",
    system_prompt="Find the facts, then hand off to the writer.",
    tools=[search_notes],
    llm=llm,
    can_handoff_to=["writer"],
)
writer = FunctionAgent(
    name="writer",
    description="Writes short summaries and publishes them.",
    system_prompt="Write a two-line summary of the facts in the conversation.",
    tools=[publish],
    llm=llm,
)
workflow = AgentWorkflow([researcher, writer], root_agent="researcher")
workflow.draw_agents()
"""),
    md("""
Under the hood a workflow is a set of steps that pass typed events to each other. This is
every path a run can take:
"""),
    code("""
workflow.draw()
"""),
    md("""
## Watch a run

The live view draws each agent as a box holding its steps and tool calls; a purple edge is a
handoff; the active agent has a bold blue border. In Jupyter it redraws while the run goes:
display it, then run the next cell and watch.
"""),
    code("""
view = WorkflowLiveView(workflow)
view
"""),
    md("""
`view.run(...)` starts the run and returns its handler at once. `stream_events()` yields what
the run reports as it goes; `await handler` gives the result, which names the agent that
answered. A `Context` keeps the conversation for the next run.
"""),
    code("""
ctx = Context(workflow)
handler = view.run(user_msg="Write a short note about Paris today.", ctx=ctx)
events = [event async for event in handler.stream_events()]
result = await handler
print(f"{result.current_agent_name} answered: {result}")
"""),
    md("""
The events, in order (the streamed pieces of each reply, `AgentStream`, are left out):
"""),
    code("""
for event in events:
    kind = type(event).__name__
    if kind != "AgentStream":
        print(f"{kind:<15} {getattr(event, 'current_agent_name', '') or getattr(event, 'tool_name', '')}")
"""),
    md("""
A still picture of the finished run (it shows on GitHub too):
"""),
    code("""
view.snapshot()
"""),
    md("""
## A person in the loop

The same context continues the conversation with the writer, who answered last. Its `publish`
tool asks before it acts, so the run pauses. `wait_for_question()` returns the question as soon
as it is asked.
"""),
    code("""
handler = view.run(user_msg="Publish it as 'Paris today'.", ctx=ctx)
question = await handler.wait_for_question()
print(question.prefix)
"""),
    md("""
The run now waits for an answer: from code, `handler.respond("yes")`; in the notebook, a box
with a **Send** button, `handler.input_box()` (your turn comes at the end of the next part).
First, though, let us save the waiting run.
"""),
    md("""
## Save, stop, resume

A run's context is plain JSON (no pickle): its state, the conversation, the steps still to run
and the question that waits. Save it, stop the run, and resume it later, here or in another
process.
"""),
    code("""
saved = json.dumps(handler.ctx.to_dict())
await handler.cancel_run()
print("run:", handler.status)
print("saved keys:", sorted(json.loads(saved)["state"]))
"""),
    md("""
`Context.from_dict` loads it; `run(ctx=...)` resumes. The tool that was waiting runs again and
asks its question again; this time we answer it.
"""),
    code("""
restored = Context.from_dict(workflow, json.loads(saved))
handler = view.run(ctx=restored)
question = await handler.wait_for_question()
print("asked again:", question.prefix)

handler.respond("yes")  # what typing yes in the answer box and clicking Send does
result = await handler
print(f"{result.current_agent_name}: {result}")
"""),
    code("""
view.snapshot()
"""),
    md("""
The whole conversation, from the restored context's memory:
"""),
    code("""
memory = await restored.get("memory")
for message in memory.get_all():
    text = message.text or ", ".join(f"calls {c.tool_name}" for c in message.tool_calls)
    print(f"{message.role.value:>9}: {text}")
"""),
    md("""
### Your turn

One more run on the same conversation: the writer is asked to publish again, and its question
waits for you. Type **yes** (or anything else) in the box below and click **Send**: the run goes
on, the live view under *Watch a run* redraws, and the box says how the run ended.
"""),
    code("""
handler = view.run(user_msg="Publish it again, as 'Paris tonight'.", ctx=restored)
question = await handler.wait_for_question()
box = handler.input_box()
box
"""),
    md("""
## One step at a time

A workflow run can also go one step at a time, so you can read what each step did before the
next one runs. `run(..., stepwise=True)` returns the handler and runs nothing yet; each
`await handler.run_step()` runs the next step and returns the events it produced. An agent on
its own is a workflow too: `agent.run(...)` runs it as a one-agent `AgentWorkflow`.

`checkpoint_callback=` is called after every step with a `Checkpoint`: the run's state at that
moment, as plain JSON, enough to resume from there.
"""),
    code("""
helper = FunctionAgent(
    name="helper",
    description="Looks facts up.",
    tools=[search_notes],
    llm=ScriptedLLM([tool_call("search_notes", topic="Oslo"), "Oslo today: light rain, 12 °C."]),
)
checkpoints = []
handler = helper.run(user_msg="Weather in Oslo?", stepwise=True, checkpoint_callback=checkpoints.append)
produced = await handler.run_step()
print([type(event).__name__ for event in produced], handler.status)
"""),
    md("""
The loop LlamaIndex's docs write runs as it is. It sends each event back with `send_event`;
nbagent has already delivered them, so sending one back does nothing (and a loop that forgets
to send loses nothing). `run_step()` returns `None` once the run is over.
"""),
    code("""
while produced_events := await handler.run_step():
    print(f"after step {len(checkpoints)}:", ", ".join(type(event).__name__ for event in produced_events))
    for ev in produced_events:
        handler.ctx.send_event(ev)

result = await handler
print(result)
"""),
    md("""
Each checkpoint names the step it was taken after. Resume from the one taken right after the
tool ran, with a model that answers differently this time:
"""),
    code("""
print([checkpoint.last_completed_step for checkpoint in checkpoints])
after_tool = next(c for c in checkpoints if c.last_completed_step == "call_tool")
saved = json.dumps(after_tool.to_dict())  # plain JSON: keep it anywhere

helper.llm = ScriptedLLM(["Oslo: 12 °C and light rain (answered after resuming)."])
print(await helper.run_from(json.loads(saved)))
"""),
    md("""
## The workflow panel

`panel()` drives step-wise runs with buttons: type a message and click **Start**, then **Step**
(one step), **Run to end**, or **Stop**. A question a tool asks shows in the panel with a box to
answer it, and the graph is redrawn after every step. Each button has a Python twin:
`panel.start("...")`, `await panel.step()`, `await panel.run()`, `panel.stop()`,
`panel.answer("yes")`.
"""),
    code("""
helper.llm = ScriptedLLM([tool_call("search_notes", topic="Paris"), "Paris today: sunny, 24 °C."])
panel = helper.panel()
panel
"""),
    code("""
panel.start("Weather in Paris?")
for _ in range(3):
    events = await panel.step()
    print(", ".join(type(event).__name__ for event in events))
print(await panel.run())
print(panel.status_text())
"""),
    md("""
## What next

- `FunctionAgent` needs a model with a tools API; `ReActAgent` works with any chat model, and
  `AgentWorkflow.from_tools_or_functions(tools, llm=...)` picks for you.
- `nbagent.workflow.Workflow` and `@step` let you write your own event-driven workflows.
- `handler.subscribe(fn)` hands every event to your own code; `RunTrace` is the account of a
  run the live view draws.
- `agent.get_prompts()` and `agent.update_prompts({...})` show and change the prompts the
  agents use (`react_header`; on the workflow `handoff_prompt`, `handoff_output_prompt` and
  `state_prompt`).
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
