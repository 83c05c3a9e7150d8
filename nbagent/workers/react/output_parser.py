"""Parse a ReAct model reply into a reasoning step, tolerating what real models write.

Rules, in order (``ReActOutputParser.parse``):

1. A code fence around the whole reply is removed. Labels are matched at the start of a line,
   in any case, with optional markdown emphasis (``**Action:**``).
2. If an ``Action:`` line comes before any ``Answer:`` line, the reply is a tool call (unless it
   says ``Action: None`` and an answer follows: then rule 3 applies). The tool
   name is the rest of that line; ``Action Input:`` must follow, and its value is the first
   ``{...}`` object after it (fences around it and anything after an ``Observation:`` line the
   model made up are ignored). The object is read as JSON, then as JSON without trailing
   commas, then as a Python literal (single quotes, True/None), then as a Python literal with
   JSON's true/false/null, each also with ``//``, ``#`` and ``/* */`` comments outside strings
   left out. Anything else is a ``ReActParseError``.
3. Otherwise an ``Answer:`` (or ``Final Answer:``) line makes it an answer: everything after
   the label, over as many lines as it takes.
4. With neither: ``Action Input:`` alone, an empty reply, or a reply that starts with
   ``Thought:`` (an unfinished ReAct turn) is a ``ReActParseError``; any other text is taken as
   the final answer, because a model that forgets the format mostly just answers.

The text before the Action/Answer line, less a leading ``Thought:`` label, is the thought.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "ReActParseError",
    "ActionReasoningStep",
    "ObservationReasoningStep",
    "HumanReasoningStep",
    "ResponseReasoningStep",
    "ReasoningStep",
    "ReActOutputParser",
    "extract_thought",
    "parse_action_input",
    "resolve_tool_name",
    "unfence",
]

# the thought the reference gives a reply that is plain text, taken as the answer
IMPLICIT_THOUGHT = "(Implicit) I can answer without any more tools!"
_MAX_INPUT_CHARS = 100_000  # ast.literal_eval on megabytes of nesting is not worth the risk


class ReActParseError(ValueError):
    """A model reply that is neither a well-formed tool call nor an answer."""


class ActionReasoningStep(BaseModel):
    """The model chose a tool: why, which one, with which arguments."""

    kind: Literal["action"] = "action"
    thought: str = Field(default="", description="The model's reasoning before the call.")
    action: str = Field(description="Name of the tool to call.")
    action_input: dict[str, Any] = Field(default_factory=dict, description="Tool arguments.")

    @property
    def is_done(self) -> bool:
        return False

    @property
    def content(self) -> str:
        args = json.dumps(self.action_input, ensure_ascii=False, default=str)
        return f"Thought: {self.thought}\nAction: {self.action}\nAction Input: {args}"

    def get_content(self) -> str:
        """The reference's name for ``content``."""
        return self.content


class ObservationReasoningStep(BaseModel):
    """What the model is shown after a call: a tool's result, a tool error or a parse error."""

    kind: Literal["observation"] = "observation"
    observation: str
    is_error: bool = False

    @property
    def is_done(self) -> bool:
        return False

    @property
    def content(self) -> str:
        return f"Observation: {self.observation}"

    def get_content(self) -> str:
        """The reference's name for ``content``."""
        return self.content


class HumanReasoningStep(BaseModel):
    """Input a person injected between two steps (``run_step(task, input=...)``): shown to
    the model where it happened, after the reasoning that came before it."""

    kind: Literal["human"] = "human"
    text: str

    @property
    def is_done(self) -> bool:
        return False

    @property
    def content(self) -> str:
        return self.text

    def get_content(self) -> str:
        """The reference's name for ``content``."""
        return self.content


class ResponseReasoningStep(BaseModel):
    """The model's final answer."""

    kind: Literal["response"] = "response"
    thought: str = ""
    response: str

    @property
    def is_done(self) -> bool:
        return True

    @property
    def content(self) -> str:
        return f"Thought: {self.thought}\nAnswer: {self.response}"

    def get_content(self) -> str:
        """The reference's name for ``content``."""
        return self.content


