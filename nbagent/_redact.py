"""Secrets that ride in URLs, and the one place that hides them.

A server's URL may carry credentials: user info (``http://user:pw@host``) and query
parameters (``?token=...``, ``?api-key=...``). Whatever nbagent shows or saves (a repr, an
HTML view, an error, a failure record, a log line, a run file, a report) shows a URL through
``redact_url``, and text that may echo a URL's secrets back (a server's error, a tool's
result) goes through ``scrub`` with that URL's ``url_secrets``. Stdlib only.
"""

from __future__ import annotations

import base64
import logging
import re
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "redact_url",
    "url_secrets",
    "named_secrets",
    "scrub",
    "scrub_error",
    "strip_userinfo",
    "protect_logs",
]

MASK = "***"

# a query parameter whose name says it holds a secret
_SECRET_NAME = re.compile(r"token|key|secret|pass|pwd|sig|auth|credential|session|cookie|jwt|code", re.I)
_MIN_SECRET = 3  # shorter pieces are not masked in free text (they would mask everything)


def _secret_value(value: str) -> bool:
    """A value that looks like a token whatever its parameter is called: long, letters and digits."""
    return len(value) >= 16 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _is_secret_param(name: str, value: str) -> bool:
    return bool(value) and (bool(_SECRET_NAME.search(unquote(name))) or _secret_value(unquote(value)))


def redact_url(url: str) -> str:
    """``url`` safe to show: user info and secret-looking query values become ``***``, the
    fragment is dropped; scheme, host, port, path and other parameters stay."""
    try:
        parts = urlsplit(str(url))
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
        pairs = []
        for pair in parts.query.split("&") if parts.query else []:
            name, eq, value = pair.partition("=")
            pairs.append(f"{name}={MASK}" if eq and _is_secret_param(name, value) else pair)
        return urlunsplit((parts.scheme, netloc, parts.path, "&".join(pairs), ""))
    except ValueError:
        return "(a URL that could not be read)"


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:pw@`` (an HTTP client would send it as ``Authorization: Basic``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The pieces of ``url`` that may be secrets, as they may appear in text: raw,
    percent-decoded, and user info as an ``Authorization: Basic`` token; longest first."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return [str(url)]
    found: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        user, _, password = userinfo.partition(":")
        found.update((userinfo, user, password))
        plain = f"{unquote(user)}:{unquote(password)}"
        found.add(base64.b64encode(plain.encode()).decode())
        found.add(base64.b64encode(plain.encode()).decode().rstrip("="))
    for pair in parts.query.split("&") if parts.query else []:
        name, eq, value = pair.partition("=")
        if eq and _is_secret_param(name, value):
            found.add(value)
    if parts.fragment:
        found.add(parts.fragment)
    found |= {unquote(s) for s in found}
    found |= {unquote(s.replace("+", " ")) for s in found}
    return sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)


def named_secrets(values: Mapping[str, str] | None) -> list[str]:
    """The values of a mapping (headers, environment) whose names say they are secrets, as
    they may appear in text (an ``Authorization`` header's token also without its scheme)."""
    found: set[str] = set()
    for name, value in (values or {}).items():
        if not isinstance(value, str) or not _SECRET_NAME.search(str(name)):
            continue
        found.add(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token"):
            found.add(token)
    return sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (longest first) replaced by ``***``."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def scrub_error(err: BaseException, clean: Callable[[str], str]) -> None:
    """Mask secrets in ``err`` in place, and in every error it carries: the ones it was raised
    from (``__cause__``/``__context__``) and an exception group's members, since a failure
    record keeps the whole chain as text. The types stay (``except`` clauses still work); a
    body a server echoed secrets in is dropped."""
    seen: set[int] = set()
    stack: list[BaseException] = [err]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        _scrub_one(e, clean)
        stack.extend(x for x in (e.__cause__, e.__context__) if x is not None)
        members = getattr(e, "exceptions", None)
        if isinstance(members, tuple):
            stack.extend(m for m in members if isinstance(m, BaseException))


def _scrub_one(err: BaseException, clean: Callable[[str], str]) -> None:
    try:
        text = str(err)
    except Exception:  # noqa: BLE001 - an error that cannot say itself: leave it
        return
    body = getattr(err, "body", None)
    dirty_body = body is not None and clean(repr(body)) != repr(body)
    notes = getattr(err, "__notes__", None)
    try:
        if isinstance(notes, list):
            err.__notes__ = [clean(n) if isinstance(n, str) else n for n in notes]
        cleaned = clean(text)
        if cleaned != text:
            err.args = (cleaned,)
            if isinstance(getattr(err, "message", None), str):
                err.message = cleaned  # type: ignore[attr-defined]
        if dirty_body:
            err.body = None  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass


class _Scrubbing(Protocol):
    def _scrub_text(self, text: str) -> str: ...


class _LogScrubber:
    """Masks the secrets of every registered owner (a model, an MCP client) in the log records
    of the HTTP stacks and SDKs they log through (``httpx`` logs each request's full URL at
    INFO, user info and query included). A record factory, not a logger filter: records of
    child loggers and of renamed forks (``httpx2``) pass here too, whatever handler the user
    attaches later."""

    PREFIXES = ("openai", "httpx", "httpcore", "mcp")

    def __init__(self) -> None:
        self.owners: weakref.WeakSet[Any] = weakref.WeakSet()
        self.installed = False
        self.previous: Any = None

    def install(self) -> None:
        if self.installed:
            return
        self.previous = logging.getLogRecordFactory()
        logging.setLogRecordFactory(self.make)
        self.installed = True

    def make(self, name: str, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.previous(name, *args, **kwargs)
        if self.owners and name.startswith(self.PREFIXES):
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001  (a broken record is not ours to fix)
                return record
            clean = message
            for owner in list(self.owners):
                clean = owner._scrub_text(clean)
            if clean != message:
                record.msg, record.args = clean, ()
        return record


_SCRUBBER = _LogScrubber()


def protect_logs(owner: _Scrubbing) -> None:
    """From now on, mask ``owner``'s secrets (``owner._scrub_text``) in the HTTP stack's logs."""
    _SCRUBBER.owners.add(owner)
    _SCRUBBER.install()
