"""Build notebooks/09_save_resume_fork.ipynb: save a run, resume it, go back, fork, compare,
price it and write a self-contained HTML report.

Run from the repo root: ``.venv/bin/python notebooks/build/build_09.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "09_save_resume_fork"

CELLS = [
    md("""
# 09 · Save, resume, fork and report

Notebook kernels restart all the time. nbagent can **save** a whole run to one JSON file and
**load** it again, so a task continues exactly where it stopped. On top of that:

1. **autosave** after every step, so a crashed kernel loses at most the step that was running;
2. **time travel**: go back to any earlier step, **fork** a new branch there, keep the old
   branch in the graph, and **compare** the two side by side;
3. **cost**: tokens and money per step and per task, from prices you set;
4. a **report**: one self-contained HTML file of the run that opens offline in any browser.

The model is a `ScriptedLLM` (offline, prepared replies); one marked cell switches to a real one.
"""),
    browser_cell(),
    md("""
The files this notebook writes go to a scratch folder that the last cell deletes.
"""),
    code("""
import json
import os
import shutil
import tempfile
from pathlib import Path

from nbagent import AgentRunner, ReActAgent, ScriptedLLM, seed_ids
from nbagent.workers import ReActAgentWorker

seed_ids(0)
HOME = Path.cwd()
RUNS = Path(tempfile.mkdtemp(prefix="nbagent-09-"))
os.chdir(RUNS)  # so the file names below are short
"""),
    md("""
## A task that we will interrupt

Two tools, and the replies the model will give: add, multiply, answer.
"""),
    code('''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def act(tool: str, a: int, b: int) -> str:
    return f'Thought: I use {tool}.\\nAction: {tool}\\nAction Input: {{"a": {a}, "b": {b}}}'


llm = ScriptedLLM([act("add", 12, 30), act("multiply", 42, 2), "Thought: I know it.\\nAnswer: 84"])
'''),
    *real_model_cells(note="The outputs stored below come from the offline model."),
    md("""
Prices are per million input and output tokens. nbagent ships no prices (they change too
often); here the offline model gets made-up ones so that the costs below are not zero. With a
real model, set the prices of its name, e.g. `{"gpt-4o-mini": (0.15, 0.60)}`.
"""),
    code("""
agent = ReActAgent.from_tools([add, multiply], llm=llm)
agent.pricing = {"scripted": (0.15, 0.60), "gpt-4o-mini": (0.15, 0.60)}
task = agent.create_task("What is (12 + 30) * 2?")
for _ in range(2):
    out = agent.run_step(task)
    print(out.tool_outputs[0].tool_name, out.tool_outputs[0].raw_input, "->", out.tool_outputs[0].content)
"""),
    md("""
## Save

`save` writes every task: its steps and their links (by id), the queue, the outputs, the
memory, the worker's state, failures and the undo history. It is plain, versioned JSON (no
pickle), written atomically: a crash never leaves half a file.
"""),
    code("""
path = agent.save("run.json")
doc = json.loads(path.read_text())
print("format:", doc["format"], "version", doc["version"])
(saved,) = doc["tasks"]
print("steps:", len(saved["steps"]), "| done:", len(saved["completed"]), "| queued:", len(saved["queue"]))
print("worker state:", sorted(saved["extra_state"]))
"""),
    md("""
## Restart and resume

After a kernel restart nothing is left in memory but the file. We imitate that here by loading
into a **brand-new runner** with a brand-new worker (the test suite does the real thing: it
resumes the file in a fresh Python process and checks that the outputs, the memory and the ids
are the same as in a run that was never interrupted).

The worker is code, not state, so you pass it again. The scripted model gets the replies that
are left (with a real model, pass the same model).
"""),
    code("""
rest = ["Thought: I know it.\\nAnswer: 84",
        act("multiply", 42, 3), "Thought: I know it.\\nAnswer: 126"]
