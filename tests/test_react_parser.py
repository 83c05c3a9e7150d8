"""ReActOutputParser on the kinds of replies real models write."""

from __future__ import annotations

import pytest

from nbagent.workers.react import (
    ActionReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ResponseReasoningStep,
)
from nbagent.workers.react.output_parser import parse_action_input

parse = ReActOutputParser().parse


def action(text: str) -> ActionReasoningStep:
    step = parse(text)
    assert isinstance(step, ActionReasoningStep), step
    return step


def answer(text: str) -> ResponseReasoningStep:
    step = parse(text)
    assert isinstance(step, ResponseReasoningStep), step
    return step


# ----- actions -------------------------------------------------------------------------------


def test_plain_action() -> None:
    step = action('Thought: I need to add.\nAction: add\nAction Input: {"a": 1, "b": 2}')
    assert (step.thought, step.action, step.action_input) == ("I need to add.", "add", {"a": 1, "b": 2})


def test_fence_around_whole_reply() -> None:
    step = action('```\nThought: add them\nAction: add\nAction Input: {"a": 1, "b": 2}\n```')
    assert step.action == "add" and step.action_input == {"a": 1, "b": 2}
    assert step.thought == "add them"


def test_fence_around_json_only() -> None:
    text = 'Thought: t\nAction: search\nAction Input:\n```json\n{\n  "query": "x } y",\n  "k": 3\n}\n```'
    step = action(text)
    assert step.action_input == {"query": "x } y", "k": 3}  # a brace inside a string is text


def test_missing_thought_prefix_is_the_thought() -> None:
    step = action('I should search first.\nAction: search\nAction Input: {"query": "cats"}')
    assert step.thought == "I should search first."
    assert answer("Let me think.\nAnswer: 42").thought == "Let me think."


def test_single_quotes_python_literals_and_trailing_commas() -> None:
    assert action("Action: f\nAction Input: {'q': 'it\\'s', 'n': None, 'ok': True}").action_input == {
        "q": "it's",
        "n": None,
        "ok": True,
    }
    assert action('Action: f\nAction Input: {"a": [1, 2,], "b": 3,}').action_input == {"a": [1, 2], "b": 3}
    # single quotes mixed with JSON words
    assert action("Action: f\nAction Input: {'flag': true, 'x': null}").action_input == {"flag": True, "x": None}
    # a trailing comma inside a string is not touched
    assert action('Action: f\nAction Input: {"s": "a,}",}').action_input == {"s": "a,}"}


def test_imagined_observation_and_later_answer_are_ignored() -> None:
    text = (
        'Thought: t\nAction: add\nAction Input: {"a": 1, "b": 2}\n'
        "Observation: 3\nThought: done\nAnswer: 3"
    )
    step = action(text)
    assert step.action == "add" and step.action_input == {"a": 1, "b": 2}


def test_markdown_labels_and_tool_name_decoration() -> None:
    step = action('**Thought:** hmm\n**Action:** `get_weather`\n**Action Input:** {"city": "Oslo"}')
    assert (step.thought, step.action, step.action_input) == ("hmm", "get_weather", {"city": "Oslo"})
    assert action("Action: now()\nAction Input: {}").action == "now"


def test_answer_text_mentioning_action_after_answer_is_an_answer() -> None:
    step = answer("Thought: easy\nAnswer: Use this format:\nAction: none\nAction Input: {}")
    assert step.response.startswith("Use this format:")
    assert "Action Input: {}" in step.response


# ----- answers -------------------------------------------------------------------------------


def test_multiline_answer_is_kept_whole() -> None:
    step = answer("Thought: I can answer without using any more tools.\nAnswer: Line one.\n\n- two\n- three\n")
    assert step.response == "Line one.\n\n- two\n- three"
    assert step.thought == "I can answer without using any more tools."


def test_final_answer_label_and_fenced_reply() -> None:
    assert answer("Final Answer: Paris").response == "Paris"
    assert answer("```text\nThought: ok\nAnswer: Paris\n```").response == "Paris"
    # a code block inside the answer is the answer's content, not a wrapper
    assert answer("Answer: ```py\nx = 1\n```").response == "```py\nx = 1\n```"


def test_action_none_followed_by_an_answer_is_an_answer() -> None:
    assert answer("Thought: no tool needed\nAction: None\nAnswer: 4").response == "4"
    with pytest.raises(ReActParseError, match="Action Input"):
        parse("Thought: hmm\nAction: None")


