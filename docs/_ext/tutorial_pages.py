"""The tutorials: the tested notebooks of ``notebooks/``, copied into ``docs/tutorials/`` at
build time (generated, not committed) with the cassettes they replay, and executed there by
myst-nb. The folder is emptied first, so files a previous build's notebooks wrote are gone.

With ``NBAGENT_DOCS_LITE=1`` (``make docs-lite``: the JupyterLite site of ``make lite`` is
built into the docs' ``lite/`` folder), each tutorial the browser site holds gets a "launch in
the browser" link under its title, opening it there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
NOTEBOOKS = DOCS.parent / "notebooks"
OUT = DOCS / "tutorials"
#: what the notebooks read beside themselves
DATA = ("cassettes",)


def notebooks(source: Path = NOTEBOOKS) -> list[Path]:
    return sorted(source.glob("[0-9][0-9]_*.ipynb"))


def lite_notebooks() -> tuple[str, ...]:
    """The tutorials the browser site holds (``lite/build_site.py``'s list)."""
    sys.path.insert(0, str(DOCS.parent))
    try:
        from lite.build_site import NOTEBOOKS as IN_LITE
    finally:
        sys.path.remove(str(DOCS.parent))
    return tuple(IN_LITE)


def launch_cell(name: str) -> dict[str, object]:
    """A markdown cell linking to the notebook in the browser site (raw HTML: the link leaves
    the Sphinx site for the JupyterLite app beside it)."""
    href = f"../lite/lab/index.html?path={name}.ipynb"
    text = (f'<p class="nbagent-launch"><a href="{href}">Launch this tutorial in the browser</a> '
            "(JupyterLite: Python in the page, nothing to install; the first run loads for a "
            "while). The cells run there as written, <code>agent.run_step(task)</code> "
            "included; a synchronous call that has to wait (a real model over the network) needs "
            "a browser with WebAssembly stack switching (JSPI), and without it says to write "
            "<code>await agent.arun_step(task)</code> instead.</p>")
    return {"cell_type": "markdown", "id": f"launch-{name[:2]}", "metadata": {}, "source": text}


def copy_tutorials(out: Path = OUT, source: Path = NOTEBOOKS, *, lite: bool | None = None) -> list[Path]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    lite = os.environ.get("NBAGENT_DOCS_LITE") == "1" if lite is None else lite
    in_lite = lite_notebooks() if lite else ()
    copied = []
    for notebook in notebooks(source):
        target = Path(shutil.copy2(notebook, out / notebook.name))
        if notebook.stem in in_lite:
            nb = json.loads(target.read_text(encoding="utf-8"))
            nb["cells"].insert(1, launch_cell(notebook.stem))
            target.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
        copied.append(target)
    for name in DATA:
        shutil.copytree(source / name, out / name)
    return copied


def drop_widget_state(app: Any, env: Any) -> None:
    """Keep the executed notebooks' widget state out of the pages: with no widget manager
    loaded (none may come from a CDN) it is dead weight, about 1 MB a page (the live graph's
    front-end code), and every widget output already shows its static HTML or SVG."""
    for data in getattr(env, "nb_metadata", {}).values():
        for key in [k for k in data.get("js_files", {}) if k.startswith("ipywidgets")]:
            del data["js_files"][key]


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", lambda app, config: copy_tutorials())
    app.connect("env-updated", drop_widget_state)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
