"""ReAct as tolerant as the reference, and its reference-visible behaviour.

Replies are what real models write; the expectations are the reference's (its parser takes the
text after ``Answer:`` wherever it follows the thought, the first word of the Action line as
the tool, the first JSON object after Action Input).
"""

from __future__ import annotations

import asyncio

import pytest

from nbagent import AgentChatResponse, ScriptedLLM, TaskStatus
from nbagent.agents import FunctionCallingAgent, ReActAgent
from nbagent.tools import FunctionTool
from nbagent.workers.base import EmptyResponseError
from nbagent.workers.react import ReActOutputParser
from nbagent.workers.react.output_parser import ActionReasoningStep, ResponseReasoningStep


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _private_(x: int) -> int:
    """A tool whose name begins and ends with an underscore."""
    return x * 10


parser = ReActOutputParser()


@pytest.mark.parametrize(
    ("reply", "thought", "answer"),
    [
        ("Thought: I know this. Answer: 42", "I know this.", "42"),
        ("Thought: I know this.\nSo, putting it together. Answer: 42 apples", "I know this.\nSo, putting it together.", "42 apples"),
        ("Thought: done. **Answer:** 5", "done.", "5"),
        ("Thought: done.\nAnswer: 5", "done.", "5"),
    ],
)
def test_answer_after_a_thought_on_the_same_line_or_a_later_one(reply: str, thought: str, answer: str) -> None:
    step = parser.parse(reply)
    assert isinstance(step, ResponseReasoningStep)
    assert (step.thought, step.response) == (thought, answer)


@pytest.mark.parametrize(
    ("reply", "name", "args"),
    [
        ('Thought: add them\nAction: add (add two numbers)\nAction Input: {"a": 1, "b": 2}', "add", {"a": 1, "b": 2}),
        ('Thought: t\nAction: add: adds two numbers\nAction Input: {"a": 1, "b": 2}', "add", {"a": 1, "b": 2}),
        ('Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2} # the two numbers\nI will wait for the result.', "add", {"a": 1, "b": 2}),
        ('Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}\n\nThis adds {a} and {b}; then I answer.', "add", {"a": 1, "b": 2}),
        ('Thought: t\nAction: add\nAction Input: {\n  "a": 1,  // first\n  "b": 2   # second\n}', "add", {"a": 1, "b": 2}),
        ("Thought: t\nAction: _private\nAction Input: {\"x\": 3}", "_private", {"x": 3}),
        ("Thought: t\nAction: private_\nAction Input: {}", "private_", {}),
        ('Thought: t\nAction: add\nAction Input: {"a": "x # not a comment // really", "b": 2}', "add", {"a": "x # not a comment // really", "b": 2}),
    ],
)
def test_action_lines_real_models_write(reply: str, name: str, args: dict) -> None:
    step = parser.parse(reply)
    assert isinstance(step, ActionReasoningStep)
    assert (step.action, step.action_input) == (name, args)


def test_tool_names_with_underscores_are_called() -> None:
    llm = ScriptedLLM(
        ['Thought: t\nAction: _private_\nAction Input: {"x": 4}', "Thought: ok\nAnswer: 40"],
        function_calling=False,
    )
    agent = ReActAgent.from_tools([FunctionTool.from_defaults(fn=_private_)], llm=llm)
    task = agent.create_task("go")
    out = agent.run_step(task.task_id)
    assert out.output.response == "Observation: 40"
    assert out.tool_outputs[0].tool_name == "_private_" and not out.tool_outputs[0].is_error


def test_intermediate_outputs_and_sources_as_the_reference() -> None:
    llm = ScriptedLLM(
        [
            'Thought: first\nAction: add (add two numbers)\nAction Input: {"a": 1, "b": 2}',
            'Thought: again\nAction: add\nAction Input: {"a": 3, "b": 4}',
            "Thought: I can answer without using any more tools. Answer: 3 and 7",
        ],
        function_calling=False,
    )
    agent = ReActAgent.from_tools([add], llm=llm)
    task = agent.create_task("add")
    first = agent.run_step(task.task_id)
    second = agent.run_step(task.task_id)
    assert isinstance(first.output, AgentChatResponse)
    assert first.output.response == "Observation: 3" and second.output.response == "Observation: 7"
    assert [s.content for s in first.output.sources] == ["3"]
    assert [s.content for s in second.output.sources] == ["3", "7"]  # accumulate over the task
    last = agent.run_step(task.task_id)
    assert last.is_last and str(last.output) == "3 and 7"
    response = agent.finalize_response(task.task_id)
    assert [s.content for s in response.sources] == ["3", "7"]
    reasoning = task.extra_state["current_reasoning"]
    assert reasoning is task.extra_state["reasoning"]
    assert [type(r).__name__ for r in reasoning] == [
        "ActionReasoningStep", "ObservationReasoningStep", "ActionReasoningStep",
        "ObservationReasoningStep", "ResponseReasoningStep",
    ]


