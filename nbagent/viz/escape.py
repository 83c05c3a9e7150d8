"""Escaping for the views: ``nbagent.text``'s helpers (re-exported here, their old home) and
``typed_preview``, which reads typed answers (``nbagent.structured``)."""

from __future__ import annotations

from typing import Any

from nbagent.structured import typed_text
from nbagent.text import (
    ELLIPSIS,
    args_preview,
    clean,
    html_text,
    preview,
    safe_str,
    short_id,
    truncate,
    wrap_lines,
)

__all__ = [
    "typed_preview",
    "ELLIPSIS",
    "clean",
    "truncate",
    "preview",
    "html_text",
    "wrap_lines",
    "safe_str",
    "short_id",
    "args_preview",
]


def typed_preview(obj: Any) -> str:
    """A typed answer in one line: ``Form(name='Ada', age=36)`` (text, not yet escaped)."""
    if not getattr(type(obj), "model_fields", None):
        return clean(obj)
    return typed_text(obj)