def test_bare_text_is_the_answer() -> None:
    step = answer("The capital of France is Paris.")
    # the thought the reference's parser gives plain text (tests/oracle compares the two)
    assert step.response == "The capital of France is Paris."
    assert step.thought == "(Implicit) I can answer without any more tools!"


# ----- malformed -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Thought: x\nAction: add", "Action Input"),
        ("Thought: x\nAction: add\nAction Input: 1 + 2", "JSON object"),
        ('Thought: x\nAction: add\nAction Input: {"a": 1', "unclosed"),
        ("Thought: x\nAction: add\nAction Input: {a: 1}", "not a valid JSON object"),
        ('Thought: x\nAction:\nAction Input: {"a": 1}', "tool name"),
        ('Action Input: {"a": 1}', "no 'Action:'"),
        ("Thought: I still need to think about it.", "neither"),
        ("Thought: x\nAnswer:", "no text"),
        ("   ", "empty"),
    ],
)
def test_malformed_replies_raise_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ReActParseError, match=reason):
        parse(text)


def test_parse_error_is_a_value_error_and_input_must_be_an_object() -> None:
    assert issubclass(ReActParseError, ValueError)
    with pytest.raises(ReActParseError, match="string keys"):
        parse_action_input("{1: 2}")


# ----- streaming helpers ---------------------------------------------------------------------


def test_find_answer_on_partial_text() -> None:
    p = ReActOutputParser()
    assert p.find_answer("Thought: ok\nAnsw") is None
    found = p.find_answer("Thought: ok\nAnswer: Par")
    assert found is not None and "Thought: ok\nAnswer: Par"[found[1] :] == "Par"
    assert p.find_answer('Action: a\nAction Input: {}\nAnswer: x') is None  # an action came first
    assert p.has_action("Thought: t\nAction: s") and not p.has_action("Thought: t\nActio")


REPLIES = [
    "Thought: ok\nAnswer: Paris",
    "Thought: t\nAction: search\nAction Input: {\"q\": 1}\nAnswer: x",
    "**Final Answer:** 42",
    "  __Answer__ :  spaced",
    "Thought: a: b\nAnswer - note: no\nAnswer: yes",
    "Answer",
    "Thought: x\nActio",
    "```\nThought: f\nAnswer: fenced\n```",
    "time: 12:30\nAnswer: later",
    "Action Input: {}\nAnswer: y",
    "\n\nAnswer:\n\ntext",
]


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_stream_scanner_agrees_with_find_answer_on_every_chunking(reply: str, size: int) -> None:
    """The incremental scanner decides like find_answer/has_action on the whole text so far,
    after every chunk, however the reply is cut."""
    p = ReActOutputParser()
    scan = p.stream_scanner()
    text = ""
    for i in range(0, len(reply), size):
        delta = reply[i : i + size]
        text += delta
        found = scan.feed(delta)
        want = p.find_answer(text)
        if want is not None and not scan.is_action:
            # the old scan could only see a label once its colon came; the scanner too
            assert found is not None and found[0] == want[0]
            assert text[found[1] :].strip() == text[want[1] :].strip()
            return
        if found is None:
            assert want is None or p.has_action(text[: want[0]])
        if scan.is_action:
            assert p.has_action(text)
            return
    assert (scan.feed("") is None) == (p.find_answer(text) is None or p.has_action(text))


def test_unfence_keeps_its_rules() -> None:
    from nbagent.workers.react.output_parser import unfence

    assert unfence("```json\n{\"a\": 1}\n```") == '{"a": 1}'
    assert unfence("```\nx\n  ```") == "x"
    assert unfence("```\n```") == ""
    assert unfence("```py```") == "```py```"  # no line break after the opening fence
    assert unfence("```a`b\nx\n```") == "```a`b\nx\n```"  # a backtick in the info string
    assert unfence("  text  ") == "text"
    assert unfence("```\nx") == "```\nx"


@pytest.mark.parametrize(
    ("line", "name"),
    [("_private", "_private"), ("**_private**", "_private"), ("__search__", "__search__"), ("*search*", "search"), ("`_x()`", "_x")],
)
def test_a_tool_name_keeps_its_own_leading_underscore(line: str, name: str) -> None:
    """Found by the fuzz suite: a valid tool name starting with '_' lost it (markdown
    emphasis was stripped from both ends whether or not it wrapped the name). Underscores
    wrapping the name stay too, as on the reference's parser: the worker maps ``__search__``
    to a tool ``search`` (tests/oracle/test_oracle_react.py)."""
    assert action(f"Thought: t\nAction: {line}\nAction Input: {{}}").action == name
