"""People in the loop and checkpoints: ask mid-run, answer from code, save the context as
JSON, load it, resume a run that was waiting or stopped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from nbagent import ChatMemoryBuffer, ChatMessage, MessageRole, ScriptedLLM, tool_call
from nbagent.workflow import (
    AgentWorkflow,
    CheckpointError,
    Context,
    Event,
    FunctionAgent,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    ToolCallResult,
    Workflow,
    WorkflowRuntimeError,
    ask_human,
    step,
)

side_effects: list[str] = []


async def confirm(ctx: Context, action: str) -> str:
    """Ask the person to confirm an action before doing it."""
    reply = await ask_human(ctx, f"Shall I {action}?", user_name="ada")
    side_effects.append(f"{action}:{reply}")
    return f"the person said {reply}"


def approval_workflow(final: str = "Done.") -> AgentWorkflow:
    llm = ScriptedLLM([tool_call("confirm", action="send the mail"), final])
    return AgentWorkflow([FunctionAgent(name="clerk", llm=llm, tools=[confirm])])


def test_a_tool_asks_and_the_run_resumes_with_the_answer_from_code() -> None:
    side_effects.clear()
    wf = approval_workflow()

    async def main() -> tuple[list[str], Any]:
        handler = wf.run(user_msg="Send the mail")
        seen = []
        async for ev in handler.stream_events():
            seen.append(type(ev).__name__)
            if isinstance(ev, InputRequiredEvent):
                assert ev.prefix == "Shall I send the mail?" and ev.get("user_name") == "ada"
                assert handler.status == "waiting"
                handler.respond("yes")
        return seen, await handler

    seen, result = asyncio.run(main())
    assert seen.index("InputRequiredEvent") < seen.index("HumanResponseEvent") < seen.index("ToolCallResult")
    assert str(result) == "Done." and side_effects == ["send the mail:yes"]
    messages = wf.agents["clerk"].llm.requests[1].messages  # type: ignore[attr-defined]
    assert messages[-1].text == "the person said yes"


def test_an_answer_must_meet_the_requirements_and_name_a_waiting_question() -> None:
    wf = approval_workflow()

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        question = await handler.wait_for_question()
        assert question is not None
        with pytest.raises(WorkflowRuntimeError, match="no step is waiting for an answer"):
            handler.send_event(HumanResponseEvent(response="no", user_name="bob"))  # not ada
        with pytest.raises(WorkflowRuntimeError, match="no step waits for an answer to question 'other'"):
            handler.send_event(HumanResponseEvent(response="no", user_name="ada", waiter_id="other"))
        assert handler.pending_questions == [question]
        handler.send_event(HumanResponseEvent(response="ok", user_name="ada"))
        return await handler

    assert str(asyncio.run(main())) == "Done."


def test_respond_fills_the_requirements_and_waiter_id() -> None:
    side_effects.clear()
    wf = approval_workflow()

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        question = await handler.wait_for_question()
        assert question is not None and question.waiter_id
        handler.respond("sure", question)
        result = await handler
        assert await handler.wait_for_question() is None
        return result

    assert str(asyncio.run(main())) == "Done."
    assert side_effects == ["send the mail:sure"]


def test_checkpoint_while_waiting_then_resume_from_json_in_a_new_context() -> None:
    side_effects.clear()
    wf = approval_workflow("Mail sent.")

    async def first() -> str:
        handler = wf.run(user_msg="Send the mail")
        await handler.wait_for_question()
        text = json.dumps(handler.ctx.to_dict())
        await handler.cancel_run()
        return text

    saved = asyncio.run(first())
    assert side_effects == []  # the tool had not gone past its question

    async def second() -> tuple[Any, list[str]]:
        ctx = Context.from_dict(wf, json.loads(saved))
        assert [q.prefix for q in ctx.pending_questions] == ["Shall I send the mail?"]  # type: ignore[attr-defined]
        handler = wf.run(ctx=ctx)
        seen: list[str] = []
        handler.subscribe(lambda e: seen.append(type(e).__name__))
        question = await handler.wait_for_question()
        assert question is not None and question.prefix == "Shall I send the mail?"  # type: ignore[attr-defined]
        handler.respond("yes")
        result = await handler
        # the stream shows the question again, once, before its answer
        assert seen.count("InputRequiredEvent") == 1
        assert seen.index("InputRequiredEvent") < seen.index("HumanResponseEvent") < seen.index("ToolCallResult")
        memory: ChatMemoryBuffer = await handler.ctx.get("memory")
        return result, [m.role.value for m in memory.get_all()]

    result, roles = asyncio.run(second())
    assert str(result) == "Mail sent." and result.current_agent_name == "clerk"
    assert side_effects == ["send the mail:yes"]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_answer_a_loaded_checkpoint_before_resuming() -> None:
    wf = approval_workflow()

    async def first() -> dict[str, Any]:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        data = handler.checkpoint()
        await handler.cancel_run()
        return data

    data = json.loads(json.dumps(asyncio.run(first())))

    async def second() -> Any:
        ctx = Context.from_dict(wf, data)
        ctx.send_event(HumanResponseEvent(response="fine", user_name="ada"))  # no run live yet
        assert ctx.pending_questions == []
        return await wf.run(ctx=ctx)

    assert str(asyncio.run(second())) == "Done."


def test_checkpoint_round_trips_state_memory_and_queued_events() -> None:
    class Item(Event):
        n: int

    class Two(Workflow):
        @step
        async def start(self, ctx: Context, ev: StartEvent) -> Item:
            memory = ChatMemoryBuffer(token_limit=50)
            memory.put(ChatMessage(role=MessageRole.USER, content="hello"))
            await ctx.set("memory", memory)
            await ctx.set("data", {"a": (1, 2.5), "__nb__": None, "roles": [MessageRole.TOOL], "inf": float("inf")})
            ctx.send_event(Item(n=1))
            ctx.send_event(Item(n=2))
            await asyncio.sleep(5)  # stopped here
            return None

        @step
        async def item(self, ctx: Context, ev: Item) -> StopEvent | None:
            got = ctx.collect_events(ev, [Item, Item, Item])  # a third never comes
            return None if got is None else StopEvent(result=[e.n for e in got])

    async def main() -> tuple[dict[str, Any], Any]:
        wf = Two()
        handler = wf.run()
        await asyncio.sleep(0.02)
        await handler.cancel_run()
        data = json.loads(json.dumps(handler.ctx.to_dict()))
        restored = Context.from_dict(wf, data)
        memory = await restored.get("memory")
        assert isinstance(memory, ChatMemoryBuffer) and memory.token_limit == 50
        assert [m.text for m in memory.get_all()] == ["hello"]
        value = await restored.get("data")
        assert value == {"a": (1, 2.5), "__nb__": None, "roles": [MessageRole.TOOL], "inf": float("inf")}
        assert restored.to_dict() == data  # saving the loaded context gives the same JSON
        return data, restored

    data, restored = asyncio.run(main())
    assert [it["step"] for it in data["interrupted"]] == ["start"]
    assert sum(len(v) for v in data["collected"].values()) + len(data["pending"]) == 2


def test_values_that_cannot_be_saved_name_their_key_and_type() -> None:
    wf = approval_workflow()

    async def main() -> None:
        ctx = Context(wf)
        await ctx.set("conn", object())
        with pytest.raises(CheckpointError, match=r"state\['conn'\]: a value of type object"):
            ctx.to_dict()
        await ctx.set("conn", {"inner": [1, {2: "x"}]})
        with pytest.raises(CheckpointError, match=r"state\['conn'\]\['inner'\]\[1\]: a dict key of type int"):
            ctx.to_dict()

    asyncio.run(main())


def test_loading_checks_the_format_the_version_and_the_workflow() -> None:
    wf = approval_workflow()
    good = Context(wf).to_dict()
    with pytest.raises(CheckpointError, match="not a saved workflow context"):
        Context.from_dict(wf, {"format": "other"})
    with pytest.raises(CheckpointError, match="version 99"):
        Context.from_dict(wf, {**good, "version": 99})

    class Other(Workflow):
        @step
        async def start(self, ev: StartEvent) -> StopEvent:
            return StopEvent()

    with pytest.raises(CheckpointError, match="cannot resume"):
        Context.from_dict(Other(), good)
    bad_event = {**good, "pending": [{"step": "init_run", "event": {"__nb__": "event", "class": "no.such:Event", "fields": {}}}]}
    with pytest.raises(CheckpointError, match="import no.such"):
        Context.from_dict(wf, bad_event)
    bad_step = {**good, "pending": [{"step": "ghost", "event": {"__nb__": "event", "class": "nbagent.workflow.events:StartEvent", "fields": {}}}]}
    with pytest.raises(CheckpointError, match="no step 'ghost'"):
        Context.from_dict(wf, bad_step)


def test_a_failed_run_resumes_at_the_failed_step_after_the_cause_is_fixed() -> None:
    flaky = {"fail": True}

    def fetch(x: int) -> str:
        """Fetch something."""
        return f"got {x}"

    class Flaky(ScriptedLLM):
        async def _achat(self, *args: Any, **kwargs: Any) -> Any:
            if flaky["fail"] and self.position == 1:
                raise ConnectionError("network down")
            return await super()._achat(*args, **kwargs)

    llm = Flaky([tool_call("fetch", x=1), "final"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[fetch])])

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        with pytest.raises(ConnectionError):
            await handler
        flaky["fail"] = False
        data = json.loads(json.dumps(handler.ctx.to_dict()))
        return await wf.run(ctx=Context.from_dict(wf, data))

    result = asyncio.run(main())
    assert str(result) == "final"
    tool_msgs = [m for m in llm.requests[-1].messages if m.role == MessageRole.TOOL]
    assert [m.text for m in tool_msgs] == ["got 1"]  # the tool ran once, its result was kept


def test_resume_with_new_input_is_refused() -> None:
    wf = approval_workflow()

    async def main() -> None:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        await handler.cancel_run()
        with pytest.raises(ValueError, match="unfinished run"):
            wf.run(user_msg="something else", ctx=handler.ctx)

    asyncio.run(main())


def test_results_of_parallel_tool_calls_survive_a_checkpoint() -> None:
    def quick(n: int) -> str:
        """Quick."""
        return f"quick {n}"

    llm = ScriptedLLM([
        {"tool_calls": [{"name": "quick", "arguments": {"n": 1}}, {"name": "confirm", "arguments": {"action": "x"}}]},
        "both done",
    ])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[quick, confirm])])

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        await asyncio.sleep(0.01)
        data = json.loads(json.dumps(handler.checkpoint()))
        await handler.cancel_run()
        handler = wf.run(ctx=Context.from_dict(wf, data))
        seen: list[Any] = []
        handler.subscribe(seen.append)
        await handler.wait_for_question()
        handler.respond("ok")
        result = await handler
        return result, [e.tool_output.content for e in seen if isinstance(e, ToolCallResult)]

    result, outputs = asyncio.run(main())
    assert str(result) == "both done"
    assert outputs == ["the person said ok"]  # quick's result came from the checkpoint
    tools = [m.text for m in llm.requests[1].messages if m.role == MessageRole.TOOL]
    assert tools == ["quick 1", "the person said ok"]


def test_a_resumed_question_is_shown_once_even_when_the_tool_asks_it_again() -> None:
    wf = approval_workflow()

    async def main() -> list[str]:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        data = json.loads(json.dumps(handler.checkpoint()))
        await handler.cancel_run()
        handler = wf.run(ctx=Context.from_dict(wf, data))
        seen: list[str] = []
        handler.subscribe(lambda e: seen.append(type(e).__name__))
        await asyncio.sleep(0.02)  # the interrupted tool runs again and waits on its question
        assert handler.status == "waiting"
        handler.respond("yes")
        await handler
        return seen

    seen = asyncio.run(main())
    assert seen.count("InputRequiredEvent") == 1 and seen.count("ToolCall") == 1
    assert seen.index("InputRequiredEvent") < seen.index("HumanResponseEvent")


def test_the_runs_tool_calls_so_far_survive_a_checkpoint_and_the_result_lists_them_all() -> None:
    def quick(n: int) -> dict[str, int]:
        """Quick."""
        return {"n": n}

    llm = ScriptedLLM([tool_call("quick", n=1), tool_call("confirm", action="x"), "both done"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm, tools=[quick, confirm])])

    async def main() -> Any:
        handler = wf.run(user_msg="go")
        await handler.wait_for_question()
        data = json.loads(json.dumps(handler.checkpoint()))  # quick's result is in the context
        await handler.cancel_run()
        ctx = Context.from_dict(wf, data)
        handler = wf.run(ctx=ctx)
        await handler.wait_for_question()
        handler.respond("ok")
        return await handler, await ctx.get("current_tool_calls")

    result, left = asyncio.run(main())
    assert [(type(c).__name__, c.tool_name, c.tool_output.raw_output) for c in result.tool_calls] == [
        ("ToolCallResult", "quick", {"n": 1}),
        ("ToolCallResult", "confirm", "the person said ok"),
    ]
    assert left == []  # the next run on this context starts its own list


def test_a_session_memory_is_saved_and_restored_as_one() -> None:
    from nbagent import Memory

    memory = Memory.from_defaults(session_id="chat-1", token_limit=20, token_flush_size=5)
    llm = ScriptedLLM(["first answer with a few words", "second answer"])
    wf = AgentWorkflow([FunctionAgent(name="solo", llm=llm)])

    async def main() -> Any:
        ctx = Context(wf)
        await wf.run(user_msg="a first question that is rather long", memory=memory, ctx=ctx)
        await wf.run(user_msg="a second question", ctx=ctx)
        return Context.from_dict(wf, json.loads(json.dumps(ctx.to_dict())))

    restored = asyncio.run(main())
    again = asyncio.run(restored.get("memory"))
    assert isinstance(again, Memory) and again.session_id == "chat-1" and again.token_flush_size == 5
    assert memory.archived  # the limit was passed: the oldest turn is archived...
    assert again.archived == memory.archived and again.get() == memory.get()  # ...and still is
