"""Build notebooks/12_approval_typed_answers.ipynb: stop a tool call with real effects and
decide it (approve, edit, reject with a reason), then make an agent fill a pydantic form.

Run from the repo root: ``.venv/bin/python notebooks/build/build_12.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "12_approval_typed_answers"

CELLS = [
    md("""
# 12 · Approve tool calls, get typed answers

Two things every serious agent framework has, and that this notebook shows step by step:

1. **Approval of tool calls.** Some tools have real effects: send, pay, delete. Mark them
   `requires_approval=True` (or give the runner a policy, `approve_tools=...`). When the
   model asks for such a call, the call does **not** run: the step ends *awaiting approval*,
   you look at the call and its arguments, and you **approve** it (maybe with edited
   arguments) or **reject** it with a reason. The model gets the reason and adapts.
2. **Typed answers.** Give the agent a pydantic model (`output_cls=SignUp`) and the answer
   comes back as a validated `SignUp` object. A reply that does not validate goes back to
   the model with the validation errors, a bounded number of times, each a visible step.

The model is played offline by a small Python function (a `FunctionLLM`) so you can read
exactly how it reacts; one marked cell switches to a real model.
"""),
    browser_cell(),
    code("""
import json

from pydantic import BaseModel, Field

from nbagent import FunctionCallingAgent, FunctionLLM, FunctionTool, seed_ids

seed_ids(0)  # stable step ids, so the drawings below stay the same
"""),
    md("""
## Part 1 · A clean-up agent that wants to delete things

A pretend folder and three tools. `delete_file` is marked `requires_approval=True`;
`list_files` and `archive_file` run without asking.
"""),
    code('''
folder = {"old_report.docx": "Q3 numbers", "tmp.log": "noise", "notes.md": "ideas"}
archive = {}


def list_files() -> list[str]:
    """List the files in the folder."""
    return sorted(folder)


def delete_file(path: str) -> str:
    """Delete a file for good.

    Args:
        path: the file to delete
    """
    del folder[path]
    return f"deleted {path}"


def archive_file(path: str) -> str:
    """Move a file to the archive (it can be restored).

    Args:
        path: the file to archive
    """
    archive[path] = folder.pop(path)
    return f"archived {path}"


tools = [
    FunctionTool.from_defaults(list_files),
    FunctionTool.from_defaults(delete_file, requires_approval=True),
    FunctionTool.from_defaults(archive_file),
]
tools[1]
'''),
    md("""
The offline "model": it lists the files, wants to delete the two old ones at once (two
parallel calls), and when a call comes back *rejected*, it reads the reason and archives
the file instead. A real model does the same kind of thing with the reason you give.
"""),
    code('''
def cleanup_model(messages, tools):
    tool_replies = [m for m in messages if m.role.value == "tool"]
    if not tool_replies:
        return {"tool_calls": [{"name": "list_files", "arguments": {}}]}
    last_user = max(i for i, m in enumerate(messages) if m.role.value == "user")
    if len(tool_replies) == 1:
        return {"content": "Two files look old; I will delete them.", "tool_calls": [
            {"name": "delete_file", "arguments": {"path": "old_report.docx"}},
            {"name": "delete_file", "arguments": {"path": "tmp.log"}},
        ]}
    rejected = [m for m in messages[last_user:] if m.role.value == "tool" and m.content.startswith("Rejected")]
    archived = any(m.role.value == "tool" and m.content.startswith("archived") for m in messages)
    if rejected and not archived:
        return {"tool_calls": [{"name": "archive_file", "arguments": {"path": "old_report.docx"}}]}
    return "Done: tmp.log is deleted; old_report.docx was not deleted (you said it is needed), I archived it."


llm = FunctionLLM(cleanup_model)
'''),
    *real_model_cells(note="The outputs stored below come from the offline model."),
    code("""
agent = FunctionCallingAgent.from_tools(tools, llm=llm, system_prompt="You tidy up a folder.")
task = agent.create_task("Clean up my folder: delete what looks old.")
agent.run_step(task)  # the model lists the files
out = agent.run_step(task)  # the model asks for two deletions
print("tool outputs of this step:", list(out.tool_outputs))
print("files:", sorted(folder))
agent.pending_approvals(task)
"""),
    md("""
