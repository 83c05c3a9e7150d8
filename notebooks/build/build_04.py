"""Build notebooks/04_custom_workers.ipynb: CustomSimpleAgentWorker and FnAgentWorker.

Run from the repo root: ``.venv/bin/python notebooks/build/build_04.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "04_custom_workers"

CELLS = [
    md("""
# 04 · Write your own worker

A **worker** turns one step into an output; the **runner** (`AgentRunner`) owns everything
else: the queue, the state, the memory, undo, the graph, the panel. So a worker you write
gets all of those for free. There are two short ways to write one:

- `CustomSimpleAgentWorker`: a class with three methods (start, one step, finish);
- `FnAgentWorker`: one plain function is the whole agent.

The one rule: **a worker keeps no state of its own**. What it needs between steps lives in
the state dict the runner hands it, so the runner can snapshot it, undo it and retry it.
"""),
    browser_cell(),
    code("""
from typing import Any

from nbagent import (
    AgentChatResponse,
    ChatMessage,
    CustomSimpleAgentWorker,
    FnAgentWorker,
    MessageRole,
    ScriptedLLM,
    Task,
    seed_ids,
)

seed_ids(0)
"""),
    md("""
## A class: `CustomSimpleAgentWorker`

This worker wants short answers. It asks the model, and while the answer is longer than
`max_words` it sends it back with a request to shorten it.

- `_initialize_state` returns the task's starting state (here, a counter). The worker adds
  two keys of its own: `memory` (this task's messages) and `sources`.
- `_arun_step` does one step and returns `(response, is_done)`. (`_run_step` is the sync
  twin, for steps that await nothing.)
- `_finalize_task` runs once when the task is finalized.
"""),
    code('''
class ConciseWorker(CustomSimpleAgentWorker):
    """Asks the model, then asks again until the answer has at most `max_words` words."""

    max_words: int = 12

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"attempts": 0}

    async def _arun_step(self, state: dict[str, Any], task: Task, input: str | None = None):
        if state["attempts"] == 0:
            state["memory"].put(ChatMessage(role=MessageRole.USER, content=task.input))
        elif input:  # text injected with run_step(task, input=...)
            state["memory"].put(ChatMessage(role=MessageRole.USER, content=input))
        reply = await self.llm.achat(task.memory.get() + state["memory"].get_all())
        state["attempts"] += 1
        answer = reply.message.text
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=answer))
        words = len(answer.split())
        if words <= self.max_words:
            return AgentChatResponse(response=answer), True
        feedback = f"That is {words} words. Say it in at most {self.max_words}."
        state["memory"].put(ChatMessage(role=MessageRole.USER, content=feedback))
        return AgentChatResponse(response=f"too long ({words} words): asked to shorten it"), False

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        print(f"finalized after {state['attempts']} attempt(s)")
'''),
    code("""
llm = ScriptedLLM([
    "The Eiffel Tower, finished in 1889 for the World's Fair in Paris, "
    "is about 330 metres tall if you count its antennas.",
    "About 330 metres, antennas included.",
])
"""),
    *real_model_cells(note="A real model may need more rounds, or fewer."),
    md("""
`as_agent()` puts the worker in an `AgentRunner`. From there it is used like any agent.
"""),
    code("""
agent = ConciseWorker(llm=llm, max_words=12).as_agent()
task = agent.create_task("How tall is the Eiffel Tower?")
step = agent.run_step(task)
print("step 1:", step.output, "| is_last:", step.is_last)
step = agent.run_step(task)
print("step 2:", step.output, "| is_last:", step.is_last)
print("answer:", agent.finalize_response(task))
"""),
    code("""
for message in agent.chat_history:
    print(f"{message.role.value:>9}: {message.text}")
"""),
    md("""
The worker wrote to `state["memory"]`, the task's own messages. The runner merged them into
the agent's memory when the task was finalized (an abandoned task's messages never get
there; see notebook 06). The graph shows both steps:
"""),
    code("""
agent.graph(task)
"""),
    md("""
## A function: `FnAgentWorker`

