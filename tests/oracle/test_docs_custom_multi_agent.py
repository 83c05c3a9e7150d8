"""LlamaIndex's "Custom Planning Multi-Agent System" notebook, ported (issue 23, item 10): a
Workflow subclass with typed start and stop events that asks a model for an XML plan, runs
agents for each step through helper functions that keep their work in the context's state,
and loops back to the planner until it answers without a plan.

The workflow runs twice: as the notebook writes it (the planner streams from ``await
self.llm.astream_chat(...)`` and keeps state with ``ctx.store``: issue 23, items 1 and 2), and
asking with ``await self.llm.achat(...)`` and keeping state with ``ctx.get`` / ``ctx.set``. The
typed events, the loop back to a StartEvent subclass, events written to the stream and the
context's state after the run are compared. Models are scripted.

No ``from __future__ import annotations``: the steps' event annotations must be the classes.
"""

import asyncio
import re
import xml.etree.ElementTree as ET
from typing import Any, Optional, Union

from pydantic import BaseModel, Field

import pytest

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents

# 0.12.52 deprecates ctx.get / ctx.set (for ctx.store) and says so on every call: the
# reference's own warning, not a finding of these tests (ctx.store is issue 23, item 1)
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Context\.get\(\) is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(r"ignore:Context\.set\(key, value\) is deprecated:DeprecationWarning"),
]

PLANNER_PROMPT = """You are a planner chatbot.

Given a user request and the current state, break the solution into ordered <step> blocks.

<state>
{state}
</state>

<available_agents>
{available_agents}
</available_agents>

If the user request does not require any steps, you can skip the <plan> block and respond directly.
"""

PLAN_REPLY = (
    "Here is the plan.\n<plan>\n"
    '  <step agent="ResearchAgent">research the history of the internet</step>\n'
    '  <step agent="WriteAgent">draft a report</step>\n'
    "</plan>"
)
PLANNER_SCRIPT = [PLAN_REPLY, "The report is written; no more steps are needed."]


class PlanStep(BaseModel):
    agent_name: str
    agent_input: str


class Plan(BaseModel):
    steps: list[PlanStep]


