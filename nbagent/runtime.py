"""Where this Python runs, for a notebook that should say what differs there.

The tutorials run in a browser too (the JupyterLite site, on Pyodide), where a few things a
machine can do are missing: child processes (a local model's server, MCP servers over stdio,
the Graphviz program), threads, and any package the site does not ship. ``browser_note()``
prints what that means for the notebook in hand, and nothing anywhere else, so a notebook
can call it in its first cells without changing its outputs on a machine.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["in_browser", "can_wait", "missing", "browser_note"]


def in_browser() -> bool:
    """True in Pyodide (a browser page, JupyterLite, or Node): no threads, no child processes.

    Example:

    >>> from nbagent.runtime import in_browser
    >>> in_browser()  # here, a Python process; in JupyterLite, True
    False
    """
    return sys.platform == "emscripten"


def can_wait() -> bool:
    """Whether a sync call (``agent.run_step(task)``) can wait for what it awaits here: always
    outside a browser; in one, only with WebAssembly stack switching (JSPI: Chromium).

    Example:

    >>> from nbagent import runtime
    >>> runtime.can_wait()  # outside a browser a sync call can always wait
    True
    """
    if not in_browser():
        return True
    try:
        from pyodide.ffi import can_run_sync  # type: ignore[import-not-found]
    except ImportError:
        return False
    return bool(can_run_sync())


def missing(*packages: str) -> list[str]:
    """Those of ``packages`` that cannot be imported here (the browser site ships no pandas).

    Example:

    >>> from nbagent import runtime
    >>> runtime.missing("json", "no_such_package_here")
    ['no_such_package_here']
    """
    return [name for name in packages if importlib.util.find_spec(name) is None]


def browser_note(*, cannot: str = "", optional: tuple[str, ...] = ()) -> None:
    """In a browser, print what differs there for this notebook; elsewhere print nothing.

    ``cannot``: what this notebook needs that a browser cannot give, and why (said first);
    ``optional``: packages some cells use and skip, saying so, when they are missing."""
    if not in_browser():
        return
    lines = [
        "This notebook runs in your browser (Pyodide): nothing is installed on your machine, "
        "and the offline models here need no network.",
    ]
    if cannot:
        lines.append(f"It needs {cannot}: those cells will fail here.")
    if can_wait():
        lines.append("Sync calls such as agent.run_step(task) wait as in Jupyter (WebAssembly stack switching).")
    else:
        lines.append(
            "This browser cannot pause a cell while a call waits: sync calls run what never waits "
            "(the offline models) and otherwise say to await the async method, e.g. "
            "`await agent.arun_step(task)`."
        )
    lines.append(
        "A browser has no child processes: no LocalLLM, no MCP server over stdio, no Graphviz "
        "program (graphs are drawn by Graphviz compiled to WebAssembly). A real model works "
        "through OpenAILLM, against a server that allows this page's origin (CORS)."
    )
    gone = missing(*optional)
    if gone:
        lines.append(f"Not in this site's packages: {', '.join(gone)}; the cells that use them say so and skip.")
    print("\n".join(lines))