Nothing was deleted: the step ended **awaiting approval**. `pending_approvals` lists each
waiting call with its `call_id`, tool name and arguments. The graph draws the waiting step
in orange, with every call and an `approve?` mark:
"""),
    code("""
agent.graph(task)
"""),
    md("""
Running now is refused with a clear error (and changes nothing):
"""),
    code("""
try:
    agent.run_step(task)
except Exception as err:
    print(type(err).__name__, "-", str(err)[:160], "...")
"""),
    md("""
Decide the calls **one by one**. `tmp.log` may go; `old_report.docx` may not, and the
reason tells the model what to do instead.
"""),
    code("""
report_call, log_call = agent.pending_approvals(task)
agent.approve(task, log_call.call_id)
agent.reject(task, report_call.call_id, reason="old_report.docx is the only copy of the Q3 numbers; archive it instead")
agent.pending_approvals(task)
"""),
    md("""
The next step runs the approved call and hands the rejection to the model as that call's
result. Then the model adapts:
"""),
    code("""
out = agent.run_step(task)
for t in out.tool_outputs:
    print(f"{t.tool_name}({t.raw_input}) -> {t.content}")
while not out.is_last:
    out = agent.run_step(task)
    for t in out.tool_outputs:
        print(f"{t.tool_name}({t.raw_input}) -> {t.content}")
print()
print(agent.finalize_response(task))
print("folder:", sorted(folder), "| archive:", sorted(archive))
"""),
    code("""
agent.graph(task)
"""),
    md("""
### Who decided what is part of the run

Each decision is stored on the step that ran the calls (in its `step_state`, as plain
JSON): the decision, who made it, when (UTC), edited arguments and the reason. So **undo**
puts the step back with its decisions (you can change them and run it again), **save/load**
keeps them, and the HTML **report** lists them. The step card shows them too:
"""),
    code("""
decided = agent.state_of(task).completed_steps[2].task_step
for d in decided.step_state["approval"]["log"]:
    print(d["decision"], "by", d["by"], "|", d["call_id"], "|", d["reason"])
decided
"""),
    md("""
### Editing the arguments, and a policy for the whole runner

`approve(task, call_id, arguments={...})` runs the call with *your* arguments, checked
against the tool's schema first. Instead of marking tools, a runner can ask for approval
of every call (`approve_tools="all"`), of some tools (a list of names), or decide by a
function of the tool name and arguments:
"""),
    code("""
folder.update({"draft.txt": "text"})
guarded = FunctionCallingAgent.from_tools(
    [list_files, archive_file],
    llm=FunctionLLM(lambda messages, tools: (
        {"tool_calls": [{"name": "archive_file", "arguments": {"path": "notes.md"}}]}
        if messages[-1].role.value == "user" else "Archived."
    )),
    approve_tools=lambda name, args: name == "archive_file",
)
t2 = guarded.create_task("Archive my notes")
guarded.run_step(t2)
(call,) = guarded.pending_approvals(t2)
try:
    guarded.approve(t2, call.call_id, arguments={"file": "draft.txt"})
except ValueError as err:
    print("refused:", err)
guarded.approve(t2, call.call_id, arguments={"path": "draft.txt"})
print(guarded.run_step(t2).tool_outputs[0].content, "| archive:", sorted(archive))
"""),
    md("""
### The same in a workflow agent

Workflow agents stream a `ToolApprovalRequired` event and wait; you answer with
`handler.ctx.send_event(ToolApprovalResponse.approve(ev) / .reject(ev, reason=...))`, or type
`yes` / `no: reason` with `handler.respond(...)` or the `handler.input_box()` widget.
"""),
    code("""
from nbagent.workflow import FunctionAgent, ToolApprovalRequired, ToolApprovalResponse

folder.update({"old_report.docx": "Q3 numbers", "tmp.log": "noise"})
archive.clear()
wf_agent = FunctionAgent(name="tidy", llm=FunctionLLM(cleanup_model), tools=tools, system_prompt="You tidy up a folder.")
handler = wf_agent.run(user_msg="Clean up my folder: delete what looks old.")
async for ev in handler.stream_events():
    if isinstance(ev, ToolApprovalRequired):
        print("asked:", ev.prefix)
        if ev.tool_kwargs["path"] == "old_report.docx":
            handler.ctx.send_event(ToolApprovalResponse.reject(ev, reason="it is the only copy; archive it instead"))
        else:
            handler.ctx.send_event(ToolApprovalResponse.approve(ev))
