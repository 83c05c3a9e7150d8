"""FunctionCallingAgentWorker / OpenAIAgentWorker through AgentRunner, with offline models."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from nbagent.llms import FunctionLLM, ScriptedLLM
from nbagent.llms.scripted import tool_call
from nbagent.messages import ChatMessage, MessageRole, ToolOutput
from nbagent.runner import AgentRunner
from nbagent.runner.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse
from nbagent.tools import FunctionTool, ToolMetadata
from nbagent.workers.function_calling import (
    CALLS_KEY,
    SOURCES_KEY,
    UNEXECUTED_KEY,
    FunctionCallingAgentWorker,
    OpenAIAgentWorker,
)


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


async def slow_echo(text: str, delay: float = 0.2) -> str:
    """Echo text after a delay."""
    await asyncio.sleep(delay)
    return f"echo:{text}"


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A scripted reply with several tool calls at once."""
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in pairs], "content": None}


def agent(replies: list[Any], tools: list[Any] | None = None, **kw: Any) -> tuple[AgentRunner, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    worker = FunctionCallingAgentWorker.from_tools([add] if tools is None else tools, llm=llm, **kw)
    return AgentRunner(worker), llm


def roles(messages: list[ChatMessage]) -> list[str]:
    return [m.role.value for m in messages]


# ----- the basic loop ------------------------------------------------------------------------


def test_single_tool_call_then_answer_carries_openai_format() -> None:
    runner, llm = agent([tool_call("add", a=2, b=3), "It is 5."], system_prompt="Be brief.")
    response = runner.chat("What is 2 + 3?")
    assert isinstance(response, AgentChatResponse)
    assert response.response == "It is 5."
    assert [s.content for s in response.sources] == ["5"]
    assert llm.requests[0].tool_choice == "auto"
    assert [t.name for t in llm.requests[0].tools] == ["add"]
    second = llm.requests[1].messages
    assert roles(second) == ["system", "user", "assistant", "tool"]
    assert second[0].content == "Be brief." and second[1].content == "What is 2 + 3?"
    call = second[2].tool_calls[0]
    assert (call.tool_name, call.tool_kwargs) == ("add", {"a": 2, "b": 3})
    assert second[3].tool_call_id == call.tool_id and second[3].name == "add"
    assert second[3].content == "5"
    # the runner's memory got the whole exchange, the final answer last
    assert roles(runner.memory.get_all()) == ["user", "assistant", "tool", "assistant"]
    assert runner.memory.get_all()[-1].content == "It is 5."


def test_step_by_step_outputs_and_state() -> None:
    runner, _ = agent([tool_call("add", a=1, b=1), "two"])
    task = runner.create_task("1+1?")
    out = runner.run_step(task)
    assert not out.is_last and len(out.next_steps) == 1
    assert [o.content for o in out.tool_outputs] == ["2"]
    assert isinstance(task.extra_state[SOURCES_KEY], AppendLog)
    assert task.extra_state[CALLS_KEY] == 1
    out = runner.run_step(task)
    assert out.is_last and str(out.output) == "two"
    assert str(runner.finalize_response(task)) == "two"


def test_plain_functions_and_function_tools_both_accepted() -> None:
    tool = FunctionTool.from_defaults(divide, name="div")
    worker = FunctionCallingAgentWorker([add, tool], ScriptedLLM(["x"]))
    assert [t.name for t in worker.tools] == ["add", "div"]
    info = worker.describe()
    assert info["tools"] == ["add", "div"] and info["max_function_calls"] == 10


def test_chat_twice_keeps_history() -> None:
    runner, llm = agent([tool_call("add", a=1, b=2), "3", "Yes, 3."])
    runner.chat("1+2?")
    runner.chat("Sure?")
    third = llm.requests[2].messages
    assert roles(third) == ["user", "assistant", "tool", "assistant", "user"]
    assert third[0].content == "1+2?" and third[-1].content == "Sure?"
    assert len(runner.memory.get_all()) == 6


def test_function_llm_plays_the_model() -> None:
    def model(messages: list[ChatMessage], tools: list[ToolMetadata]) -> Any:
        last = messages[-1]
        if last.role == MessageRole.TOOL:
            return f"The sum is {last.content}."
        assert [t.name for t in tools] == ["add"]
        return tool_call("add", a=40, b=2)

    llm = FunctionLLM(model)
    runner = AgentRunner(FunctionCallingAgentWorker.from_tools([add], llm=llm))
    assert runner.chat("40+2?").response == "The sum is 42."
    assert len(llm.requests) == 2


# ----- parallel calls ------------------------------------------------------------------------


def test_parallel_tool_calls_run_concurrently_in_call_order() -> None:
    reply = calls(
        ("slow_echo", {"text": "a", "delay": 0.25}),
        ("slow_echo", {"text": "b", "delay": 0.2}),
        ("slow_echo", {"text": "c", "delay": 0.15}),
    )
    runner, llm = agent([reply, "done"], tools=[slow_echo])
    start = time.perf_counter()
    response = runner.chat("echo three")
    elapsed = time.perf_counter() - start
    assert elapsed < 0.4, f"three 0.15-0.25 s calls took {elapsed:.2f} s: not concurrent"
    assert [s.content for s in response.sources] == ["echo:a", "echo:b", "echo:c"]
    msgs = llm.requests[1].messages
    ids = [c.tool_id for c in msgs[1].tool_calls]
    assert [m.tool_call_id for m in msgs[2:]] == ids
    assert [m.content for m in msgs[2:]] == ["echo:a", "echo:b", "echo:c"]


def test_parallel_calls_off_keeps_one_call_per_reply() -> None:
    """allow_parallel_tool_calls=False means one tool call per model reply, as on the reference
    (its models keep the first call; its worker raises for a model that sends more) and as
    FunctionAgent does; it used to run every call of the reply one after another."""
    reply = calls(("slow_echo", {"text": "a"}), ("slow_echo", {"text": "b"}))
    runner, llm = agent([reply, "done"], tools=[slow_echo], allow_parallel_tool_calls=False)
    response = runner.chat("echo two")
    assert [s.content for s in response.sources] == ["echo:a"]
    sent = llm.requests[1].messages
    assert [len(m.tool_calls) for m in sent if m.tool_calls] == [1]  # the transcript stays valid
    assert [m.content for m in sent if m.role.value == "tool"] == ["echo:a"]


# ----- tool_choice ---------------------------------------------------------------------------


def test_tool_choice_applies_to_the_first_step_only() -> None:
    runner, llm = agent([tool_call("add", a=1, b=1), tool_call("add", a=2, b=2), "ok"])
    runner.chat("go", tool_choice="add")
    assert [r.tool_choice for r in llm.requests] == ["add", "auto", "auto"]


def test_default_tool_choice_of_the_runner_and_dict_choice() -> None:
    llm = ScriptedLLM([tool_call("add", a=1, b=1), "ok"])
    forced = {"type": "function", "function": {"name": "add"}}
    runner = AgentRunner(FunctionCallingAgentWorker([add], llm), default_tool_choice=forced)
    runner.chat("go")
    assert llm.requests[0].tool_choice == forced and llm.requests[1].tool_choice == "auto"


def test_unknown_tool_choice_is_a_clear_error_and_nothing_was_sent() -> None:
    runner, llm = agent(["never"])
    with pytest.raises(ValueError, match=r"'mul'.*\['add'\]"):
        runner.chat("go", tool_choice="mul")
    with pytest.raises(ValueError, match="'sub'"):
        runner.chat("go", tool_choice={"type": "function", "function": {"name": "sub"}})
    assert llm.requests == []


def test_no_tools_sends_no_tool_choice() -> None:
    runner, llm = agent(["hello"], tools=[])
    assert runner.chat("hi").response == "hello"
    assert llm.requests[0].tools == [] and llm.requests[0].tool_choice is None


# ----- return_direct, limits, errors ---------------------------------------------------------


def test_return_direct_ends_the_task_with_the_tool_output() -> None:
    lookup = FunctionTool.from_defaults(lambda key: f"value of {key}", name="lookup", return_direct=True)
    reply = calls(("add", {"a": 1, "b": 1}), ("lookup", {"key": "k"}))
    runner, llm = agent([reply], tools=[add, lookup])
    response = runner.chat("get k")
    assert response.response == "value of k"
    assert response.metadata["return_direct"] == "lookup"
    assert len(llm.requests) == 1
    # the tool's reply is the last message, as on the reference's worker (no assistant message
    # repeating it; tests/oracle/test_oracle_runner.py compares the two)
    assert roles(runner.memory.get_all()) == ["user", "assistant", "tool", "tool"]


def test_return_direct_tool_that_fails_does_not_end_the_task() -> None:
    boom = FunctionTool.from_defaults(lambda: 1 / 0, name="boom", return_direct=True)
    runner, llm = agent([tool_call("boom"), "it failed"], tools=[boom])
    response = runner.chat("go")
    assert response.response == "it failed" and response.sources[0].is_error


def test_max_function_calls_forces_an_answer() -> None:
    runner, llm = agent(
        [tool_call("add", a=1, b=1), tool_call("add", a=2, b=2), "final"], max_function_calls=2
    )
    assert runner.chat("go").response == "final"
    assert [r.tool_choice for r in llm.requests] == ["auto", "auto", "none"]


def test_calls_past_the_budget_are_not_run_and_the_model_is_told() -> None:
    reply = calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}), ("add", {"a": 3, "b": 3}))
    runner, llm = agent([reply, "final"], max_function_calls=2)
    response = runner.chat("go")
    assert [s.content for s in response.sources[:2]] == ["2", "4"]
    skipped = response.sources[2]
    assert skipped.is_error and "at most 2" in skipped.content
    tool_msgs = [m for m in llm.requests[1].messages if m.role == MessageRole.TOOL]
    assert len(tool_msgs) == 3 and llm.requests[1].tool_choice == "none"


