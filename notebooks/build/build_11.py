"""Build notebooks/11_batch_eval.ipynb: evaluate an agent on a small dataset, find the failures
in the grid, open one, fix the prompt, re-run only the failures.

Run from the repo root: ``.venv/bin/python notebooks/build/build_11.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "11_batch_eval"

CELLS = [
    md("""
# 11 · Run an agent over a dataset

You have stepped through one task. The next question is always: **how does my agent do on 50
questions?** `runner.run_batch(inputs)` runs one task per input, at most `max_concurrency` at
a time, and gives back a `BatchRun`:

- `.results` in input order: the answer, or the exception that ended that task;
- `.failed`, and per task its steps, tokens, cost and latency (`.to_pandas()`);
- every task stays in the runner, so you can open its step DAG and transcript;
- a `check` function grades each answer: a wrong answer is a failure like a crash;
- `store="eval.db"` writes each task as it finishes; running the same batch again skips what
  succeeded and runs only the rest (after a fix, or after a crash or a kernel restart).

In this notebook: evaluate a calculator agent offline, find its failures in the grid, open one,
fix the prompt, and re-run only the failures.
"""),
    browser_cell(optional=("pandas",)),
    code("""
import os
import re
import shutil
import tempfile
from pathlib import Path

from nbagent import FunctionCallingAgent, FunctionLLM, MessageRole, seed_ids, tool_call

seed_ids(0)
HOME = Path.cwd()
WORK = Path(tempfile.mkdtemp(prefix="nbagent-11-"))
os.chdir(WORK)  # the store file goes to a scratch folder that the last cell deletes
"""),
    md("""
## The dataset and the grader

Twelve questions with their expected answers. `check(question, response)` returns whether an
answer is right; `run_batch(..., check=check)` marks a task whose answer it rejects as failed.
"""),
    code("""
DATASET = {
    "What is 12 plus 30?": 42,
    "What is 7 times 8?": 56,
    "What is 17 times 23?": 391,
    "What is 250 plus 250?": 500,
    "What is 3 times 9?": 27,
    "What is 46 times 12?": 552,
    "What is 1234 plus 4321?": 5555,
    "What is 15 times 20?": 300,
    "What is 99 plus 1?": 100,
    "What is 64 times 64?": 4096,
    "What is 5 times 5?": 25,
    "What is 808 plus 192?": 1000,
}
questions = list(DATASET)


def check(question, response):
    \"\"\"Right when the last number of the answer is the expected one.\"\"\"
    numbers = re.findall(r"-?\\d+", response.response)
    return bool(numbers) and int(numbers[-1]) == DATASET[question]
"""),
    md("""
## The agent

Two tools, and an offline model played by a Python function (`FunctionLLM`) that behaves like
a lazy real one: unless its system prompt tells it to use tools for everything, it does big
multiplications "in its head" and rounds. Its server also hangs up once on one question.
"""),
    code('''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


hung_up = set()


def calculator_model(messages, tools):
    system = messages[0].text if messages[0].role == MessageRole.SYSTEM else ""
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"The answer is {last.text}."
    question = last.text
    if "1234" in question and question not in hung_up:
        hung_up.add(question)
        raise ConnectionError("the model server hung up")
    a, b = (int(n) for n in re.findall(r"\\d+", question))
    if "plus" in question:
        return tool_call("add", a=a, b=b)
    if "always use a tool" in system.lower() or (a < 10 and b < 10):
        return tool_call("multiply", a=a, b=b)
    return f"That is about {round(a * b, -1)}."  # mental arithmetic: a rounded guess


llm = FunctionLLM(calculator_model, model="calc-model")
'''),
    *real_model_cells(note="The outputs stored below come from the offline model."),
    code("""
agent = FunctionCallingAgent.from_tools(
    [add, multiply], llm=llm, system_prompt="You are a helpful calculator."
)
agent.pricing = {"calc-model": (0.15, 0.60), "gpt-4o-mini": (0.15, 0.60)}  # made-up prices
"""),
    md("""
## Run the batch

