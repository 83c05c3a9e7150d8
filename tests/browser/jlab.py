"""A throwaway JupyterLab server for browser tests: loopback only, isolated, always stopped.

The server listens on a free 127.0.0.1 port with a random token. Its config, runtime, data,
settings and workspace folders live in a temporary home, so a developer's own setup never
leaks in, and the kernels it offers are the ones the test writes there (each may change the
kernel's environment, e.g. a PATH without Graphviz). It runs in its own process group and
``stop()`` ends the whole group (SIGTERM, then SIGKILL). Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # root in CI: the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
]


REQUIRED = os.environ.get("REQUIRE_BROWSER") == "1"
STEP_TIMEOUT_MS = int(os.environ.get("STEP_TIMEOUT_MS", "60000"))  # bounds every single wait


def need(ok: object, why: str) -> None:
    """Skip when a browser tool is missing, or fail when CI said it must be there."""
    import pytest

    if not ok:
        if REQUIRED:
            pytest.fail(f"{why} (REQUIRE_BROWSER=1)")
        pytest.skip(why)


def check_browser_tools() -> None:
    """Call first in a browser test (not only in a fixture) so CI reports FAILED, not ERROR."""
    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        need(False, "the playwright package is not installed (pip install playwright)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def path_without(names: set[str], into: Path) -> str:
    """A PATH of one folder holding symlinks to every program on PATH except ``names``."""
    into.mkdir(parents=True, exist_ok=True)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not os.path.isdir(folder):
            continue
        for entry in os.listdir(folder):
            if entry in names or (into / entry).exists() or (into / entry).is_symlink():
                continue
            try:
                (into / entry).symlink_to(os.path.join(folder, entry))
            except OSError:
                pass
    return str(into)


class JupyterLab:
    """``with JupyterLab(root, kernels={...}) as lab: page.goto(lab.url("/lab/tree/x.ipynb"))``."""

    def __init__(
        self,
        root_dir: Path,
        kernels: dict[str, dict[str, str]] | None = None,
        startup_timeout: float = 90.0,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.kernels = dict(kernels or {})
        self.startup_timeout = startup_timeout
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="nbagent-jlab-")
        self.home = Path(self._tmp.name)
        self.log_path = self.home / "jupyter.log"
        self._log: Any = None

    def _write_kernels(self, data_dir: Path) -> None:
        for name, env in self.kernels.items():
            spec_dir = data_dir / "kernels" / name
            spec_dir.mkdir(parents=True, exist_ok=True)
            spec = {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"nbagent test ({name})",
                "language": "python",
                "env": env,
            }
            (spec_dir / "kernel.json").write_text(json.dumps(spec))

    def start(self) -> JupyterLab:
        home = self.home
        data_dir = home / "data"
        self._write_kernels(data_dir)
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(home / "config"),
            JUPYTER_RUNTIME_DIR=str(home / "runtime"),
            JUPYTER_DATA_DIR=str(data_dir),
            JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(home / "lab-workspaces"),
            IPYTHONDIR=str(home / "ipython"),
            PYTHONUNBUFFERED="1",
            JUPYTER_PLATFORM_DIRS="1",
        )
        env.pop("JUPYTER_PATH", None)
        # answer the "get notified about Jupyter news?" toast before it covers the page
        notif = home / "lab-settings" / "@jupyterlab" / "apputils-extension"
        notif.mkdir(parents=True, exist_ok=True)
        (notif / "notification.jupyterlab-settings").write_text(
            '{"fetchNews": "false", "checkForUpdates": false}'
        )
        cmd = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.allow_root=True",
            "--LabApp.extension_manager=readonly",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            # safety nets if the test process dies without stopping us
            "--MappingKernelManager.cull_idle_timeout=300",
            "--MappingKernelManager.cull_interval=60",
            "--ServerApp.shutdown_no_activity_timeout=300",
        ]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, cwd=self.root_dir, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.base}/api/status?token={self.token}"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with code {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"jupyter lab was not up after {self.startup_timeout:.0f} s:\n{self.log()}")

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # server and its kernels
                proc.wait(timeout=timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        if proc is not None:
            self._kill_leftover_kernels()
        if self._log is not None:
            self._log.close()
            self._log = None

    def leftover_kernels(self) -> list[int]:
        """Pids of kernels this server started that are still alive (their connection file
        lives in our runtime folder; kernels get their own session, so killpg misses them)."""
        marker = str(self.home / "runtime").encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path("/proc", entry, "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                pids.append(int(entry))
        return pids

    def _kill_leftover_kernels(self, grace: float = 5.0) -> None:
        deadline = time.monotonic() + grace
        while self.leftover_kernels() and time.monotonic() < deadline:
            time.sleep(0.1)  # they exit by themselves once the server is gone
        for pid in self.leftover_kernels():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._tmp.cleanup()


def loopback_page(
    browser: Any, lab: JupyterLab, *, width: int, height: int, timeout_ms: int, console_errors: bool = False
) -> tuple[Any, Any, list[str], list[str]]:
    """A new context and page that may reach only this JupyterLab and loopback: every other
    request is aborted and listed in ``offsite``; page errors (and, if asked, console errors)
    are listed in ``errors``. Returns ``(context, page, offsite, errors)``."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    offsite: list[str] = []

    def only_loopback(route: Any) -> None:
        url = route.request.url
        if url.startswith((lab.base + "/", "data:", "blob:", "http://localhost:", "http://127.0.0.1:")):
            route.continue_()
        else:
            offsite.append(url)
            route.abort()

    ctx.route("**/*", only_loopback)
    page = ctx.new_page()
    page.set_default_timeout(timeout_ms)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    if console_errors:
        page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
    return ctx, page, offsite, errors
