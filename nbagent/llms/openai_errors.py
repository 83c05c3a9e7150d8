"""Where an OpenAI-compatible server is, and what to tell the person when reaching it fails.

The openai client's bare "Connection error." / "Request timed out." become errors that name
the URL tried (secrets masked), what bounds the call and the likely cause, keeping the
client's exception types so ``except openai.APIConnectionError`` still works.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

if TYPE_CHECKING:
    from nbagent.llms.openai import OpenAILLM

__all__ = [
    "is_loopback_url",
    "is_openai_url",
    "split_query",
    "explain_connection_error",
    "reached_then_lost",
    "timed_out_error",
    "lost_connection_error",
    "http_errors",
    "request_stub",
]


# -- addresses ---------------------------------------------------------------------------------


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` points at this machine (127.0.0.0/8, ::1 or localhost)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_openai_url(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (which needs a key)."""
    return (urlsplit(url).hostname or "").lower() == "api.openai.com"


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its query, and the query as parameters: the openai client appends
    paths to its base URL, so a query (``?api-key=...``) goes with every request instead."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, {}
    if not parts.query:
        return url, {}
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), dict(parse_qsl(parts.query))


# -- errors ------------------------------------------------------------------------------------


def explain_connection_error(llm: OpenAILLM, err: Exception) -> None:
    """Give the openai client's bare "Connection error." / "Request timed out." the URL it
    tried and the likely causes, as the missing-key message does (type kept: ``except
    openai.APIConnectionError`` still works; secrets are masked by the caller afterwards)."""
    import openai

    if not isinstance(err, openai.APIConnectionError):
        return
    url = llm.public_base_url
    cause = err.__cause__ or err.__context__
    why = f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else ""
    if isinstance(err, openai.APITimeoutError):
        text = (
            f"Request timed out: the model server at {url} did not answer within "
            f"timeout={llm.timeout:g} s, which bounds the whole call (connecting, every retry and the "
            f"whole reply){why}. A local model may still be loading or be too slow for this prompt: "
            "pass a larger timeout=..., or check the server's log."
        )
    elif reached_then_lost(err):
        text = (
            f"Connection lost: the model server at {url} closed the connection before its reply "
            f"was complete{why}, after {llm.max_retries} retries. The server was reached, so it is "
            "running: check its log (it may have crashed or been restarted), or a proxy in between."
        )
    else:
        local = is_loopback_url(llm.base_url)
        hint = (
            "Is the server running and listening on that port? (Ollama: `ollama serve`, "
            "http://localhost:11434/v1; llama.cpp: `llama-server --port 8080`, "
            "http://localhost:8080/v1)"
            if local
            else "Is the address right, and can this machine reach it (network, proxy, firewall)?"
        )
        text = (
            f"Connection error: could not reach the model server at {url}{why}. {hint} Check "
            "base_url / OPENAI_BASE_URL: an OpenAI-compatible server's address usually ends in /v1."
        )
    err.message = text
    err.args = (text,)


# errors of the HTTP stack that mean the server was reached and then the connection broke
_LOST = ("RemoteProtocolError", "ReadError", "WriteError", "ConnectionResetError", "BrokenPipeError")


def reached_then_lost(err: BaseException) -> bool:
    """Whether ``err`` came from a connection that was made and then broke (not a refusal)."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        names = {c.__name__ for c in type(e).__mro__}
        if names & {"ConnectError", "ConnectTimeout", "ConnectionRefusedError"}:
            return False
        if names & set(_LOST):
            return True
        e = e.__cause__ or e.__context__
    return False


def timed_out_error(llm: OpenAILLM, request: Any, chunks: int) -> Exception:
    """The whole call ran past ``timeout``: an ``openai.APITimeoutError`` saying so."""
    import openai

    err = openai.APITimeoutError(request=request if request is not None else request_stub(llm))
    what = "did not answer" if not chunks else f"did not finish its streamed reply ({chunks} chunk(s) had come)"
    text = (
        f"Request timed out: the model server at {llm.public_base_url} {what} within "
        f"timeout={llm.timeout:g} s, which bounds the whole call (connecting, every retry and "
        "the whole reply). A local model may still be loading or be too slow for this prompt: "
        "pass a larger timeout=..., or check the server's log."
    )
    err.message = text
    err.args = (text,)
    return err


def lost_connection_error(llm: OpenAILLM, request: Any, chunks: int, cause: BaseException) -> Exception:
    """The connection broke while the reply was coming: an ``openai.APIConnectionError``
    that says so (the server was reached; this is not "is it running?")."""
    import openai

    text = (
        f"Connection lost: the model server at {llm.public_base_url} closed the connection "
        f"in the middle of its streamed reply, after {chunks} chunk(s) "
        f"({type(cause).__name__}: {cause}). The partial reply was dropped; the step stays "
        "queued: run it again, and check the server's log (or a proxy in between) if this repeats."
    )
    err = openai.APIConnectionError(message=text, request=request)
    err.__cause__ = cause
    return err


def http_errors(response: Any) -> tuple[type[BaseException], type[BaseException]]:
    """The HTTP library's transport and read-timeout errors (httpx, or the fork the openai
    client uses), found from the response it gave."""
    module = sys.modules.get(type(response).__module__.split(".")[0])
    transport = getattr(module, "TransportError", None)
    timeout = getattr(module, "TimeoutException", None)
    if not (isinstance(transport, type) and isinstance(timeout, type)):
        return OSError, TimeoutError
    return transport, timeout


def request_stub(llm: OpenAILLM) -> Any:
    """A request object for an error raised before any response came (what the openai
    errors carry), built with the HTTP library the client uses; the URL is the public one."""
    import openai

    base = next((c for c in type.mro(openai.DefaultAsyncHttpxClient) if c.__name__ == "AsyncClient"), None)
    module = sys.modules.get(base.__module__.split(".")[0]) if base is not None else None
    request_cls = getattr(module, "Request", None)
    if request_cls is None:
        return None
    try:
        return request_cls("POST", llm.public_base_url.split("?", 1)[0] + "/chat/completions")
    except Exception:  # noqa: BLE001
        return None
