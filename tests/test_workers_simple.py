"""CustomSimpleAgentWorker and FnAgentWorker contracts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    AgentRunner,
    BaseAgentWorker,
    ChatMessage,
    CustomSimpleAgentWorker,
    FnAgentWorker,
    MessageRole,
    ScriptedLLM,
    Task,
    TaskStep,
    TaskStepOutput,
)


class Echo(CustomSimpleAgentWorker):
    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        reply = self.llm.chat([ChatMessage(content=task.input)])
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=str(reply)))
        return AgentChatResponse(response=str(reply)), True

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


def test_custom_worker_with_an_llm_and_memory() -> None:
    llm = ScriptedLLM(["hello back"])
    runner = Echo.from_tools(tools=[], llm=llm).as_agent()
    assert str(runner.chat("hello")) == "hello back"
    assert [m.content for m in runner.chat_history] == ["hello back"]
    assert llm.requests[0].messages[0].content == "hello"


def test_reserved_state_keys_are_checked() -> None:
    class Bad(Echo):
        def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
            return {"memory": 1}

    with pytest.raises(ValueError, match=r"reserved key\(s\) \['memory'\]"):
        Bad(llm=None).as_agent().create_task("x")


def test_custom_worker_async_step_and_bad_return() -> None:
    class AsyncOne(Echo):
        async def _arun_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
            await asyncio.sleep(0)
            return AgentChatResponse(response="async"), True

    assert str(AsyncOne(llm=None).as_agent().chat("x")) == "async"

    class Wrong(Echo):
        def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> Any:
            return "just text"

    with pytest.raises(TypeError, match=r"\(response, is_done\)"):
        Wrong(llm=None).as_agent().chat("x")


def test_tools_and_retriever_are_exclusive() -> None:
    def f(x: int) -> int:
        return x

    class Retriever:
        def retrieve(self, text: str) -> list[Any]:
            return [f]

    with pytest.raises(ValueError, match="not both"):
        Echo(tools=[f], tool_retriever=Retriever(), llm=None)
    assert [t.name for t in Echo(tool_retriever=Retriever(), llm=None).get_tools("q")] == ["f"]
    assert [t.name for t in Echo(tools=[f], llm=None).get_tools("q")] == ["f"]


def test_fn_worker_runs_a_function_of_the_state() -> None:
    async def countdown(state: dict[str, Any]) -> tuple[str, bool]:
        state["left"] -= 1
        return f"{state['left']} left", state["left"] == 0

    runner = FnAgentWorker(countdown, initial_state={"left": 3}).as_agent()
    task = runner.create_task("go")
    outputs = [str(runner.run_step(task)) for _ in range(3)]
    assert outputs == ["2 left", "1 left", "0 left"]
    assert isinstance(runner.finalize_response(task), AgentChatResponse)
    runner2 = FnAgentWorker(countdown, initial_state={"left": 3}).as_agent()
    assert str(runner2.chat("again")) == "0 left"  # initial state is copied per task


def test_fn_worker_limits_and_validation() -> None:
    runner = FnAgentWorker(lambda s: ("x", False), max_steps=2).as_agent()
    with pytest.raises(RuntimeError, match="max_steps=2"):
        runner.chat("go")
    # the convenience keys give way to the user's own state
    seen: list[Any] = []
    FnAgentWorker(lambda s: (seen.append(s["input"]) or "x", True), initial_state={"input": 1}).as_agent().chat("go")
    assert seen == [1]
    with pytest.raises(TypeError, match=r"\(state, is_done\)"):
        FnAgentWorker(lambda s: "x").as_agent().chat("go")
    with pytest.raises(TypeError, match="needs a function"):
        FnAgentWorker()
    with pytest.raises(ValueError, match="max_steps"):
        FnAgentWorker(lambda s: (s, True), max_steps=0)


def test_base_worker_derives_sync_from_async_and_back() -> None:
    class SyncOnly(BaseAgentWorker):
        def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
            return TaskStep(task_id=task.task_id, input=task.input)

        def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
            return TaskStepOutput(output=AgentChatResponse(response="sync"), task_step=step, is_last=True)

    class AsyncOnly(SyncOnly):
        run_step = BaseAgentWorker.run_step  # type: ignore[assignment]

        async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
            return TaskStepOutput(output=AgentChatResponse(response="async"), task_step=step, is_last=True)

    class Neither(SyncOnly):
        run_step = BaseAgentWorker.run_step  # type: ignore[assignment]

    assert str(SyncOnly().as_agent().chat("x")) == "sync"
    assert str(AsyncOnly().as_agent().chat("x")) == "async"
    w = AsyncOnly()
    t = Task(input="x")
    assert str(w.run_step(w.initialize_step(t), t)) == "async"
    with pytest.raises(NotImplementedError, match="run_step or arun_step"):
        Neither().as_agent().chat("x")
    assert AgentRunner(SyncOnly()).agent_worker.describe()["kind"] == "SyncOnly"
