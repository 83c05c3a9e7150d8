"""Every agent constructor forwards every runner argument (issue 28, item 11).

The keywords come from ``AgentRunner.__init__``'s signature, so a new runner argument is
tested here as soon as it exists: the test fails until it has a case below (a value to pass
and a way to see that the runner got it).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    ChatMessage,
    FunctionCallingAgent,
    FunctionTool,
    OldOpenAIAgent,
    OldReActAgent,
    OpenAIAgent,
    ParallelAgentRunner,
    ReActAgent,
    ScriptedLLM,
)
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import MessageRole
from nbagent.runner.agent_state import AgentState
from nbagent.store import RunStore
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.planner import PlannerAgentWorker
from nbagent.workers.react import ReActAgentWorker


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class WindowLLM(ScriptedLLM):
    """A scripted model that knows its context window (the runner sizes its memory from it)."""

    context_window = 1000


def _fc_llm(kw: dict[str, Any]) -> ScriptedLLM:
    """The model a constructor is given: the case's (``llm=``), else a plain scripted one."""
    llm = kw.pop("llm", None) or ScriptedLLM(["done"])
    llm.is_function_calling_model = True  # type: ignore[misc]
    return llm


def _react_llm(kw: dict[str, Any]) -> ScriptedLLM:
    llm = kw.pop("llm", None) or ScriptedLLM(["Answer: done"])
    llm.is_function_calling_model = False  # type: ignore[misc]
    return llm


def _as_agent(worker: Any, kw: dict[str, Any]) -> AgentRunner:
    return worker.as_agent(**kw)  # type: ignore[no-any-return]


# constructor name -> fn(**runner_kwargs) -> runner; a model passed as llm= goes where the
# constructor takes its model (and, from there, to the runner)
CONSTRUCTORS: dict[str, Callable[..., AgentRunner]] = {
    "ReActAgent.from_tools": lambda **kw: ReActAgent.from_tools([add], llm=_react_llm(kw), **kw),
    "OldReActAgent.from_tools": lambda **kw: OldReActAgent.from_tools([add], llm=_react_llm(kw), **kw),
    "FunctionCallingAgent.from_tools": lambda **kw: FunctionCallingAgent.from_tools([add], llm=_fc_llm(kw), **kw),
    "OpenAIAgent.from_tools": lambda **kw: OpenAIAgent.from_tools([add], llm=_fc_llm(kw), **kw),
    "OldOpenAIAgent.from_tools": lambda **kw: OldOpenAIAgent.from_tools([add], llm=_fc_llm(kw), **kw),
    "AgentRunner.from_llm (tools API)": lambda **kw: AgentRunner.from_llm([add], llm=_fc_llm(kw), **kw),
    "AgentRunner.from_llm (ReAct)": lambda **kw: AgentRunner.from_llm([add], llm=_react_llm(kw), **kw),
    "ParallelAgentRunner.from_llm": lambda **kw: ParallelAgentRunner.from_llm([add], llm=_fc_llm(kw), **kw),
    "ReActAgentWorker.as_agent": lambda **kw: _as_agent(
        ReActAgentWorker.from_tools([add], llm=_react_llm({})), kw
    ),
    "FunctionCallingAgentWorker.as_agent": lambda **kw: _as_agent(
        FunctionCallingAgentWorker.from_tools([add], llm=_fc_llm({})), kw
    ),
    "ParallelAgentRunner(planner)": lambda **kw: ParallelAgentRunner(
        PlannerAgentWorker.from_tools([add], llm=_react_llm({})), **kw
    ),
}


def _case(name: str, tmp: Path) -> tuple[Any, Callable[[AgentRunner], bool]]:
    """A value for the runner keyword ``name`` and a check that the runner has it."""
    if name == "chat_history":
        said = [ChatMessage(role=MessageRole.USER, content="remember the tea")]
        return said, lambda r: [m.content for m in r.chat_history] == ["remember the tea"]
    if name == "state":
        state = AgentState()
        return state, lambda r: r.state is state
    if name == "memory":
        memory = ChatMemoryBuffer(token_limit=123)
        return memory, lambda r: r.memory is memory
    if name == "llm":  # the runner sizes its memory from the model's window (3/4 of 1000)
        return WindowLLM(["done"]), lambda r: r.memory.token_limit == 750
    if name == "callback_manager":
        return object(), lambda r: True  # accepted; the warning is checked by the caller
    if name == "init_task_state_kwargs":
        return {"colour": "teal"}, lambda r: r.init_task_state_kwargs == {"colour": "teal"}
    if name == "delete_task_on_finish":
        return True, lambda r: r.delete_task_on_finish is True
    if name == "default_tool_choice":
        return "none", lambda r: r.default_tool_choice == "none"
    if name == "verbose":
        return True, lambda r: r.verbose is True
    if name == "keep_history":
        return False, lambda r: r.keep_history is False
    if name == "autosave":
        path = tmp / "run.json"
        return path, lambda r: r.autosave == path and path.exists()
    if name == "approve_tools":
        return ["add"], lambda r: r.approve_tools == ["add"]
    if name == "store":
        store = RunStore(tmp / "runs.db")
        return store, lambda r: r.autosave == store.path
    if name == "max_finished_tasks":
        return 3, lambda r: r.max_finished_tasks == 3
    if name == "tracer_provider":  # nbagent.tracing asks it for nbagent's tracer
        from opentelemetry.trace import NoOpTracerProvider

        asked: list[str] = []

        class Provider(NoOpTracerProvider):
            def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> Any:
                asked.append(name)
                return super().get_tracer(name, *args, **kwargs)

        return Provider(), lambda r: asked == ["nbagent"]
    if name == "max_concurrency":  # ParallelAgentRunner's own
        return 2, lambda r: r.max_concurrency == 2
    raise AssertionError(
        f"AgentRunner takes {name!r}, which this test has no case for: add one to _case "
        "(a value, and how to see that the runner got it)"
    )


