"""The workflow reference page's surface, as a LlamaIndex user writes it (imports and the model
changed, nothing else): workflow agents that run on their own and are pydantic models,
AgentWorkflowStartEvent, from_tools_or_functions, ReActAgent(formatter=...), prompts as data,
empty model replies, and the reference's own error texts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError

from nbagent import FunctionLLM, ScriptedLLM, tool_call
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole
from nbagent.prompts import PromptTemplate
from nbagent.tools import FunctionTool
from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workflow import (
    AgentInput,
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    AgentWorkflowStartEvent,
    BaseWorkflowAgent,
    Context,
    FunctionAgent,
    MaxAgentIterationsError,
    ReActAgent,
    ToolCall,
    ToolCallResult,
    WorkflowRuntimeError,
)


def multiply(a: float, b: float) -> float:
    """Multiply two numbers and returns the product"""
    return a * b


def add(a: float, b: float) -> float:
    """Add two numbers and returns the sum"""
    return a + b


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def stream_and_wait(handler: Any) -> tuple[list[Any], Any]:
    events = [ev async for ev in handler.stream_events()]
    return events, await handler


# ----- item 3: an agent is a workflow on its own ---------------------------------------------
def test_function_agent_runs_on_its_own_like_a_one_agent_workflow() -> None:
    def script() -> ScriptedLLM:
        return ScriptedLLM([tool_call("multiply", a=20, b=2), "The answer is 40."])

    async def go() -> None:
        # the reference's docs, imports and model changed
        agent = FunctionAgent(
            tools=[multiply],
            llm=script(),
            system_prompt="You are an agent that can perform basic mathematical operations using tools.",
        )
        handler = agent.run(user_msg="What is 20*2?")
        events, response = await stream_and_wait(handler)
        assert str(response) == "The answer is 40." and isinstance(response, AgentOutput)

        solo = AgentWorkflow(agents=[FunctionAgent(
            tools=[multiply], llm=script(),
            system_prompt="You are an agent that can perform basic mathematical operations using tools.",
        )])
        solo_events, solo_response = await stream_and_wait(solo.run(user_msg="What is 20*2?"))
        kinds = [type(e).__name__ for e in events]
        assert kinds == [type(e).__name__ for e in solo_events]  # exactly what the workflow streams
        assert str(solo_response) == str(response)
        assert {AgentInput, AgentStream, AgentOutput, ToolCall, ToolCallResult} <= {type(e) for e in events}

    run(go())


def test_context_of_an_agent_keeps_the_conversation_and_max_iterations_is_taken() -> None:
    async def go() -> None:
        agent = ReActAgent(tools=[multiply], llm=FunctionLLM(
            lambda messages, tools: "Thought: done\nAnswer: " + str(sum(m.role == MessageRole.USER for m in messages))
        ))
        ctx = Context(agent)
        assert str(await agent.run(user_msg="My name is Logan", ctx=ctx)) == "1"
        assert str(await agent.run(user_msg="What is my name?", ctx=ctx)) == "2"  # the history came along
        memory = await ctx.get("memory")
        assert [m.text for m in memory.get_all() if m.role == MessageRole.USER] == ["My name is Logan", "What is my name?"]

        memory = ChatMemoryBuffer.from_defaults()
        memory.put(ChatMessage(role=MessageRole.USER, content="earlier"))
        seen = FunctionAgent(llm=FunctionLLM(lambda messages, tools: f"{len(messages)} messages"))
        assert str(await seen.run(user_msg="now", memory=memory)) == "2 messages"
        assert [m.text for m in memory.get_all()] == ["earlier", "now", "2 messages"]

        looping = FunctionAgent(llm=ScriptedLLM([tool_call("multiply", a=1, b=1)], repeat_last=True), tools=[multiply])
        with pytest.raises(MaxAgentIterationsError, match=r"Max iterations of 2 reached! Either something went wrong"):
            await looping.run(user_msg="loop", max_iterations=2)

    run(go())


def test_workflow_agents_are_pydantic_models_with_tool_validation() -> None:
    llm = ScriptedLLM(["x"])
    agent = FunctionAgent(name="math", description="Does math", tools=[multiply, FunctionTool.from_defaults(add)], llm=llm)
    assert isinstance(agent, BaseWorkflowAgent)
    assert all(isinstance(t, FunctionTool) for t in agent.tools)  # a plain function became a FunctionTool
    dumped = agent.model_dump(exclude={"llm", "tools"})
    assert dumped["name"] == "math" and dumped["description"] == "Does math"
    assert dumped["can_handoff_to"] is None and dumped["system_prompt"] is None
    assert dumped["scratchpad_key"] == "scratchpad"
    assert set(FunctionAgent.model_fields) >= {"name", "description", "system_prompt", "tools", "tool_retriever",
                                                "can_handoff_to", "llm"}
    assert ReActAgent.model_fields["reasoning_key"].default == "current_reasoning"
    with pytest.raises(TypeError, match="tools must be a list"):
        FunctionAgent(tools="multiply", llm=llm)
    with pytest.raises(TypeError, match="a tool must be a function or a FunctionTool"):
        FunctionAgent(tools=[42], llm=llm)
    with pytest.raises(ValidationError, match="needs llm"):
        FunctionAgent(name="x")
    with pytest.raises(ValidationError, match="LLM must be a FunctionCallingLLM"):
        FunctionAgent(llm=ScriptedLLM(["x"], function_calling=False))
    with pytest.raises(ValidationError, match="tool\n  Extra inputs are not permitted"):
        FunctionAgent(llm=llm, tool=[multiply])  # misspelt: refused, not silently ignored
    copy = agent.model_copy(update={"name": "math2"})
    assert copy.name == "math2" and copy.tools == agent.tools


def test_agent_workflow_start_event_and_from_tools_or_functions() -> None:
    async def go() -> None:
        wf = AgentWorkflow.from_tools_or_functions(
            [multiply, add],
            llm=ScriptedLLM([tool_call("add", a=20, b=8), "28"]),
            system_prompt="You are an agent that can perform basic mathematical operations using tools.",
        )
        agent = wf.agents["Agent"]
        assert isinstance(agent, FunctionAgent)
        assert agent.description == "A single agent that uses the provided tools or functions."
        assert [t.name for t in agent.tools] == ["multiply", "add"]
        response = await wf.run(start_event=AgentWorkflowStartEvent(user_msg="What is 20+(2*4)?"))
        assert str(response) == "28"

        react = AgentWorkflow.from_tools_or_functions(
            [multiply], llm=ScriptedLLM(["Thought: I know.\nAnswer: 6"], function_calling=False),
            initial_state={"unit": "cm"}, state_prompt="State: {state}\nAsk: {msg}",
        )
        assert isinstance(react.agents["Agent"], ReActAgent)
        handler = react.run(user_msg="2*3?")
        assert str(await handler) == "6"
        memory = await handler.ctx.get("memory")
        assert memory.get_all()[0].text == "State: {'unit': 'cm'}\nAsk: 2*3?"
        with pytest.raises(TypeError, match="start_event must be a AgentWorkflowStartEvent"):
            react.run(start_event=ChatMessage(role=MessageRole.USER, content="x"))  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            react.run(start_event=AgentWorkflowStartEvent(max_iterations="many"))

    run(go())


# ----- ReAct formatter and prompts (item 5) --------------------------------------------------
def test_react_agent_formatter_and_react_header_prompt() -> None:
    async def go() -> None:
        llm = ScriptedLLM(["Thought: easy.\nAnswer: 42"], function_calling=False, repeat_last=True)
        agent = ReActAgent(tools=[multiply, add], llm=llm, system_prompt="Be brief.")
        prompt_dict = agent.get_prompts()
        assert list(prompt_dict) == ["react_header"]
        assert "{tool_desc}" in prompt_dict["react_header"].template
        react_system_header_str = "You answer with tools: {tool_names}.\n{tool_desc}\n{context}Reply Thought/Answer."
        agent.update_prompts({"react_header": PromptTemplate(react_system_header_str)})
        assert agent.get_prompts()["react_header"].template == react_system_header_str
        await agent.run(user_msg="hi")
        system = llm.requests[-1].messages[0]
        assert system.role == MessageRole.SYSTEM
        assert system.text.startswith("You answer with tools: multiply, add.\n- multiply: Multiply two numbers")
        assert "Be brief." in system.text  # the agent's own system prompt is the context
        with pytest.raises(KeyError, match="no prompt named 'system'"):
            agent.update_prompts({"system": "x"})

        # formatter= with nbagent's formatter carrying its own header
        fmt = ReActChatFormatter(system_prompt="HEADER {tool_names}")
        llm2 = ScriptedLLM(["Thought: ok\nAnswer: fine"], function_calling=False)
        await ReActAgent(tools=[add], llm=llm2, formatter=fmt).run(user_msg="x")
        assert llm2.requests[0].messages[0].text == "HEADER add"

    run(go())


def test_a_new_react_header_after_a_run_is_what_the_model_reads_next() -> None:
    """``update_prompts({"react_header": ...})`` between two runs: the second run's model reads
    the new header (nothing of the first run's prompt is kept)."""
    llm = ScriptedLLM(["Thought: t\nAnswer: one", "Thought: t\nAnswer: two"], function_calling=False)
    agent = ReActAgent(llm=llm)

    async def go() -> None:
        await agent.run(user_msg="hi")
        agent.update_prompts({"react_header": "NEW HEADER {tool_desc} {tool_names}"})
        await agent.run(user_msg="hi again")

    run(go())
    first, second = (r.messages[0].text for r in llm.requests)
    assert not first.startswith("NEW HEADER") and second.startswith("NEW HEADER")


def test_a_reference_style_formatter_object_builds_the_input() -> None:
    class MyFormatter:
        """The reference's formatter contract: context, format(tools, chat_history, current_reasoning)."""

        def __init__(self) -> None:
            self.context = ""
            self.system_header = "custom header"
            self.calls: list[tuple[list[str], int, int]] = []

        def format(self, tools: list[Any], chat_history: list[ChatMessage], current_reasoning: list[Any]) -> list[ChatMessage]:
            self.calls.append(([t.metadata.name for t in tools], len(chat_history), len(current_reasoning)))
            head = ChatMessage(role=MessageRole.SYSTEM, content=f"{self.system_header} | {self.context}")
            return [head, *chat_history, *[ChatMessage(role=MessageRole.USER, content=r.content) for r in current_reasoning]]

    async def go() -> None:
        fmt = MyFormatter()
        llm = ScriptedLLM(['Thought: add\nAction: add\nAction Input: {"a": 1, "b": 2}', "Thought: ok\nAnswer: 3"],
                          function_calling=False)
        agent = ReActAgent(tools=[add], llm=llm, formatter=fmt, system_prompt="ctx text")
        assert agent.get_prompts()["react_header"].template == "custom header"
        assert str(await agent.run(user_msg="1+2")) == "3"
        assert fmt.calls == [(["add"], 1, 0), (["add"], 1, 2)]
        assert llm.requests[0].messages[0].text == "custom header | ctx text"
        assert llm.requests[1].messages[-1].text == "Observation: 3.0"

    run(go())


def test_agent_workflow_prompts_handoff_and_state() -> None:
    async def go() -> None:
        llm = ScriptedLLM([tool_call("handoff", to_agent="b", reason="r"), "from b"])
        a = FunctionAgent(name="a", description="first", llm=llm)
        b = ReActAgent(name="b", description="second", llm=ScriptedLLM(["Thought: t\nAnswer: from b"], function_calling=False))
        wf = AgentWorkflow([a, b], root_agent="a", initial_state={"k": 1})
        # the keys and order of llama-index-core 0.12.52 (handoff_output_prompt came after the page)
        assert list(wf.get_prompts()) == ["handoff_prompt", "handoff_output_prompt", "state_prompt", "b:react_header"]
        wf.update_prompts({"handoff_prompt": "Pass it on. {agent_info}", "state_prompt": "[{state}] {msg}"})
        assert isinstance(wf.handoff_prompt, PromptTemplate)
        assert wf.handoff_prompt.get_template() == "Pass it on. {agent_info}"
        result = await wf.run(user_msg="hello")
        assert str(result) == "from b"
        handoff = next(t for t in llm.requests[0].tools if t.name == "handoff")
        assert handoff.description.startswith("Pass it on. - b: second")
        assert llm.requests[0].messages[-1].text == "[{'k': 1}] hello"
        with pytest.raises(ValueError, match="State prompt must contain \\{state\\} and \\{msg\\}"):
            wf.update_prompts({"state_prompt": "{state} only"})
        assert wf.state_prompt.template == "[{state}] {msg}"  # nothing changed
        wf.update_prompts({"b:react_header": "B HEADER {tool_names}"})
        assert b.get_prompts()["react_header"].template == "B HEADER {tool_names}"

    run(go())


# ----- item 8: empty replies ------------------------------------------------------------------
def test_an_empty_reply_ends_a_function_agent_run_with_content_none() -> None:
    async def go() -> None:
        agent = FunctionAgent(llm=ScriptedLLM([""]))
        result = await agent.run(user_msg="say nothing")
        assert result.response.content is None and str(result) == ""

    run(go())


def test_an_empty_reply_fails_a_react_agent_run_with_got_empty_message() -> None:
    async def go() -> None:
        agent = ReActAgent(llm=ScriptedLLM(["  "], function_calling=False))
        handler = agent.run(user_msg="say nothing")
        with pytest.raises(WorkflowRuntimeError, match="Got empty message"):
            await handler
        assert handler.ctx.has_pending_work  # the step can be run again

    run(go())


def test_raw_carries_the_models_raw_reply() -> None:
    from pydantic import BaseModel

    from nbagent.llms.base import ChatResponse

    class Completion(BaseModel):
        id: str
        n: int

    class RawLLM(ScriptedLLM):
        """A model whose replies carry a raw server object, as a real client's do."""

        async def _astream(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> AsyncIterator[ChatResponse]:
            async for chunk in super()._astream(messages, tools, tool_choice, **kwargs):
                yield chunk.model_copy(update={"raw": Completion(id="cmpl-1", n=len(messages))})

    async def go() -> None:
        agent = FunctionAgent(llm=RawLLM(["done"]))
        events, result = await stream_and_wait(agent.run(user_msg="hi"))
        assert result.raw == {"id": "cmpl-1", "n": 1}
        streamed = [e for e in events if isinstance(e, AgentStream)]
        assert streamed and streamed[-1].raw == {"id": "cmpl-1", "n": 1}

    run(go())


def test_react_agent_card_shows_the_prompt_the_model_sees_escaped() -> None:
    agent = ReActAgent(name="r", tools=[add], llm=ScriptedLLM(["x"], function_calling=False),
                       system_prompt="Answer <briefly>.")
    agent.update_prompts({"react_header": "HEADER for {tool_names}\n{context}"})
    html = agent._repr_html_()
    assert "HEADER for add" in html and "Answer &lt;briefly&gt;." in html and "<briefly>" not in html
    assert "the prompt the model sees" not in FunctionAgent(llm=ScriptedLLM(["x"]))._repr_html_()


def test_an_agent_copy_or_one_set_up_for_handoffs_runs_on_its_own() -> None:
    async def go() -> None:
        agent = FunctionAgent(name="a", llm=ScriptedLLM(["from a"]), can_handoff_to=["b"])
        assert str(await agent.run(user_msg="hi")) == "from a"  # no 'b' here: no handoff tool
        twin = agent.model_copy(update={"llm": ScriptedLLM(["from the copy"])})
        result = await twin.run(user_msg="hi")
        assert str(result) == "from the copy"
        assert twin._as_workflow() is not agent._as_workflow()

    run(go())


def test_context_serializer_as_the_reference_docs_write_it() -> None:
    from nbagent.workflow import CheckpointError, JsonPickleSerializer, JsonSerializer

    async def go() -> None:
        agent = FunctionAgent(llm=FunctionLLM(lambda messages, tools: f"{len(messages)} messages so far"))
        ctx = Context(agent)
        await agent.run(user_msg="My name is Logan", ctx=ctx)
        ctx_dict = ctx.to_dict(serializer=JsonSerializer())
        restored_ctx = Context.from_dict(agent, ctx_dict, serializer=JsonSerializer())
        assert str(await agent.run(user_msg="What is my name?", ctx=restored_ctx)) == "3 messages so far"
        with pytest.raises(CheckpointError, match="never pickled"):
            ctx.to_dict(serializer=JsonPickleSerializer())
        with pytest.raises(TypeError, match="serializer must be"):
            Context.from_dict(agent, ctx_dict, serializer=object())

    run(go())
