"""AgentWorkflow over the offline models: handoffs, tools, prompts, events, ReAct, limits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nbagent import ChatMessage, FunctionLLM, FunctionTool, MessageRole, ScriptedLLM, tool_call
from nbagent.workflow import (
    AgentInput,
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    Context,
    FunctionAgent,
    MaxAgentIterationsError,
    ReActAgent,
    StopEvent,
    ToolCall,
    ToolCallResult,
)


def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


def broken(x: int) -> int:
    """A tool that fails."""
    raise ZeroDivisionError("the tool divided by zero")


def two_agents(a_replies: list[Any], b_replies: list[Any], **kwargs: Any) -> AgentWorkflow:
    triage = FunctionAgent(
        name="triage", description="Routes requests", llm=ScriptedLLM(a_replies), can_handoff_to=["weather"],
        system_prompt="You route requests.",
    )
    weather = FunctionAgent(name="weather", description="Knows the weather", llm=ScriptedLLM(b_replies), tools=[lookup])
    return AgentWorkflow([triage, weather], root_agent="triage", **kwargs)


def collect(wf: AgentWorkflow, **kwargs: Any) -> tuple[list[Any], Any]:
    """Run ``wf`` to the end; the streamed events and the result."""

    async def main() -> tuple[list[Any], Any]:
        handler = wf.run(**kwargs)
        events = [e async for e in handler.stream_events()]
        return events, await handler

    return asyncio.run(main())


def answer(wf: AgentWorkflow, **kwargs: Any) -> Any:
    """Run ``wf`` to the end and return the result."""
    return collect(wf, **kwargs)[1]


def test_handoff_then_tool_then_answer_streams_events_in_order_and_names_the_agent() -> None:
    wf = two_agents(
        [tool_call("handoff", to_agent="weather", reason="it is about weather")],
        [tool_call("lookup", city="Paris"), "Sunny in Paris."],
    )
    events, result = collect(wf, user_msg="Weather in Paris?")
    kinds = [type(e).__name__ for e in events if not isinstance(e, AgentStream)]
    assert kinds == [
        "AgentInput", "AgentOutput", "ToolCall", "ToolCallResult",   # triage hands off
        "AgentInput", "AgentOutput", "ToolCall", "ToolCallResult",   # weather calls lookup
        "AgentInput", "AgentOutput", "StopEvent",                    # weather answers
    ]
    agents = [e.current_agent_name for e in events if isinstance(e, AgentInput)]
    assert agents == ["triage", "weather", "weather"]
    assert isinstance(result, AgentOutput)
    assert str(result) == "Sunny in Paris." and result.current_agent_name == "weather"
    streamed = [e for e in events if isinstance(e, AgentStream)]
    assert "".join(e.delta for e in streamed if e.current_agent_name == "weather").endswith("Sunny in Paris.")
    handoff = [e for e in events if isinstance(e, ToolCallResult)][0]
    assert handoff.return_direct and "weather is now handling" in handoff.tool_output.content


def test_the_active_agent_sees_its_system_prompt_and_the_handoff_tool_only_where_allowed() -> None:
    wf = two_agents([tool_call("handoff", to_agent="weather", reason="r")], ["done"])
    answer(wf, user_msg="hi")
    triage_req = wf.agents["triage"].llm.requests[0]  # type: ignore[attr-defined]
    assert triage_req.messages[0].role == MessageRole.SYSTEM and triage_req.messages[0].text == "You route requests."
    triage_tools = {t.name: t for t in triage_req.tools}
    assert set(triage_tools) == {"handoff"}
    assert "- weather: Knows the weather" in triage_tools["handoff"].description
    assert "triage" not in triage_tools["handoff"].description.split("hand off to:")[-1]
    weather_req = wf.agents["weather"].llm.requests[0]  # type: ignore[attr-defined]
    assert {t.name for t in weather_req.tools} == {"lookup", "handoff"}  # can_handoff_to=None: anyone else
    # the history the second agent sees holds the handoff
    texts = [m.text for m in weather_req.messages]
    assert texts[0] == "hi" and any("weather is now handling" in t for t in texts)


def test_handoff_to_an_agent_that_is_not_allowed_is_an_answer_the_model_reads() -> None:
    a = FunctionAgent(name="a", llm=ScriptedLLM([tool_call("handoff", to_agent="c", reason="x"), "I answer myself"]),
                      can_handoff_to=["b"])
    b = FunctionAgent(name="b", llm=ScriptedLLM(["b"]))
    c = FunctionAgent(name="c", llm=ScriptedLLM(["c"]))
    wf = AgentWorkflow([a, b, c], root_agent="a")
    events, result = collect(wf, user_msg="go")
    bad = [e for e in events if isinstance(e, ToolCallResult)][0]
    assert not bad.tool_output.is_error  # as on the reference: an answer, and the run goes on
    assert bad.tool_output.content == (
        "Agent a cannot hand off to c. Please select a valid agent to hand off to. Valid agents: b"
    )
    assert result.current_agent_name == "a" and str(result) == "I answer myself"


def test_unknown_tool_and_raising_tool_become_errors_the_model_sees() -> None:
    llm = ScriptedLLM([{"tool_calls": [{"name": "nope", "arguments": {}}, {"name": "broken", "arguments": {"x": 1}}]}, "ok"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[broken])])
    events, result = collect(wf, user_msg="go")
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert [r.tool_output.is_error for r in results] == [True, True]
    assert results[0].tool_output.content.startswith("Tool nope not found. Please select a tool that is available.")
    # the reference's words (the message alone), then the exception's type
    assert results[1].tool_output.content == "the tool divided by zero (ZeroDivisionError)"
    second = llm.requests[1].messages
    tool_msgs = [m for m in second if m.role == MessageRole.TOOL]
    assert [m.tool_call_id for m in tool_msgs] == ["call_1", "call_2"]  # replies in call order
    assert str(result) == "ok"


def test_return_direct_tool_ends_the_run_with_its_output() -> None:
    final = FunctionTool.from_defaults(lambda: "the direct answer", name="final", return_direct=True)
    llm = ScriptedLLM([tool_call("final")])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[final])])
    result = answer(wf, user_msg="go")
    assert str(result) == "the direct answer" and len(llm.requests) == 1


def test_state_prompt_wraps_the_user_message_and_tools_can_change_state() -> None:
    async def remember(ctx: Context, fact: str) -> str:
        """Store a fact in the shared state."""
        state = await ctx.get("state")
        state["facts"] = [*state.get("facts", []), fact]
        return "stored"

    llm = ScriptedLLM([tool_call("remember", fact="sky is blue"), "noted"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[remember])], initial_state={"facts": []},
                       state_prompt="STATE={state}\nMSG={msg}")

    async def main() -> tuple[Any, Any]:
        h = wf.run(user_msg="remember this")
        await h
        return await h.ctx.get("state"), llm.requests[0].messages[0].text

    state, first = asyncio.run(main())
    assert state == {"facts": ["sky is blue"]}
    assert first == "STATE={'facts': []}\nMSG=remember this"
    assert wf.initial_state == {"facts": []}  # each run works on its own copy


def test_tool_schema_hides_ctx_and_plain_functions_are_accepted() -> None:
    async def ask(ctx: Context, question: str) -> str:
        """Ask something."""
        return question

    agent = FunctionAgent(name="solo", llm=ScriptedLLM(["x"]), tools=[lookup, ask])
    schemas = {t.name: t.metadata.parameters() for t in agent.tools}
    assert set(schemas["ask"]["properties"]) == {"question"}
    assert set(schemas["lookup"]["properties"]) == {"city"}


def test_tool_retriever_adds_tools_for_the_input() -> None:
    class Retriever:
        def __init__(self) -> None:
            self.queries: list[str] = []

        def retrieve(self, text: str) -> list[Any]:
            self.queries.append(text)
            return [lookup]

    retriever = Retriever()
    llm = ScriptedLLM([tool_call("lookup", city="Oslo"), "cold"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tool_retriever=retriever)])
    events, result = collect(wf, user_msg="Oslo weather")
    assert [t.name for t in llm.requests[0].tools] == ["lookup"]
    out = [e for e in events if isinstance(e, ToolCallResult)][0]
    assert out.tool_output.content == "sunny in Oslo" and not out.tool_output.is_error
    assert retriever.queries[0] == "Oslo weather"


def test_from_tools_or_functions_picks_the_agent_by_function_calling() -> None:
    fc = AgentWorkflow.from_tools_or_functions([lookup], llm=ScriptedLLM(["a"]))
    react = AgentWorkflow.from_tools_or_functions([lookup], llm=ScriptedLLM(["a"], function_calling=False))
    assert type(fc.agents["Agent"]) is FunctionAgent
    assert type(react.agents["Agent"]) is ReActAgent
    assert [t.name for t in react.agents["Agent"].tools] == ["lookup"]
    with pytest.raises(ValueError, match="needs llm"):
        AgentWorkflow.from_tools_or_functions([lookup])


def test_react_agent_runs_tools_from_text_and_hands_off() -> None:
    react_llm = ScriptedLLM(
        [
            'Thought: I need the weather.\nAction: lookup\nAction Input: {"city": "Rome"}',
            'Thought: not mine to finish.\nAction: handoff\nAction Input: {"to_agent": "writer", "reason": "write it up"}',
        ],
        function_calling=False,
    )
    writer_llm = ScriptedLLM(["Thought: I can answer.\nAnswer: Rome is sunny."], function_calling=False)
    researcher = ReActAgent(name="researcher", description="finds facts", llm=react_llm, tools=[lookup])
    writer = ReActAgent(name="writer", description="writes", llm=writer_llm)
    wf = AgentWorkflow([researcher, writer], root_agent="researcher")
    events, result = collect(wf, user_msg="Weather in Rome?")
    assert str(result) == "Rome is sunny." and result.current_agent_name == "writer"
    second = react_llm.requests[1].messages
    assert second[0].role == MessageRole.SYSTEM and "lookup" in second[0].text and "handoff" in second[0].text
    assert second[-1].text == "Observation: sunny in Rome"
    writer_history = [m.text for m in writer_llm.requests[0].messages]
    assert any("Action: lookup" in t and "Observation: sunny in Rome" in t for t in writer_history)
    calls = [e.tool_name for e in events if isinstance(e, ToolCall) and not isinstance(e, ToolCallResult)]
    assert calls == ["lookup", "handoff"]


def test_react_reply_that_does_not_parse_is_asked_again() -> None:
    llm = ScriptedLLM(["Thought: hmm, let me think", "Answer: 4"], function_calling=False)
    wf = AgentWorkflow([ReActAgent(name="solo", llm=llm)])
    events, result = collect(wf, user_msg="2+2?")
    outputs = [e for e in events if isinstance(e, AgentOutput)]
    assert outputs[0].retry_messages and not outputs[1].retry_messages
    assert "Error while parsing the output: " in llm.requests[1].messages[-1].text
    assert str(result) == "4"


def test_max_iterations_stops_a_looping_agent() -> None:
    llm = ScriptedLLM([tool_call("lookup", city="X")], repeat_last=True)
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[lookup])], max_iterations=3)
    with pytest.raises(MaxAgentIterationsError, match="max_iterations=3"):
        answer(wf, user_msg="loop")
    with pytest.raises(MaxAgentIterationsError, match="max_iterations=2"):
        answer(wf, user_msg="loop", max_iterations=2)


def test_a_model_error_surfaces_with_its_own_type() -> None:
    class Unavailable(RuntimeError):
        pass

    wf = AgentWorkflow([FunctionAgent(name="solo", llm=ScriptedLLM([Unavailable("503")]))])
    with pytest.raises(Unavailable, match="503"):
        answer(wf, user_msg="hi")


def test_reusing_the_context_continues_the_conversation_with_the_last_agent() -> None:
    wf = two_agents([tool_call("handoff", to_agent="weather", reason="r")], ["first", "second"])

    async def main() -> tuple[Any, Any, list[str]]:
        ctx = Context(wf)
        r1 = await wf.run(user_msg="one", ctx=ctx)
        r2 = await wf.run(user_msg="two", ctx=ctx)
        memory = await ctx.get("memory")
        return r1, r2, [m.text for m in memory.get_all() if m.role == MessageRole.USER]

    r1, r2, users = asyncio.run(main())
    assert (str(r1), str(r2)) == ("first", "second")
    assert r2.current_agent_name == "weather"
    assert users == ["one", "two"]


def test_chat_history_starts_a_run_instead_of_user_msg() -> None:
    llm = FunctionLLM(lambda messages, tools: f"saw {len(messages)} messages")
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm)])
    history = [ChatMessage(role=MessageRole.USER, content="a"), ChatMessage(role=MessageRole.ASSISTANT, content="b"),
               ChatMessage(role=MessageRole.USER, content="c")]
    assert str(answer(wf, chat_history=history)) == "saw 3 messages"
    with pytest.raises(ValueError, match="Cannot provide both user_msg and chat_history"):
        answer(wf, user_msg="x", chat_history=history)
    with pytest.raises(ValueError, match="needs user_msg"):
        answer(wf, )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"agents": []}, ValueError, "At least one agent must be provided"),
        ({"root_agent": None}, ValueError, "Exactly one root agent must be provided.*root_agent=... \\(one of \\['a', 'b'\\]\\)"),
        ({"root_agent": "zed"}, ValueError, "Root agent zed not found in provided agents"),
        ({"handoff_prompt": "no placeholder"}, ValueError, "Handoff prompt must contain \\{agent_info\\}"),
        ({"state_prompt": "{state} only"}, ValueError, "missing \\['msg'\\]"),
        ({"max_iterations": 0}, ValueError, "max_iterations"),
        ({"initial_state": ["x"]}, TypeError, "initial_state must be a dict"),
    ],
)
def test_construction_is_validated(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    agents = [FunctionAgent(name="a", llm=ScriptedLLM(["x"])), FunctionAgent(name="b", llm=ScriptedLLM(["x"]))]
    params: dict[str, Any] = {"agents": agents, "root_agent": "a", **kwargs}
    with pytest.raises(error, match=match):
        AgentWorkflow(**params)


def test_agent_validation() -> None:
    with pytest.raises(ValueError, match="needs llm"):
        FunctionAgent(name="x")
    with pytest.raises(ValueError, match="is_function_calling_model=False"):
        FunctionAgent(name="x", llm=ScriptedLLM(["a"], function_calling=False))
    with pytest.raises(ValueError, match="unknown agents \\['ghost'\\]"):
        AgentWorkflow([FunctionAgent(name="x", llm=ScriptedLLM(["a"]), can_handoff_to=["ghost"])])
    with pytest.raises(ValueError, match="two agents are named"):
        AgentWorkflow([FunctionAgent(name="x", llm=ScriptedLLM(["a"])), FunctionAgent(name="x", llm=ScriptedLLM(["a"]))], root_agent="x")
    own_handoff = FunctionTool.from_defaults(lambda: "x", name="handoff")
    with pytest.raises(ValueError, match="rename yours"):
        AgentWorkflow([FunctionAgent(name="x", llm=ScriptedLLM(["a"]), tools=[own_handoff])])


def test_single_agent_has_no_handoff_tool_and_is_the_root() -> None:
    llm = ScriptedLLM(["hello"])
    wf = AgentWorkflow([FunctionAgent(name="only", llm=llm, tools=[lookup])])
    assert wf.root_agent == "only"
    assert str(answer(wf, user_msg="hi")) == "hello"
    assert [t.name for t in llm.requests[0].tools] == ["lookup"]


def test_the_workflow_steps_match_the_reference() -> None:
    wf = two_agents(["x"], ["y"])
    assert list(wf.steps) == [
        "init_run", "setup_agent", "run_agent_step", "parse_agent_output", "call_tool", "aggregate_tool_results",
    ]
    assert wf.steps["call_tool"].num_workers == 4
    assert StopEvent in wf.steps["parse_agent_output"].returns
