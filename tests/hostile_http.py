"""A hostile HTTP server on 127.0.0.1 over raw sockets, for testing what clients do with faults
a well-behaved server (``http.server``) cannot produce: a stream closed cleanly mid-reply, a
connection dropped mid-body, a body trickling a byte at a time, keep-alive comments forever,
lines that are not JSON, surrogate halves split across chunks, headers echoed back.

``with hostile(handler, ...) as server:`` serves one scripted ``handler(conn, request)`` per
request, in order (the last one repeats); ``server.base_url`` is ``http://127.0.0.1:PORT/v1``
and ``server.requests`` records each request (method, path, lower-case headers, body). A
handler writes whatever bytes it likes with the helpers below; the connection is closed when
it returns. ``server.stop`` is set on exit, for handlers that would go on forever.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HostileServer", "Request", "hostile", "SSE_HEAD", "CLOSE_HEAD", "chunk", "END", "event", "delta", "finish", "trickle"]

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)
CLOSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"  # body ends at close
END = b"0\r\n\r\n"  # the last chunk: the body ended cleanly


def chunk(data: bytes | str) -> bytes:
    """One piece of a chunked body."""
    raw = data.encode() if isinstance(data, str) else data
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


def event(obj: Any) -> bytes:
    """One server-sent event: ``data: <json>`` and the blank line (a str is sent as it is)."""
    return b"data: " + (obj if isinstance(obj, bytes) else (obj if isinstance(obj, str) else json.dumps(obj)).encode()) + b"\n\n"


def delta(d: dict[str, Any], finish_reason: str | None = None, model: str = "hostile-model") -> dict[str, Any]:
    return {
        "id": "chatcmpl-h",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": d, "finish_reason": finish_reason}],
    }


def finish(reason: str = "stop") -> dict[str, Any]:
    return delta({}, reason)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    raw_head: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


Handler = Callable[[socket.socket, Request], None]


@dataclass
class HostileServer:
    handlers: list[Handler]
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._accept, name="hostile-http", daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            request = _read_request(conn)
            if request is None:
                return
            with self.lock:
                self.requests.append(request)
                n = len(self.requests)
                handler = self.handlers[min(n, len(self.handlers)) - 1]
            handler(conn, request)
        except OSError:
            pass  # the client hung up: expected of a client that gave up
        except BaseException as err:  # noqa: BLE001 - a broken handler must show in the test
            self.errors.append(err)
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        for t in self.threads:
            t.join(5)


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length") or 0)
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return Request(method, path, headers, body, head)


@contextmanager
def hostile(*handlers: Handler) -> Iterator[HostileServer]:
    server = HostileServer(list(handlers))
    try:
        yield server
    finally:
        server.close()
    if server.errors:
        raise server.errors[0]


def trickle(conn: socket.socket, data: bytes, every: float, stop: threading.Event) -> None:
    """Send ``data`` one byte at a time, ``every`` seconds apart, until done or told to stop."""
    for i in range(len(data)):
        if stop.is_set():
            return
        conn.sendall(data[i : i + 1])
        time.sleep(every)