def test_undo_keeps_current_reasoning_the_same_list() -> None:
    llm = ScriptedLLM(
        ['Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}', "Thought: t\nAnswer: 3", "Thought: t\nAnswer: 3"],
        function_calling=False,
    )
    agent = ReActAgent.from_tools([add], llm=llm)
    task = agent.create_task("add")
    agent.run_step(task.task_id)
    agent.run_step(task.task_id)
    agent.undo_step(task.task_id)
    assert task.extra_state["current_reasoning"] is task.extra_state["reasoning"]
    assert len(task.extra_state["current_reasoning"]) == 2


def test_parse_error_is_fed_back_with_the_references_words() -> None:
    llm = ScriptedLLM(
        ["Thought: hmm\nAction: add\nAction Input: not json", "Thought: ok\nAnswer: fine"], function_calling=False
    )
    agent = ReActAgent.from_tools([add], llm=llm)
    assert str(agent.chat("go")) == "fine"
    fed_back = llm.requests[1].messages[-1].text
    assert fed_back.startswith("Observation: Error while parsing the output: ")
    assert "Action Input" in fed_back  # nbagent's hint follows


@pytest.mark.parametrize("chunks", [["Thought: t\nAnswer: 42\n"], ["Thought: t\nAnswer:", " 4", "2", "\n", "\n"], ["Thought: t\nAnswer: 4", "2 \n\n"], ["Thought: t\nAnswer: a\n", "b\n"]])
def test_stream_chat_leaves_no_trailing_newline(chunks: list[str]) -> None:
    text = "".join(chunks).split("Answer:", 1)[1].strip()
    llm = ScriptedLLM(["".join(chunks)], function_calling=False)
    agent = ReActAgent.from_tools([add], llm=llm)
    response = agent.stream_chat("go")
    tokens = list(response.response_gen)
    assert response.response == text == "".join(tokens)
    assert agent.chat_history[-1].text == text

    async def run() -> str:
        llm2 = ScriptedLLM(["".join(chunks)], function_calling=False)
        r = await ReActAgent.from_tools([add], llm=llm2).astream_chat("go")
        async for _ in r.async_response_gen():
            pass
        return r.response

    assert asyncio.run(run()) == text


def test_max_iterations_message_starts_with_the_references_words() -> None:
    llm = ScriptedLLM(['Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}'], repeat_last=True, function_calling=False)
    agent = ReActAgent.from_tools([add], llm=llm, max_iterations=2)
    with pytest.raises(ValueError, match=r"^Reached max iterations\. .*max_iterations=2"):
        agent.chat("loop")


@pytest.mark.parametrize("reply", ["", "   \n"])
def test_empty_reply_fails_the_react_step_and_keeps_it(reply: str) -> None:
    llm = ScriptedLLM([reply, "Thought: ok\nAnswer: back"], function_calling=False)
    agent = ReActAgent.from_tools([add], llm=llm)
    task = agent.create_task("go")
    step = agent.get_upcoming_steps(task.task_id)[0]
    with pytest.raises(EmptyResponseError, match="empty message"):
        agent.run_step(task.task_id)
    assert agent.get_upcoming_steps(task.task_id) == [step]
    assert agent.state_of(task).status == TaskStatus.FAILED
    assert task.extra_state["iterations"] == 0 and list(task.extra_state["reasoning"]) == []
    assert agent.run_step(task.task_id).is_last


def test_empty_reply_fails_the_function_calling_step_and_keeps_it() -> None:
    llm = ScriptedLLM(["", "back"])
    agent = FunctionCallingAgent.from_tools([add], llm=llm)
    task = agent.create_task("go")
    with pytest.raises(EmptyResponseError, match="empty message"):
        agent.run_step(task.task_id)
    assert len(agent.get_upcoming_steps(task.task_id)) == 1 and task.scratch_memory.get_all() == []
    assert str(agent.run_step(task.task_id).output) == "back"