In Jupyter, `run_batch` shows a live grid while it runs (outside Jupyter, a `tqdm` bar):
counts of done / running / failed / queued tasks, one cell per task coloured by status,
tokens and cost so far, and a **Stop** button. Stop (or *Kernel → Interrupt*, Ctrl-C in a
script) starts no new task, cancels the running ones and returns the batch with what
finished. Here we switch the live view off (`progress=False`) and show the grid once the batch
is done, so that the saved notebook shows the final state.
"""),
    code("""
batch = agent.run_batch(questions, max_concurrency=4, check=check, store="eval.db", progress=False)
print(batch)
"""),
    md("""
The grid: green cells passed, red ones failed. **Click a cell** to open that task: its step
DAG, its transcript, its answer or error. (`grid.click(i)` does the same from code.)
"""),
    code("""
grid = batch.widget()
grid
"""),
    md("""
## Find the failures

`batch.failed` lists them; each keeps the exception that ended it. `AnswerRejected` is the
grader saying no; the `ConnectionError` came from the model's server.
"""),
    code("""
for item in batch.failed:
    print(f"#{item.index:<2} {item.input:<26} {type(item.error).__name__}: {item.error}")
"""),
    md("""
Per-task figures, one row per input (pandas is optional; `batch.rows()` gives plain dicts,
which is what the cell shows where pandas is missing, as in the browser site):
"""),
    code("""
import importlib.util

columns = ["input", "status", "response", "steps", "total_tokens", "cost"]
if importlib.util.find_spec("pandas") is None:
    print("No pandas here (the browser site ships none): batch.rows() instead of batch.to_pandas()")
    for row in batch.rows():
        print({name: row[name] for name in columns})
else:
    display(batch.to_pandas()[columns])
"""),
    md("""
## Open one

Task #2 was rejected. Its DAG shows one step: the model answered without calling a tool.
"""),
    code("""
grid.click(2)
batch.graph(2)
"""),
    code("""
for message in batch.transcript(2):
    print(f"{message.role.value:>9}: {message.text}")
"""),
    md("""
## Fix the prompt, re-run only the failures

The system prompt is data (see `get_prompts` / `update_prompts`). Tell the model to use a
tool for every calculation, then run **the same batch with the same store**: the tasks that
passed are read back from `eval.db` (not run again); only the failed ones run. A new kernel
would do the same: the store is a file.
"""),
    code("""
agent.agent_worker.update_prompts(
    {"system_prompt": "You are a careful calculator. Always use a tool for every calculation; never guess."}
)
again = agent.run_batch(questions, max_concurrency=4, check=check, store="eval.db", progress=False)
ran = [item.index for item in again if not item.resumed]
print("ran again:", ran, "| read back from the store:", len(again) - len(ran))
print(again)
"""),
    code("""
again.widget()
"""),
    md("""
## More than one machine

`backend="ray"` runs the tasks on a Ray cluster (`pip install 'nbagent[ray]'`), with the same
API and results. Each Ray worker builds its own runner, worker and model with a zero-argument
function that Ray ships; the tasks come back as plain records and open here like any other:

```python
import ray
ray.init()  # or ray.init(address="auto") on a cluster

def make_agent():
    return FunctionCallingAgent.from_tools([add, multiply], llm=OpenAILLM(model="gpt-4o-mini"))

batch = agent.run_batch(questions, backend="ray", factory=make_agent, max_concurrency=32)
```

Other options: `timeout_s=` (a limit per task), `background=True` (return at once; the grid's
Stop button works while it runs; `batch.wait()`), `name=` (several batches in one store).
"""),
    md("""
Clean up the scratch folder.
"""),
    code("""
os.chdir(HOME)
shutil.rmtree(WORK)
print("removed the scratch folder:", not WORK.exists())
"""),
    md("""
## Next

- [09 · Save, resume, fork and report](09_save_resume_fork.ipynb): one run, saved and resumed.
- [07 · Parallel DAG](07_parallel_dag.ipynb): steps of one task that run side by side.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
