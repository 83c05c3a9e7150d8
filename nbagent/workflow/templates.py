"""The prompts of an AgentWorkflow, checked for the placeholders they must contain.

Apart from ``multi_agent`` so that a workflow agent (``agents``) validates its own
``state_prompt`` with the same check without importing the multi-agent workflow.
"""

from __future__ import annotations

from typing import Any

from nbagent.prompts import PromptTemplate, as_template

__all__ = ["checked_template"]

_PROMPT_WORDS = {
    "handoff_prompt": "Handoff prompt",
    "handoff_output_prompt": "Handoff output prompt",
    "state_prompt": "State prompt",
}


def checked_template(value: Any, what: str, needed: tuple[str, ...]) -> PromptTemplate:
    """``value`` as a PromptTemplate that contains every placeholder in ``needed``; else a
    ValueError naming the prompt and what it lacks."""
    template = as_template(value, what)
    missing = [p for p in needed if "{" + p + "}" not in template.template]
    if missing:
        raise ValueError(
            f"{_PROMPT_WORDS.get(what, what)} must contain {' and '.join('{' + p + '}' for p in needed)}; "
            f"{what} is missing {missing}"
        )
    return template
