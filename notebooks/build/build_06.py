"""Build notebooks/06_memory_abandon_chat.ipynb: conversation memory, abandon, chat.

Run from the repo root: ``.venv/bin/python notebooks/build/build_06.py``.
"""

from __future__ import annotations

from tutorial_kit import browser_cell, build, code, md, real_model_cells

NAME = "06_memory_abandon_chat"

CELLS = [
    md("""
# 06 · Memory, abandon and chat

An agent remembers the conversation: each finished task adds its question and answer to
the agent's **memory**, and the next task's model calls see it. This notebook shows

- how `chat` builds on memory, and what the memory holds;
- how to **abandon** a task so that nothing it did reaches the memory;
- a memory with a **token limit**, which forgets the oldest messages;
- `query` (no history), `reset`, and passing your own `chat_history`.

The model is a `FunctionLLM`: a small Python function plays it, and it answers from what it
is sent, so you can see exactly what the memory gives it.
"""),
    browser_cell(),
    code("""
import re

from nbagent import ChatMemoryBuffer, ChatMessage, FunctionLLM, MessageRole, OpenAIAgent, seed_ids

seed_ids(0)
"""),
    md("""
The "model" looks for "my name is ..." in the user messages it is sent.
"""),
    code('''
def name_bot(messages: list[ChatMessage], tools: list) -> str:
    """Answer from the messages it is sent: it knows a name only if one is in them."""
    names = [m.group(1) for msg in messages if msg.role == MessageRole.USER
             for m in [re.search(r"my name is (\\w+)", msg.text, re.IGNORECASE)] if m]
    question = messages[-1].text
    if re.search(r"my name is \\w+", question, re.IGNORECASE):
        return f"Nice to meet you, {names[-1]}!"
    if "my name?" in question:
        return f"Your name is {names[-1]}." if names else "I don't know your name yet."
    return f"I was sent {len(messages)} messages."


llm = FunctionLLM(name_bot)
'''),
    *real_model_cells(note="A real model answers in its own words, of course."),
    md("""
## Chat builds on memory

`chat` runs a whole task: create it, run its steps, finalize. Finalizing adds the task's
messages to the memory, so the second question is answered from the first.
"""),
    code("""
agent = OpenAIAgent.from_tools([], llm=llm)
print(agent.chat("Hi! My name is Ada."))
print(agent.chat("What is my name?"))
"""),
    code("""
print(agent.memory)
for message in agent.chat_history:
    print(f"{message.role.value:>9}: {message.text}")
"""),
    md("""
## Abandon a task

A task runs steps on its own messages; they reach the memory only when it is finalized.
`abandon_task` ends a task without that: whatever it said is forgotten.
"""),
    code("""
task = agent.create_task("Actually, my name is Bob.")
step = agent.run_step(task)
print("the task's answer:", step.output)
agent.abandon_task(task)
print("status:", agent.state_of(task).status.value)
print("messages in memory:", len(agent.memory))
print(agent.chat("What is my name?"))
"""),
    md("""
The runner lists its tasks, the abandoned one included:
"""),
    code("""
agent
"""),
    md("""
## A memory with a token limit

A `ChatMemoryBuffer` keeps every message (`get_all()`), but gives the model only the newest
ones that fit in `token_limit` (`get()`). With a small limit, the agent soon forgets the name:
"""),
    code("""
small = ChatMemoryBuffer(token_limit=40)
forgetful = OpenAIAgent.from_tools([], llm=llm, memory=small)
print(forgetful.chat("Hi! My name is Ada."))
print(forgetful.chat("The weather is nice today, isn't it?"))
print(forgetful.chat("Tell me something about the sea."))
print(forgetful.chat("What is my name?"))
"""),
    code("""
print("tokens kept:", small.token_count(), "| limit:", small.token_limit)
print("messages kept:", len(small.get_all()), "| in the window:", len(small.get()))
for message in small.get():
    print(f"{message.role.value:>9}: {message.text}")
"""),
    md("""
## Query, reset, your own history

`query` answers one question with no history and leaves the memory as it was:
"""),
    code("""
print(agent.query("What is my name?"))
print("messages in memory:", len(agent.memory))
"""),
    md("""
`reset` forgets the conversation and every task; `chat_history=` starts from a history you
give (it replaces the memory):
"""),
    code("""
agent.reset()
print(agent.chat("What is my name?"))
history = [ChatMessage(role=MessageRole.USER, content="Call me Grace; my name is Grace.")]
print(agent.chat("What is my name?", chat_history=history))
"""),
    md("""
## Streaming chat

`stream_chat` is `chat` with the answer streamed; the memory is updated when the stream ends.
"""),
    code("""
response = agent.stream_chat("Hello again, what is my name?")
print("".join(response.response_gen))
print("messages in memory:", len(agent.memory))
"""),
    md("""
That is the tour. Back to [01 · Quick start](01_quickstart.ipynb), or on to the notebooks on
parallel steps, workflows and saving a session.
"""),
]

if __name__ == "__main__":
    build(NAME, CELLS)
