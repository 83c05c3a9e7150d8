"""``BasicMCPClient``: one MCP server, its session on an event loop of its own.

Why a thread per client: the SDK's session is an async context manager bound to the task
that entered it. Here it lives in one task on an event loop of its own, in a daemon thread
owned by the client (never by a worker or a runner). Sync callers, async callers on any
loop and Jupyter's running loop all hand their requests to that loop, so one session serves
them all, and closing it (``close()``, ``runner.reset()``, interpreter exit) always runs the
SDK's own shutdown, which stops the server process.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from nbagent._redact import named_secrets, protect_logs, redact_url, scrub, scrub_error, url_secrets
from nbagent.registry import html_view

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import (
        CallToolResult,
        GetPromptResult,
        ListPromptsResult,
        ListResourcesResult,
        ListToolsResult,
        ReadResourceResult,
    )

__all__ = ["BasicMCPClient", "MCPServerError", "close_tool_sessions"]

T = TypeVar("T")

_STDERR_TAIL = 1500
# JSON-RPC codes the SDK uses for "no answer": the connection closed, or the read timed out
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001
_PING_TIMEOUT = 5.0


class MCPServerError(RuntimeError):
    """An MCP server could not be started or reached, died, or did not answer in time.

    Raised out of the tool call so the step fails (and stays queued to be retried) instead
    of telling the model a tool "returned" a broken connection.
    """

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"MCP server {server!r}: {message}")
        self.server = server


class _Host:
    """An event loop running in a daemon thread: the home of one client's session."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name=f"nbagent-mcp-{name}", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def stop(self, wait: float = 10.0) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(wait)


class _Session:
    """One session: the task that holds the SDK client open, its stop signal, its stderr file."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.client: Client | None = None
        self.errlog: Any = None

    async def finish(self) -> None:
        """Let the holding task leave the SDK client (which stops a stdio server); bounded."""
        self.client = None
        self.stop.set()
        task = self.task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), 15)
            except BaseException:  # noqa: BLE001 - a broken session may end any way it likes
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001
                    pass
        if self.errlog is not None:
            self.errlog.close()
            self.errlog = None

    def stderr_tail(self) -> str:
        """The server's last stderr lines, for an error message."""
        log = self.errlog
        if log is None or log.closed:
            return ""
        try:
            log.flush()
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - _STDERR_TAIL * 4))
            text = log.read()[-_STDERR_TAIL:].strip()
        except (OSError, ValueError):
            return ""
        return f"\nThe server's last stderr lines:\n{text}" if text else ""


_LIVE: weakref.WeakSet[BasicMCPClient] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for client in list(_LIVE):
        try:
            client.close()
        except Exception:  # noqa: BLE001 - exiting: close what can be closed
            pass


