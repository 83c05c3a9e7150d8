"""LlamaIndex's "ReAct Agent - A Simple Intro with Calculator Tools", "ReAct Agent with Query
Engine Tools" (the indexes replaced by function tools) and "Controlling Agent Reasoning Loop
with Return Direct Tools" notebooks, ported (issue 23, item 10). Models are scripted; each
scenario runs on llama-index-core 0.12.52 and on nbagent.

No ``from __future__ import annotations`` (a tool's annotations must be real types).
"""

import asyncio
import contextlib
import io
import re
from typing import Any, Optional

from pydantic import BaseModel

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call


def multiply(a: int, b: int) -> int:
    """Multiply two integers and returns the result integer"""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers and returns the result integer"""
    return a + b


REACT_SCRIPT = [
    'Thought: The current language of the user is: English. I need to use a tool.\nAction: multiply\nAction Input: {"a": 2, "b": 4}',
    'Thought: Now I add 20.\nAction: add\nAction Input: {"a": 20, "b": 8}',
    "Thought: I can answer without using any more tools.\nAnswer: The result of 20 + (2 * 4) is 28.",
]


def test_react_agent_streams_its_reasoning_and_answers() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(REACT_SCRIPT, function_calling=False)
        agent = api.ReActAgent(tools=[multiply, add], llm=llm)

        async def go(agent: Any = agent, api: DocsApi = api) -> tuple[str, str, list[Any]]:
            ctx = api.Context(agent)
            handler = agent.run("What is 20+(2*4)?", ctx=ctx)
            printed, results = "", []
            async for ev in handler.stream_events():
                if isinstance(ev, api.AgentStream):
                    printed += ev.delta
                if isinstance(ev, api.ToolCallResult):
                    results.append((ev.tool_name, ev.tool_kwargs, ev.tool_output.content, ev.tool_output.raw_output))
            response = await handler
            return printed, str(response), results

        seen.append(asyncio.run(go()))
    printed, answer, results = seen[0]
    assert printed == "".join(REACT_SCRIPT)
    assert answer == "The result of 20 + (2 * 4) is 28."
    assert results == [("multiply", {"a": 2, "b": 4}, "8", 8), ("add", {"a": 20, "b": 8}, "28", 28)]
    assert seen[1] == seen[0]


def test_a_custom_react_header_reaches_the_model() -> None:
    """``update_prompts({"react_header": PromptTemplate(...)})`` with the notebook's extra rules:
    the header the model reads is the new one, tools filled in."""
    header = (
        "You are designed to help with a variety of tasks.\n\n## Tools\nYou have access to the following tools:\n{tool_desc}\n\n"
        "## Output Format\nUse one of {tool_names}.\n\n## Additional Rules\n"
        "- The answer MUST contain a sequence of bullet points that explain how you arrived at the answer.\n\n"
        "## Current Conversation\nBelow is the current conversation.\n"
    )
    seen = []
    for api in docs_both():
        llm = api.llm(["Thought: I can answer.\nAnswer: - 5 + 3 + 2 is 10."], function_calling=False)
        agent = api.ReActAgent(tools=[multiply, add], llm=llm)
        keys = sorted(agent.get_prompts())
        agent.update_prompts({"react_header": api.PromptTemplate(header)})

        async def go(agent: Any = agent) -> str:
            return str(await agent.run("What is 5+3+2"))

        answer = asyncio.run(go())
        system = [m.content for m in api.requests(llm)[0] if m.role.value == "system"][0]
        seen.append((keys, answer, system.startswith("You are designed to help with a variety of tasks."), "## Additional Rules" in system, "add" in system))
    assert seen[0] == (["react_header"], "- 5 + 3 + 2 is 10.", True, True, True)
    assert seen[1] == seen[0]


def lyft_10k(input: str) -> str:
    """Provides information about Lyft financials for year 2021. Use a detailed plain text question as input to the tool."""
    return "Lyft's revenue growth in 2021 was 36%."


def uber_10k(input: str) -> str:
    """Provides information about Uber financials for year 2021. Use a detailed plain text question as input to the tool."""
    return "Uber's revenue growth in 2021 was 57%."


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_react_agent_with_document_tools_compares_two_companies() -> None:
    """The query-engine notebook with each 10-K index replaced by a function tool: the runner's
    ReActAgent, verbose, two chats (sync, then async). Action inputs are JSON in the script;
    nbagent echoes them as JSON where the reference writes a Python dict (a deliberate
    difference, see test_oracle_runner), so the printed trace is compared with that undone."""
    script = [
        'Thought: I need to use a tool to help me answer the question.\nAction: lyft_10k\nAction Input: {"input": "Lyft revenue growth 2021"}',
        "Thought: I can answer without using any more tools.\nAnswer: Lyft's revenue growth in 2021 was 36%.",
        'Thought: First Lyft.\nAction: lyft_10k\nAction Input: {"input": "Lyft revenue growth 2021"}',
        'Thought: Now Uber.\nAction: uber_10k\nAction Input: {"input": "Uber revenue growth 2021"}',
        "Thought: I can answer without using any more tools.\nAnswer: Uber grew faster (57%) than Lyft (36%).",
    ]
    seen = []
    for api in docs_both():
        llm = api.llm(script, function_calling=False)
        tools = [api.FunctionTool.from_defaults(fn=lyft_10k), api.FunctionTool.from_defaults(fn=uber_10k)]
        agent = api.RunnerReActAgent.from_tools(tools, llm=llm, verbose=True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            first = agent.chat("What was Lyft's revenue growth in 2021?")
            second = asyncio.run(agent.achat("Compare and contrast the revenue growth of Uber and Lyft in 2021, then give an analysis"))
        printed = _UUID.sub("<id>", out.getvalue())
        printed = re.sub(r'Action Input: \{"input": "([^"]*)"\}', r"Action Input: {'input': '\1'}", printed)
        seen.append(
            (str(first), str(second), printed, [(s.tool_name, s.content) for s in second.sources], [(m.role.value, m.content) for m in agent.chat_history])
        )
    ref, nb = seen
    assert ref[:2] == ("Lyft's revenue growth in 2021 was 36%.", "Uber grew faster (57%) than Lyft (36%).")
    assert "Observation: Uber's revenue growth in 2021 was 57%." in ref[2]
    assert nb == ref


# --- return direct ----------------------------------------------------------------------


class Booking(BaseModel):
    name: Optional[str] = None
    email: Optional[str] = None
    phone: Optional[str] = None
    date: Optional[str] = None
    time: Optional[str] = None


def booking_tools(api: DocsApi, bookings: dict[str, Booking]) -> list[Any]:
    """The notebook's four booking tools; create and confirm return directly."""

    def get_booking_state(user_id: str) -> str:
        """Get the current state of a booking for a given booking ID."""
        try:
            return str(bookings[user_id].model_dump())
        except KeyError:
            return f"Booking ID {user_id} not found"

    def update_booking(user_id: str, property: str, value: str) -> str:
        """Update a property of a booking for a given booking ID. Only enter details that are explicitly provided."""
        setattr(bookings[user_id], property, value)
        return f"Booking ID {user_id} updated with {property} = {value}"

    def create_booking(user_id: str) -> str:
        """Create a new booking and return the booking ID."""
        bookings[user_id] = Booking()
        return "Booking created, but not yet confirmed. Please provide your name, email, phone, date, and time."

    def confirm_booking(user_id: str) -> str:
        """Confirm a booking for a given booking ID."""
        booking = bookings[user_id]
        for field, what in (("name", "your name"), ("email", "your email"), ("phone", "your phone number")):
            if getattr(booking, field) is None:
                raise ValueError(f"Please provide {what}.")
        return f"Booking ID {user_id} confirmed!"

    return [
        api.FunctionTool.from_defaults(fn=get_booking_state),
        api.FunctionTool.from_defaults(fn=update_booking),
        api.FunctionTool.from_defaults(fn=create_booking, return_direct=True),
        api.FunctionTool.from_defaults(fn=confirm_booking, return_direct=True),
    ]


