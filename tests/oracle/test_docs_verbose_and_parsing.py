"""What the agents print and what a ReAct reply may look like (issue 23, item 9): a Python-dict
Action Input with a ``/* comment */`` parses as on LlamaIndex 0.12.52, and ``OpenAIAgent``'s
``verbose=True`` prints each call as the docs notebooks show it ("Got output: ..."). Plus one
difference kept on purpose: the order of verbose lines when a reply's calls run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both
from tests.oracle.test_docs_function_calling import PARALLEL, _agent, _captured, add, multiply
from tests.oracle.test_docs_react_return_direct import REACT_SCRIPT
from tests.oracle.test_docs_react_return_direct import add as add_typed
from tests.oracle.test_docs_react_return_direct import multiply as multiply_typed

COMMENTED = "Thought: Now I add.\nAction: add\nAction Input: {'a': 20, /* the product */ 'b': 8}"


def test_item9_a_python_dict_action_input_with_a_comment_parses() -> None:
    seen = []
    for api in docs_both():
        step = api.ReActOutputParser().parse(COMMENTED)
        seen.append((type(step).__name__, step.action, step.action_input))
    assert seen[0] == ("ActionReasoningStep", "add", {"a": 20, "b": 8})
    assert seen[1] == seen[0]


def test_item9_a_react_run_whose_model_writes_a_commented_python_dict() -> None:
    script = [REACT_SCRIPT[0], COMMENTED, REACT_SCRIPT[2]]
    seen = []
    for api in docs_both():
        agent = api.ReActAgent(tools=[multiply_typed, add_typed], llm=api.llm(script, function_calling=False))

        async def go(agent: Any = agent, api: DocsApi = api) -> tuple[str, list[Any]]:
            handler = agent.run("What is 20+(2*4)?")
            results = [(ev.tool_name, ev.tool_kwargs, ev.tool_output.content) async for ev in handler.stream_events() if isinstance(ev, api.ToolCallResult)]
            return str(await handler), results

        seen.append(asyncio.run(go()))
    assert seen[0] == ("The result of 20 + (2 * 4) is 28.", [("multiply", {"a": 2, "b": 4}, "8"), ("add", {"a": 20, "b": 8}, "28")])
    assert seen[1] == seen[0]


# the agent_runner notebook's stored output for its OpenAIAgent chat (verbose=True), with the
# arguments written as the scripted model writes them (the notebook's model indented them)
NOTEBOOK_GOT_OUTPUT = (
    "=== Calling Function ===\n"
    'Calling function: multiply with args: {"a": 121, "b": 3}\n'
    "Got output: 363\n"
    "========================\n"
    "\n"
    "=== Calling Function ===\n"
    'Calling function: add with args: {"a": 363, "b": 42}\n'
    "Got output: 405\n"
    "========================\n"
    "\n"
)


def test_item9_openai_agent_verbose_prints_got_output_as_the_notebooks_show() -> None:
    """nbagent alone: OpenAIAgent lives in llama-index-agent-openai, which is not installed; the
    oracle is the notebooks' stored output. Core's FunctionCallingAgent keeps its own words
    ("=== Function Output ===", compared in test_docs_function_calling.py)."""
    import nbagent

    agent = nbagent.OpenAIAgent.from_tools(
        [nbagent.FunctionTool.from_defaults(fn=multiply), nbagent.FunctionTool.from_defaults(fn=add)],
        llm=nbagent.ScriptedLLM(list(PARALLEL)),
        verbose=True,
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        response = agent.chat("What is (121 * 3) + 42?")
    assert str(response) == "The result of (121 * 3) + 42 is 405."
    assert "Added user message to memory: What is (121 * 3) + 42?\n" + NOTEBOOK_GOT_OUTPUT in out.getvalue()
    assert "Function Output" not in out.getvalue()


def test_async_parallel_calls_print_as_sync_ones_on_purpose() -> None:
    """Different on purpose: the reference's async path prints both "Calling function" lines
    before the outputs (its calls run concurrently), its sync path one call and its output after
    the other. nbagent has one path for both (the sync one is derived from the async one), so
    ``achat`` prints what ``chat`` prints: each call with its output, in call order."""
    seen = []
    for api in docs_both():
        agent, _ = _agent(api, PARALLEL)

        async def go(agent: Any = agent) -> str:
            return str(await agent.achat("What is (121 * 3) + 42?"))

        seen.append(_captured(lambda go=go: asyncio.run(go())))
        sync_agent, _ = _agent(api, PARALLEL)
        seen.append(_captured(lambda agent=sync_agent: str(agent.chat("What is (121 * 3) + 42?"))))
    ref_async, ref_sync, nb_async, nb_sync = seen

    def calls_before_first_output(printed: str) -> int:
        lines = printed.splitlines()
        return sum(line.startswith("Calling function") for line in lines[: lines.index("=== Function Output ===")])

    assert ref_async[0] == ref_sync[0] == nb_async[0] == nb_sync[0] == "The result of (121 * 3) + 42 is 405."
    assert calls_before_first_output(ref_async[1]) == 2 and calls_before_first_output(ref_sync[1]) == 1
    assert nb_async[1] == nb_sync[1] == ref_sync[1]