def build(api: DocsApi, streaming: bool) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The notebook's agents, helpers, events and PlannerWorkflow, on one side.

    ``streaming=True`` is the notebook's form (``await llm.astream_chat`` and ``ctx.store``);
    ``False`` asks with ``await llm.achat`` and keeps state with ``ctx.get`` / ``ctx.set``."""
    llms = {
        "planner": api.llm(PLANNER_SCRIPT),
        "research": api.llm(["Notes: ARPANET went live in 1969."]),
        "write": api.llm(["<report># The Internet\nARPANET, 1969.</report>"]),
    }
    research_agent = api.FunctionAgent(
        name="ResearchAgent", description="Useful for recording research notes.", system_prompt="You research.", llm=llms["research"], tools=[]
    )
    write_agent = api.FunctionAgent(
        name="WriteAgent", description="Useful for writing a report from the notes.", system_prompt="You write.", llm=llms["write"], tools=[]
    )
    Context, Event, StartEvent, StopEvent, ChatMessage = api.Context, api.Event, api.StartEvent, api.StopEvent, api.ChatMessage

    async def get_state(ctx: Any) -> Any:
        return await (ctx.store.get("state") if streaming else ctx.get("state"))

    async def set_state(ctx: Any, state: Any) -> None:
        await (ctx.store.set("state", state) if streaming else ctx.set("state", state))

    async def call_research_agent(ctx: Any, prompt: str) -> str:
        result = await research_agent.run(user_msg=f"Write some notes about the following: {prompt}")
        state = await get_state(ctx)
        state["research_notes"].append(str(result))
        await set_state(ctx, state)
        return str(result)

    async def call_write_agent(ctx: Any) -> str:
        state = await get_state(ctx)
        notes = "\n\n".join(state["research_notes"])
        result = await write_agent.run(user_msg=f"Write a report from these notes: <research_notes>{notes}</research_notes>")
        report = re.search(r"<report>(.*)</report>", str(result), re.DOTALL).group(1)  # type: ignore[union-attr]
        state["report_content"] = str(report)
        await set_state(ctx, state)
        return str(report)

    class InputEvent(StartEvent):  # type: ignore[misc, valid-type]
        user_msg: Optional[str] = Field(default=None)
        chat_history: list[ChatMessage]  # type: ignore[valid-type]
        state: Optional[dict[str, Any]] = Field(default=None)

    class OutputEvent(StopEvent):  # type: ignore[misc, valid-type]
        response: str
        chat_history: list[ChatMessage]  # type: ignore[valid-type]
        state: dict[str, Any]

    class StreamEvent(Event):  # type: ignore[misc, valid-type]
        delta: str

    class PlanEvent(Event):  # type: ignore[misc, valid-type]
        step_info: str

    class ExecuteEvent(Event):  # type: ignore[misc, valid-type]
        plan: Plan
        chat_history: list[ChatMessage]  # type: ignore[valid-type]

    class PlannerWorkflow(api.Workflow):  # type: ignore[misc, name-defined]
        llm = llms["planner"]
        agents = {"ResearchAgent": research_agent, "WriteAgent": write_agent}

        @api.step
        async def plan(self, ctx: Context, ev: InputEvent) -> Union[ExecuteEvent, OutputEvent]:  # type: ignore[valid-type]
            if ev.state:
                await set_state(ctx, ev.state)
            chat_history = ev.chat_history
            if ev.user_msg:
                chat_history.append(ChatMessage(role="user", content=ev.user_msg))
            state = await get_state(ctx)
            available = "\n".join(f'<agent name="{a.name}">{a.description}</agent>' for a in self.agents.values())
            system_prompt = ChatMessage(role="system", content=PLANNER_PROMPT.format(state=str(state), available_agents=available))
            if streaming:
                response = await self.llm.astream_chat(messages=[system_prompt] + chat_history)
                full_response = ""
                async for chunk in response:
                    full_response += chunk.delta or ""
                    if chunk.delta:
                        ctx.write_event_to_stream(StreamEvent(delta=chunk.delta))
            else:
                full_response = (await self.llm.achat(messages=[system_prompt] + chat_history)).message.content
                ctx.write_event_to_stream(StreamEvent(delta=full_response))
            xml_match = re.search(r"(<plan>.*</plan>)", full_response, re.DOTALL)
            if not xml_match:
                chat_history.append(ChatMessage(role="assistant", content=full_response))
                return OutputEvent(response=full_response, chat_history=chat_history, state=state)
            root = ET.fromstring(xml_match.group(1))
            plan = Plan(steps=[PlanStep(agent_name=s.attrib["agent"], agent_input=(s.text or "").strip()) for s in root.findall("step")])
            return ExecuteEvent(plan=plan, chat_history=chat_history)

        @api.step
        async def execute(self, ctx: Context, ev: ExecuteEvent) -> InputEvent:  # type: ignore[valid-type]
            chat_history = ev.chat_history
            for plan_step in ev.plan.steps:
                ctx.write_event_to_stream(PlanEvent(step_info=f'<step agent="{plan_step.agent_name}">{plan_step.agent_input}</step>'))
                if plan_step.agent_name == "ResearchAgent":
                    await call_research_agent(ctx, plan_step.agent_input)
                elif plan_step.agent_name == "WriteAgent":
                    await call_write_agent(ctx)
            state = await get_state(ctx)
            chat_history.append(
                ChatMessage(role="user", content=f"I've completed the previous steps, here's the updated state:\n\n<state>\n{state}\n</state>")
            )
            return InputEvent(chat_history=chat_history)

    events = {"PlanEvent": PlanEvent, "StreamEvent": StreamEvent, "OutputEvent": OutputEvent}
    return PlannerWorkflow(timeout=None), llms, events


INITIAL_STATE = {"research_notes": [], "report_content": "Not written yet.", "review": "Review required."}


def run_planner(api: DocsApi, streaming: bool) -> dict[str, Any]:
    workflow, llms, events = build(api, streaming)

    async def go() -> dict[str, Any]:
        handler = workflow.run(user_msg="Write me a report on the history of the internet.", chat_history=[], state=dict(INITIAL_STATE, research_notes=[]))
        steps, streamed = [], ""
        async for event in handler.stream_events():
            if isinstance(event, events["PlanEvent"]):
                steps.append(event.step_info)
            elif isinstance(event, events["StreamEvent"]):
                streamed += event.delta
        result = await handler
        state = await (handler.ctx.store.get("state") if streaming else handler.ctx.get("state"))
        return {
            "result_type": type(result).__name__,
            "response": result.response,
            "history": roles_contents(result.chat_history),
            "state": state,
            "plan_steps": steps,
            "streamed": streamed,
            "planner_read": [roles_contents(r) for r in api.requests(llms["planner"])],
        }

    return asyncio.run(go())


def test_the_planner_workflow_plans_runs_agents_and_answers() -> None:
    ref, nb = (run_planner(api, streaming=False) for api in docs_both())
    assert ref["result_type"] == "OutputEvent"
    assert ref["response"] == "The report is written; no more steps are needed."
    assert ref["plan_steps"] == [
        '<step agent="ResearchAgent">research the history of the internet</step>',
        '<step agent="WriteAgent">draft a report</step>',
    ]
    assert ref["state"]["report_content"] == "# The Internet\nARPANET, 1969."
    assert ref["state"]["research_notes"] == ["Notes: ARPANET went live in 1969."]
    assert ref["streamed"] == PLAN_REPLY + PLANNER_SCRIPT[1]
    assert len(ref["planner_read"]) == 2 and ref["planner_read"][1][-1][0] == "user"
    assert nb == ref


def test_items1_2_the_planner_streams_from_an_awaited_astream_chat_and_keeps_state_in_the_store() -> None:
    ref, nb = (run_planner(api, streaming=True) for api in docs_both())
    assert ref["response"] == "The report is written; no more steps are needed."
    assert ref["streamed"] == PLAN_REPLY + PLANNER_SCRIPT[1]
    assert ref["state"]["report_content"] == "# The Internet\nARPANET, 1969."
    assert nb == ref
