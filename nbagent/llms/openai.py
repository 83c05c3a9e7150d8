"""A chat model over any OpenAI-compatible server: OpenAI itself, Ollama, vLLM, llama.cpp.

Only the async path is written (``_achat`` / ``_astream``); the base class derives the sync
methods. The ``openai`` package is imported inside methods, so ``import nbagent`` stays fast
and works without it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from nbagent._redact import protect_logs, redact_url, scrub, scrub_error, strip_userinfo, url_secrets
from nbagent.llms.base import (
    LLM,
    ChatResponse,
    IncompleteReplyError,
    MalformedReplyError,
    NetworkBlockedError,
    ToolChoice,
    network_blocked,
)
from nbagent.llms.openai_stream import (
    Deadline,
    StreamAccumulator,
    malformed,
    new_call_id,
    parse_arguments,
    shown,
    sse_events,
    usage_of,
)
from nbagent.messages import ChatMessage, MessageRole, ToolSelection
from nbagent.tools import RAW_ARGUMENTS_KEY, ToolMetadata

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAILLM", "DEFAULT_BASE_URL", "RAW_ARGUMENTS_KEY", "parse_arguments"]

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
    ``repr``, not in errors; ``masked_key`` shows enough of it to tell keys apart. User info
    in ``base_url`` (``user:pw@``) is never sent: the key goes as ``Authorization: Bearer``,
    never URL credentials in its place; a query in it (``?api-key=...``) goes with every
    request. Both are masked wherever the URL is shown.

    ``timeout`` (seconds) bounds the whole call: connecting, every retry and the whole
    reply, streamed or not. A server that trickles bytes or sends keep-alive comments cannot
    stretch it; a streamed reply that has not ended by then is an ``openai.APITimeoutError``
    (the step stays queued). A long reply from a slow model needs a larger ``timeout``.
    ``max_retries``: how many times a failed request (connection refused, 408, 429, 5xx) is
    sent again, within that same time.
    """

    provider_name = "openai"

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
        """``base_url`` with what may be a secret masked: user info (``user:pw@``) and
        secret-looking query values (``?api-key=...``). Every repr, error and log line shows this one."""
        return redact_url(self.base_url)

    def _scrub_text(self, text: str) -> str:
        """``text`` with the key and the URL's secrets masked."""
        if self.base_url in text:
            text = text.replace(self.base_url, self.public_base_url)
        text = scrub(text, url_secrets(self.base_url))
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
                if self._api_key or url_secrets(self.base_url):
                    protect_logs(self)
                # user info never goes out (httpx would send it as Authorization: Basic, and
                # the openai client would then send no key); the query goes with every request
                base, query = _split_query(strip_userinfo(self.base_url))
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

    def _scrubbed(self, err: Exception, explain: bool = True) -> NoReturn:
        """Re-raise ``err`` (same type, so ``except openai.AuthenticationError`` still works)
        with the key and the URL's secrets masked wherever they appear: in it, in its body
        (a server may echo them back) and in the errors it was raised from."""
        if explain:
            _explain_connection_error(self, err)
        scrub_error(err, self._scrub_text)
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
        deadline = Deadline(self.timeout)
        try:
            completion = await deadline.wait(self._client().chat.completions.create(**params))
        except openai.OpenAIError as e:
            self._scrubbed(e)
        except asyncio.TimeoutError:
            self._scrubbed(self._timed_out(None, 0), explain=False)
        except json.JSONDecodeError as e:  # a 200 whose JSON body is broken or cut short
            self._scrubbed(_bad_json(self.public_base_url, e), explain=False)
        return parse_completion(completion, self.model, self.public_base_url)

    async def _astream(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatResponse]:
        """The reply as it comes; its end, form and time are checked (``openai_stream``)."""
        import openai

        self._check_allowed()
        params = self._params(messages, tools, tool_choice, kwargs)
        params["stream"] = True
        params.setdefault("stream_options", {"include_usage": True})
        deadline = Deadline(self.timeout)
        opening = self._client().chat.completions.with_streaming_response.create(**params)
        try:
            response = await deadline.wait(opening.__aenter__())
        except openai.OpenAIError as e:
            self._scrubbed(e)
        except asyncio.TimeoutError:
            self._scrubbed(self._timed_out(None, 0), explain=False)
        http = response.http_response
        transport_error, read_timeout = _http_errors(http)
        server = self.public_base_url
        acc = StreamAccumulator(self.model, server)
        body = http.aiter_bytes()
        events = sse_events(body, server)
        last: Any = None
        ended = False
        try:
            while True:
                try:
                    data, line = await deadline.wait(events.__anext__())
                except StopAsyncIteration:
                    break
                if data.strip() == "[DONE]":
                    ended = True
                    break
                chunk = _decode_chunk(data, line, server, http.request)
                last = chunk
                piece = acc.add(chunk, line)
                if piece:
                    yield ChatResponse(
                        message=ChatMessage(role=MessageRole.ASSISTANT, content=acc.text),
                        delta=piece,
                        model=acc.model,
                        raw=_as_chunk(chunk),  # the server's own chunk, as the reference's ``r.raw``
                    )
        except asyncio.TimeoutError:
            self._scrubbed(self._timed_out(http.request, acc.chunks), explain=False)
        except read_timeout:
            self._scrubbed(self._timed_out(http.request, acc.chunks), explain=False)
        except transport_error as err:
            self._scrubbed(self._lost(http.request, acc.chunks, err), explain=False)
        except (openai.OpenAIError, MalformedReplyError) as err:
            self._scrubbed(err, explain=False)
        finally:  # each generator closed here, on this loop (not left to the garbage collector)
            await events.aclose()
            await body.aclose()
            await opening.__aexit__(None, None, None)
        if not ended and not acc.finished:
            self._scrubbed(acc.missing_end(), explain=False)
        final = acc.final()
        final.raw = _as_chunk(last)
        yield final

    def _timed_out(self, request: Any, chunks: int) -> Exception:
        """The whole call ran past ``timeout``: an ``openai.APITimeoutError`` saying so."""
        import openai

        err = openai.APITimeoutError(request=request if request is not None else _request_stub(self))
        what = "did not answer" if not chunks else f"did not finish its streamed reply ({chunks} chunk(s) had come)"
        text = (
            f"Request timed out: the model server at {self.public_base_url} {what} within "
            f"timeout={self.timeout:g} s, which bounds the whole call (connecting, every retry and "
            "the whole reply). A local model may still be loading or be too slow for this prompt: "
            "pass a larger timeout=..., or check the server's log."
        )
        err.message = text
        err.args = (text,)
        return err

    def _lost(self, request: Any, chunks: int, cause: BaseException) -> Exception:
        """The connection broke while the reply was coming: an ``openai.APIConnectionError``
        that says so (the server was reached; this is not "is it running?")."""
        import openai

        text = (
            f"Connection lost: the model server at {self.public_base_url} closed the connection "
            f"in the middle of its streamed reply, after {chunks} chunk(s) "
            f"({type(cause).__name__}: {cause}). The partial reply was dropped; the step stays "
            "queued: run it again, and check the server's log (or a proxy in between) if this repeats."
        )
        err = openai.APIConnectionError(message=text, request=request)
        err.__cause__ = cause
        return err


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
            f"Request timed out: the model server at {url} did not answer within "
            f"timeout={llm.timeout:g} s, which bounds the whole call (connecting, every retry and the "
            f"whole reply){why}. A local model may still be loading or be too slow for this prompt: "
            "pass a larger timeout=..., or check the server's log."
        )
    elif _reached(err):
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


