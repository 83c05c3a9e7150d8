"""Typed answers (output_cls): validated objects, errors fed back for bounded retries, each
retry a visible step; the tools API, response_format and JSON modes, over real HTTP too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from nbagent import (
    AgentRunner,
    FunctionCallingAgent,
    FunctionLLM,
    FunctionTool,
    ReActAgent,
    ScriptedLLM,
)
from nbagent.llms.scripted import tool_call
from nbagent.structured import FINAL_TOOL, StructuredOutputError

try:
    from tests.openai_server import FakeOpenAIServer, serve
except ImportError:  # run from inside tests/
    from openai_server import FakeOpenAIServer, serve  # type: ignore[no-redef]


class Address(BaseModel):
    city: str
    zip: str = Field(pattern=r"^\d{5}$")


class Form(BaseModel):
    """A sign-up form."""

    name: str
    age: int = Field(ge=0, le=150)
    address: Address


GOOD = {"name": "Ada", "age": 36, "address": {"city": "London", "zip": "12345"}}


def lookup(name: str) -> str:
    """Look a person up."""
    return f"{name}: 36 years, lives in London 12345"


def test_tool_mode_retries_with_the_errors_then_returns_the_object() -> None:
    bad = {**GOOD, "age": -1, "address": {"city": "London", "zip": "N1"}}
    llm = ScriptedLLM([tool_call("lookup", name="Ada"), tool_call(FINAL_TOOL, **bad), tool_call(FINAL_TOOL, **GOOD)])
    agent = FunctionCallingAgent.from_tools([lookup], llm=llm, output_cls=Form)
    task = agent.create_task("fill the form for Ada")
    agent.run_step(task)  # the lookup
    assert [t.name for t in llm.requests[0].tools] == ["lookup", FINAL_TOOL]
    assert llm.requests[0].tools[1].parameters()["required"] == ["name", "age", "address"]
    retry = agent.run_step(task)  # a bad answer: a visible step, not the end
    assert not retry.is_last and retry.tool_outputs[0].is_error
    assert "age: Input should be greater than or equal to 0" in retry.output.response
    assert "address.zip: String should match pattern" in retry.output.response
    final = agent.run_step(task)
    assert final.is_last
    obj = final.output.structured_response
    assert isinstance(obj, Form) and obj.address.zip == "12345"
    assert json.loads(final.output.response) == GOOD
    # the model saw the errors as the reply to its call, with the call's id
    tool_msgs = [m for m in llm.requests[-1].messages if m.role.value == "tool"]
    assert tool_msgs[-1].tool_call_id == retry.tool_outputs[0].tool_call_id
    assert "greater than or equal to 0" in tool_msgs[-1].content
    response = agent.finalize_response(task)
    assert response.structured_response is obj
    # the history stays a valid transcript: the answering call has its reply, then the answer
    roles = [m.role.value for m in agent.chat_history]
    assert roles[-3:] == ["assistant", "tool", "assistant"]


def test_retries_are_bounded_and_the_failed_step_stays_queued() -> None:
    llm = ScriptedLLM(["not json", '{"name": "Ada"}', json.dumps(GOOD)])
    agent = FunctionCallingAgent.from_tools([], llm=llm, output_cls=Form, max_output_retries=1)
    task = agent.create_task("fill")
    first = agent.run_step(task)
    assert "not valid JSON" in first.output.response and not first.is_last
    state = agent.state_of(task)
    queued = agent.get_upcoming_steps(task)[0]
    with pytest.raises(StructuredOutputError, match=r"after 1 retries.*address: Field required"):
        agent.run_step(task)
    assert agent.get_upcoming_steps(task)[0] is queued and len(state.completed_steps) == 1
    assert state.failures[-1].error_type == "StructuredOutputError"
    agent.agent_worker.max_output_retries = 3
    assert agent.run_step(task).output.structured_response == Form(**GOOD)


def test_a_text_json_answer_is_accepted_in_tool_mode() -> None:
    llm = ScriptedLLM(["```json\n" + json.dumps(GOOD) + "\n```"])
    agent = FunctionCallingAgent.from_tools([], llm=llm, output_cls=Form)
    assert agent.chat("fill").structured_response == Form(**GOOD)


def test_json_mode_puts_the_schema_in_the_prompt() -> None:
    seen: list[Any] = []

    def model(messages: list[Any], tools: list[Any]) -> str:
        seen.append((messages, tools))
        return json.dumps(GOOD)

    llm = FunctionLLM(model)
    agent = FunctionCallingAgent.from_tools(
        [lookup], llm=llm, output_cls=Form, structured_mode="json", system_prompt="Be brief."
    )
    assert agent.chat("fill").structured_response == Form(**GOOD)
    messages, tools = seen[0]
    assert [t.name for t in tools] == ["lookup"]
    assert messages[0].content == "Be brief."
    assert messages[1].role.value == "system" and '"zip"' in messages[1].content


def test_when_the_tool_budget_is_spent_the_answer_tool_is_forced() -> None:
    llm = ScriptedLLM([tool_call("lookup", name="Ada"), tool_call(FINAL_TOOL, **GOOD)])
    agent = FunctionCallingAgent.from_tools([lookup], llm=llm, output_cls=Form, max_function_calls=1)
    agent.chat("fill")
    assert llm.requests[1].tool_choice == {"type": "function", "function": {"name": FINAL_TOOL}}


def test_bad_configuration_is_a_clear_error() -> None:
    llm = ScriptedLLM([])
    with pytest.raises(TypeError, match="output_cls must be a pydantic BaseModel subclass"):
        FunctionCallingAgent.from_tools([], llm=llm, output_cls=dict)
    with pytest.raises(ValueError, match="structured_mode must be one of"):
        FunctionCallingAgent.from_tools([], llm=llm, output_cls=Form, structured_mode="xml")
    with pytest.raises(ValueError, match="max_output_retries must be an int >= 0"):
        ReActAgent.from_tools([], llm=llm, output_cls=Form, max_output_retries=-1)

    def final_result() -> str:
        """Clashes."""
        return ""

    with pytest.raises(ValueError, match="rename the tool"):
        FunctionCallingAgent.from_tools([final_result], llm=llm, output_cls=Form)


def test_react_answer_is_validated_and_retried() -> None:
    llm = ScriptedLLM(
        [
            'Thought: I know it\nAnswer: {"name": "Ada", "age": 36}',
            "Thought: fixed\nAnswer: " + json.dumps(GOOD),
        ]
    )
    agent = ReActAgent.from_tools([lookup], llm=llm, output_cls=Form)
    task = agent.create_task("fill")
    retry = agent.run_step(task)
    assert not retry.is_last and "address: Field required" in retry.output.response
    final = agent.run_step(task)
    assert final.output.structured_response == Form(**GOOD)
    prompt = llm.requests[-1].prompt
    assert "The text after 'Answer:' must be a single JSON object" in prompt
    assert "Observation: Your final answer was rejected: the answer is not a valid Form" in prompt
    # streaming a typed answer validates it whole
    llm2 = ScriptedLLM(["Answer: " + json.dumps(GOOD)])
    agent2 = ReActAgent.from_tools([], llm=llm2, output_cls=Form)
    streamed = agent2.stream_chat("fill")
    assert streamed.structured_response == Form(**GOOD)
    assert streamed.get_response().structured_response == Form(**GOOD)


def test_tool_mode_over_http_with_the_openai_client() -> None:
    from nbagent.llms.openai import OpenAILLM

    server: FakeOpenAIServer
    with serve() as server:
        server.add({"tool_calls": [{"name": FINAL_TOOL, "arguments": {**GOOD, "age": "old"}}]})
        server.add({"tool_calls": [{"name": FINAL_TOOL, "arguments": GOOD}]})
        llm = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=10)
        agent = FunctionCallingAgent.from_tools([lookup], llm=llm, output_cls=Form)
        response = agent.chat("fill")
        assert response.structured_response == Form(**GOOD)
        first = server.requests[0]
        names = [t["function"]["name"] for t in first["tools"]]
        assert names == ["lookup", FINAL_TOOL]
        assert "response_format" not in first
        params = first["tools"][1]["function"]["parameters"]
        assert params["properties"]["address"] == {"$ref": "#/$defs/Address"}
        assert "Address" in params["$defs"]
        second = server.requests[1]["messages"]
        assert second[-1]["role"] == "tool" and "age: Input should be a valid integer" in second[-1]["content"]


def test_response_format_over_http_when_the_server_supports_it() -> None:
    from nbagent.llms.openai import OpenAILLM

    def reply(body: dict[str, Any]) -> str:
        fmt = body.get("response_format")
        if not fmt:
            return "plain text"
        return json.dumps(GOOD)

    with serve([reply]) as server:
        llm = OpenAILLM(
            model="fake-model", base_url=server.base_url, api_key="sk-test", max_retries=0,
            timeout=10, supports_response_format=True,
        )
        agent = FunctionCallingAgent.from_tools([lookup], llm=llm, output_cls=Form)
        assert agent.chat("fill").structured_response == Form(**GOOD)
        body = server.requests[0]
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["name"] == "Form"
        assert body["response_format"]["json_schema"]["schema"]["required"] == ["name", "age", "address"]
        assert [t["function"]["name"] for t in body["tools"]] == ["lookup"]


def test_views_show_the_typed_object_escaped(tmp_path: Path) -> None:
    from nbagent.viz.dot import task_to_dot
    from nbagent.viz.html import chat_response_html, step_output_html

    evil = {**GOOD, "name": "<img src=x onerror=alert(1)>"}
    llm = ScriptedLLM([tool_call(FINAL_TOOL, **evil)])
    agent = FunctionCallingAgent.from_tools([], llm=llm, output_cls=Form)
    task = agent.create_task("fill")
    out = agent.run_step(task)
    dot = task_to_dot(agent.state_of(task))
    assert "answer: Form(name=" in dot and "<img" not in dot and "&lt;img" in dot
    card = step_output_html(out)
    assert "typed answer · Form" in card and "<img" not in card and "&lt;img" in card
    assert "London" in card
    assert "typed answer · Form" in chat_response_html(agent.finalize_response(task))
    # a saved run keeps the typed answer as its class (output_cls allowed Form and Address in
    # files), and a new process that builds the agent again can load it
    loaded = AgentRunner.load(agent.save(tmp_path / "run.json"))
    final = loaded.state_of(task.task_id).completed_steps[-1].output
    assert final.structured_response == Form(**evil)


def test_a_typed_answer_of_a_class_defined_in_a_function_names_it_when_saving(tmp_path: Path) -> None:
    from nbagent.persist import PersistError

    class Local(BaseModel):
        x: int

    agent = FunctionCallingAgent.from_tools([], llm=ScriptedLLM(['{"x": 1}']), output_cls=Local)
    assert agent.chat("x").structured_response == Local(x=1)
    with pytest.raises(PersistError, match="Local"):
        agent.save(tmp_path / "run.json")
