"""LlamaIndex's "Building an Agent around a Query Pipeline" notebook, ported (issue 23, item
10): a ReAct loop written as a query pipeline of stateful function components (agent input,
ReAct prompt, the model, the output parser, a tool runner, the response processors) with
conditional links, wrapped in a QueryPipelineAgentWorker and run step by step and end to end.
The text-to-SQL query engine is replaced by a function tool; the model is scripted.

The pipeline is built twice: as the notebook writes it (``StatefulFnComponent(fn=...,
partial_dict={"tools": [...]})``, ``ToolRunnerComponent(..., callback_manager=task.callback_manager)``,
``AgentChatResponse("text")``, issue 23 item 5; its observation is ``str()`` of ``{"output":
ToolOutput(...)}``, whose repr differs on purpose, so that one repr is masked), and in a form
that closes over its tools, names ``response=`` and observes the tool's text.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents


def sql_tool(input: str) -> str:
    """Useful for translating a natural language query into a SQL query"""
    return "The top 3 tracks by AC/DC are: For Those About To Rock, Put The Finger On You, Let's Get It Up."


SCRIPT = [
    'Thought: I need to use a tool to help me answer the question.\nAction: sql_tool\nAction Input: {"input": "tracks by AC/DC, limit 3"}',
    "Thought: I can answer without using any more tools.\nAnswer: For Those About To Rock, Put The Finger On You, Let's Get It Up.",
]
QUESTION = "What are some tracks from the artist AC/DC? Limit it to 3"


def build_pipeline(api: DocsApi, llm: Any, docs_form: bool) -> Any:
    """The notebook's pipeline. ``docs_form`` uses its exact calls (partial_dict, the task's
    callback manager, a positional AgentChatResponse)."""
    tool = api.FunctionTool.from_defaults(fn=sql_tool)
    StatefulFnComponent, AgentChatResponse = api.StatefulFnComponent, api.AgentChatResponse

    def agent_input_fn(state: dict[str, Any]) -> str:
        step_state, task = state["step_state"], state["task"]
        if "current_reasoning" not in step_state:
            step_state["current_reasoning"] = []
        step_state["current_reasoning"].append(api.ObservationReasoningStep(observation=task.input))
        return task.input

    def react_prompt_fn(state: dict[str, Any], input: str, tools: list[Any] = (tool,)) -> list[Any]:  # type: ignore[assignment]
        task, step_state = state["task"], state["step_state"]
        return api.ReActChatFormatter().format(
            tools,
            chat_history=task.memory.get() + step_state["memory"].get_all(),
            current_reasoning=step_state["current_reasoning"],
        )

    def parse_react_output_fn(state: dict[str, Any], chat_response: Any) -> dict[str, Any]:
        reasoning_step = api.ReActOutputParser().parse(chat_response.message.content)
        return {"done": reasoning_step.is_done, "reasoning_step": reasoning_step}

    def run_tool_fn(state: dict[str, Any], reasoning_step: Any) -> dict[str, Any]:
        task, step_state = state["task"], state["step_state"]
        if docs_form:
            runner = api.ToolRunnerComponent([tool], callback_manager=task.callback_manager)
        else:
            runner = api.ToolRunnerComponent([tool])
        tool_output = runner.run_component(tool_name=reasoning_step.action, tool_input=reasoning_step.action_input)
        # the notebook observes str() of the runner's {"output": ToolOutput(...)}, a repr that
        # differs between the libraries on purpose (masked in the comparison); the other form
        # observes the tool's text
        observation = str(tool_output) if docs_form else tool_output["output"].content
        observation_step = api.ObservationReasoningStep(observation=observation)
        step_state["current_reasoning"].append(observation_step)
        return {"response_str": observation_step.get_content(), "is_done": False}

    def process_response_fn(state: dict[str, Any], response_step: Any) -> dict[str, Any]:
        task, step_state = state["task"], state["step_state"]
        step_state["current_reasoning"].append(response_step)
        step_state["memory"].put(api.ChatMessage(content=task.input, role=api.MessageRole.USER))
        step_state["memory"].put(api.ChatMessage(content=response_step.response, role=api.MessageRole.ASSISTANT))
        return {"response_str": response_step.response, "is_done": True}

    def process_agent_response_fn(state: dict[str, Any], response_dict: dict[str, Any]) -> Any:
        if docs_form:
            return AgentChatResponse(response_dict["response_str"]), response_dict["is_done"]
        return AgentChatResponse(response=response_dict["response_str"]), response_dict["is_done"]

    if docs_form:
        def prompt_fn(state: dict[str, Any], input: str, tools: list[Any]) -> list[Any]:
            return react_prompt_fn(state, input, tools)

        react_prompt = StatefulFnComponent(fn=prompt_fn, partial_dict={"tools": [tool]})
    else:
        react_prompt = StatefulFnComponent(fn=react_prompt_fn)

    qp = api.QueryPipeline(verbose=False)
    qp.add_modules(
        {
            "agent_input": StatefulFnComponent(fn=agent_input_fn),
            "react_prompt": react_prompt,
            "llm": llm,
            "react_output_parser": StatefulFnComponent(fn=parse_react_output_fn),
            "run_tool": StatefulFnComponent(fn=run_tool_fn),
            "process_response": StatefulFnComponent(fn=process_response_fn),
            "process_agent_response": StatefulFnComponent(fn=process_agent_response_fn),
        }
    )
    qp.add_chain(["agent_input", "react_prompt", "llm", "react_output_parser"])
    qp.add_link("react_output_parser", "run_tool", condition_fn=lambda x: not x["done"], input_fn=lambda x: x["reasoning_step"])
    qp.add_link("react_output_parser", "process_response", condition_fn=lambda x: x["done"], input_fn=lambda x: x["reasoning_step"])
    qp.add_link("process_response", "process_agent_response")
    qp.add_link("run_tool", "process_agent_response")
    return qp


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run_notebook(api: DocsApi, docs_form: bool) -> dict[str, Any]:
    """Step by step, then ``reset`` and end to end, as the notebook does."""
    llm = api.llm(SCRIPT + SCRIPT, function_calling=False)
    agent = api.QueryPipelineAgentWorker(build_pipeline(api, llm, docs_form)).as_agent(verbose=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        task = agent.create_task(QUESTION)
        first = agent.run_step(task.task_id)
        second = agent.run_step(task.task_id)
        stepwise = agent.finalize_response(task.task_id)
        agent.reset()
        e2e = agent.chat(QUESTION)
    return {
        "steps": [(str(first.output), first.is_last), (str(second.output), second.is_last)],
        "responses": [str(stepwise), str(e2e)],
        "memory": roles_contents(agent.memory.get_all()),
        "printed": _UUID.sub("<id>", out.getvalue()),
        "second_call_read": roles_contents(api.requests(llm)[1]),
    }


def test_a_react_agent_built_as_a_query_pipeline() -> None:
    ref, nb = (run_notebook(api, docs_form=False) for api in docs_both())
    answer = "For Those About To Rock, Put The Finger On You, Let's Get It Up."
    assert ref["steps"][1] == (answer, True) and ref["steps"][0][1] is False
    assert ref["steps"][0][0].startswith("Observation: ")
    assert ref["responses"] == [answer, answer]
    assert ref["memory"] == [("user", QUESTION), ("assistant", answer)]
    assert "> Running step <id>. Step input: " + QUESTION in ref["printed"]
    assert nb == ref


# a ToolOutput's repr (one level of nested parentheses: TextBlock(...), args=())
_TOOL_OUTPUT_REPR = re.compile(r"ToolOutput\((?:[^()]|\([^()]*\))*\)")


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return _TOOL_OUTPUT_REPR.sub("ToolOutput(...)", value)
    if isinstance(value, (list, tuple)):
        return type(value)(_masked(v) for v in value)
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


def test_item5_the_pipeline_as_the_notebook_writes_it() -> None:
    """partial_dict, a task's callback_manager and a positional AgentChatResponse run on both;
    what differs is the observation's ToolOutput repr, on purpose: nbagent's ``raw_input`` is
    the call's arguments and its text is ``content=`` (the reference: ``blocks=[TextBlock(...)]``,
    ``raw_input={'args': (), 'kwargs': {...}}``)."""
    ref, nb = (run_notebook(api, docs_form=True) for api in docs_both())
    answer = "For Those About To Rock, Put The Finger On You, Let's Get It Up."
    assert ref["responses"] == [answer, answer]
    assert "{'output': ToolOutput(blocks=[TextBlock(" in ref["steps"][0][0]
    assert "{'output': ToolOutput(content=" in nb["steps"][0][0]
    assert _masked(nb) == _masked(ref)
    assert _masked(ref) != ref  # the mask did hide the repr
