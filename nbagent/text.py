"""Text hygiene shared by the DOT and HTML renderers, the reports and the services' text.

Everything a user, a model or a tool wrote goes through ``clean`` (no control characters, no
lone surrogates, no bidi overrides, so both expat, which Graphviz uses for HTML-like labels, and
browsers accept it), then ``truncate``/``preview`` (bounded length), then ``html_text`` (HTML
entities for ``& < > " '``). The DOT renderer uses HTML-like labels ``<...>``, whose text is
escaped exactly like HTML text, so one escaper serves both outputs. Stdlib only: any layer
may use it (``nbagent.viz.escape`` re-exports it with the views' ``typed_preview``).
"""

from __future__ import annotations

import html
import json
import re
import textwrap
from typing import Any

__all__ = [
    "ELLIPSIS",
    "clean",
    "truncate",
    "preview",
    "html_text",
    "wrap_lines",
    "safe_str",
    "short_id",
    "args_preview",
    "output_text",
]

ELLIPSIS = "…"

# C0 controls except \t \n \r, DEL and C1 controls, UTF-16 surrogates (invalid in UTF-8),
# the two non-characters XML forbids, and bidi embedding/override/isolate characters.
_BAD_CHARS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u202a-\u202e\u2066-\u2069]"
)
_REPLACEMENT = "\ufffd"


def safe_str(value: Any) -> str:
    """``str(value)`` that never raises (a broken ``__str__`` must not break a view)."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception as err:  # noqa: BLE001 - any failure is shown, not raised
        return f"<unprintable {type(value).__name__}: {type(err).__name__}>"


def clean(text: Any) -> str:
    """Text with line ends normalised, tabs as spaces and unsafe characters replaced by U+FFFD."""
    s = safe_str(text)
    if "\r" in s:
        s = s.replace("\r\n", "\n").replace("\r", "\n")
    if "\t" in s:
        s = s.replace("\t", "    ")
    return _BAD_CHARS.sub(_REPLACEMENT, s)


def truncate(text: str, limit: int | None, *, words: bool = False) -> str:
    """At most ``limit`` characters; a cut string ends with an ellipsis. ``None``: no limit.
    ``words``: cut at a space (prose reads better without half a word), unless that would
    drop more than half the text kept."""
    if limit is None or len(text) <= limit:
        return text
    if limit < 1:
        return ELLIPSIS
    kept = text[: limit - 1]
    if not words:
        return kept + ELLIPSIS
    if text[limit - 1] != " ":
        space = kept.rfind(" ")
        if space > limit // 2:
            kept = kept[:space]
    return kept.rstrip() + ELLIPSIS


def preview(value: Any, limit: int | None = 80, *, words: bool = False) -> str:
    """A one-line, cleaned, length-bounded rendering of ``value`` (whitespace collapsed);
    ``words``: cut at a word's end."""
    return truncate(" ".join(clean(value).split()), limit, words=words)


def html_text(value: Any, limit: int | None = None) -> str:
    """Cleaned, optionally truncated text, HTML-escaped (quotes too): safe in text and attributes."""
    return html.escape(truncate(clean(value), limit), quote=True)


def wrap_lines(text: str, width: int) -> list[str]:
    """Split one line into lines of at most ``width`` characters, at spaces when possible."""
    if len(text) <= width:
        return [text]
    return textwrap.wrap(
        text, width=width, break_long_words=True, break_on_hyphens=False, drop_whitespace=True
    ) or [""]


def short_id(step_id: Any, n: int = 8) -> str:
    """The first ``n`` characters of an id (cleaned, not escaped)."""
    return clean(step_id)[:n]


def _value_preview(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=safe_str, sort_keys=False)
    except (TypeError, ValueError, RecursionError):
        return safe_str(value)


def args_preview(kwargs: Any) -> str:
    """``a=1, b="x"`` for a dict of tool arguments (JSON values, insertion order)."""
    if not isinstance(kwargs, dict):
        return _value_preview(kwargs)
    return ", ".join(f"{safe_str(k)}={_value_preview(v)}" for k, v in kwargs.items())


def output_text(output: Any) -> str:
    """The text of a step's output, without consuming a stream (``str()`` on one would)."""
    if output is None:
        return ""
    response = getattr(output, "response", None)
    if isinstance(response, str):
        return response
    return clean(output)
