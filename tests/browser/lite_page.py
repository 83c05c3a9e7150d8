"""Driving the JupyterLite site in Chromium: loopback only, the Pyodide kernel, cells and their
outputs.

The site a test builds (``lite/build_site.py`` with ``expose_app=True``) exposes
``window.jupyterapp``, so outputs are read from the notebook's model (output types, error
names and values) rather than scraped from the page; cells are still run the way a person runs
them, from the Run menu or with Shift+Enter.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

#: reads every code cell of the current notebook: index, execution count, outputs
CELLS_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.model.cells;
  const found = [];
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== "code") continue;
    found.push({
      index: i,
      source: cell.sharedModel.getSource(),
      execution_count: cell.executionCount,
      outputs: cell.outputs.toJSON(),
    });
  }
  return found;
}"""

KERNEL_IDLE_JS = """() => [...document.querySelectorAll('.jp-StatusBar-Widget')]
  .some(e => /Pyodide\\) \\| Idle/.test(e.textContent))"""
BUSY_PROMPT_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-InputPrompt')]
  .some(e => e.textContent.includes('*'))"""


@dataclass
class LitePage:
    """A page on the site that may reach only the site's own server (and data:/blob:)."""

    page: Any
    base: str
    offsite: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def open_notebook(self, name: str) -> None:
        self.started = time.monotonic()
        self.page.goto(f"{self.base}/lab/index.html?path={name}")
        self.page.wait_for_selector(".jp-Notebook .jp-Cell")

    def wait_kernel_idle(self, timeout_ms: int) -> float:
        """Waits for the Pyodide kernel to be idle; returns seconds since the notebook opened."""
        self.page.wait_for_function(KERNEL_IDLE_JS, timeout=timeout_ms)
        return time.monotonic() - self.started

    def cells(self) -> list[dict[str, Any]]:
        cells: list[dict[str, Any]] = self.page.evaluate(CELLS_JS)
        return cells

    def code_cell(self, contains: str) -> Any:
        return self.page.locator(".jp-CodeCell", has_text=contains).first

    def menu(self, menu: str, item: str) -> None:
        self.page.get_by_role("menuitem", name=menu, exact=True).click()
        self.page.get_by_role("menuitem", name=item, exact=True).click()

    def run_menu(self, item: str) -> None:
        self.menu("Run", item)

    def clear_outputs(self) -> None:
        """Edit > Clear Outputs of All Cells: the notebooks ship with the outputs they had when
        built; cleared, every output (and execution count) seen later is this run's own."""
        self.menu("Edit", "Clear Outputs of All Cells")
        self.page.wait_for_function(
            """() => { const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
              for (let i = 0; i < cells.length; i++) { const c = cells.get(i);
                if (c.type === 'code' && (c.executionCount !== null || c.outputs.length)) return false; }
              return true; }"""
        )

    def add_cell_below(self, after: str, source: str) -> None:
        """Select the code cell containing ``after``, add a cell below it, type ``source`` and run
        it (Shift+Enter). ``source`` lines must not open blocks (the editor would indent)."""
        self.code_cell(after).locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("b")
        self.page.keyboard.press("Enter")
        self.page.keyboard.type(source)
        self.page.keyboard.press("Shift+Enter")

    def wait_cell_done(self, source: str, timeout_ms: int) -> dict[str, Any]:
        """The cell whose source is ``source``, once it has run (its outputs as the model has them)."""
        self.page.wait_for_function(
            """src => { const panel = window.jupyterapp.shell.currentWidget;
              const cells = panel.content.model.cells;
              for (let i = 0; i < cells.length; i++) {
                const c = cells.get(i);
                if (c.type === 'code' && c.sharedModel.getSource() === src && c.executionCount !== null) return true;
              } return false; }""",
            arg=source, timeout=timeout_ms,
        )
        return next(c for c in self.cells() if c["source"] == source)

    def run_all_and_collect_errors(self, timeout_ms: int) -> list[dict[str, Any]]:
        """Run All Cells from the Run menu, wait until the run ends (every code cell ran, or one
        failed and the rest were not run), and return each error output: ``{"index", "ename",
        "evalue"}``. The notebooks' end-to-end test uses it (or its two halves).
        The stored outputs are cleared first, so only this run's count."""
        self.clear_outputs()
        self.run_menu("Run All Cells")
        return self.wait_run_all(timeout_ms)

    def wait_run_all(self, timeout_ms: int) -> list[dict[str, Any]]:
        """After Run All Cells: wait until the run ends, and return each error output."""
        self.page.wait_for_function(
            """([idle, busy]) => {
              const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
              let all = true, failed = false;
              for (let i = 0; i < cells.length; i++) {
                const c = cells.get(i);
                if (c.type !== 'code') continue;
                if (c.executionCount === null) all = false;
                if (c.outputs.toJSON().some(o => o.output_type === 'error')) failed = true;
              }
              return (all || failed) && eval(idle)() && !eval(busy)();
            }""",
            arg=[KERNEL_IDLE_JS, BUSY_PROMPT_JS], timeout=timeout_ms,
        )
        return [
            {"index": cell["index"], "ename": error_name(out.get("ename")), "evalue": out.get("evalue")}
            for cell in self.cells()
            for out in cell["outputs"]
            if out.get("output_type") == "error"
        ]


def error_name(raw: str | None) -> str | None:
    """The Pyodide kernel reports an error's name as ``<class 'ValueError'>``: the bare name."""
    match = re.fullmatch(r"<class '(?:[\w.]+\.)?(\w+)'>", raw or "")
    return match.group(1) if match else raw


def lite_page(
    browser: Any, base: str, *, timeout_ms: int, width: int = 1400, height: int = 1000, allow: tuple[str, ...] = ()
) -> tuple[Any, LitePage]:
    """A new context and page on the site at ``base``; every other request is aborted and
    listed in ``offsite`` (but those to the ``allow`` origins: a test's own server on
    127.0.0.1), page errors in ``errors``. Returns ``(context, LitePage)``."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    lite = LitePage(page=None, base=base)

    def only_the_site(route: Any) -> None:
        url = route.request.url
        if url.startswith((base + "/", "data:", "blob:", *(origin + "/" for origin in allow))):
            route.continue_()
        else:
            lite.offsite.append(url)
            route.abort()

    ctx.route("**/*", only_the_site)
    page = ctx.new_page()
    page.set_default_timeout(timeout_ms)
    page.on("pageerror", lambda e: lite.errors.append(f"pageerror: {e}"))
    lite.page = page
    return ctx, lite
