"""A chat model over any OpenAI-compatible server: OpenAI itself, Ollama, vLLM, llama.cpp.

Only the async path is written (``_achat`` / ``_astream``); the base class derives the sync
methods. The ``openai`` package is imported inside methods, so ``import nbagent`` stays fast
and works without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import warnings
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn

from nbagent._redact import protect_logs, redact_url, scrub, scrub_error, strip_userinfo, url_secrets
from nbagent.llms.base import (
    LLM,
    ChatResponse,
    MalformedReplyError,
    NetworkBlockedError,
    ToolChoice,
    network_blocked,
)
from nbagent.llms.openai_errors import (
    explain_connection_error,
    http_errors,
    is_loopback_url,
    is_openai_url,
    lost_connection_error,
    split_query,
    timed_out_error,
)
from nbagent.llms.openai_stream import Deadline, StreamAccumulator, parse_arguments, sse_events
from nbagent.llms.openai_wire import (
    as_chunk,
    bad_json,
    decode_chunk,
    parse_completion,
    to_openai_message,
    to_openai_tool_choice,
)
from nbagent.messages import ChatMessage, MessageRole
from nbagent.tools import RAW_ARGUMENTS_KEY, ToolMetadata

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAILLM", "DEFAULT_BASE_URL", "RAW_ARGUMENTS_KEY", "parse_arguments"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_NO_KEY_PLACEHOLDER = "not-needed"


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
        if not self._api_key and is_openai_url(self.base_url):
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
                base, query = split_query(strip_userinfo(self.base_url))
                with warnings.catch_warnings():  # in Pyodide httpx2 warns that the browser's
                    # fetch pools connections itself (openai's default limits): nothing to fix
                    warnings.filterwarnings("ignore", "The following transport option", UserWarning)
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
            explain_connection_error(self, err)
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
            self._scrubbed(timed_out_error(self, None, 0), explain=False)
        except json.JSONDecodeError as e:  # a 200 whose JSON body is broken or cut short
            self._scrubbed(bad_json(self.public_base_url, e), explain=False)
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
            self._scrubbed(timed_out_error(self, None, 0), explain=False)
        http = response.http_response
        transport_error, read_timeout = http_errors(http)
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
                chunk = decode_chunk(data, line, server, http.request)
                last = chunk
                piece = acc.add(chunk, line)
                if piece:
                    yield ChatResponse(
                        message=ChatMessage(role=MessageRole.ASSISTANT, content=acc.text),
                        delta=piece,
                        model=acc.model,
                        raw=as_chunk(chunk),  # the server's own chunk, as the reference's ``r.raw``
                    )
        except asyncio.TimeoutError:
            self._scrubbed(timed_out_error(self, http.request, acc.chunks), explain=False)
        except read_timeout:
            self._scrubbed(timed_out_error(self, http.request, acc.chunks), explain=False)
        except transport_error as err:
            self._scrubbed(lost_connection_error(self, http.request, acc.chunks, err), explain=False)
        except (openai.OpenAIError, MalformedReplyError) as err:
            self._scrubbed(err, explain=False)
        finally:  # each generator closed here, on this loop (not left to the garbage collector)
            await events.aclose()
            await body.aclose()
            await opening.__aexit__(None, None, None)
        if not ended and not acc.finished:
            self._scrubbed(acc.missing_end(), explain=False)
        final = acc.final()
        final.raw = as_chunk(last)
        yield final
