"""Prompts as data on the legacy workers and the runners built on them.

The ReAct snippet is the reference docs' "ReAct Agent - A Simple Intro with Calculator Tools"
customisation, ported by changing the imports and the model.
"""

from __future__ import annotations

import pytest

from nbagent import AgentRunner, PromptTemplate, ScriptedLLM, tool_call
from nbagent.agents import FunctionCallingAgent, ReActAgent
from nbagent.messages import MessageRole
from nbagent.tools import FunctionTool
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.react import REACT_SYSTEM_PROMPT, ReActAgentWorker, ReActChatFormatter
from nbagent.workers.react.output_parser import ActionReasoningStep, ObservationReasoningStep
from tests.helpers import CountingWorker


def multiply(a: int, b: int) -> int:
    """Multiply two integers and returns the result integer"""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers and returns the result integer"""
    return a + b


multiply_tool = FunctionTool.from_defaults(fn=multiply)
add_tool = FunctionTool.from_defaults(fn=add)

react_system_header_str = """\

You are designed to help with a variety of tasks, from answering questions \
    to providing summaries to other types of analyses.

## Tools
You have access to the following tools:
{tool_desc}

## Output Format
To answer the question, please use the following format.

```
Thought: I need to use a tool to help me answer the question.
Action: tool name (one of {tool_names}) if using a tool.
Action Input: the input to the tool, in a JSON format representing the kwargs (e.g. {{"input": "hello world", "num_beams": 5}})
```

Please ALWAYS start with a Thought.

## Current Conversation
Below is the current conversation consisting of interleaving human and assistant messages.

