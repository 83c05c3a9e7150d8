"""Build notebooks/07_parallel_dag.ipynb: ParallelAgentRunner and the planner (a DAG of tool calls).

Run from the repo root: ``.venv/bin/python notebooks/build/build_07.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "07_parallel_dag"

CELLS = [
    md("""
# 07 · Parallel steps: a DAG of tool calls

So far every task was a chain: one step, then the next. Many questions split into parts that
do not depend on each other. Here a **planner** writes all the tool calls it needs at once,
with their dependencies; each call becomes a step, and `ParallelAgentRunner` runs every step
whose previous steps are done, **at the same time**.

The planner follows LLMCompiler ([Kim et al., 2023](https://arxiv.org/abs/2312.04511)):
plan, run the calls in parallel, then a **join** step reads the results and answers, or
asks for a new plan.
"""),
    browser_cell(),
    code("""
import asyncio

from nbagent import ParallelAgentRunner, PlannerAgentWorker, ScriptedLLM, seed_ids

seed_ids(0)  # stable step ids, so this notebook's outputs are the same on every run
"""),
    md("""
## Tools

Two lookups and a division. The lookups wait a moment, as a web request would, and count
how many of them run at once.
"""),
    code('''
POPULATION = {"Paris": 2_100_000, "Berlin": 3_600_000}
AREA_KM2 = {"Paris": 105, "Berlin": 890}
running = {"now": 0, "peak": 0}


async def lookup(table: dict, city: str) -> int:
    running["now"] += 1
    running["peak"] = max(running["peak"], running["now"])
    await asyncio.sleep(0.001)
    running["now"] -= 1
    return table[city]


async def population(city: str) -> int:
    """The number of people living in a city."""
    return await lookup(POPULATION, city)


async def area(city: str) -> int:
    """The area of a city in km²."""
    return await lookup(AREA_KM2, city)


def divide(a: float, b: float) -> float:
    """a divided by b, rounded to one decimal."""
    return round(a / b, 1)
'''),
    md("""
## The model's plan

The planner asks the model for a numbered plan. `$N` stands for the result of call N, so
call 5 waits for calls 1 and 3. Offline, a `ScriptedLLM` plays the model: first the plan,
then the join's answer.
"""),
    code('''
PLAN = """Thought: I need both populations and both areas; they do not depend on each other.
1. population(city="Paris")
2. population(city="Berlin")
3. area(city="Paris")
4. area(city="Berlin")
5. divide(a=$1, b=$3)
6. divide(a=$2, b=$4)
7. join()"""
ANSWER = """Thought: Paris has 20000.0 people per km², Berlin 4044.9.
Answer: Paris is about five times as dense: some 20,000 people per km², against about 4,045 in Berlin."""

llm = ScriptedLLM([PLAN, ANSWER])
'''),
    *real_model_cells(
        note="With a real model the plan and the numbers below will differ (the later sections "
        "keep their scripted models: they show what happens when a plan is wrong)."
    ),
    md("""
## The runner

`ParallelAgentRunner` is an `AgentRunner` (same tasks, events, undo, graph) that schedules
a task's steps as a DAG. `max_concurrency` bounds how many steps run at once.
"""),
    code("""
worker = PlannerAgentWorker([population, area, divide], llm)
runner = ParallelAgentRunner(worker, max_concurrency=4)
task = runner.create_task("Which city is more densely populated, Paris or Berlin?")
"""),
    md("""
`run_steps_in_queue` runs every step that is ready **now**, together, and returns their
outputs. The first wave is the plan step alone:
"""),
    code("""
(plan_step,) = runner.run_steps_in_queue(task)
print(plan_step.reasoning)
print(plan_step.output)
"""),
    md("""
The plan became seven steps. The four lookups are ready (grey); the divisions and the join
are **blocked** (dotted, amber) until the steps they wait for are done.
"""),
    code("""
runner.graph(task)
"""),
    md("""
The next wave runs the four lookups at once:
"""),
    code("""
for out in runner.run_steps_in_queue(task):
    print(out.task_step.input, "->", out.output)
print("lookups running at the same time, at most:", running["peak"])
"""),
    md("""
`run_until_done` keeps going: each step starts as soon as its previous steps are done,
until a step gives the answer.
"""),
    code("""
last = runner.run_until_done(task)
print(runner.finalize_response(task, last))
"""),
    code("""
runner.graph(task)
"""),
    md("""
The answer's sources are the tool calls of every step:
"""),
    code("""
for source in runner.finalize_response(task).sources:
    print(f"{source.tool_name}({source.raw_input}) = {source.content}")
"""),
    md("""
## When the plan is wrong

A plan can name a tool that does not exist, refer to a call that is not there, or loop
(`$1` needs `$2`, which needs `$1`). None of these crash the task: the planner sends the
model the reason, and the model writes the plan again.
"""),
    code('''
fixing = ScriptedLLM([
    '1. population(city="Paris")\\n2. surface(city="Paris")\\n3. join()',
    "1. divide(a=$2, b=1)\\n2. divide(a=$1, b=1)\\n3. join()",
    '1. population(city="Paris")\\n2. area(city="Paris")\\n3. divide(a=$1, b=$2)\\n4. join()',
    "Answer: About 20,000 people per km².",
])
runner2 = ParallelAgentRunner(PlannerAgentWorker([population, area, divide], fixing))
print(runner2.chat("How dense is Paris?"))
'''),
    code("""
task2 = runner2.list_tasks()[0]
for message in task2.extra_state["planner_messages"]:
    if message.role.value == "user":
        print(message.text)
"""),
    code("""
runner2.graph(task2)
"""),
    md("""
## When a result is missing: a new plan

A tool that fails gives an error **result**, not a crash; calls that needed it are
skipped. The join sees this and can ask for a new plan (`Replan: ...`), up to
`max_replans` times.
"""),
    code('''
replanning = ScriptedLLM([
    '1. population(city="Lutetia")\\n2. join()',
    "Thought: Lutetia is not in the table; it is the old name of Paris.\\nReplan: look up Paris instead",
    '1. population(city="Paris")\\n2. join()',
    "Answer: Lutetia is today's Paris: about 2.1 million people.",
])
runner3 = ParallelAgentRunner(PlannerAgentWorker([population, area, divide], replanning))
print(runner3.chat("How many people live in Lutetia?"))
task3 = runner3.list_tasks()[0]
for out in runner3.get_completed_steps(task3):
    print("-", out.output)
'''),
    md("""
## Undo in a parallel task

`undo_step` takes back the most recently finished step. In a parallel task, that takes back
one branch only: its output and its next steps go, its siblings' results stay. Here the
last division is undone and queued again; re-running it finishes the task the same way.
"""),
    code("""
runner4 = ParallelAgentRunner(PlannerAgentWorker([population, area, divide], ScriptedLLM([PLAN, ANSWER])))
task4 = runner4.create_task("Which city is more densely populated, Paris or Berlin?")
runner4.run_steps_in_queue(task4)  # the plan
runner4.run_steps_in_queue(task4)  # the four lookups
runner4.run_steps_in_queue(task4)  # the two divisions
undone = runner4.undo_step(task4)
print("undone:", undone.input)
print("queued:", [s.input or "join" for s in runner4.get_upcoming_steps(task4)])
print("still done:", [o.output for o in runner4.get_completed_steps(task4)][1:])
"""),
    code("""
print(runner4.run_until_done(task4).output)
runner4.graph(task4)
"""),
    md("""
## What to remember

- A step is ready when all its `prev_steps` are done; the runner works that out, and
  `is_ready=False` on a new step that waits for others is fine. On a step with nothing
  to wait for, `is_ready=False` *holds* it (drawn as held) until `runner.release_step(...)`,
  `step.is_ready = True` or the panel's Release button.
- A join that several steps return in `next_steps` is queued once and runs once, after all
  of them.
- `run_steps_in_queue` runs one wave; `run_until_done` and `chat` run the whole DAG.
- A step that fails goes back to the queue; the steps that ran beside it keep their results,
  and the error is raised as it was. Run again to retry.
- A task with nothing left to run and no answer raises a clear `TaskStateError`; it never
  spins.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
