"""ReAct (issue 11, items 7-9): the parser, the worker and the texts the model reads, on
llama_index.core 0.12.52 and on nbagent, from the same raw model strings."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from tests.oracle.ref import both, tool_call

# --- the parser, fed the same raw replies ---------------------------------------------------

IMPLICIT = "(Implicit) I can answer without any more tools!"  # the reference's thought for bare text

SAME = [
    'Thought: I need to add.\nAction: add\nAction Input: {"a": 1, "b": 2}',
    "Thought: I can answer.\nAnswer: 42",
    "Thought: I know this. Answer: 42",  # answer after a thought on the same line
    "Thought: I know this.\n\nSome more thinking.\nAnswer: 42",  # ... or on a later line
    'Thought: use it\nAction: add (add two numbers)\nAction Input: {"a": 1, "b": 2}',
    'Thought: use it\nAction: add\nAction Input: {"a": 1, "b": 2}\nThis will add the numbers.',
    'Thought: use it\nAction: add\nAction Input: {"a": 1, "b": 2} // adds them',
    'Thought: t\nAction: add_\nAction Input: {"a": 1}',
    'Thought: t\nAction: _add_\nAction Input: {"a": 1}',  # kept: the worker maps emphasis
    'Thought: t\nAction: __private\nAction Input: {"a": 1}',
    "Thought: done\nAnswer: line one\nline two\n",
    "Thought: t\nAction: add\nAction Input: {'a': 1, 'b': 2}",
    'Thought: t\nAction: add\nAction Input: ```json\n{"a": 1, "b": 2}\n```',
    'Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}\nObservation: 3\nThought: I can answer.\nAnswer: 3',
    "Thought: I can answer without using any more tools.\nAnswer: The answer is 405.\n",
    'Thought: t\nAction: search\nAction Input: {"q": "a, b", "n": true}',
    'Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2,}',
    "Hello there, how can I help?",  # no format at all: the reply is the answer
]
# both refuse these (the reference raises ValueError; nbagent's ReActParseError is one)
REFUSED = ["Thought: I need to think more", "Thought: no input\nAction: add"]


def _parsed(step: Any) -> dict[str, Any]:
    return {
        "type": type(step).__name__,
        **{k: getattr(step, k) for k in ("thought", "action", "action_input", "response") if hasattr(step, k)},
        "is_done": step.is_done,
    }


@pytest.mark.parametrize("raw", SAME)
def test_parser_reads_what_the_reference_reads(raw: str) -> None:
    ref, nb = (_parsed(api.ReActOutputParser().parse(raw)) for api in both())
    assert nb == ref


@pytest.mark.parametrize("raw", REFUSED)
def test_parser_refuses_what_the_reference_refuses(raw: str) -> None:
    for api in both():
        with pytest.raises(ValueError):
            api.ReActOutputParser().parse(raw)


def test_parser_deliberate_differences() -> None:
    ref, nb = (api.ReActOutputParser() for api in both())
    # "Answer:" with no Thought before it: the reference keeps the label in the answer text
    assert ref.parse("Answer: just this").response == "Answer: just this"
    assert nb.parse("Answer: just this").response == "just this"
    # an empty reply: the reference makes it an empty answer; nbagent refuses it
    # (deliberate11.md: an empty reply fails the step with a clear error)
    assert ref.parse("").response == ""
    with pytest.raises(ValueError, match="empty"):
        nb.parse("")


# --- the worker: tools called, observations, sources, reasoning, streaming -------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _add_(a: int) -> int:
    """Increment a number (a tool whose name begins and ends with '_')."""
    return a + 1


def fail(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"no luck with {x}")


def _react(api: SimpleNamespace, script: list[str], **kwargs: Any) -> tuple[Any, Any]:
    tools = [api.FunctionTool.from_defaults(fn=f) for f in (add, _add_, fail)]
    worker = api.ReActAgentWorker.from_tools(tools, llm=api.llm(script, function_calling=False), **kwargs)
    return api.AgentRunner(worker), worker


def _run_steps(api: SimpleNamespace, script: list[str], **kwargs: Any) -> dict[str, Any]:
    agent, _ = _react(api, script, **kwargs)
    task = agent.create_task("question")
    steps = []
    while True:
        out = agent.run_step(task.task_id)
        steps.append((out.output.response, [s.content for s in out.output.sources], out.is_last))
        if out.is_last:
            break
    response = agent.finalize_response(task.task_id)
    reasoning = [(type(r).__name__, r.get_content()) for r in task.extra_state["current_reasoning"]]
    return {
        "steps": steps,
        "response": str(response),
        "sources": [(s.tool_name, s.content, s.is_error) for s in response.sources],
        "reasoning": reasoning,
    }


ANSWER = "Thought: I can answer without using any more tools.\nAnswer: done"


@pytest.mark.parametrize(
    "reply",
    [
        'Thought: t\nAction: add (add two numbers)\nAction Input: {"a": 1, "b": 2}\nThat adds them.',
        'Thought: t\nAction: _add_\nAction Input: {"a": 1}',
        "Thought: t\nAction: add\nAction Input: ```json\n{'a': 1, 'b': 2}\n```",
    ],
)
def test_worker_calls_the_same_tool_and_reports_like_reference(reply: str) -> None:
    ref, nb = (_run_steps(api, [reply, ANSWER]) for api in both())
    # Deliberate: nbagent writes the action's input back as JSON (see test_oracle_runner)
    nb["reasoning"] = [(k, c.replace('{"a": 1, "b": 2}', "{'a': 1, 'b': 2}").replace('{"a": 1}', "{'a': 1}")) for k, c in nb["reasoning"]]
    assert nb == ref
    assert ref["steps"][0][0].startswith("Observation: ")  # the intermediate output, not vacuous


def test_sources_accumulate_over_the_task_as_on_reference() -> None:
    script = [
        'Thought: a\nAction: add\nAction Input: {"a": 1, "b": 2}',
        'Thought: b\nAction: add\nAction Input: {"a": 3, "b": 4}',
        ANSWER,
    ]
    ref, nb = (_run_steps(api, script) for api in both())
    nb["reasoning"] = [
        (k, c.replace('{"a": 1, "b": 2}', "{'a': 1, 'b': 2}").replace('{"a": 3, "b": 4}', "{'a': 3, 'b': 4}"))
        for k, c in nb["reasoning"]
    ]
    assert nb == ref
    assert [s[1] for s in ref["steps"]] == [["3"], ["3", "7"], ["3", "7"]]


def test_texts_the_model_reads_after_a_failing_or_unknown_tool() -> None:
    script = [
        'Thought: t\nAction: fail\nAction Input: {"x": 1}',
        'Thought: t\nAction: nosuch\nAction Input: {"x": 1}',
        ANSWER,
    ]
    ref, nb = (_run_steps(api, script) for api in both())
    ref_obs = [s[0] for s in ref["steps"][:2]]
    nb_obs = [s[0] for s in nb["steps"][:2]]
    # the reference's words first; nbagent's extra hint (the tools there are) may follow
    assert ref_obs == ["Observation: Error: no luck with 1", "Observation: Error: No such tool named `nosuch`."]
    assert nb_obs[1] == ref_obs[1] + " Available tools: _add_, add, fail"
    # a tool that raises: the reference's words (this worker's: "Error: {e}"), then the type
    assert nb_obs[0] == ref_obs[0] + " (RuntimeError)"
    assert [s[:3:2] for s in nb["sources"]] == [s[:3:2] for s in ref["sources"]]  # names, is_error


def test_unparseable_reply_is_fed_back_to_the_model() -> None:
    script = ["Thought: I need to think more", ANSWER]
    seen = []
    for api in both():
        llm = api.llm(script, function_calling=False)
        worker = api.ReActAgentWorker.from_tools([api.FunctionTool.from_defaults(fn=add)], llm=llm)
        response = api.AgentRunner(worker).chat("question")
        seen.append((str(response), api.requests(llm)[1][-1].content, [s.tool_name for s in response.sources]))
    (ref_answer, ref_fed, ref_sources), (nb_answer, nb_fed, nb_sources) = seen
    assert ref_answer == nb_answer == "done"
    # Deliberate (deliberate11.md): the legacy reference worker feeds back a fixed text and
    # counts it as a source from a tool "unknown"; nbagent feeds back what was wrong, in the
    # workflow ReActAgent's words ("Error while parsing the output: ..."), and invents no source.
    assert ref_fed == (
        "Observation: Error: Could not parse output. Please follow the thought-action-input format. Try again."
    )
    assert ref_sources == ["unknown"]
    assert nb_fed.startswith("Observation: Error while parsing the output: ")
    assert nb_sources == []


def test_current_reasoning_is_there_and_holds_the_same_steps() -> None:
    script = ['Thought: a\nAction: add\nAction Input: {"a": 1, "b": 2}', ANSWER]
    kinds = []
    for api in both():
        agent, _ = _react(api, script)
        task = agent.create_task("q")
        agent.run_step(task.task_id)
        kinds.append([type(r).__name__ for r in task.extra_state["current_reasoning"]])
        agent.run_step(task.task_id)
        kinds.append([type(r).__name__ for r in task.extra_state["current_reasoning"]])
    assert kinds[2:] == kinds[:2]
    assert kinds[1] == ["ActionReasoningStep", "ObservationReasoningStep", "ResponseReasoningStep"]


@pytest.mark.parametrize("final", [ANSWER, ANSWER + "\n", "Thought: x\nAnswer: two\nlines\n\n"])
def test_stream_chat_final_text_same_as_reference_without_trailing_newline(final: str) -> None:
    script = ['Thought: a\nAction: add\nAction Input: {"a": 1, "b": 2}', final]
    seen = []
    for api in both():
        agent, _ = _react(api, script)
        stream = agent.stream_chat("q")
        tokens = "".join(stream.response_gen)
        seen.append((tokens, str(stream), stream.response, [s.content for s in stream.sources]))
        agent2, _ = _react(api, script)

        async def go(agent2: Any = agent2) -> tuple[str, str]:
            s = await agent2.astream_chat("q")
            toks = [t async for t in s.async_response_gen()]
            return "".join(toks), s.response

        seen.append(asyncio.run(go()))
    ref, ref_async, nb, nb_async = seen
    # the final response: the same text, no trailing newline, on both
    assert nb[1:] == ref[1:]
    assert nb_async[1] == ref_async[1]
    assert not ref[1].endswith("\n") and not nb[1].endswith("\n")
    # Deliberate: the reference's token stream still carries the reply's trailing newline(s)
    # that its final response drops; nbagent's tokens add up to the final response exactly.
    assert ref[0].rstrip("\n") == ref[1] and ref_async[0].rstrip("\n") == ref_async[1]
    assert nb[0] == nb[1] and nb_async[0] == nb_async[1]


def test_max_iterations_text_and_count() -> None:
    script = ['Thought: a\nAction: add\nAction Input: {"a": 1, "b": 2}'] * 6
    seen = []
    for api in both():
        agent, _ = _react(api, script, max_iterations=3)
        task = agent.create_task("q")
        with pytest.raises(ValueError) as err:
            while not agent.run_step(task.task_id).is_last:
                pass
        seen.append((str(err.value), len(task.extra_state["sources"])))
    (ref_text, ref_calls), (nb_text, nb_calls) = seen
    assert ref_text == "Reached max iterations."
    assert nb_text.startswith("Reached max iterations.")  # nbagent's hint follows
    # Deliberate: the reference counts reasoning steps (an action and its observation are
    # two), so max_iterations=3 stops it after 2 tool calls; nbagent counts model calls, as the
    # workflow agents' max_iterations does, and stops after 3.
    assert (ref_calls, nb_calls) == (2, 3)


def test_empty_reply_legacy_worker() -> None:
    # Deliberate (deliberate11.md): an empty reply fails the step with a clear error and the
    # step stays queued; the reference's legacy worker takes "" as the final answer.
    seen = []
    for api in both():
        agent, _ = _react(api, ["", ANSWER])
        task = agent.create_task("q")
        try:
            out = agent.run_step(task.task_id)
            seen.append(("answered", out.output.response, out.is_last))
        except ValueError as e:
            seen.append(("raised", str(e), len(agent.get_upcoming_steps(task.task_id))))
    assert seen[0] == ("answered", "", True)
    assert seen[1][0] == "raised" and "empty" in seen[1][1] and seen[1][2] == 1