RUNNER_KEYWORDS = [
    p.name
    for p in inspect.signature(AgentRunner.__init__).parameters.values()
    if p.name not in ("self", "agent_worker")
]


def test_the_keyword_list_is_read_from_the_runner(tmp_path: Path) -> None:
    assert {"autosave", "store", "approve_tools", "max_finished_tasks", "memory", "llm"} <= set(RUNNER_KEYWORDS)
    for name in RUNNER_KEYWORDS:
        _case(name, tmp_path)  # every keyword has a case


@pytest.mark.parametrize("keyword", RUNNER_KEYWORDS)
@pytest.mark.parametrize("constructor", list(CONSTRUCTORS))
def test_every_constructor_forwards_every_runner_keyword(constructor: str, keyword: str, tmp_path: Path) -> None:
    value, got_it = _case(keyword, tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runner = CONSTRUCTORS[constructor](**{keyword: value})
    try:
        assert isinstance(runner, AgentRunner)
        assert got_it(runner), f"{constructor} did not give {keyword}={value!r} to the runner"
        if keyword == "callback_manager":
            assert any("callback_manager" in str(w.message) for w in seen)
        # and the agent still runs (the worker did not get the runner's keyword instead)
        if keyword not in ("approve_tools", "default_tool_choice", "state"):
            task = runner.create_task("hi")
            assert runner.state_of(task).step_queue
    finally:
        runner.autosave = None


def test_parallel_runner_forwards_its_own_keyword_with_the_others(tmp_path: Path) -> None:
    worker = PlannerAgentWorker.from_tools([add], llm=_react_llm({}))
    runner = ParallelAgentRunner(worker, max_concurrency=2, autosave=tmp_path / "p.json", max_finished_tasks=1)
    try:
        assert runner.max_concurrency == 2 and runner.max_finished_tasks == 1
        assert runner.autosave == tmp_path / "p.json"
    finally:
        runner.autosave = None


def test_a_worker_keyword_still_reaches_the_worker_and_a_wrong_one_is_named() -> None:
    agent = ReActAgent.from_tools([add], llm=_react_llm({}), max_iterations=4, autosave=None, reasoning_token_budget=77)
    assert agent.agent_worker.max_iterations == 4 and agent.agent_worker.reasoning_token_budget == 77
    with pytest.raises(TypeError, match="no_such_option"):
        ReActAgent.from_tools([add], llm=_react_llm({}), no_such_option=1)
    with pytest.raises(TypeError, match="no_such_option"):
        FunctionCallingAgent.from_tools([add], llm=_fc_llm({}), no_such_option=1)


def test_tools_work_after_forwarding() -> None:
    llm = ScriptedLLM([{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, "5"])
    agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)], llm=llm, max_finished_tasks=1)
    assert str(agent.chat("2+3?")) == "5"


def test_the_model_sizes_the_memory_as_on_the_reference() -> None:
    """llama-index-core 0.12.52's ReActAgent.from_tools gives its model to the memory too
    (3/4 of the context window); nbagent's does the same since it forwards llm= to the runner."""
    from llama_index.core.agent import ReActAgent as TheirReActAgent
    from llama_index.core.llms import MockLLM

    theirs = TheirReActAgent.from_tools([], llm=MockLLM())
    window = MockLLM().metadata.context_window
    mine_llm = ScriptedLLM(["Answer: done"], function_calling=False)
    mine_llm.context_window = window  # type: ignore[attr-defined]
    mine = ReActAgent.from_tools([], llm=mine_llm)
    assert mine.memory.token_limit == theirs.memory.token_limit == int(window * 0.75)