def _reached(err: BaseException) -> bool:
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


def _bad_json(base_url: str, err: json.JSONDecodeError) -> MalformedReplyError:
    """A reply body that is not JSON; cut short (the parser ran off its end) says so."""
    doc = err.doc if isinstance(err.doc, str) else ""
    cut = err.msg.startswith("Unterminated") or err.pos >= len(doc.rstrip())
    if cut:
        return IncompleteReplyError(
            f"the model server at {base_url} ended its reply before the end: the JSON stops "
            f"after {len(doc)} characters ({err.msg}). The partial reply was dropped; the step "
            f"stays queued: run it again. Reply: {shown(doc[-200:])}"
        )
    return _malformed(base_url, f"the reply is not valid JSON ({err.msg} at character {err.pos})", doc)


def _malformed(base_url: str, what: str, raw: Any) -> MalformedReplyError:
    text = repr(raw)
    if len(text) > 300:
        text = text[:300] + "…"
    return MalformedReplyError(f"the server at {base_url} sent a malformed chat completion: {what}. Reply: {text}")


def parse_completion(completion: Any, model: str, base_url: str) -> ChatResponse:
    """An OpenAI ``ChatCompletion`` as a ``ChatResponse``; anything missing is a MalformedReplyError."""
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
        if not name or not isinstance(name, str):
            raise _malformed(base_url, f"tool call {i} has no function name", completion)
        arguments = getattr(function, "arguments", None)
        calls.append(
            ToolSelection(
                tool_id=str(getattr(call, "id", None) or new_call_id()),
                tool_name=name,
                tool_kwargs=parse_arguments(arguments if isinstance(arguments, str) else None),
            )
        )
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise _malformed(base_url, "choices[0].message.content is not a string", completion)
    try:
        usage = usage_of(getattr(completion, "usage", None))
    except ValueError as err:
        raise _malformed(base_url, str(err), completion) from None
    return ChatResponse(
        message=ChatMessage(role=MessageRole.ASSISTANT, content=content, tool_calls=calls),
        usage=usage,
        model=getattr(completion, "model", None) or model,
        raw=completion,
    )


# -- the streamed path's glue ------------------------------------------------------------------


def _decode_chunk(data: str, line: str, server: str, request: Any) -> Any:
    """One event's data as JSON; an error the server streams (``{"error": ...}``) is raised as
    the openai client raises it (``openai.APIError``)."""
    import openai

    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise malformed(server, line, f"expected 'data: ' followed by a JSON chat.completion.chunk or [DONE], but it is not JSON ({why})") from None
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = f"an error in the middle of the stream: {str(error)[:300]}"
        raise openai.APIError(message=message, request=request, body=error)
    return chunk


def _as_chunk(chunk: Any) -> Any:
    """A checked chunk as the openai client's ``ChatCompletionChunk`` (built without
    re-validating, as the client builds it); the dict itself if that is not possible."""
    if not isinstance(chunk, dict):
        return chunk
    try:
        from openai.types.chat import ChatCompletionChunk

        return ChatCompletionChunk.model_construct(**chunk)
    except Exception:  # noqa: BLE001 - an odd chunk stays plain data
        return chunk


def _http_errors(response: Any) -> tuple[type[BaseException], type[BaseException]]:
    """The HTTP library's transport and read-timeout errors (httpx, or the fork the openai
    client uses), found from the response it gave."""
    module = sys.modules.get(type(response).__module__.split(".")[0])
    transport = getattr(module, "TransportError", None)
    timeout = getattr(module, "TimeoutException", None)
    if not (isinstance(transport, type) and isinstance(timeout, type)):
        return OSError, TimeoutError
    return transport, timeout


def _request_stub(llm: OpenAILLM) -> Any:
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