result = await handler
print(result)
print([(d["tool_name"], d["arguments"]["path"], d["decision"]) for d in await handler.ctx.get("tool_approvals")])
"""),
    md("""
### In the control panel

In the control panel (`agent.panel(task)`), each waiting call gets a row with **Approve**,
**Edit** (approve with the arguments typed in the row) and **Reject** (with the reason typed
next to it); `panel.approve`, `panel.edit` and `panel.reject` do the same from code. Here is
the clean-up once more, on a fresh agent with the two files back (nothing below touches the
folder), brought to the point where its two deletions wait: the panel shows a row for each.
Type a reason and click **Reject** on the `old_report.docx` row, **Approve** the other, then
**Run to end**: the model adapts as it did above and archives the file instead.
"""),
    code("""
folder.update({"old_report.docx": "Q3 numbers", "tmp.log": "noise"})
archive.clear()
tidy = FunctionCallingAgent.from_tools(tools, llm=llm, system_prompt="You tidy up a folder.")
cleanup = tidy.create_task("Clean up my folder: delete what looks old.")
tidy.run_step(cleanup)  # the model lists the files
tidy.run_step(cleanup)  # it asks for the two deletions: they wait
print([f"{call.tool_name}({call.arguments})" for call in tidy.pending_approvals(cleanup)])
panel = tidy.panel(cleanup)
panel
"""),
    md("""
## Part 2 · An agent fills a pydantic form

`output_cls=SignUp` makes the answer a `SignUp`. With a function-calling model the agent
gets one extra tool, `final_result`, whose arguments are the form's fields; calling it is
answering. (With a server that supports OpenAI's `response_format`, set
`OpenAILLM(..., supports_response_format=True)` and the schema goes there instead; a model
without a tools API is asked for a JSON answer.)
"""),
    code('''
class SignUp(BaseModel):
    """A workshop sign-up form."""

    name: str
    email: str = Field(pattern=r"^[^@ ]+@[^@ ]+\\.[a-z]+$")
    age: int = Field(ge=16, description="participants must be 16 or older")
    topics: list[str] = Field(min_length=1)


def form_model(messages, tools):
    """Fills the form from the user's message; its first try has two mistakes."""
    if messages[-1].role.value == "user":
        return {"tool_calls": [{"name": "final_result", "arguments": {
            "name": "Ada Lovelace", "email": "ada at example.org", "age": "thirty-six", "topics": ["agents"]}}]}
    return {"tool_calls": [{"name": "final_result", "arguments": {
        "name": "Ada Lovelace", "email": "ada@example.org", "age": 36, "topics": ["agents", "graphs"]}}]}


form_agent = FunctionCallingAgent.from_tools([], llm=FunctionLLM(form_model), output_cls=SignUp)
form_task = form_agent.create_task(
    "Sign me up: I'm Ada Lovelace, 36, ada@example.org, into agents and graphs."
)
first = form_agent.run_step(form_task)
print("is_last:", first.is_last)
print(first.output.response)
'''),
    md("""
The first try did not validate. That was a visible step: the model got the errors as the
result of its `final_result` call. (`max_output_retries`, default 2, bounds the retries;
after that the step fails with `StructuredOutputError` and stays queued.) The second try:
"""),
    code("""
second = form_agent.run_step(form_task)
response = form_agent.finalize_response(form_task)
signup = response.structured_response
print(type(signup).__name__, "|", signup.email, "|", signup.age, "|", signup.topics)
second
"""),
    code("""
form_agent.graph(form_task)
"""),
    md("""
The same works with `ReActAgent.from_tools(..., output_cls=SignUp)` (the `Answer:` must be
the form's JSON) and with workflow agents: `FunctionAgent(..., output_cls=SignUp)` or
`AgentWorkflow([...], output_cls=SignUp)`, whose final `AgentOutput` carries
`.structured_response`.

## Next

- [05 · Control panel](05_control_panel.ipynb): the panel with its Approve / Edit / Reject rows.
- [09 · Save, resume, fork](09_save_resume_fork.ipynb): decisions are saved with the run.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