def test_model_that_ignores_tool_choice_none_still_ends() -> None:
    reply = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}], "content": "Best guess: 2"}
    runner, llm = agent([reply], max_function_calls=0)
    response = runner.chat("go")
    assert response.response == "Best guess: 2"
    assert response.metadata[UNEXECUTED_KEY][0]["tool_name"] == "add"
    assert response.sources == []
    stored = runner.memory.get_all()[-1]
    assert stored.tool_calls == [] and stored.additional_kwargs[UNEXECUTED_KEY]


def test_tool_errors_become_observations_and_the_run_recovers() -> None:
    runner, llm = agent(
        [
            tool_call("divide", a=1, b=0),
            tool_call("nope", x=1),
            tool_call("divide", a="x", b=2),
            tool_call("divide", a=6, b=3),
            "6/3 is 2",
        ],
        tools=[divide],
    )
    response = runner.chat("6/3?")
    assert response.response == "6/3 is 2"
    errors = [s for s in response.sources if s.is_error]
    assert len(errors) == 3
    assert "ZeroDivisionError" in errors[0].content
    assert errors[1].content.startswith("Tool with name nope not found, please double check.")  # the reference's words
    assert "invalid arguments" in errors[2].content
    tool_msgs = [m for m in llm.requests[1].messages if m.role == MessageRole.TOOL]
    assert "ZeroDivisionError" in str(tool_msgs[0].content)