ReasoningStep = (
    ActionReasoningStep | ObservationReasoningStep | HumanReasoningStep | ResponseReasoningStep
)


def _label(words: str) -> re.Pattern[str]:
    """A label at the start of a line, any case, optionally in markdown emphasis."""
    return re.compile(rf"^[ \t]*[*_]*(?:{words})[*_]*[ \t]*:[*_]*[ \t]*", re.MULTILINE | re.IGNORECASE)


THOUGHT_RE = _label("Thought")
ACTION_RE = _label("Action")
ACTION_INPUT_RE = _label(r"Action[ \t]+Input")
ANSWER_RE = _label(r"(?:Final[ \t]+)?Answer")
OBSERVATION_RE = _label("Observation")
_INLINE_ANSWER_RE = re.compile(r"(?<![\w-])(?:Final[ \t]+)?Answer[*_]*[ \t]*:[*_]*[ \t]*", re.IGNORECASE)
_NO_ACTION_RE = re.compile(r"[`*_\"' ]*(?:none|n/a|no action|no tool)[`*_\"'. ]*$", re.MULTILINE | re.IGNORECASE)
# A quoted string (kept as is) or the thing to change, for edits that must skip strings.
_STRING = r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'"
_TOOL_NAME_RE = re.compile(r"[^\s`*\"'(),;:\[\]{}]+")
_COMMENT_RE = re.compile(rf"({_STRING})|(?://|#)[^\n]*|/\*.*?\*/", re.DOTALL)
_TRAILING_COMMA_RE = re.compile(rf"({_STRING})|,(\s*[}}\]])", re.DOTALL)
_JSON_WORD_RE = re.compile(rf"({_STRING})|\b(true|false|null)\b", re.DOTALL)
_PY_WORDS = {"true": "True", "false": "False", "null": "None"}


def unfence(text: str) -> str:
    """The reply without a code fence around all of it.

    Plain string slicing, not a regex: a lazy ``(.*?)`` before a closing fence backtracks
    quadratically over a long run of blanks (80 KB took seconds).
    """
    text = text.strip()
    if not (text.startswith("```") and text.endswith("```")):
        return text
    nl = text.find("\n")
    if nl < 0 or nl + 1 > len(text) - 3 or "`" in text[3:nl]:
        return text  # no line break after the opening fence, or a backtick in its info string
    return text[nl + 1 : -3].strip()


def extract_thought(prefix: str) -> str:
    """The thought in the text before an Action/Answer line: less its label and any opening fence."""
    text = prefix.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1].strip() if "\n" in text else ""
    m = THOUGHT_RE.match(text)
    if m:
        text = text[m.end() :]
    return text.strip()


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _clean_tool_name(line: str) -> str:
    """The tool's name: the first word of the line, less markdown and quotes around it.

    ``add (add two numbers)`` and ``add: adds`` name ``add``. A leading or trailing
    underscore stays (``_private``, ``__search__``): the worker matches a name wrapped in
    underscores against its tools.
    """
    text = line.strip().strip("`*\"' ")
    m = _TOOL_NAME_RE.match(text)
    name = m.group(0) if m else ""
    return _unemphasize(name.rstrip(".:").strip("`*\"'"))


def _unemphasize(name: str) -> str:
    """``name`` without markdown bold/italics in ``*``: ``*`` never belongs to a tool name.
    Underscores stay, as the reference's parser keeps them (``_add_`` may be a tool's own
    name); the worker maps ``__search__`` to a tool ``search`` when there is no other match."""
    return name.strip("*")


def resolve_tool_name(name: str, known: Any) -> str:
    """The tool ``name`` means: itself if there is such a tool, else the one tool that is the
    same less wrapping underscores (``__search__`` written in markdown emphasis for ``search``)."""
    if name in known:
        return name
    same = [n for n in known if n.strip("_") == name.strip("_")]
    return same[0] if len(same) == 1 else name