For a loop that needs no class, one function is enough: `fn(state) -> (state, is_done)`, the
reference's contract. The answer goes in `state["__output__"]`; `state["__task__"]` is the
Task. nbagent also lends `input` (this step's input), `step` (the step number) and `memory`
while `fn` runs. Whatever you put in `state` is kept for the next step (and copied into
`task.extra_state`). The short form `fn(state) -> (output, is_done)` works too.

This one plays "guess my number" by halving the range. You are the other player: you answer
each guess by injecting `"higher"`, `"lower"` or `"yes"` as the next step's input.
"""),
    code('''
def guesser(state: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    answer = state["input"]
    if answer == "yes":
        state["__output__"] = f"Got it: {state['guess']}, in {state['step']} guesses."
        return state, True
    if answer == "higher":
        state["low"] = state["guess"] + 1
    elif answer == "lower":
        state["high"] = state["guess"] - 1
    state["guess"] = (state["low"] + state["high"]) // 2
    state["__output__"] = f"Is it {state['guess']}?"
    return state, False


game = FnAgentWorker(guesser, initial_state={"low": 1, "high": 100}).as_agent()
task = game.create_task("I'm thinking of a number from 1 to 100.")
print(game.run_step(task).output)
'''),
    code("""
print(game.run_step(task, input="higher").output)
print(game.run_step(task, input="lower").output)
"""),
    md("""
The number is 70. Say you slip and answer "lower" to 62:
"""),
    code("""
print(game.run_step(task, input="lower").output)
"""),
    md("""
`undo_step` takes that step back: the range in the task's state is what it was before the
step, and the step is queued again. Answer again, right this time:
"""),
    code("""
state = task.extra_state
print("before undo:", {k: state[k] for k in ("low", "high", "guess")})
game.undo_step(task)
print("after undo: ", {k: state[k] for k in ("low", "high", "guess")})
print(game.run_step(task, input="higher").output)
"""),
    code("""
for reply in ["higher", "lower", "higher", "yes"]:
    print(f"{reply:>6} -> {game.run_step(task, input=reply).output}")
print(game.finalize_response(task))
"""),
    md("""
The whole game as a graph, the undone step included:
"""),
    code("""
game.graph(task)
"""),
    md("""
## Ported code: `QueryPipelineAgentWorker`

LlamaIndex once let you write an agent as a *query pipeline*: a small graph of functions that
runs once per step, with the task and the step's state handed to every `StatefulFnComponent`.
It deprecated that in favour of `FnAgentWorker`, and nbagent keeps it only so that such code
runs after changing its imports (`nbagent.query_pipeline` has `QueryPipeline`,
`StatefulFnComponent`, `FnComponent`, ...). Here: ask the model, and try again until it
answers with digits only. What must outlive a step lives in `state["step_state"]`, so undo and
retries work as for every other worker.
"""),
    code('''
import warnings

from nbagent import QueryPipelineAgentWorker
from nbagent.query_pipeline import QueryPipeline, StatefulFnComponent


def prompt(state: dict[str, Any]) -> str:
    tries = state["step_state"].setdefault("tries", [])
    hint = f" Not {tries[-1]!r}: digits only." if tries else ""
    return f"{state['task'].input} Answer with an integer.{hint}"


def check(state: dict[str, Any], reply: Any) -> tuple[AgentChatResponse, bool]:
    text = reply.message.content.strip()
    state["step_state"]["tries"].append(text)
    return AgentChatResponse(response=text), text.isdigit()


llm = ScriptedLLM(["about six", "6.0", "6"])
pipeline = QueryPipeline(chain=[StatefulFnComponent(fn=prompt), llm, StatefulFnComponent(fn=check)])
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    retrier = QueryPipelineAgentWorker(pipeline).as_agent()
print(said[0].message)

task = retrier.create_task("What is 2 * 3?")
while not (out := retrier.run_step(task)).is_last:
    print("not yet:", out.output)
print("answer:", retrier.finalize_response(task), "after", task.extra_state["tries"])
'''),
    md("""
Next: [05 · The control panel](05_control_panel.ipynb), buttons for all of this.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
