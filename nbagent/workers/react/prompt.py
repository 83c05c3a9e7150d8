"""The ReAct system prompt: what the model is told about its tools and how to reply.

A template is plain text with up to three placeholders, filled by ``str.replace`` (so JSON
braces in a template need no escaping): ``{tool_desc}`` (one entry per tool with its JSON
schema), ``{tool_names}`` (comma-separated) and ``{context}`` (the worker's ``context``
section, or nothing). A template written for the reference, where literal braces are doubled
(``{{"input": "hello"}}``, ``str.format`` style), is recognised by its ``{{`` and its doubled
braces are made single, as the reference's ``str.format`` would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from nbagent.tools import FunctionTool

__all__ = [
    "REACT_SYSTEM_PROMPT",
    "FORMAT_REMINDER",
    "format_tool_descriptions",
    "render_system_prompt",
]

REACT_SYSTEM_PROMPT = """\
You work on the user's request step by step: think, use a tool when it helps, read its \
result, and repeat until you can give a complete answer.
{context}
## Tools

{tool_desc}

## How to reply

To use a tool, reply with exactly these three lines, then stop and wait:

Thought: <what you need next and why>
Action: <the tool's name: one of {tool_names}>
Action Input: <the arguments as one JSON object with double quotes, e.g. {"query": "Paris"}>

The next message then starts with "Observation:" and holds the tool's result, or an error \
you should correct. Never write an Observation yourself.

When you know enough to answer, reply with:

Thought: I can answer without using any more tools.
Answer: <your answer to the user>

Call one tool per reply, start every reply with "Thought:", and answer in the language of \
the user's question.
"""

FORMAT_REMINDER = (
    'Reply in the format "Thought: ...", "Action: <tool name>", "Action Input: <JSON object>" '
    'to use a tool, or "Thought: ...", "Answer: <your answer>" to answer'
)

_PLACEHOLDER_RE = re.compile(r"\{(?:context|tool_names|tool_desc)\}")
_FORMAT_STYLE_RE = re.compile(r"\{\{|\}\}|\{(?:context|tool_names|tool_desc)\}")
_NO_TOOLS = "(no tools: answer from what you know)"


def format_tool_descriptions(tools: Sequence[FunctionTool]) -> str:
    """One entry per tool: name, description and the JSON schema of its arguments."""
    if not tools:
        return _NO_TOOLS
    entries = []
    for tool in tools:
        meta = tool.metadata
        schema = json.dumps(meta.parameters(), ensure_ascii=False)
        entry = f"- {meta.name}: {meta.description}\n  Arguments (JSON schema): {schema}"
        if meta.return_direct:
            entry += "\n  Its result is given to the user as the final answer."
        entries.append(entry)
    return "\n".join(entries)


def render_system_prompt(
    tools: Sequence[FunctionTool], template: Any = None, context: str | None = None
) -> str:
    """Fill a template (the default ``REACT_SYSTEM_PROMPT``; a str or a PromptTemplate) for
    these tools."""
    template = REACT_SYSTEM_PROMPT if template is None else template
    if not isinstance(template, str):
        text = getattr(template, "template", None)
        if not isinstance(text, str):
            raise TypeError(f"react_system_prompt must be a str template, got {type(template).__name__}")
        template = text
    names = ", ".join(t.name for t in tools) or "(none)"
    context_text = f"\n## Context\n\n{context.strip()}\n" if context and context.strip() else ""
    values = {
        "{context}": context_text,
        "{tool_names}": names,
        "{tool_desc}": format_tool_descriptions(tools),
    }
    # One pass, so a placeholder written inside a tool's description is left alone.
    if "{{" in template:  # written for str.format: {{ and }} stand for single braces
        values["{{"], values["}}"] = "{", "}"
        return _FORMAT_STYLE_RE.sub(lambda m: values[m.group(0)], template)
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(0)], template)