def _object_span(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text`` (quotes of either kind respected)."""
    start = text.find("{")
    if start < 0:
        return None
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return ""  # opened but never closed


def _without_trailing_commas(src: str) -> str:
    return _TRAILING_COMMA_RE.sub(lambda m: m.group(1) or m.group(2), src)


def _without_comments(src: str) -> str:
    return _COMMENT_RE.sub(lambda m: m.group(1) or "", src)


def _json_words_to_python(src: str) -> str:
    return _JSON_WORD_RE.sub(lambda m: m.group(1) or _PY_WORDS[m.group(2)], src)


def parse_action_input(src: str) -> dict[str, Any]:
    """Read an Action Input object leniently (see the module docstring, rule 2)."""
    if len(src) > _MAX_INPUT_CHARS:
        raise ReActParseError(
            f"Action Input is {len(src)} characters long; at most {_MAX_INPUT_CHARS} are read"
        )
    fixed = _without_trailing_commas(src)
    value: Any = None
    for candidate, reader in (
        (src, json.loads),
        (fixed, json.loads),
        (fixed, ast.literal_eval),
        (_json_words_to_python(fixed), ast.literal_eval),
        (_without_comments(fixed), json.loads),  # //, # or /* */ comments inside the object
        (_json_words_to_python(_without_trailing_commas(_without_comments(src))), ast.literal_eval),
    ):
        try:
            value = reader(candidate)
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    else:
        raise ReActParseError(
            f"the Action Input {_short(src)!r} is not a valid JSON object"
        )
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ReActParseError(
            f"the Action Input must be a JSON object with string keys, got {_short(src)!r}"
        )
    return value


class ReActOutputParser:
    """Turns a model reply into an ``ActionReasoningStep`` or ``ResponseReasoningStep``."""

    def parse(self, output: str, is_streaming: bool = False) -> ReasoningStep:
        """Parse one reply; raise ``ReActParseError`` saying what is wrong if it is malformed."""
        if not isinstance(output, str):
            raise TypeError(f"parse() takes the reply text (str), got {type(output).__name__}")
        text = unfence(output)
        action = ACTION_RE.search(text)
        answer = ANSWER_RE.search(text)
        if action is not None and (answer is None or action.start() < answer.start()):
            if answer is None or not _NO_ACTION_RE.match(text, action.end()):
                return self._parse_action(text, action)
        if answer is not None:
            response = text[answer.end() :].strip()
            if not response:
                raise ReActParseError("'Answer:' is followed by no text")
            return ResponseReasoningStep(thought=extract_thought(text[: answer.start()]), response=response)
        if ACTION_INPUT_RE.search(text):
            raise ReActParseError("there is an 'Action Input:' line but no 'Action:' line naming the tool")
        if not text:
            raise ReActParseError("the reply is empty")
        thought = THOUGHT_RE.match(text)
        if thought is not None:
            # "Thought: I know it. Answer: 42": the answer label after the thought, mid-line
            inline = _INLINE_ANSWER_RE.search(text, thought.end())
            if inline is not None and text[inline.end() :].strip():
                return ResponseReasoningStep(
                    thought=text[thought.end() : inline.start()].strip().rstrip("*_").strip(),
                    response=text[inline.end() :].strip(),
                )
            raise ReActParseError(
                "the reply has a Thought but neither an 'Action:' nor an 'Answer:' line"
            )
        return ResponseReasoningStep(thought=IMPLICIT_THOUGHT, response=text)

    def _parse_action(self, text: str, action: re.Match[str]) -> ActionReasoningStep:
        rest = text[action.end() :]
        obs = OBSERVATION_RE.search(rest)
        if obs is not None:  # the model went on to imagine the tool's result: drop it
            rest = rest[: obs.start()]
        inp = ACTION_INPUT_RE.search(rest)
        head = rest if inp is None else rest[: inp.start()]
        lines = [ln for ln in head.splitlines() if ln.strip()]
        name = _clean_tool_name(lines[0]) if lines else ""
        if not name:
            raise ReActParseError("'Action:' is not followed by a tool name")
        if inp is None:
            raise ReActParseError(
                f"'Action: {name}' is not followed by an 'Action Input:' line with the arguments"
            )
        span = _object_span(rest[inp.end() :])
        if span is None:
            given = _short(rest[inp.end() :]) or "nothing"
            raise ReActParseError(
                f"the Action Input of {name!r} must be a JSON object such as {{\"x\": 1}}, got {given!r}"
            )
        if span == "":
            raise ReActParseError(f"the Action Input of {name!r} is an unclosed JSON object (missing '}}')")
        return ActionReasoningStep(
            thought=extract_thought(text[: action.start()]), action=name, action_input=parse_action_input(span)
        )

    @staticmethod
    def stream_scanner() -> ReActStreamScanner:
        """A scanner that reads a streamed reply chunk by chunk (linear in its length)."""
        return ReActStreamScanner()

    @staticmethod
    def find_answer(partial: str) -> tuple[int, int] | None:
        """Where the ``Answer:`` label starts and its text begins, if a (partial) reply is
        already known to be an answer: an ``Answer:`` line arrived with no ``Action:`` line
        before it. Used to stream the answer before the reply is complete.
        """
        answer = ANSWER_RE.search(partial)
        if answer is None:
            return None
        if ACTION_RE.search(partial, 0, answer.start()) is not None:
            return None
        return answer.start(), answer.end()

    @staticmethod
    def has_action(partial: str) -> bool:
        """Whether a (partial) reply contains an ``Action:`` line (so it is a tool call)."""
        return ACTION_RE.search(partial) is not None


class ReActStreamScanner:
    """Finds, while a reply streams in, whether it is a tool call or where its answer starts.

    Same decision as ``find_answer`` / ``has_action`` on the text so far, but each character
    is looked at a bounded number of times: a label is the start of a line up to the line's
    first colon, so a line is decided once, when its first colon arrives, and a line without
    one is never matched. (Re-searching the whole text on every chunk made an 80 KB streamed
    reply quadratic: seconds.)
    """

    __slots__ = ("is_action", "answer", "_offset", "_line_start", "_parts", "_decided")

    def __init__(self) -> None:
        self.is_action = False  # an Action: line came first: the reply is a tool call
        self.answer: tuple[int, int] | None = None  # (label start, text start) in the reply
        self._offset = 0  # characters fed so far
        self._line_start = 0  # offset of the current line
        self._parts: list[str] = []  # the current line so far, until it is decided
        self._decided = False  # the current line's first colon has been seen

    def feed(self, delta: str) -> tuple[int, int] | None:
        """Add the next chunk; return the answer's (label start, text start) once known."""
        if self.is_action or self.answer is not None:
            return self.answer
        pos = 0
        n = len(delta)
        while pos < n and not self.is_action and self.answer is None:
            nl = delta.find("\n", pos)
            end = n if nl < 0 else nl + 1
            if not self._decided:
                colon = delta.find(":", pos, end)
                if colon >= 0:
                    self._parts.append(delta[pos:end])
                    self._decide("".join(self._parts))
                    self._parts = []
                    self._decided = True
                elif nl < 0:
                    self._parts.append(delta[pos:end])
            if nl >= 0:  # the line ends: the next one starts undecided
                self._parts = []
                self._decided = False
                self._line_start = self._offset + end
            pos = end
        self._offset += n
        return self.answer

    def _decide(self, line: str) -> None:
        if ACTION_RE.match(line):
            self.is_action = True
            return
        m = ANSWER_RE.match(line)
        if m is not None:
            self.answer = (self._line_start + m.start(), self._line_start + m.end())
