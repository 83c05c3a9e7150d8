"""A chat model over any OpenAI-compatible server: OpenAI itself, Ollama, vLLM, llama.cpp.

Only the async path is written (``_achat`` / ``_astream``); the base class derives the sync
methods. The ``openai`` package is imported inside methods, so ``import nbagent`` stays fast
and works without it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import threading
import uuid
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from nbagent.llms.base import LLM, ChatResponse, NetworkBlockedError, ToolChoice, network_blocked
from nbagent.messages import ChatMessage, MessageRole, TokenUsage, ToolSelection
from nbagent.tools import RAW_ARGUMENTS_KEY, ToolMetadata

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAILLM", "DEFAULT_BASE_URL", "RAW_ARGUMENTS_KEY"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY_PLACEHOLDER = "not-needed"
_TOOL_CHOICE_KEYWORDS = ("auto", "none", "required")


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` points at this machine (127.0.0.0/8, ::1 or localhost)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_openai_url(url: str) -> bool:
    return (urlsplit(url).hostname or "").lower() == "api.openai.com"


class OpenAILLM(LLM):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    The key and URL default to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. A local server
    (any ``base_url`` other than api.openai.com) needs no key. The key is never shown: not in
    ``repr``, not in errors; ``masked_key`` shows enough of it to tell keys apart.
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        is_function_calling_model: bool = True,
        is_multimodal: bool = False,
        additional_kwargs: dict[str, Any] | None = None,
        supports_response_format: bool = False,
    ) -> None:
        self.model = model
        self.supports_response_format = supports_response_format
        self.base_url: str = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._api_key: str | None = api_key or os.environ.get("OPENAI_API_KEY") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.is_function_calling_model = is_function_calling_model
        self.is_multimodal = is_multimodal
        self.additional_kwargs: dict[str, Any] = dict(additional_kwargs or {})
        # httpx async connections belong to the loop that opened them: one client per loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()

    # -- identity, without the secret ------------------------------------------------------

    @property
    def masked_key(self) -> str:
        """The key with all but its last 4 characters hidden, e.g. ``'sk-…1234'``."""
        key = self._api_key
        if not key:
            return "(none)"
        prefix = "sk-" if key.startswith("sk-") else ""
        if len(key) <= 12:  # too short to show any of it safely
            return prefix + "…"
        return prefix + "…" + key[-4:]

    @property
    def public_base_url(self) -> str:
        """``base_url`` without what may be a secret: user info (``user:pw@``), query
        (``?api-key=...``) and fragment. Every repr, error and log line shows this one."""
        return public_url(self.base_url)

    def _scrub_text(self, text: str) -> str:
        """``text`` with the key and the URL's secrets masked."""
        if self.base_url in text:
            text = text.replace(self.base_url, self.public_base_url)
        for secret in _url_secrets(self.base_url):
            text = text.replace(secret, "***")
        key = self._api_key
        if key and key in text:
            text = text.replace(key, self.masked_key)
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.public_base_url!r})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle/copy without live clients (they are bound to an event loop)."""
        state = self.__dict__.copy()
        state.pop("_clients", None)
        state.pop("_clients_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clients = weakref.WeakKeyDictionary()
        self._clients_lock = threading.Lock()

    # -- client ----------------------------------------------------------------------------

    def _check_allowed(self) -> None:
        """Refuse before any request: blocked network, or no key for api.openai.com."""
        if network_blocked() and not is_loopback_url(self.base_url):
            raise NetworkBlockedError(
                f"OpenAILLM would send a request to {self.public_base_url}, but network access is "
                "blocked. Allow it with nbagent.llms.block_network(False) or unset "
                "NBAGENT_BLOCK_NETWORK; loopback servers (127.0.0.1, localhost) are always allowed."
            )
        if not self._api_key and _is_openai_url(self.base_url):
            raise ValueError(
                f"OpenAILLM(model={self.model!r}) has no API key for {self.public_base_url}: set "
                "OPENAI_API_KEY, or pass api_key=..., or pass base_url=... for a local "
                "OpenAI-compatible server (Ollama, vLLM, llama.cpp) that needs no key."
            )

    def _client(self) -> AsyncOpenAI:
        """The client for the running event loop, created on first use."""
        import openai

        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.get(loop)
            if client is None:
                _protect_logs(self)
                base, query = _split_query(self.base_url)
                client = openai.AsyncOpenAI(
                    api_key=self._api_key or _NO_KEY_PLACEHOLDER,
                    base_url=base,
                    default_query=query or None,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                )
                self._clients[loop] = client
            return client

    async def aclose(self) -> None:
        """Close the client of the running event loop (the others close with their loops)."""
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    def close(self) -> None:
        """Close every client's connections, from sync code (e.g. when done with a model)."""
        with self._clients_lock:
            clients = list(self._clients.items())
            self._clients.clear()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, client in clients:
            if loop.is_closed():
                continue  # its sockets went with it
            if loop is running:
                loop.create_task(client.close())
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=5)
            elif running is None:
                loop.run_until_complete(client.close())

    def _scrubbed(self, err: Exception) -> NoReturn:
        """Re-raise ``err`` (same type, so ``except openai.AuthenticationError`` still works)
        with the key and the URL's secrets masked wherever they appear: in it, in its body
        (a server may echo them back) and in the errors it was raised from."""
        _explain_connection_error(self, err)
        seen: set[int] = set()
        e: BaseException | None = err
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            _scrub_error(self, e)
            e = e.__cause__ or e.__context__
        raise err

    # -- request ---------------------------------------------------------------------------

    def _params(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "messages": [to_openai_message(m) for m in messages]}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        params.update(self.additional_kwargs)
        if tools:
            params["tools"] = [t.to_openai_tool() for t in tools]
            if tool_choice is not None:
                params["tool_choice"] = to_openai_tool_choice(tool_choice)
        params.update(kwargs)
        return params

    async def _achat(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> ChatResponse:
        import openai

        self._check_allowed()
        params = self._params(messages, tools, tool_choice, kwargs)
        try:
            completion = await self._client().chat.completions.create(**params)
        except openai.OpenAIError as e:
            self._scrubbed(e)
        return parse_completion(completion, self.model, self.public_base_url)

    async def _astream(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponse]:
        import openai

        self._check_allowed()
        params = self._params(messages, tools, tool_choice, kwargs)
        params["stream"] = True
        params.setdefault("stream_options", {"include_usage": True})
        try:
            stream = await self._client().chat.completions.create(**params)
        except openai.OpenAIError as e:
            self._scrubbed(e)
        acc = _StreamAccumulator(self.model)
        last: Any = None
        try:
            async for chunk in stream:
                last = chunk
                piece = acc.add(chunk)
                if piece:
                    yield ChatResponse(
                        message=ChatMessage(role=MessageRole.ASSISTANT, content=acc.text),
                        delta=piece,
                        model=acc.model,
                        raw=chunk,  # the server's own chunk, as the reference's ``r.raw``
                    )
        except openai.OpenAIError as e:
            self._scrubbed(e)
        finally:
            await stream.close()
        final = acc.final(self.public_base_url)
        final.raw = last
        yield final


# -- conversion: ours -> OpenAI ----------------------------------------------------------------


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One ``ChatMessage`` as an OpenAI chat message dict."""
    role = message.role.value
    if message.role == MessageRole.TOOL:
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content if message.content is not None else "",
        }
    out: dict[str, Any] = {"role": role, "content": message.content}
    if message.role == MessageRole.ASSISTANT and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.tool_id,
                "type": "function",
                "function": {
                    "name": call.tool_name,
                    "arguments": json.dumps(call.tool_kwargs, ensure_ascii=False, default=str),
                },
            }
            for call in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    if message.name and message.role in (MessageRole.USER, MessageRole.SYSTEM):
        out["name"] = message.name
    return out


def to_openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``"auto"``/``"none"``/``"required"`` and dicts pass through; a tool name forces that tool."""
    if isinstance(choice, dict):
        return choice
    if choice in _TOOL_CHOICE_KEYWORDS:
        return choice
    return {"type": "function", "function": {"name": choice}}


# -- conversion: OpenAI -> ours ----------------------------------------------------------------


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments as a dict; text that is not a JSON object is kept under
    ``__raw_arguments__`` so the model gets an error observation rather than a crash."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: text}
    if not isinstance(value, dict):
        return {RAW_ARGUMENTS_KEY: text}
    return value


def _new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _usage(raw: Any) -> TokenUsage | None:
    if raw is None:
        return None
    return TokenUsage(
        prompt_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
    )


def public_url(url: str) -> str:
    """A URL without user info, query or fragment (where keys sometimes hide)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address keeps its brackets
            host = f"[{host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "(a URL that could not be read)"


def _split_query(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its query, and the query as parameters: the openai client appends
    paths to its base URL, so a query (``?api-key=...``) goes with every request instead."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, {}
    if not parts.query:
        return url, {}
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), dict(parse_qsl(parts.query))


def _url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that may be secrets, longest first (raw and percent-decoded)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found.add(userinfo)
        found.update(userinfo.split(":", 1))
    for piece in (parts.query, parts.fragment):
        if piece:
            found.add(piece)
            for pair in piece.split("&"):
                found.add(pair.split("=", 1)[-1])
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def _scrub_error(llm: OpenAILLM, err: BaseException) -> None:
    text = str(err)
    body = getattr(err, "body", None)
    clean = llm._scrub_text(text)
    dirty_body = body is not None and llm._scrub_text(repr(body)) != repr(body)
    if clean == text and not dirty_body:
        return
    try:
        err.args = (clean,)
        if hasattr(err, "message"):
            err.message = clean  # type: ignore[attr-defined]
        if dirty_body:
            err.body = None  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass


class _LogScrubber:
    """Masks every OpenAILLM's URL secrets and key in the log records of the HTTP stack the
    openai client logs through (``httpx`` logs each request's full URL at INFO, user info and
    query included). A record factory, not a logger filter: records of child loggers and of
    renamed forks (``httpx2``) pass here too, whatever handler the user attaches later."""

    PREFIXES = ("openai", "httpx", "httpcore")

    def __init__(self) -> None:
        self.llms: weakref.WeakSet[OpenAILLM] = weakref.WeakSet()
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
        if self.llms and name.startswith(self.PREFIXES):
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001  (a broken record is not ours to fix)
                return record
            clean = message
            for llm in list(self.llms):
                clean = llm._scrub_text(clean)
            if clean != message:
                record.msg, record.args = clean, ()
        return record


_SCRUBBER = _LogScrubber()


def _protect_logs(llm: OpenAILLM) -> None:
    if not _url_secrets(llm.base_url) and not llm._api_key:
        return
    _SCRUBBER.llms.add(llm)
    _SCRUBBER.install()


def _explain_connection_error(llm: OpenAILLM, err: Exception) -> None:
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
            f"Request timed out: the model server at {url} did not answer within {llm.timeout:g} s "
            f"(after {llm.max_retries} retries){why}. A local model may still be loading or be too "
            "slow for this prompt: pass a larger timeout=..., or check the server's log."
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


def _malformed(base_url: str, what: str, raw: Any) -> ValueError:
    shown = repr(raw)
    if len(shown) > 300:
        shown = shown[:300] + "…"
    return ValueError(f"the server at {base_url} sent a malformed chat completion: {what}. Reply: {shown}")


def parse_completion(completion: Any, model: str, base_url: str) -> ChatResponse:
    """An OpenAI ``ChatCompletion`` as a ``ChatResponse``; anything missing is a ValueError."""
    if isinstance(completion, (str, bytes)):
        raise _malformed(base_url, "the reply is not a JSON chat completion", completion)
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise _malformed(base_url, "it has no 'choices'", completion)
    message = getattr(choices[0], "message", None)
    if message is None:
        raise _malformed(base_url, "choices[0] has no 'message'", completion)
    calls: list[ToolSelection] = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if not name:
            raise _malformed(base_url, f"tool call {i} has no function name", completion)
        calls.append(
            ToolSelection(
                tool_id=getattr(call, "id", None) or _new_call_id(),
                tool_name=name,
                tool_kwargs=parse_arguments(getattr(function, "arguments", None)),
            )
        )
    content = getattr(message, "content", None)
    return ChatResponse(
        message=ChatMessage(role=MessageRole.ASSISTANT, content=content, tool_calls=calls),
        usage=_usage(getattr(completion, "usage", None)),
        model=getattr(completion, "model", None) or model,
        raw=completion,
    )


class _PartialCall:
    """One tool call being assembled from stream fragments."""

    __slots__ = ("id", "name", "arguments")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str = ""
        self.arguments: str = ""


class _StreamAccumulator:
    """Puts a streamed reply back together: text, tool calls by index, usage, model."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text = ""
        self.calls: dict[int, _PartialCall] = {}
        self.usage: TokenUsage | None = None
        self.saw_choice = False
        self.chunks = 0

    def add(self, chunk: Any) -> str:
        """Take one chunk in; return its new text (may be empty)."""
        self.chunks += 1
        if getattr(chunk, "model", None):
            self.model = chunk.model
        usage = _usage(getattr(chunk, "usage", None))
        if usage is not None:
            self.usage = usage
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""
        self.saw_choice = True
        delta = getattr(choices[0], "delta", None)
        if delta is None:
            return ""
        for frag in getattr(delta, "tool_calls", None) or []:
            index = getattr(frag, "index", None)
            index = len(self.calls) if index is None else int(index)
            call = self.calls.setdefault(index, _PartialCall())
            if getattr(frag, "id", None):
                call.id = frag.id
            function = getattr(frag, "function", None)
            if function is not None:
                if getattr(function, "name", None):
                    call.name += function.name
                if getattr(function, "arguments", None):
                    call.arguments += function.arguments
        piece = getattr(delta, "content", None) or ""
        self.text += piece
        return piece

    def final(self, base_url: str) -> ChatResponse:
        """The whole reply, with tool calls and usage; raises if no choice ever came."""
        if not self.saw_choice:
            raise _malformed(
                base_url, f"the stream of {self.chunks} chunk(s) had no 'choices'", None
            )
        calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            if not partial.name:
                raise _malformed(base_url, f"streamed tool call {index} has no function name", None)
            calls.append(
                ToolSelection(
                    tool_id=partial.id or _new_call_id(),
                    tool_name=partial.name,
                    tool_kwargs=parse_arguments(partial.arguments),
                )
            )
        message = ChatMessage(role=MessageRole.ASSISTANT, content=self.text or None, tool_calls=calls)
        if not calls and message.content is None:
            message.content = ""
        return ChatResponse(message=message, delta="", usage=self.usage, model=self.model)
