"""LlamaIndex's "FunctionAgent / AgentWorkflow Basic Introduction" notebook, ported (issue 23,
item 10): a FunctionAgent with a web-search tool, the same run as a one-agent AgentWorkflow,
a Context carried between runs and through JSON, streaming, a tool that keeps state in the
context, and a human in the loop, live and across a saved context.

The web search is a local function returning a fixed text; the model is scripted. Each
scenario runs once on llama-index-core 0.12.52 and once on nbagent and compares what the
notebook's reader sees.

No ``from __future__ import annotations`` here: a tool's ``ctx: Context`` annotation must be
the class itself, as in the notebook, for the agents to see that the tool takes the context.
"""

import asyncio
from typing import Any

import pytest

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call

# 0.12.52 deprecates ctx.get / ctx.set (for ctx.store) and says so on every call: the
# reference's own warning, not a finding of these tests (ctx.store is issue 23, item 1)
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Context\.get\(\) is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(r"ignore:Context\.set\(key, value\) is deprecated:DeprecationWarning"),
]


async def search_web(query: str) -> str:
    """Useful for using the web to answer questions."""
    return f"Results for {query}: sunny, 13 C, light wind."


WEATHER_RUN = [tool_call("search_web", query="weather in San Francisco"), "It is sunny and 13 C in San Francisco."]


def _agent(api: DocsApi, script: list[Any], tools: list[Any] | None = None, **kwargs: Any) -> tuple[Any, Any]:
    llm = api.llm(script)
    agent = api.FunctionAgent(
        tools=[search_web] if tools is None else tools,
        llm=llm,
        system_prompt="You are a helpful assistant that can search the web for information.",
        **kwargs,
    )
    return agent, llm


def test_running_the_agent_prints_its_answer() -> None:
    seen = []
    for api in docs_both():
        agent, llm = _agent(api, WEATHER_RUN)

        async def go(agent: Any = agent) -> str:
            response = await agent.run(user_msg="What is the weather in San Francisco?")
            return str(response)

        seen.append((asyncio.run(go()), [roles_contents(r) for r in api.requests(llm)]))
    assert seen[1] == seen[0]
    answer, requests = seen[0]
    assert answer == "It is sunny and 13 C in San Francisco."
    # the model read the tool's text after its own call
    assert requests[1][-1] == ("tool", "Results for weather in San Francisco: sunny, 13 C, light wind.")


def test_the_same_run_as_a_one_agent_workflow() -> None:
    seen = []
    for api in docs_both():
        agent, llm = _agent(api, WEATHER_RUN)
        workflow = api.AgentWorkflow(agents=[agent])

        async def go(workflow: Any = workflow) -> tuple[str, str]:
            response = await workflow.run(user_msg="What is the weather in San Francisco?")
            return str(response), response.current_agent_name

        seen.append((asyncio.run(go()), [roles_contents(r) for r in api.requests(llm)]))
    assert seen[1] == seen[0]
    assert seen[0][0] == ("It is sunny and 13 C in San Francisco.", "Agent")  # the default agent name


def test_a_context_keeps_the_conversation_between_runs_as_the_notebook_shows() -> None:
    """The notebook's agent remembers the name in its second run. On 0.12.52 an agent with a
    system prompt run on its own forgets it: ``run`` passes ``chat_history=[system]`` and
    ``init_run`` then replaces the memory with it (a later change; the notebook was run on an
    earlier 0.12). nbagent keeps the conversation, as the notebook shows."""
    seen = []
    for api in docs_both():
        agent, llm = _agent(api, ["Nice to meet you, Logan!", "Your name is Logan."])

        async def go(agent: Any = agent, api: DocsApi = api) -> list[str]:
            ctx = api.Context(agent)
            first = await agent.run(user_msg="My name is Logan, nice to meet you!", ctx=ctx)
            second = await agent.run(user_msg="What is my name?", ctx=ctx)
            return [str(first), str(second)]

        seen.append((asyncio.run(go()), [roles_contents(r) for r in api.requests(llm)]))
    (ref_answers, ref_requests), (nb_answers, nb_requests) = seen
    assert nb_answers == ref_answers == ["Nice to meet you, Logan!", "Your name is Logan."]
    assert nb_requests[0] == ref_requests[0] == [("user", "My name is Logan, nice to meet you!")]
    assert ref_requests[1] == [("user", "What is my name?")]  # 0.12.52 forgot the first exchange
    assert nb_requests[1] == [
        ("user", "My name is Logan, nice to meet you!"),
        ("assistant", "Nice to meet you, Logan!"),
        ("user", "What is my name?"),
    ]