def with_text(content: str, *pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A reply that says something and calls tools."""
    return {"content": content, "tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}


BOOKING_SCRIPT = [
    with_text("Okay, let's create a new booking for you.", ("create_booking", {"user_id": "user123"})),
    with_text(
        "Got it, thanks.",
        ("update_booking", {"user_id": "user123", "property": "name", "value": "Logan"}),
        ("update_booking", {"user_id": "user123", "property": "email", "value": "test@gmail.com"}),
    ),
    "Please also provide your phone number, preferred date, and time for the booking.",
    with_text("Let me confirm.", ("confirm_booking", {"user_id": "user123"})),
    "I still need your phone number.",
    with_text(
        "Great, thank you.",
        ("update_booking", {"user_id": "user123", "property": "phone", "value": "1234567890"}),
        ("update_booking", {"user_id": "user123", "property": "date", "value": "2023-04-05"}),
        ("update_booking", {"user_id": "user123", "property": "time", "value": "17:00"}),
    ),
    with_text("Looks like I have all the details.", ("confirm_booking", {"user_id": "user123"})),
]


def test_return_direct_tools_end_the_run_with_their_output() -> None:
    messages = [
        "Hello! I would like to make a booking, around 5pm?",
        "Sure! My name is Logan, and my email is test@gmail.com?",
        "Can you confirm it now?",
        "Right! My phone number is 1234567890, the date of the booking is April 5, at 5pm.",
    ]
    seen = []
    for api in docs_both():
        bookings: dict[str, Booking] = {}
        llm = api.llm(BOOKING_SCRIPT)
        agent = api.FunctionAgent(tools=booking_tools(api, bookings), llm=llm, system_prompt="You are helping user123 with a booking.")

        async def go(agent: Any = agent, api: DocsApi = api) -> list[tuple[str, str]]:
            ctx = api.Context(agent)
            turns = []
            for message in messages:
                handler = agent.run(message, ctx=ctx)
                printed = ""
                async for ev in handler.stream_events():
                    if isinstance(ev, api.AgentStream):
                        printed += ev.delta
                    elif isinstance(ev, api.ToolCallResult):
                        printed += f"\nCall {ev.tool_name} with {ev.tool_kwargs}\nReturned: {ev.tool_output}\n"
                turns.append((printed, str(await handler)))
            return turns

        turns = asyncio.run(go())
        seen.append((turns, bookings["user123"].model_dump(), len(api.requests(llm))))
    ref, nb = seen
    assert [t[1] for t in ref[0]] == [
        "Booking created, but not yet confirmed. Please provide your name, email, phone, date, and time.",
        "Please also provide your phone number, preferred date, and time for the booking.",
        "I still need your phone number.",
        "Booking ID user123 confirmed!",
    ]
    assert ref[1] == {"name": "Logan", "email": "test@gmail.com", "phone": "1234567890", "date": "2023-04-05", "time": "17:00"}
    assert "Returned: Please provide your phone number.\n" in ref[0][2][0]  # the tool's error, fed back
    assert ref[2] == 7  # a direct return ends the run without another model call
    # Deliberate (README, Coming from LlamaIndex): a tool that raises is reported in the
    # reference's words with the exception's type after them
    assert "Returned: Please provide your phone number. (ValueError)\n" in nb[0][2][0]
    nb_turns = [(printed.replace(" (ValueError)\n", "\n"), answer) for printed, answer in nb[0]]
    assert (nb_turns, *nb[1:]) == ref