# ----- streaming -----------------------------------------------------------------------------


def test_stream_chat_streams_tokens_and_memory_holds_the_exchange() -> None:
    runner, llm = agent([tool_call("add", a=20, b=22), "The answer is 42 indeed."])
    response = runner.stream_chat("20+22?")
    assert isinstance(response, StreamingAgentChatResponse)
    tokens = list(response.response_gen)
    assert len(tokens) >= 3
    assert "".join(tokens) == "The answer is 42 indeed."
    assert [s.content for s in response.sources] == ["42"]
    history = runner.memory.get_all()
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert history[0].content == "20+22?" and history[-1].content == "The answer is 42 indeed."


def test_async_stream_chat() -> None:
    async def main() -> tuple[list[str], list[ChatMessage]]:
        runner, _ = agent(["Hello there, friend."])
        response = await runner.astream_chat("hi")
        tokens = [t async for t in response.async_response_gen()]
        return tokens, runner.memory.get_all()

    tokens, history = asyncio.run(main())
    assert "".join(tokens) == "Hello there, friend." and len(tokens) > 1
    assert roles(history) == ["user", "assistant"]


def test_streamed_text_then_tool_calls_runs_the_calls_and_goes_on() -> None:
    """Issue 29: the text is the model's words in that step, the calls run, the step is not
    last (tests/test_stream_tool_calls.py has the rest)."""
    reply = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}], "content": "Let me add."}
    runner, llm = agent([reply, "3"])
    response = runner.stream_chat("1+2?")
    assert list(response.response_gen) == ["Let ", "me ", "add.", "\n\n", "3"]
    assert response.response == "3" and [s.content for s in response.sources] == ["3"]
    history = runner.memory.get_all()
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert history[1].content == "Let me add." and history[1].tool_calls[0].tool_kwargs == {"a": 1, "b": 2}
    assert UNEXECUTED_KEY not in history[1].additional_kwargs