def test_a_context_restored_from_json_remembers() -> None:
    seen = []
    for api in docs_both():
        agent, llm = _agent(api, ["Nice to meet you, Logan!", "Yes, your name is Logan."])

        async def go(agent: Any = agent, api: DocsApi = api) -> str:
            ctx = api.Context(agent)
            await agent.run(user_msg="My name is Logan, nice to meet you!", ctx=ctx)
            ctx_dict = ctx.to_dict(serializer=api.JsonSerializer())
            restored = api.Context.from_dict(agent, ctx_dict, serializer=api.JsonSerializer())
            return str(await agent.run(user_msg="Do you still remember my name?", ctx=restored))

        seen.append((asyncio.run(go()), roles_contents(api.requests(llm)[1])))
    (ref_answer, ref_request), (nb_answer, nb_request) = seen
    assert nb_answer == ref_answer == "Yes, your name is Logan."
    # 0.12.52 forgets what came before a run of an agent with a system prompt (see above)
    assert ref_request == [("user", "Do you still remember my name?")]
    assert nb_request == [
        ("user", "My name is Logan, nice to meet you!"),
        ("assistant", "Nice to meet you, Logan!"),
        ("user", "Do you still remember my name?"),
    ]


def test_streaming_the_agent_stream_deltas_prints_the_answer() -> None:
    seen = []
    for api in docs_both():
        agent, _ = _agent(api, WEATHER_RUN)

        async def go(agent: Any = agent, api: DocsApi = api) -> tuple[str, list[str]]:
            handler = agent.run(user_msg="What is the weather in Saskatoon?")
            printed, kinds = "", []
            async for event in handler.stream_events():
                kinds.append(type(event).__name__)
                if isinstance(event, api.AgentStream):
                    printed += event.delta
            await handler
            return printed, kinds

        seen.append(asyncio.run(go()))
    assert seen[1] == seen[0]
    printed, kinds = seen[0]
    assert printed == "It is sunny and 13 C in San Francisco."
    assert {"AgentInput", "AgentStream", "AgentOutput", "ToolCall", "ToolCallResult"} <= set(kinds)


def _set_name_tool(api: DocsApi) -> Any:
    Context = api.Context

    async def set_name(ctx: Context, name: str) -> str:  # type: ignore[valid-type]
        state = await ctx.get("state")
        state["name"] = name
        await ctx.set("state", state)
        return f"Name set to {name}"

    return set_name


def test_a_tool_keeps_state_in_the_context_with_get_and_set() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm([tool_call("set_name", name="Logan"), "Your name has been set to Logan."])
        workflow = api.AgentWorkflow(
            agents=[api.FunctionAgent(tools=[_set_name_tool(api)], llm=llm, system_prompt="You can set a name.")],
            initial_state={"name": "unset"},
        )

        async def go(workflow: Any = workflow, api: DocsApi = api) -> tuple[str, Any, list[str]]:
            ctx = api.Context(workflow)
            handler = workflow.run(user_msg="My name is Logan", ctx=ctx)
            outputs = [ev.tool_output.content async for ev in handler.stream_events() if isinstance(ev, api.ToolCallResult)]
            response = await handler
            state = await ctx.get("state")
            return str(response), state["name"], outputs

        seen.append(asyncio.run(go()))
    assert seen[1] == seen[0]
    assert seen[0] == ("Your name has been set to Logan.", "Logan", ["Name set to Logan"])


def _dangerous_task_tool(api: DocsApi) -> Any:
    Context, HumanResponseEvent, InputRequiredEvent = api.Context, api.HumanResponseEvent, api.InputRequiredEvent

    async def dangerous_task(ctx: Context) -> str:  # type: ignore[valid-type]
        """A dangerous task that requires human confirmation."""
        question = "Are you sure you want to proceed?"
        response = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_id=question,
            waiter_event=InputRequiredEvent(prefix=question, user_name="Logan"),
            requirements={"user_name": "Logan"},
        )
        if response.response == "yes":
            return "Dangerous task completed successfully."
        return "Dangerous task aborted."

    return dangerous_task


HITL_RUN = [tool_call("dangerous_task"), "The dangerous task has been completed successfully."]


def test_a_human_in_the_loop_answers_the_tools_question() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(HITL_RUN)
        agent = api.FunctionAgent(tools=[_dangerous_task_tool(api)], llm=llm, system_prompt="You can do dangerous tasks.")

        async def go(agent: Any = agent, api: DocsApi = api) -> tuple[list[str], str, list[Any]]:
            handler = agent.run(user_msg="I want to proceed with the dangerous task.")
            asked, outputs = [], []
            async for event in handler.stream_events():
                if isinstance(event, api.InputRequiredEvent):
                    asked.append(event.prefix)
                    handler.ctx.send_event(api.HumanResponseEvent(response="yes", user_name=event.user_name))
                if isinstance(event, api.ToolCallResult):
                    outputs.append(event.tool_output.content)
            return asked, str(await handler), outputs

        seen.append(asyncio.run(go()))
    assert seen[1] == seen[0]
    assert seen[0] == (
        ["Are you sure you want to proceed?"],
        "The dangerous task has been completed successfully.",
        ["Dangerous task completed successfully."],
    )
