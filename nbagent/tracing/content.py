"""Message content as the GenAI conventions write it on a span: JSON text of
``[{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", ...}]}]``.

Only called when content is captured (``capture_content=True`` or the environment switch).
Values that JSON cannot hold are written as their ``str``; nothing is ever executed or
fetched. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["messages_json", "value_json", "MAX_CHARS"]

#: content longer than this is cut (a span attribute is no place for a whole document)
MAX_CHARS = 8_000


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "…"


def _parts(message: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    text = getattr(message, "text", None)
    if text is None:
        text = getattr(message, "content", None)
    if text:
        parts.append({"type": "text", "content": _cut(str(text))})
    for call in getattr(message, "tool_calls", None) or ():
        parts.append(
            {
                "type": "tool_call",
                "id": getattr(call, "tool_id", None),
                "name": getattr(call, "tool_name", None),
                "arguments": getattr(call, "tool_kwargs", None),
            }
        )
    if getattr(message, "tool_call_id", None):
        parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": _cut(str(text or ""))}]
    return parts


def _role(message: Any) -> str:
    role = getattr(message, "role", "user")
    return str(getattr(role, "value", role))


def messages_json(messages: Iterable[Any], finish_reason: str | None = None) -> str:
    """The messages as one JSON text (``finish_reason`` on each: for the output messages)."""
    out = []
    for m in messages:
        item: dict[str, Any] = {"role": _role(m), "parts": _parts(m)}
        if finish_reason is not None:
            item["finish_reason"] = finish_reason
        out.append(item)
    return json.dumps(out, ensure_ascii=False, default=str)


def value_json(value: Any) -> str:
    """A tool's arguments or result as JSON text (text stays text), cut to ``MAX_CHARS``."""
    if isinstance(value, str):
        return _cut(value)
    return _cut(json.dumps(value, ensure_ascii=False, default=str))
