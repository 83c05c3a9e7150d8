"""ReActAgentWorker through AgentRunner, with offline scripted models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nbagent.llms import FunctionLLM, ScriptedLLM
from nbagent.llms.base import ChatResponse
from nbagent.memory import count_tokens
from nbagent.messages import ChatMessage, MessageRole
from nbagent.runner import AgentRunner
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse
from nbagent.tools import FunctionTool, ToolMetadata
from nbagent.workers import ReActAgentWorker
from nbagent.workers.react import (
    ActionReasoningStep,
    MaxIterationsError,
    ObservationReasoningStep,
    ResponseReasoningStep,
)


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def boom(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"kaput {x}")


def act(tool: str, args: str, thought: str = "I need a tool.") -> str:
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {args}"


def final(text: str) -> str:
    return f"Thought: I can answer without using any more tools.\nAnswer: {text}"


ADD_1_2 = act("add", '{"a": 1, "b": 2}')


def agent(replies: list[Any], tools: list[Any] | None = None, **kw: Any) -> tuple[AgentRunner, ScriptedLLM]:
    llm = ScriptedLLM(replies, repeat_last=kw.pop("repeat_last", False))
    worker = ReActAgentWorker.from_tools([add] if tools is None else tools, llm=llm, **kw)
    return AgentRunner(worker), llm


def texts(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role.value, m.text) for m in messages]


def observations(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages if m.role == MessageRole.USER and m.text.startswith("Observation:")]


# ----- the basic loop ------------------------------------------------------------------------


def test_tool_call_then_answer_and_prompt_layout() -> None:
    runner, llm = agent([ADD_1_2, final("1 + 2 = 3")])
    response = runner.chat("What is 1 + 2?")
    assert isinstance(response, AgentChatResponse)
    assert response.response == "1 + 2 = 3"
    assert [s.content for s in response.sources] == ["3"]

    first, second = llm.requests
    system = first.messages[0]
    assert system.role == MessageRole.SYSTEM
    # the system prompt lists the tool, its description and the JSON schema of its arguments
    assert "- add: Add two numbers." in system.text
    assert '"required": ["a", "b"]' in system.text and "Action Input:" in system.text
    assert texts(first.messages[1:]) == [("user", "What is 1 + 2?")]
    # the second request: system, question, the model's action (re-rendered), the observation
    assert texts(second.messages[1:]) == [
        ("user", "What is 1 + 2?"),
        ("assistant", 'Thought: I need a tool.\nAction: add\nAction Input: {"a": 1, "b": 2}'),
        ("user", "Observation: 3"),
    ]
    assert texts(runner.memory.get_all()) == [("user", "What is 1 + 2?"), ("assistant", "1 + 2 = 3")]


def test_step_outputs_carry_reasoning_tool_outputs_and_sources() -> None:
    runner, _ = agent([ADD_1_2, final("3")])
    task = runner.create_task("1+2?")
    out1 = runner.run_step(task)
    assert not out1.is_last and len(out1.next_steps) == 1
    assert out1.reasoning == "I need a tool."
    assert [(o.tool_name, o.raw_input, o.content) for o in out1.tool_outputs] == [("add", {"a": 1, "b": 2}, "3")]
    assert list(task.extra_state["sources"]) == out1.tool_outputs
    assert runner.get_upcoming_steps(task) == out1.next_steps
    out2 = runner.run_step(task)
    assert out2.is_last and out2.next_steps == [] and not out2.tool_outputs
    assert out2.reasoning == "I can answer without using any more tools."
    kinds = [type(s) for s in task.extra_state["reasoning"]]
    assert kinds == [ActionReasoningStep, ObservationReasoningStep, ResponseReasoningStep]
    # memory changes only at finalize
    assert runner.memory.get_all() == []
    assert str(runner.finalize_response(task)) == "3"
    assert len(runner.memory.get_all()) == 2


def test_plain_functions_and_describe() -> None:
    llm = ScriptedLLM([final("hi")])
    worker = ReActAgentWorker([add, boom], llm, max_iterations=7)
    assert all(isinstance(t, FunctionTool) for t in worker.tools)
    assert worker.describe() == {
        "kind": "ReActAgentWorker",
        "model": "scripted",
        "tools": ["add", "boom"],
        "max_iterations": 7,
    }
    with pytest.raises(ValueError, match="needs a model"):
        ReActAgentWorker.from_tools([add])
    with pytest.raises(ValueError, match="max_iterations"):
        ReActAgentWorker([add], llm, max_iterations=0)


def test_custom_prompt_and_context() -> None:
    template = 'Tools: {tool_names}\n{tool_desc}\nKeep {"json": "braces"}{context}'
    runner, llm = agent([final("ok")], react_system_prompt=template, context="You are a calculator.")
    runner.chat("hi")
    system = llm.requests[0].messages[0].text
    assert system.startswith("Tools: add\n- add: Add two numbers.")
    assert 'Keep {"json": "braces"}' in system and "You are a calculator." in system


def test_tool_retriever_picks_the_tools() -> None:
    class Retriever:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def retrieve(self, text: str) -> list[Any]:
            self.asked.append(text)
            return [add]

    retriever = Retriever()
    llm = ScriptedLLM([ADD_1_2, final("3")])
    runner = AgentRunner(ReActAgentWorker(None, llm, tool_retriever=retriever))
    assert runner.chat("1+2?").response == "3"
    assert retriever.asked == ["1+2?", "1+2?"]
    assert "- add:" in llm.requests[0].messages[0].text
    assert observations(llm.requests[1].messages) == ["Observation: 3"]


# ----- errors the model sees and recovers from ------------------------------------------------


def test_unknown_tool_is_an_error_observation_then_recovery() -> None:
    runner, llm = agent([act("multiply", '{"a": 2, "b": 3}'), ADD_1_2, final("3")])
    task = runner.create_task("compute")
    out = runner.run_step(task)
    assert not out.is_last
    assert out.tool_outputs[0].is_error
    assert len(llm.requests) == 1
    runner.run_step(task)
    (err,) = observations(llm.requests[1].messages)
    assert err.startswith("Observation: Error: No such tool named `multiply`.") and "Available tools: add" in err  # the reference's words, then the hint
    assert runner.run_step(task).is_last
    assert str(runner.finalize_response(task)) == "3"
    assert task.extra_state["reasoning"][1].is_error is True


def test_tool_exception_is_an_error_observation() -> None:
    runner, llm = agent([act("boom", '{"x": 7}'), final("it failed")], tools=[add, boom])
    assert runner.chat("go").response == "it failed"
    (obs,) = observations(llm.requests[1].messages)
    assert obs == "Observation: Error: kaput 7 (RuntimeError)"  # the reference's words, then the type


def test_bad_arguments_are_an_error_observation() -> None:
    runner, llm = agent([act("add", '{"a": "one"}'), final("sorry")])
    runner.chat("go")
    (obs,) = observations(llm.requests[1].messages)
    assert "invalid arguments for tool 'add'" in obs and "b: Field required" in obs


def test_malformed_reply_is_a_parse_error_observation_then_recovery() -> None:
    runner, llm = agent(["Thought: hmm\nAction: add\nAction Input: a=1, b=2", ADD_1_2, final("3")])
    task = runner.create_task("1+2?")
    out = runner.run_step(task)
    assert not out.is_last and not out.tool_outputs and len(out.next_steps) == 1
    assert out.output.response.startswith("Observation: Error while parsing the output: ")
    runner.run_step(task)
    last = llm.requests[1].messages[-1]
    assert last.role == MessageRole.USER
    assert last.text.startswith("Observation: Error while parsing the output: the Action Input of 'add'")
    assert "Reply in the format" in last.text
    assert runner.run_step(task).is_last
    assert str(runner.finalize_response(task)) == "3"


def test_max_iterations_error_keeps_the_step_queued() -> None:
    runner, llm = agent([ADD_1_2], max_iterations=2, repeat_last=True)
    task = runner.create_task("loop forever")
    runner.run_step(task)
    runner.run_step(task)
    with pytest.raises(MaxIterationsError, match=r"max_iterations=2") as info:
        runner.run_step(task)
    assert isinstance(info.value, ValueError)
    assert "ReActAgentWorker(..., max_iterations=N)" in str(info.value)
    assert len(llm.requests) == 2  # no model call was made
    assert len(runner.get_upcoming_steps(task)) == 1
    assert task.extra_state["iterations"] == 2
    runner.agent_worker.max_iterations = 3  # type: ignore[attr-defined]
    assert not runner.run_step(task).is_last
    assert len(llm.requests) == 3


def test_max_iterations_through_chat() -> None:
    runner, _ = agent([ADD_1_2], max_iterations=3, repeat_last=True)
    with pytest.raises(MaxIterationsError, match="max_iterations=3"):
        runner.chat("loop")


def test_return_direct_tool_ends_the_task_with_its_output() -> None:
    lookup = FunctionTool.from_defaults(lambda city: f"Sunny in {city}", name="weather", return_direct=True)
    runner, llm = agent([act("weather", '{"city": "Oslo"}')], tools=[lookup])
    task = runner.create_task("weather in Oslo?")
    out = runner.run_step(task)
    assert out.is_last and out.output.response == "Sunny in Oslo"
    assert [o.content for o in out.tool_outputs] == ["Sunny in Oslo"]
    runner.finalize_response(task)
    assert texts(runner.memory.get_all()) == [("user", "weather in Oslo?"), ("assistant", "Sunny in Oslo")]
    assert len(llm.requests) == 1
    assert "given to the user as the final answer" in llm.requests[0].messages[0].text


def test_return_direct_tool_that_fails_does_not_end_the_task() -> None:
    failing = FunctionTool.from_defaults(boom, return_direct=True)
    runner, _ = agent([act("boom", '{"x": 1}'), final("no luck")], tools=[failing])
    task = runner.create_task("go")
    assert not runner.run_step(task).is_last
    assert runner.run_step(task).is_last


# ----- streaming -----------------------------------------------------------------------------


def test_stream_chat_streams_the_answer_and_then_fills_memory() -> None:
    runner, llm = agent([ADD_1_2, final("The sum is three, as computed.")])
    response = runner.stream_chat("What is 1 + 2?")
    assert isinstance(response, StreamingAgentChatResponse)
    assert not response.is_done
    assert runner.memory.get_all() == []  # finalized only when the stream ends
    tokens = list(response.response_gen)
    assert len(tokens) > 3
    assert "".join(tokens) == "The sum is three, as computed."
    assert texts(runner.memory.get_all()) == [
        ("user", "What is 1 + 2?"),
        ("assistant", "The sum is three, as computed."),
    ]
    assert [s.content for s in response.sources] == ["3"]
    assert observations(llm.requests[1].messages) == ["Observation: 3"]


class ChunkedLLM(ScriptedLLM):
    """Streams each scripted reply in fixed-size chunks (so labels arrive split)."""

    async def _astream(self, messages: list[ChatMessage], tools: list[ToolMetadata], tool_choice: Any, **kw: Any) -> AsyncIterator[ChatResponse]:
        full = await self._achat(messages, tools, tool_choice, **kw)
        text = full.message.text
        for i in range(0, len(text), 5):
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text[: i + 5]), delta=text[i : i + 5])


def test_stream_step_starts_the_answer_mid_chunk() -> None:
    llm = ChunkedLLM([ADD_1_2, "Thought: done\nAnswer: Paris is the capital."])
    runner = AgentRunner(ReActAgentWorker([add], llm))
    task = runner.create_task("capital?")
    first = runner.stream_step(task)
    assert not first.is_last and first.tool_outputs[0].content == "3"
    out = runner.stream_step(task)
    assert out.is_last and out.reasoning == "done"
    stream = out.output
    assert isinstance(stream, StreamingAgentChatResponse)
    assert stream.response == "Par"  # "Answer" arrived split; the chunk after it starts the answer
    response = runner.finalize_response(task, out)
    assert str(response) == "Paris is the capital."
    assert texts(runner.memory.get_all())[-1] == ("assistant", "Paris is the capital.")
    assert isinstance(task.extra_state["reasoning"][-1], ResponseReasoningStep)


def test_stream_of_bare_text_is_the_answer() -> None:
    llm = FunctionLLM(lambda messages, tools: "Just Paris.")
    runner = AgentRunner(ReActAgentWorker([add], llm))
    response = runner.stream_chat("capital?")
    assert "".join(response.response_gen) == "Just Paris."
    assert texts(runner.memory.get_all()) == [("user", "capital?"), ("assistant", "Just Paris.")]


def test_stream_of_malformed_reply_is_a_parse_error_step() -> None:
    llm = ChunkedLLM(["Thought: still thinking", final("ok")])
    runner = AgentRunner(ReActAgentWorker([add], llm))
    task = runner.create_task("q")
    out = runner.stream_step(task)
    assert not out.is_last and "Error while parsing the output" in out.output.response


# ----- steering, undo, memory ----------------------------------------------------------------


def test_injected_human_input_reaches_the_next_request_and_memory() -> None:
    runner, llm = agent([ADD_1_2, act("add", '{"a": 1, "b": 10}'), final("11")])
    task = runner.create_task("1+2?")
    runner.run_step(task)
    runner.run_step(task, input="Actually use b=10.")
    sent = texts(llm.requests[1].messages)
    assert ("user", "Actually use b=10.") in sent
    # shown where it happened: after the first action and its observation, not before them
    assert sent.index(("user", "Actually use b=10.")) == len(sent) - 1
    assert sent[-2][1].startswith("Observation:") and sent[-3][1].startswith("Thought:")
    runner.run_step(task)
    # still in the prompt afterwards, exactly once
    assert texts(llm.requests[2].messages).count(("user", "Actually use b=10.")) == 1
    runner.finalize_response(task)
    assert texts(runner.memory.get_all()) == [
        ("user", "1+2?"),
        ("user", "Actually use b=10."),
        ("assistant", "11"),
    ]


def test_first_step_input_follows_the_question() -> None:
    runner, llm = agent([final("hello")])
    task = runner.create_task("original")
    runner.run_step(task, input="added")
    assert texts(llm.requests[0].messages[1:]) == [("user", "original"), ("user", "added")]


def test_undo_after_tool_step_gives_the_same_next_request() -> None:
    runner, llm = agent([ADD_1_2, act("add", '{"a": 3, "b": 4}'), act("add", '{"a": 3, "b": 4}'), final("7")])
    task = runner.create_task("sum?")
    runner.run_step(task)
    runner.run_step(task)  # request 1
    assert len(task.extra_state["reasoning"]) == 4
    runner.undo_step(task)
    assert len(task.extra_state["reasoning"]) == 2
    assert task.extra_state["iterations"] == 1
    assert len(task.extra_state["sources"]) == 1
    runner.run_step(task)  # request 2: the same step again
    assert texts(llm.requests[2].messages) == texts(llm.requests[1].messages)
    runner.run_step(task)
    # the undone step left nothing behind: one 3+4 call in the prompt
    assert observations(llm.requests[3].messages) == ["Observation: 3", "Observation: 7"]
    runner.finalize_response(task)
    assert texts(runner.memory.get_all()) == [("user", "sum?"), ("assistant", "7")]


def test_undo_first_step_does_not_duplicate_the_question() -> None:
    runner, llm = agent([ADD_1_2, ADD_1_2, final("3")])
    task = runner.create_task("1+2?")
    runner.run_step(task)
    runner.undo_step(task)
    runner.run_step(task)
    assert texts(llm.requests[1].messages) == texts(llm.requests[0].messages)
    runner.run_step(task)
    assert next(m for m in texts(llm.requests[2].messages) if m[0] == "user") == ("user", "1+2?")
    assert observations(llm.requests[2].messages) == ["Observation: 3"]


def test_second_chat_sees_the_first_question_and_answer() -> None:
    runner, llm = agent([ADD_1_2, final("3"), final("You asked 1+2.")])
    runner.chat("What is 1 + 2?")
    runner.chat("What did I ask?")
    assert texts(llm.requests[2].messages[1:]) == [
        ("user", "What is 1 + 2?"),
        ("assistant", "3"),
        ("user", "What did I ask?"),
    ]
    # the first task's reasoning is not carried into the second task's prompt
    assert observations(llm.requests[2].messages) == []


def test_achat() -> None:
    runner, llm = agent([ADD_1_2, final("3")])
    response = asyncio.run(runner.achat("1+2?"))
    assert response.response == "3" and len(llm.requests) == 2


# ----- bounded prompt ------------------------------------------------------------------------


def test_prompt_stays_within_the_reasoning_budget_over_300_steps() -> None:
    budget = 300
    llm = ScriptedLLM([ADD_1_2], repeat_last=True)
    runner = AgentRunner(ReActAgentWorker([add], llm, max_iterations=1000, reasoning_token_budget=budget))
    task = runner.create_task("keep adding")
    for _ in range(300):
        runner.run_step(task)
    fixed = llm.requests[0].messages  # system prompt and question: the part that never changes
    fixed_tokens = sum(4 + count_tokens(m.text) for m in fixed)

    def reasoning_tokens(i: int) -> int:
        return sum(4 + count_tokens(m.text) for m in llm.requests[i].messages) - fixed_tokens

    last = llm.requests[299].messages
    assert last[: len(fixed)] == fixed
    note = last[len(fixed)].text
    shown = len(last) - len(fixed) - 1
    assert note == f"({598 - shown} earlier reasoning steps omitted)"
    assert shown >= 2 and last[-1].text == "Observation: 3"
    assert last[len(fixed) + 1].role == MessageRole.ASSISTANT  # never opens on an orphan observation
    assert reasoning_tokens(299) <= budget + 4 + count_tokens(note)
    assert reasoning_tokens(299) == reasoning_tokens(100)  # flat, not growing
    assert len(llm.requests[299].prompt) < len(llm.requests[0].prompt) + 6 * budget
    # everything is still recorded, only the prompt is windowed
    assert len(task.extra_state["reasoning"]) == 600


def test_one_huge_observation_is_still_shown() -> None:
    big = FunctionTool.from_defaults(lambda: "word " * 500, name="big")
    runner, llm = agent([act("big", "{}"), final("done")], tools=[big], reasoning_token_budget=50)
    runner.chat("go")
    obs = observations(llm.requests[1].messages)
    assert len(obs) == 1 and obs[0].count("word") == 500


def test_astream_chat_inside_an_event_loop() -> None:
    runner, _ = agent([ADD_1_2, final("three, via the tool")])

    async def main() -> tuple[list[str], list[tuple[str, str]]]:
        response = await runner.astream_chat("1+2?")
        tokens = [t async for t in response.async_response_gen()]
        return tokens, texts(runner.memory.get_all())

    tokens, memory = asyncio.run(main())
    assert len(tokens) > 1 and "".join(tokens) == "three, via the tool"
    assert memory == [("user", "1+2?"), ("assistant", "three, via the tool")]


def test_verbose_prints_the_reasoning(capsys: pytest.CaptureFixture[str]) -> None:
    runner, _ = agent([ADD_1_2, final("3")], verbose=True)
    runner.chat("1+2?")
    printed = capsys.readouterr().out
    assert "Action: add" in printed and "Observation: 3" in printed and "Answer: 3" in printed