def test_stream_step_runs_tools_when_the_reply_has_no_text() -> None:
    runner, _ = agent([tool_call("add", a=1, b=2), "3"])
    task = runner.create_task("1+2?")
    out = runner.stream_step(task)
    assert not out.is_last and [o.content for o in out.tool_outputs] == ["3"]
    out = runner.stream_step(task)
    assert out.is_last and isinstance(out.output, StreamingAgentChatResponse)
    assert str(runner.finalize_response(task)) == "3"
    assert runner.memory.get_all()[-1].content == "3"


# ----- steering and undo ---------------------------------------------------------------------


def test_injected_input_reaches_the_model() -> None:
    runner, llm = agent([tool_call("add", a=1, b=1), "ok, 2 then"])
    task = runner.create_task("1+1?")
    runner.run_step(task)
    runner.run_step(task, input="Just say the number.")
    msgs = llm.requests[1].messages
    assert roles(msgs) == ["user", "assistant", "tool", "user"]
    assert msgs[-1].content == "Just say the number."


def test_injected_input_on_the_first_step_goes_after_the_question() -> None:
    runner, llm = agent(["fine"])
    task = runner.create_task("original")
    runner.run_step(task, input="added")
    assert [m.content for m in llm.requests[0].messages] == ["original", "added"]


def test_undo_after_a_tool_step_then_rerun_reproduces_the_request() -> None:
    runner, llm = agent([tool_call("add", a=1, b=1), "2", tool_call("add", a=1, b=1), "two"])
    task = runner.create_task("1+1?")
    runner.run_step(task)
    runner.run_step(task)
    runner.undo_step(task)  # the answer step
    runner.undo_step(task)  # the tool step
    assert task.extra_state[CALLS_KEY] == 0 and len(task.extra_state[SOURCES_KEY]) == 0
    assert len(task.scratch_memory) == 0
    runner.run_step(task)
    assert llm.requests[2].messages == llm.requests[0].messages
    runner.run_step(task)
    assert [m.content for m in llm.requests[3].messages[:2]] == ["1+1?", None]
    assert str(runner.finalize_response(task)) == "two"
    assert roles(runner.memory.get_all()) == ["user", "assistant", "tool", "assistant"]
    assert len(runner.finalize_response(task).sources) == 1


def test_failed_model_call_rolls_back_and_retry_works() -> None:
    runner, llm = agent([tool_call("add", a=1, b=1), RuntimeError("server down"), "2"])
    task = runner.create_task("1+1?")
    runner.run_step(task)
    with pytest.raises(RuntimeError, match="server down"):
        runner.run_step(task)
    out = runner.run_step(task)
    assert out.is_last and str(out.output) == "2"
    assert llm.requests[1].messages == llm.requests[2].messages


# ----- construction --------------------------------------------------------------------------


def test_non_function_calling_model_is_refused_with_a_hint() -> None:
    llm = ScriptedLLM(["x"], function_calling=False)
    with pytest.raises(ValueError, match="ReActAgentWorker"):
        OpenAIAgentWorker.from_tools([add], llm=llm)
    with pytest.raises(ValueError, match="is_function_calling_model=False"):
        FunctionCallingAgentWorker([add], llm)


