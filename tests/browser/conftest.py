"""Fixtures for the real-browser tests: a JupyterLab server, Debian's Chromium, screenshots.

Chromium is ``/usr/bin/chromium`` (apt), driven by Playwright's pip package; never run
``playwright install``. With ``REQUIRE_BROWSER=1`` (CI) a missing Chromium or Playwright is a
failure; otherwise those tests are skipped. Screenshots go to ``$SCREENSHOT_DIR``
(default ``artifacts/screenshots`` in the repo).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jlab import (  # type: ignore[import-not-found]
    CHROMIUM,
    CHROMIUM_ARGS,
    STEP_TIMEOUT_MS,
    JupyterLab,
    check_browser_tools,
    path_without,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def playwright_api() -> Any:
    check_browser_tools()
    import playwright.sync_api as api

    return api


# module scope, not session: Playwright's sync API keeps an asyncio loop running in this thread
# while it is open, which would break every later test that calls asyncio.run()
@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, playwright_api: Any) -> Iterator[JupyterLab]:
    root = tmp_path_factory.mktemp("nbroot")
    nodot_path = path_without({"dot"}, tmp_path_factory.mktemp("path-without-dot"))
    server = JupyterLab(root, kernels={"nbagent-dot": {}, "nbagent-nodot": {"PATH": nodot_path}})
    server.start()
    try:
        yield server
    finally:
        server.stop()
        if os.environ.get("JLAB_LOG"):
            Path(os.environ["JLAB_LOG"]).write_text(server.log())
        server._tmp.cleanup()


@pytest.fixture(scope="module")
def browser(playwright_api: Any, lab: JupyterLab) -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_TIMEOUT_MS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    d = Path(os.environ.get("SCREENSHOT_DIR") or REPO / "artifacts" / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d
