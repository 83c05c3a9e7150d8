"""Input given on a task's first step goes to the model after the question, never instead of
it (issue 29, item 2), for every worker; later steps are unchanged. (The reference replaces
the question: tests/oracle/test_oracle_first_input.py.)"""

from __future__ import annotations

from typing import Any

from nbagent import (
    AgentRunner,
    FunctionTool,
    ImageDocument,
    MultimodalReActAgentWorker,
    ParallelAgentRunner,
    ScriptedLLM,
)
from nbagent.messages import MessageRole
from nbagent.schema import AgentChatResponse, Task
from nbagent.workers.custom import CustomSimpleAgentWorker
from nbagent.workers.fn import FnAgentWorker
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.planner import PlannerAgentWorker
from nbagent.workers.react import ReActAgentWorker

QUESTION = "What is 121 * 3?"
HINT = "Hint: use the multiply tool."
REACT_ANSWER = "Thought: I can answer without using any more tools.\nAnswer: 363"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _texts(messages: list[Any], role: MessageRole = MessageRole.USER) -> list[str]:
    return [m.text for m in messages if m.role == role]


def test_function_calling_sends_the_question_then_the_hint() -> None:
    llm = ScriptedLLM(["363"])
    runner = AgentRunner(FunctionCallingAgentWorker([multiply], llm))
    task = runner.create_task(QUESTION)
    runner.run_step(task, input=HINT)
    sent = llm.requests[0].messages
    assert _texts(sent) == [QUESTION, HINT]
    assert [m.role for m in sent] == [MessageRole.USER, MessageRole.USER]
    runner.finalize_response(task)
    assert _texts(runner.memory.get_all()) == [QUESTION, HINT]  # the transcript keeps both


def test_react_sends_the_question_then_the_hint_as_on_later_steps() -> None:
    llm = ScriptedLLM([REACT_ANSWER])
    runner = AgentRunner(ReActAgentWorker.from_tools([multiply], llm=llm))
    task = runner.create_task(QUESTION)
    runner.run_step(task, input=HINT)
    prompt = llm.requests[0].messages
    texts = [m.text for m in prompt[1:]]  # after the system header
    assert texts[0] == QUESTION
    assert any(HINT in t for t in texts[1:])
    assert _texts(task.scratch_memory.get_all()) == [QUESTION, HINT]


def test_input_on_a_later_step_is_unchanged() -> None:
    llm = ScriptedLLM([{"tool_calls": [{"name": "multiply", "arguments": {"a": 121, "b": 3}}]}, "363"])
    runner = AgentRunner(FunctionCallingAgentWorker([multiply], llm))
    task = runner.create_task(QUESTION)
    runner.run_step(task)
    runner.run_step(task, input=HINT)
    assert _texts(llm.requests[0].messages) == [QUESTION]
    assert _texts(llm.requests[1].messages) == [QUESTION, HINT]


def test_no_input_and_the_question_itself_add_nothing() -> None:
    llm = ScriptedLLM(["a", "b"])
    runner = AgentRunner(FunctionCallingAgentWorker([multiply], llm))
    runner.run_step(runner.create_task(QUESTION))
    runner.run_step(runner.create_task(QUESTION), input=QUESTION)
    assert _texts(llm.requests[0].messages) == [QUESTION]
    assert _texts(llm.requests[1].messages) == [QUESTION]  # once, not twice


def test_multimodal_keeps_the_images_on_the_question() -> None:
    llm = ScriptedLLM([REACT_ANSWER])
    worker = MultimodalReActAgentWorker([FunctionTool.from_defaults(multiply)], multi_modal_llm=llm)
    runner = AgentRunner(worker)
    image = ImageDocument(image_url="https://example.invalid/cat.png")
    task = runner.create_task(QUESTION, extra_state={"image_docs": [image]})
    runner.run_step(task, input=HINT)
    first = task.scratch_memory.get_all()[0]
    assert isinstance(first.content, list) and first.content[0]["text"] == QUESTION
    assert any(p.get("type") == "image_url" for p in first.content)
    assert any(HINT in m.text for m in llm.requests[0].messages)


def test_planner_plans_for_the_question_with_the_hint_after_it() -> None:
    llm = ScriptedLLM(["1. join()", "Answer: 363"])
    runner = ParallelAgentRunner(PlannerAgentWorker([FunctionTool.from_defaults(multiply)], llm))
    task = runner.create_task(QUESTION)
    runner.run_steps_in_queue(task, input=HINT)
    users = _texts(llm.requests[0].messages)
    assert users == [QUESTION, HINT]


class _Echo(CustomSimpleAgentWorker):
    """Records what a custom worker is given on its first step."""

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"seen": []}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["seen"].append((task.input, input))
        return AgentChatResponse(response="ok"), True

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def test_custom_and_fn_workers_get_the_question_and_the_input() -> None:
    runner = _Echo().as_agent()
    task = runner.create_task(QUESTION)
    runner.run_step(task, input=HINT)
    assert task.extra_state["seen"] == [(QUESTION, HINT)]

    seen: list[tuple[str, Any]] = []

    def fn(state: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        seen.append((state["__task__"].input, state["input"]))
        state["__output__"] = "ok"
        return state, True

    runner = AgentRunner(FnAgentWorker(fn))
    runner.run_step(runner.create_task(QUESTION), input=HINT)
    assert seen == [(QUESTION, HINT)]