def test_bad_construction_arguments() -> None:
    with pytest.raises(ValueError, match="needs llm"):
        FunctionCallingAgentWorker.from_tools([add])
    with pytest.raises(ValueError, match="max_function_calls"):
        FunctionCallingAgentWorker([add], ScriptedLLM([]), max_function_calls=-1)
    with pytest.raises(ValueError, match="not both"):
        FunctionCallingAgentWorker([add], ScriptedLLM([]), tool_retriever=object())


def test_openai_worker_builds_an_openai_llm_when_none_is_given() -> None:
    pytest.importorskip("openai")
    worker = OpenAIAgentWorker.from_tools([add], model="my-model", base_url="http://127.0.0.1:9/v1", api_key="sk-x")
    assert type(worker.llm).__name__ == "OpenAILLM"
    assert worker.llm.model == "my-model"
    assert isinstance(worker, FunctionCallingAgentWorker)


def test_tool_retriever_picks_the_tools_from_the_task_input() -> None:
    class Retriever:
        def __init__(self) -> None:
            self.queries: list[str] = []

        def retrieve(self, text: str) -> list[Any]:
            self.queries.append(text)
            return [divide] if "divide" in text else [add]

    retriever = Retriever()
    llm = ScriptedLLM([tool_call("divide", a=6, b=3), "2"])
    runner = AgentRunner(FunctionCallingAgentWorker(None, llm, tool_retriever=retriever))
    assert runner.chat("please divide 6 by 3").response == "2"
    assert [t.name for t in llm.requests[0].tools] == ["divide"]
    assert retriever.queries == ["please divide 6 by 3"] * 2


def test_sources_are_tool_outputs() -> None:
    runner, _ = agent([tool_call("add", a=1, b=1), "2"])
    response = runner.chat("go")
    assert all(isinstance(s, ToolOutput) for s in response.sources)
    assert response.sources[0].tool_call_id is not None


# ----- over real HTTP: OpenAIAgentWorker against the loopback OpenAI-compatible server ---------


def test_openai_worker_end_to_end_over_http() -> None:
    pytest.importorskip("openai")
    from tests.openai_server import serve

    replies: list[Any] = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "call_a"}]},
        "The sum is 5.",
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}, "id": "call_b"}]},
        "Then 2, streamed.",
    ]
    with serve(replies) as server:
        worker = OpenAIAgentWorker.from_tools(
            [add], model="fake-model", base_url=server.base_url, api_key="sk-test"
        )
        runner = AgentRunner(worker)
        try:
            assert runner.chat("2+3?", tool_choice="add").response == "The sum is 5."
            streamed = runner.stream_chat("and 1+1?")
            tokens = list(streamed.response_gen)
        finally:
            worker.llm.close()
        bodies = server.requests
    assert bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert bodies[1]["tool_choice"] == "auto"
    assert bodies[1]["messages"][1]["tool_calls"][0]["id"] == "call_a"
    assert bodies[1]["messages"][2] == {"role": "tool", "tool_call_id": "call_a", "content": "5"}
    assert bodies[2]["messages"][-1] == {"role": "user", "content": "and 1+1?"}
    assert bodies[3]["stream"] is True and bodies[3]["messages"][-1]["tool_call_id"] == "call_b"
    assert "".join(tokens) == "Then 2, streamed." and len(tokens) > 1
    assert roles(runner.memory.get_all()) == ["user", "assistant", "tool", "assistant"] * 2


def test_parallel_calls_of_sync_tools_overlap_in_threads() -> None:
    import time as _time

    def slow_lookup(key: str) -> str:
        """Look a key up slowly (a blocking call, like an HTTP request)."""
        _time.sleep(0.2)
        return key.upper()

    llm = ScriptedLLM([
        {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": k}} for k in ("a", "b", "c")]},
        "done",
    ])
    runner = FunctionCallingAgentWorker.from_tools([slow_lookup], llm=llm).as_agent()
    task = runner.create_task("look up a, b and c")
    start = _time.perf_counter()
    out = runner.run_step(task)
    elapsed = _time.perf_counter() - start
    assert [o.content for o in out.tool_outputs] == ["A", "B", "C"]  # call order kept
    assert elapsed < 0.45, f"three 0.2 s sync calls took {elapsed:.2f} s: they did not overlap"