model = ScriptedLLM(rest) if isinstance(llm, ScriptedLLM) else llm
resumed = AgentRunner.load(path, ReActAgentWorker.from_tools([add, multiply], llm=model))
task_id = task.task_id
print(resumed)
print("next step:", resumed.get_upcoming_steps(task_id)[0].step_id[:8])
"""),
    code("""
out = resumed.run_step(task_id)
print("is_last:", out.is_last, "| answer:", out.output)
"""),
    md("""
## Autosave

Give the runner a file and it saves after every step and every change (undo, fork, finalize).
If the kernel dies, `AgentRunner.load` of that file brings you back to the last finished step.
"""),
    code("""
resumed.autosave = "autosave.json"
print("autosaving to", resumed.autosave.name)
"""),
    md("""
## Time travel and forks

`goto_step(task, step_id)` goes back to just after that step (any earlier step, not only the
last one); `goto_step(..., before=True)` to just before it. `fork(task, step_id, input=...)`
goes back to just before a step and puts a **new step** (new id) in its place, with new input
if you give some. The old steps stay in the graph, greyed and dashed.

Here we fork at the second step and ask for another factor.
"""),
    code("""
first, second, third = [o.task_step.step_id for o in resumed.get_completed_steps(task_id)]
new_step = resumed.fork(task_id, second, input="Actually, multiply by 3 instead.")
print("forked: new step", new_step.step_id[:8], "replaces", second[:8])
while not (out := resumed.run_step(task_id)).is_last:
    pass
print("answer:", out.output)
"""),
    md("""
A **branch** is a path of steps from the first one to where it ends. The old branch is kept:
"""),
    code("""
for branch in resumed.branches(task_id):
    print(branch)
"""),
    code("""
resumed.graph(task_id)
"""),
    md("""
`compare` shows two branches side by side: the steps they share, then where they differ
(input, thought, tool calls, output).
"""),
    code("""
resumed.compare(task_id, 0, "current")
"""),
    md("""
## Cost

Tokens and money per step (at the model each step used) and per task. `total` counts the
steps of the current branch; `spent` also counts the runs that were undone (they were paid for).
"""),
    code("""
cost = resumed.cost(task_id)
for step in cost.steps:
    print(step.step_id[:8], "undone" if step.undone else "      ", step.model, step.cost)
print("total:", cost.total)
print("spent:", cost.spent)
"""),
    md("""
Finalize the task: its question and answer go into the runner's memory, and the autosave file
follows.
"""),
    code("""
print(resumed.finalize_response(task_id))
again = AgentRunner.load("autosave.json")  # no worker: enough to look at the run
print("autosaved task is", again.state_of(task_id).status.value, "with", len(again.branches(task_id)), "branches")
"""),
    md("""
## A report to hand out

`write_report` writes one HTML file: the DAG as SVG (or a step list without Graphviz), every
step, the transcript, tokens, timings and errors. It has no script and loads nothing from the
network, so it opens offline in any browser. From a terminal, the same from a saved run:

```
nbagent report run.json -o run.html
```
"""),
    code("""
from nbagent.report import write_report

report = write_report(resumed, task_id, "run.html")
page = report.read_text()
print(report.name, "| has the graph:", "<svg" in page or "nb-timeline" in page,
      "| has a script:", "<script" in page)
"""),
    code("""
from nbagent.__main__ import main

exit_code = main(["report", "autosave.json", "-o", "from_cli.html"])
"""),
    md("""
Clean up the files this notebook wrote.
"""),
    code("""
resumed.autosave = None
os.chdir(HOME)
shutil.rmtree(RUNS)
print("removed the scratch folder:", not RUNS.exists())
"""),
    md("""
## Next

- [02 · ReAct step by step](02_react_step_by_step.ipynb): undo and retry one step at a time.
- [07 · Parallel DAG](07_parallel_dag.ipynb): steps that run side by side.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