atexit.register(_close_all_at_exit)


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def _default_name(command_or_url: str, args: Sequence[str]) -> str:
    if _is_url(command_or_url):
        parts = urlsplit(command_or_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    argv = list(args)
    if "-m" in argv[:-1]:  # python -m package
        return argv[argv.index("-m") + 1]
    base = os.path.basename(command_or_url)
    if base in ("uvx", "npx", "pipx") and argv:
        return next((a for a in argv if not a.startswith("-")), base)
    return base


class BasicMCPClient:
    """One MCP server: ``BasicMCPClient("uvx", ["mcp-server-time"])`` or a streamable-HTTP URL
    (``.../mcp``; a URL ending in ``/sse`` uses the older SSE transport).

    The session starts at the first request and is reused by every later one, from sync or
    async code, on any event loop. ``timeout`` (seconds) bounds each request; a server that
    misses it fails the call with ``MCPServerError``. ``startup_timeout`` bounds the start
    (default: ``timeout``, at least 30 s). ``close()`` (or ``with``/``async with``) ends the
    session and stops a stdio server; the next request starts a new one.

    Credentials in the URL (``user:pw@``, ``?token=...``), in ``headers`` and in secret-named
    ``env`` variables go to the server and nowhere else: the repr, the HTML view, every
    error and every tool result show them as ``***``.
    """

    def __init__(
        self,
        command_or_url: str,
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        *,
        cwd: str | os.PathLike[str] | None = None,
        headers: dict[str, str] | None = None,
        name: str | None = None,
        startup_timeout: float | None = None,
    ) -> None:
        if not isinstance(command_or_url, str) or not command_or_url.strip():
            raise ValueError(
                f"command_or_url must be a command (e.g. 'uvx') or an http(s):// URL, got {command_or_url!r}"
            )
        if isinstance(args, str):
            raise TypeError(f"args must be a list of strings, got the string {args!r}; wrap it: [{args!r}]")
        self.is_url = _is_url(command_or_url)
        if self.is_url:
            if args:
                raise ValueError(f"args are for a command; {command_or_url!r} is a URL (got args={list(args)!r})")
            if env:
                raise ValueError("env is for a command started over stdio; a URL's server has its own")
            if cwd is not None:
                raise ValueError("cwd is for a command started over stdio, not for a URL")
            if not urlsplit(command_or_url).hostname:
                raise ValueError(f"{command_or_url!r} has no host")
        elif headers:
            raise ValueError("headers are for a URL; a command talks over stdio")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if startup_timeout is not None and not (isinstance(startup_timeout, (int, float)) and startup_timeout > 0):
            raise ValueError(f"startup_timeout must be a number of seconds > 0 or None, got {startup_timeout!r}")
        self.command_or_url = command_or_url
        self.args = [str(a) for a in (args or [])]
        self.env = dict(env) if env else None
        self.timeout = float(timeout)
        # starting a server (a Python interpreter, its imports) can take longer than a call
        self.startup_timeout = float(startup_timeout) if startup_timeout is not None else max(self.timeout, 30.0)
        self.cwd = os.fspath(cwd) if cwd is not None else None
        self.headers = dict(headers) if headers else None
        self._secrets = (url_secrets(command_or_url) if self.is_url else []) + named_secrets(self.headers) + named_secrets(self.env)
        if self._secrets:
            protect_logs(self)  # the HTTP stack logs each request's URL
        self.name = name or _default_name(command_or_url, self.args)
        # as LlamaIndex's client: a URL whose path ends in /sse is the older SSE transport
        self.transport = (
            "stdio" if not self.is_url
            else "sse" if urlsplit(command_or_url).path.rstrip("/").endswith("/sse")
            else "streamable-http"
        )
        self._lock = threading.Lock()
        self._host: _Host | None = None
        # the rest is touched only on the host loop
        self._session: _Session | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._start_lock: asyncio.Lock | None = None
        self._tools: list[Any] | None = None  # the last listing, for the views
        self.sessions_started = 0
        _LIVE.add(self)

    # ----- lifecycle ------------------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        """Whether a session is open now (it opens at the first request)."""
        session = self._session
        return session is not None and session.client is not None

    def _ensure_host(self) -> _Host:
        with self._lock:
            if self._host is None or not self._host.thread.is_alive():
                self._host = _Host(self.name)
            return self._host

    def _server(self, session: _Session) -> Any:
        """The SDK transport for this server."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if self.is_url and self.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(self.command_or_url, headers=self.headers, timeout=self.timeout)
        if self.is_url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=self.headers) if self.headers else None
            return streamable_http_client(self.command_or_url, http_client=http)
        params = StdioServerParameters(command=self.command_or_url, args=self.args, env=self.env, cwd=self.cwd)
        # the server's stderr goes to a file of ours: Jupyter's sys.stderr has no fd, and
        # its last lines make a clear error when the server dies
        session.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        return stdio_client(params, errlog=session.errlog)

    async def _session_main(self, session: _Session, started: asyncio.Future[Client]) -> None:
        """Enter the SDK client, hand it out, wait for the stop signal, exit in this same task."""
        from mcp import Client

        try:
            async with Client(self._server(session), read_timeout_seconds=self.timeout) as client:
                if not started.done():
                    started.set_result(client)
                await session.stop.wait()
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits for the start
            if not started.done():
                started.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            if not isinstance(err, Exception):
                raise

    async def _connect(self) -> Client:
        """The open session, starting one if needed (on the host loop)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            current = self._session
            if current is not None and current.client is not None:
                return current.client
            self._detach()
            loop = asyncio.get_running_loop()
            started: asyncio.Future[Client] = loop.create_future()
            session = self._session = _Session()
            session.task = loop.create_task(self._session_main(session, started))
            try:
                client = await asyncio.wait_for(asyncio.shield(started), self.startup_timeout)
            except asyncio.TimeoutError:
                tail = session.stderr_tail()
                await self._teardown()
                raise self._error(
                    f"did not start within startup_timeout={self.startup_timeout:g} s ({self._where()}){tail}"
                ) from None
            except Exception as err:
                tail = session.stderr_tail()
                await self._teardown()
                raise self._error(
                    f"could not start a session ({self._where()}): {_describe(err)}{tail}", err
                ) from err
            session.client = client
            self.sessions_started += 1
            return client

    def _detach(self) -> None:
        """Let go of the current session and close it in the background (on the host loop).

        A call that found the server dead or hung fails at once; the SDK's shutdown (which
        may wait seconds before it kills a hung process) goes on meanwhile, and ``close()``
        waits for it.
        """
        session, self._session = self._session, None
        if session is None:
            return
        session.stop.set()
        closing = asyncio.get_running_loop().create_task(session.finish())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _teardown(self) -> None:
        """Close every session, current and closing (the SDK stops stdio servers)."""
        self._detach()
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    def _scrub_text(self, text: str) -> str:
        """``text`` with this server's credentials (URL, headers, secret env values) masked."""
        if self.is_url and self.command_or_url in text:
            text = text.replace(self.command_or_url, redact_url(self.command_or_url))
        return scrub(text, self._secrets) if self._secrets else text

    def _error(self, message: str, cause: BaseException | None = None) -> MCPServerError:
        """An ``MCPServerError`` with the credentials masked, in it and in the errors under it."""
        if cause is not None:
            scrub_error(cause, self._scrub_text)
        return MCPServerError(self.name, self._scrub_text(message))

    def _where(self, short: bool = False) -> str:
        """The URL (credentials masked), or the command line (``short``: the program's name
        without its path)."""
        if self.is_url:
            return redact_url(self.command_or_url)
        program = os.path.basename(self.command_or_url) if short else self.command_or_url
        return " ".join([program, *self.args])

    async def _request(self, fn: Callable[[Client], Awaitable[T]], what: str) -> T:
        """Run ``fn(session)`` on the host loop; a dead or silent server is ``MCPServerError``."""
        client = await self._connect()
        try:
            return await asyncio.wait_for(fn(client), self.timeout + 5)  # backstop for the SDK's own
        except Exception as err:
            if not _no_answer(err):
                raise
            timed_out = _timed_out(err)
            if timed_out and await self._still_alive(client):
                # a slow tool on a live server: the session stays for the next call
                raise self._error(f"{what} got no answer within timeout={self.timeout:g} s", err) from err
            session = self._session
            tail = ""
            if session is not None and session.client is client:
                tail = session.stderr_tail()
                self._detach()
            if timed_out:
                msg = f"{what} got no answer within timeout={self.timeout:g} s and the server stopped answering"
            else:
                msg = f"{what} failed: the connection to the server was lost ({_describe(err)})"
            raise self._error(f"{msg}. The next call starts a new session.{tail}", err) from err

    async def _still_alive(self, client: Client) -> bool:
        """After a timeout: is the server still answering (a slow tool), or hung (start over)?"""
        try:
            # ping is gone from the 2026 protocol; a fresh tool listing is a request every server answers
            await asyncio.wait_for(client.list_tools(cache_mode="refresh"), min(self.timeout, _PING_TIMEOUT))
            return True
        except Exception:  # noqa: BLE001
            return False

    async def _run(self, fn: Callable[[Client], Awaitable[T]], what: str) -> T:
        """From any async context: run a request on the host loop and await it here."""
        host = self._ensure_host()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is host.loop:
            return await self._request(fn, what)
        return await asyncio.wrap_future(host.submit(self._request(fn, what)))

    def _run_sync(self, fn: Callable[[Client], Awaitable[T]], what: str) -> T:
        """From sync code (also inside Jupyter's running loop): block until the answer."""
        host = self._ensure_host()
        if threading.current_thread() is host.thread:
            raise RuntimeError("a sync MCP call from the client's own loop would wait for itself; await it")
        fut = host.submit(self._request(fn, what))
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # KeyboardInterrupt: stop the request too
            raise

    async def aclose(self) -> None:
        """End the session and stop a stdio server; the next request starts a new one."""
        host = self._host
        if host is None:
            return
        await asyncio.wrap_future(host.submit(self._teardown()))
        with self._lock:
            if self._host is host:
                self._host = None
        await asyncio.to_thread(host.stop)

    def close(self) -> None:
        """``aclose`` for sync code."""
        with self._lock:
            host, self._host = self._host, None
        if host is None:
            return
        if host.thread.is_alive():
            try:
                host.submit(self._teardown()).result(30)
            except Exception:  # noqa: BLE001 - closing: the thread goes anyway
                pass
        host.stop()

    def __enter__(self) -> BasicMCPClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> BasicMCPClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ----- requests (the names LlamaIndex's BasicMCPClient uses) -----------------------------
    async def list_tools(self) -> ListToolsResult:
        """The server's tools (an SDK ``ListToolsResult``, every page)."""
        result = await self._run(_list_all_tools, "listing tools")
        self._tools = list(result.tools)
        return result

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        """Call a tool; returns the SDK's ``CallToolResult`` (``is_error`` set on a tool error)."""
        return await self._run(lambda c: c.call_tool(tool_name, arguments or {}), f"calling tool {tool_name!r}")

    async def list_resources(self) -> ListResourcesResult:
        """The server's resources (an SDK ``ListResourcesResult``): data it offers to read,
        each named by a URI that ``read_resource`` takes."""
        return await self._run(lambda c: c.list_resources(), "listing resources")

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """Read one resource by its URI (an SDK ``ReadResourceResult``: its text or binary
        contents)."""
        return await self._run(lambda c: c.read_resource(uri), f"reading resource {uri!r}")

    async def list_prompts(self) -> ListPromptsResult:
        """The prompt templates the server offers (an SDK ``ListPromptsResult``)."""
        return await self._run(lambda c: c.list_prompts(), "listing prompts")

    async def get_prompt(self, prompt_name: str, arguments: dict[str, str] | None = None) -> GetPromptResult:
        """One prompt filled in with ``arguments`` (an SDK ``GetPromptResult``: its
        messages)."""
        return await self._run(lambda c: c.get_prompt(prompt_name, arguments), f"getting prompt {prompt_name!r}")

    def list_tools_sync(self) -> ListToolsResult:
        """``list_tools`` for sync code."""
        result = self._run_sync(_list_all_tools, "listing tools")
        self._tools = list(result.tools)
        return result

    def call_tool_sync(self, tool_name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        """``call_tool`` for sync code."""
        return self._run_sync(lambda c: c.call_tool(tool_name, arguments or {}), f"calling tool {tool_name!r}")

    def __repr__(self) -> str:
        state = "connected" if self.is_connected else "not connected"
        return f"BasicMCPClient({self.name!r}, {self._where(short=True)!r}, timeout={self.timeout:g}, {state})"

    def _repr_html_(self) -> str | None:
        return html_view(self)


async def _list_all_tools(client: Client) -> ListToolsResult:
    first = await client.list_tools()
    tools = list(first.tools)
    cursor = first.next_cursor
    for _ in range(100):  # a server whose pages never end cannot hang the listing
        if cursor is None:
            break
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
    return first.model_copy(update={"tools": tools, "next_cursor": None})


def _leaves(err: BaseException) -> list[BaseException]:
    inner = getattr(err, "exceptions", None)  # an exception group (3.10: the backport's)
    if isinstance(inner, tuple) and inner:
        return [leaf for e in inner for leaf in _leaves(e)]
    return [err]


def _code(err: BaseException) -> int | None:
    code = getattr(err, "code", None)
    if code is None:
        code = getattr(getattr(err, "error", None), "code", None)
    return code if isinstance(code, int) else None


def _timed_out(err: BaseException) -> bool:
    return any(
        isinstance(e, (asyncio.TimeoutError, TimeoutError)) or _code(e) == _REQUEST_TIMEOUT for e in _leaves(err)
    )


def _no_answer(err: BaseException) -> bool:
    """The server gave no answer (closed, timed out, unreachable), as opposed to an error reply."""
    from mcp import MCPError

    for e in _leaves(err):
        if isinstance(e, MCPError):
            if e.code in (_CONNECTION_CLOSED, _REQUEST_TIMEOUT):
                return True
            continue
        if isinstance(e, (ValueError, RuntimeError)) and not isinstance(e, (TimeoutError, ConnectionError)):
            continue  # a malformed or unexpected reply: the server answered
        return True
    return False


def _describe(err: BaseException) -> str:
    leaves = _leaves(err)
    return "; ".join(f"{type(e).__name__}: {e}" for e in leaves[:3]) or type(err).__name__


def close_tool_sessions(tools: Sequence[Any] | None) -> None:
    """Close the MCP sessions behind these tools (``runner.reset()`` does this)."""
    seen: set[int] = set()
    for tool in tools or []:
        client = getattr(tool, "mcp_client", None)
        if isinstance(client, BasicMCPClient) and id(client) not in seen:
            seen.add(id(client))
            client.close()
