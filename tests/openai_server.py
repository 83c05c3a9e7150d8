"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for testing real clients offline.

``with serve(replies) as server:`` starts it on a free port in a background thread;
``server.base_url`` is ``http://127.0.0.1:PORT/v1`` and ``server.requests`` records every
request (its JSON body, plus ``.headers`` and ``.path``). Each ``POST .../chat/completions``
takes the next scripted reply:

- ``"text"``: an assistant message with that text;
- ``{"content": ..., "tool_calls": [{"name", "arguments", "id"?}], "usage"?, "model"?}``:
  ``arguments`` is a dict (sent as JSON) or a string (sent as is, e.g. invalid JSON);
- ``{"status": 500, "message"?, "headers"?}``: one HTTP error with an OpenAI error body;
- ``{"malformed": True}``: a 200 whose JSON has no ``choices``;
- ``{"raw": "...", "status"?, "content_type"?}``: that body verbatim;
- a callable ``fn(request_body) -> reply``: computes the reply from the request.

``"delay"`` (seconds) in a dict reply waits before answering. Streaming requests
(``"stream": true``) get SSE chunks in the ``chat.completion.chunk`` format: text in several
deltas, tool-call arguments split across chunks, and a final usage chunk when
``stream_options.include_usage`` is set. Past the end of the script the server answers a
non-retryable 500 saying so.

``cors="*"`` (or an origin) makes it a server a web page may call, as a browser checks: every
answer carries ``Access-Control-Allow-Origin``, and a preflight (``OPTIONS``) is answered and
recorded in ``server.preflights``. Without it, no CORS header is sent.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

__all__ = ["FakeOpenAIServer", "RecordedRequest", "serve"]

Reply = Union[str, dict[str, Any], Callable[[dict[str, Any]], Any]]

_WORDS = re.compile(r"\S+\s*|\s+")


class RecordedRequest(dict):  # type: ignore[type-arg]
    """The JSON body of one request (a dict), with ``.headers`` (lower-case keys) and ``.path``."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str], path: str) -> None:
        super().__init__(body)
        self.headers = headers
        self.path = path

    @property
    def body(self) -> dict[str, Any]:
        return dict(self)


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a stream abandoned, a retry that gave up) is not an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    """The running server: its URL, the replies still to give, and the requests it got."""

    def __init__(self, replies: Sequence[Reply] = (), *, model: str = "fake-model", cors: str | None = None) -> None:
        self.model = model
        self.cors = cors
        self.preflights: list[dict[str, str]] = []
        self.replies: list[Reply] = list(replies)
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="fake-openai-server", daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.replies.extend(replies)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _take(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            return self.replies.pop(0) if self.replies else None

    def __repr__(self) -> str:
        return f"FakeOpenAIServer({self.base_url!r}, left={len(self.replies)}, requests={len(self.requests)})"


@contextmanager
def serve(replies: Sequence[Reply] = (), *, model: str = "fake-model", cors: str | None = None) -> Iterator[FakeOpenAIServer]:
    """Run a scripted server for the ``with`` block; it stops on exit."""
    server = FakeOpenAIServer(replies, model=model, cors=cors)
    try:
        yield server
    finally:
        server.close()


# -- building replies ----------------------------------------------------------------------


def _normalise(reply: Any, body: dict[str, Any]) -> dict[str, Any]:
    if callable(reply):
        reply = reply(body)
    if isinstance(reply, str):
        return {"content": reply}
    if isinstance(reply, dict):
        return reply
    raise TypeError(f"a scripted reply must be a str, dict or callable, got {reply!r}")


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        args = call.get("arguments", {})
        out.append(
            {
                "id": call.get("id") or f"call_{i + 1}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    return out


def _usage(reply: dict[str, Any], body: dict[str, Any]) -> dict[str, int]:
    if "usage" in reply:
        usage = dict(reply["usage"])
    else:  # a rough, deterministic count: words, like a tokenizer would roughly give
        prompt = sum(3 + len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        completion = len(str(reply.get("content") or "").split()) + 5 * len(reply.get("tool_calls") or [])
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    return usage


def _completion(reply: dict[str, Any], body: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    calls = _tool_calls(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.get("model", model),
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": _usage(reply, body),
    }


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _chunks(reply: dict[str, Any], body: dict[str, Any], model: str, n: int) -> list[dict[str, Any]]:
    """The reply as ``chat.completion.chunk`` objects, split the way real servers split."""
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": reply.get("model", model)}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.get("malformed"):
        return [{k: v for k, v in c.items() if k != "choices"} for c in out]
    pieces = reply.get("chunks") or _WORDS.findall(str(reply.get("content") or ""))
    out.extend(chunk({"content": p}) for p in pieces)
    calls = _tool_calls(reply)
    for index, call in enumerate(calls):
        out.append(chunk({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }]}))
        for frag in _split(call["function"]["arguments"], 4):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": frag}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**base, "choices": [], "usage": _usage(reply, body)})
    return out


# -- HTTP ----------------------------------------------------------------------------------


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def end_headers(self) -> None:
            if server.cors is not None:
                self.send_header("Access-Control-Allow-Origin", server.cors)
            super().end_headers()

        def do_OPTIONS(self) -> None:
            """A browser's preflight: allowed only when the server was started with ``cors``."""
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server.preflights.append({"path": self.path, **headers})
            if server.cors is None:
                self._send(405, b"", "text/plain")
                return
            self._send(204, b"", "text/plain", {
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": headers.get("access-control-request-headers", "*"),
                "Access-Control-Max-Age": "600",
            })

        def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json", headers)

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            err = {"error": {"message": message, "type": "server_error", "code": None}}
            self._json(status, err, headers)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.split("?", 1)[0].rstrip("/").endswith("/chat/completions"):
                self._error(404, f"no route {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._error(400, "request body is not JSON")
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = RecordedRequest(body, headers, self.path)
            scripted = server._take(request)
            n = len(server.requests)
            if scripted is None:
                self._error(500, f"fake OpenAI server: no scripted reply left for request {n}",
                            {"x-should-retry": "false"})
                return
            reply = _normalise(scripted, body)
            if reply.get("delay"):
                time.sleep(float(reply["delay"]))
            if "raw" in reply:
                data = reply["raw"]
                data = data if isinstance(data, bytes) else str(data).encode()
                self._send(int(reply.get("status", 200)), data,
                           reply.get("content_type", "text/plain"), reply.get("headers"))
                return
            if "status" in reply and int(reply["status"]) >= 400:
                headers_out = {"retry-after-ms": "10", **(reply.get("headers") or {})}
                self._error(int(reply["status"]), reply.get("message", "scripted error"), headers_out)
                return
            if body.get("stream"):
                self._stream(_chunks(reply, body, server.model, n))
                return
            if reply.get("malformed"):
                self._json(200, {"id": f"chatcmpl-{n}", "object": "chat.completion", "model": server.model})
                return
            self._json(200, _completion(reply, body, server.model, n))

        def _stream(self, chunks: list[dict[str, Any]]) -> None:
            """Server-sent events over chunked transfer encoding, flushed chunk by chunk."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for obj in [*chunks, "[DONE]"]:
                data = obj if isinstance(obj, str) else json.dumps(obj)
                event = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