"""


def test_reference_react_prompt_customisation_reaches_the_model() -> None:
    llm = ScriptedLLM(
        ['Thought: add first.\nAction: add\nAction Input: {"a": 5, "b": 3}', "Thought: done.\nAnswer: 10"],
        function_calling=False,
    )
    agent = ReActAgent.from_tools([multiply_tool, add_tool], llm=llm, verbose=True)
    prompt_dict = agent.get_prompts()
    assert list(prompt_dict) == ["agent_worker:system_prompt"]
    assert prompt_dict["agent_worker:system_prompt"].template == REACT_SYSTEM_PROMPT
    # --- the docs' snippet ---
    react_system_prompt = PromptTemplate(react_system_header_str)
    agent.get_prompts()
    agent.update_prompts({"agent_worker:system_prompt": react_system_prompt})
    agent.reset()
    response = agent.chat("What is 5+3+2")
    # --- what the model saw ---
    assert str(response) == "10"
    system = llm.requests[0].messages[0]
    assert system.role == MessageRole.SYSTEM
    assert "You are designed to help with a variety of tasks" in system.text
    assert '(e.g. {"input": "hello world", "num_beams": 5})' in system.text  # {{ }} made single
    assert "one of multiply, add" in system.text and "- multiply:" in system.text
    assert "{tool_desc}" not in system.text
    assert agent.get_prompts()["agent_worker:system_prompt"].template == react_system_header_str


def test_worker_prompts_and_the_html_view_show_what_the_model_sees() -> None:
    worker = ReActAgentWorker.from_tools([add_tool], llm=ScriptedLLM([], function_calling=False))
    assert set(worker.get_prompts()) == {"system_prompt"}
    worker.update_prompts({"system_prompt": "Tools: {tool_names}. Be <brief>."})
    assert worker.prompt_preview() == "Tools: add. Be <brief>."
    html = worker._repr_html_()
    assert "system prompt the model sees" in html and "Be &lt;brief&gt;." in html
    with pytest.raises(KeyError, match="no prompt named 'react_header'.*'system_prompt'"):
        worker.update_prompts({"react_header": "x"})
    with pytest.raises(TypeError, match="must be a str or a PromptTemplate"):
        worker.update_prompts({"system_prompt": 42})  # type: ignore[dict-item]


def test_function_calling_worker_system_prompt_is_a_prompt() -> None:
    llm = ScriptedLLM(["hi"])
    agent = FunctionCallingAgent.from_tools([add_tool], llm=llm)
    assert agent.get_prompts()["agent_worker:system_prompt"].template == ""
    agent.update_prompts({"agent_worker:system_prompt": PromptTemplate("You are terse.")})
    agent.chat("hello")
    assert llm.requests[0].messages[0].role == MessageRole.SYSTEM
    assert llm.requests[0].messages[0].text == "You are terse."
    worker = agent.agent_worker
    assert isinstance(worker, FunctionCallingAgentWorker)
    assert "You are terse." in worker._repr_html_()


def test_runner_without_prompts_and_unknown_keys() -> None:
    runner = AgentRunner(CountingWorker())
    assert runner.get_prompts() == {}
    with pytest.raises(KeyError, match="has no prompts"):
        runner.update_prompts({"agent_worker:system_prompt": "x"})


def test_react_chat_formatter_from_defaults_and_reference_format() -> None:
    fmt = ReActChatFormatter.from_defaults()
    assert fmt.system_header == REACT_SYSTEM_PROMPT and fmt.context is None
    custom = ReActChatFormatter.from_defaults(
        system_header="H {tool_names}", context="ctx", observation_role=MessageRole.TOOL
    )
    reasoning = [
        ActionReasoningStep(thought="t", action="add", action_input={"a": 1, "b": 2}),
        ObservationReasoningStep(observation="3"),
    ]
    msgs = custom.format([add_tool], chat_history=[], current_reasoning=reasoning)
    assert msgs[0].text == "H add"
    assert [m.role for m in msgs[1:]] == [MessageRole.ASSISTANT, MessageRole.TOOL]
    assert msgs[2].text == "Observation: 3"
    custom.system_header = PromptTemplate("new {tool_names}")  # the cache is dropped
    assert custom.format([add_tool])[0].text == "new add"
    with pytest.raises(ValueError, match="once"):
        ReActChatFormatter("a", system_header="b")


def test_formatter_given_with_a_header_keeps_the_header() -> None:
    fmt = ReActChatFormatter()
    worker = ReActAgentWorker([add_tool], ScriptedLLM([], function_calling=False), react_system_prompt="only {tool_names}", formatter=fmt)
    assert worker.prompt_preview() == "only add"


def test_observation_role_reaches_the_model() -> None:
    llm = ScriptedLLM(
        ['Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}', "Thought: ok\nAnswer: 3"],
        function_calling=False,
    )
    fmt = ReActChatFormatter.from_defaults(observation_role=MessageRole.TOOL)
    agent = ReActAgent.from_tools([add_tool], llm=llm, react_chat_formatter=fmt)
    assert str(agent.chat("1+2")) == "3"
    roles = [m.role for m in llm.requests[1].messages]
    assert roles[-1] == MessageRole.TOOL and llm.requests[1].messages[-1].text == "Observation: 3"


def test_tool_call_model_still_works_with_tools() -> None:
    llm = ScriptedLLM([tool_call("add", a=1, b=2), "3"])
    agent = FunctionCallingAgent.from_tools([add_tool], llm=llm, system_prompt=PromptTemplate("S"))
    assert str(agent.chat("1+2")) == "3"
    assert llm.requests[0].messages[0].text == "S"


def test_planner_prompts_are_data_too() -> None:
    from nbagent.workers.planner import PlannerAgentWorker

    worker = PlannerAgentWorker([add_tool], ScriptedLLM([]))
    assert set(worker.get_prompts()) == {"planner_prompt", "join_prompt"}
    before = worker.prompt_preview()
    worker.update_prompts({"planner_prompt": "Plan with {tool_names}."})
    assert worker.prompt_preview() == "Plan with add." != before
    worker.update_prompts({"join_prompt": "Join."})
    assert worker.join_prompt == "Join."
