"""Prompts as data (issue 11, item 5): get_prompts() keys and texts, update_prompts, on
llama_index.core 0.12.52 and on nbagent."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.oracle.ref import both


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _objects(api: SimpleNamespace) -> dict[str, Any]:
    tools = [api.FunctionTool.from_defaults(fn=add)]
    return {
        "react_worker": api.ReActAgentWorker.from_tools(tools, llm=api.llm([], function_calling=False)),
        "fc_worker": api.FunctionCallingAgentWorker.from_tools(tools, llm=api.llm([])),
        "react_runner": api.AgentRunner(api.ReActAgentWorker.from_tools(tools, llm=api.llm([], function_calling=False))),
        "fn_agent": api.FunctionAgent(name="f", tools=tools, llm=api.llm([]), system_prompt="Be brief."),
        "react_agent": api.ReActAgent(name="r", tools=tools, llm=api.llm([], function_calling=False)),
        "workflow": api.AgentWorkflow(
            agents=[
                api.FunctionAgent(name="f", description="adds", tools=tools, llm=api.llm([])),
                api.ReActAgent(name="r", description="thinks", tools=tools, llm=api.llm([], function_calling=False)),
            ],
            root_agent="f",
        ),
    }


def _prompts(api: SimpleNamespace) -> dict[str, dict[str, str]]:
    return {name: {k: v.get_template() for k, v in obj.get_prompts().items()} for name, obj in _objects(api).items()}


def test_prompt_keys_and_texts_against_reference() -> None:
    ref, nb = (_prompts(api) for api in both())
    # keys the reference has, nbagent has too
    assert set(ref["react_worker"]) == set(nb["react_worker"]) == {"system_prompt"}
    assert set(ref["react_agent"]) == set(nb["react_agent"]) == {"react_header"}
    assert set(ref["fn_agent"]) == set(nb["fn_agent"]) == set()
    # the workflow: the page's keys (handoff_prompt, state_prompt), 0.12.52's
    # handoff_output_prompt, and its agents' prompts under "<agent>:<key>"
    assert set(ref["workflow"]) == set(nb["workflow"])
    assert {"handoff_prompt", "state_prompt", "handoff_output_prompt", "r:react_header"} <= set(ref["workflow"])
    # texts: the workflow's are the reference's
    for key in ("handoff_prompt", "state_prompt", "handoff_output_prompt"):
        assert nb["workflow"][key] == ref["workflow"][key], key
    # Deliberate: the issue asks for the function-calling worker's and the runners' prompts
    # (system_prompt); the reference's get_prompts() there is empty
    assert ref["fc_worker"] == {} and nb["fc_worker"] == {"system_prompt": ""}
    assert ref["react_runner"] == {} and set(nb["react_runner"]) == {"agent_worker:system_prompt"}
    # Deliberate: nbagent's ReAct header is its own, shorter text (a bounded prompt that small
    # local models follow); the same placeholders, and the reference's header can be set with
    # update_prompts (next test). Both tell the model the Thought/Action/Action Input/Answer format.
    ref_header, nb_header = ref["react_agent"]["react_header"], nb["react_agent"]["react_header"]
    assert nb_header != ref_header and len(nb_header) < len(ref_header)
    for needle in ("{tool_desc}", "{tool_names}", "Thought:", "Action:", "Action Input:", "Answer:"):
        assert needle in ref_header and needle in nb_header, needle
    assert nb["react_worker"]["system_prompt"] == nb_header and ref["react_worker"]["system_prompt"] == ref_header


def test_state_prompt_formats_the_same() -> None:
    texts = [
        _objects(api)["workflow"].get_prompts()["state_prompt"].format(state="{'n': 1}", msg="hi") for api in both()
    ]
    assert texts[0] == texts[1] == "Current state:\n{'n': 1}\n\nCurrent message:\nhi\n"


def test_a_header_written_for_the_reference_reaches_the_model() -> None:
    header = "You have tools.\n{tool_desc}\nUse one of: {tool_names}\n"
    seen = []
    for api in both():
        llm = api.llm(["Thought: x\nAnswer: y"], function_calling=False)
        worker = api.ReActAgentWorker.from_tools([api.FunctionTool.from_defaults(fn=add)], llm=llm)
        worker.update_prompts({"system_prompt": type(worker.get_prompts()["system_prompt"])(header)})
        answer = str(api.AgentRunner(worker).chat("hi"))
        system = api.requests(llm)[0][0]
        seen.append((answer, system.role.value, system.content))
    (ref_answer, ref_role, ref_text), (nb_answer, nb_role, nb_text) = seen
    assert ref_answer == nb_answer == "y" and ref_role == nb_role == "system"
    assert ref_text.startswith("You have tools.\n") and nb_text.startswith("You have tools.\n")
    assert ref_text.rstrip().endswith("Use one of: add") and nb_text.rstrip().endswith("Use one of: add")
    # Deliberate: {tool_desc} lists a tool in nbagent's words (name, description, JSON schema)
    # rather than the reference's "> Tool Name: / Tool Description: / Tool Args:" lines
    assert "> Tool Name: add" in ref_text and "- add: Add two integers." in nb_text
