"""``nbagent.runtime``: what a tutorial's first cell says in a browser, and that it says nothing
on a machine (the stored outputs nbval checks do not change). The browser itself is
tests/browser/test_lite_browser.py (the JupyterLite site in Chromium)."""

from __future__ import annotations

import sys
import types

import pytest

from nbagent import runtime


def test_on_a_machine_it_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert runtime.in_browser() is False and runtime.can_wait() is True
    runtime.browser_note(cannot="an MCP server", optional=("surely_not_a_package",))
    assert capsys.readouterr().out == ""


def _pyodide(monkeypatch: pytest.MonkeyPatch, jspi: bool) -> None:
    monkeypatch.setattr(sys, "platform", "emscripten")
    ffi = types.ModuleType("pyodide.ffi")
    ffi.can_run_sync = lambda: jspi  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyodide", types.ModuleType("pyodide"))
    monkeypatch.setitem(sys.modules, "pyodide.ffi", ffi)


def test_in_a_browser_with_jspi_it_says_what_differs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _pyodide(monkeypatch, jspi=True)
    runtime.browser_note(optional=("json", "surely_not_a_package"))
    out = capsys.readouterr().out
    assert out.startswith("This notebook runs in your browser (Pyodide)")
    assert "Sync calls such as agent.run_step(task) wait as in Jupyter" in out
    assert "no LocalLLM, no MCP server over stdio" in out and "CORS" in out
    assert "Not in this site's packages: surely_not_a_package;" in out  # json is there: not named
    assert "those cells will fail" not in out


def test_without_jspi_it_says_to_await_and_names_what_cannot_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _pyodide(monkeypatch, jspi=False)
    assert runtime.can_wait() is False
    runtime.browser_note(cannot="MCP servers, which run as child processes")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "It needs MCP servers, which run as child processes: those cells will fail here."
    assert "`await agent.arun_step(task)`" in lines[2]


def test_missing_names_only_what_cannot_be_imported() -> None:
    assert runtime.missing("json", "surely_not_a_package", "sqlite3") == ["surely_not_a_package"]
