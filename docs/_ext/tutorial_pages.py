"""The tutorials: the tested notebooks of ``notebooks/``, copied into ``docs/tutorials/`` at
build time (generated, not committed) with the cassettes they replay, and executed there by
myst-nb. The folder is emptied first, so files a previous build's notebooks wrote are gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
NOTEBOOKS = DOCS.parent / "notebooks"
OUT = DOCS / "tutorials"
#: what the notebooks read beside themselves
DATA = ("cassettes",)


def notebooks(source: Path = NOTEBOOKS) -> list[Path]:
    return sorted(source.glob("[0-9][0-9]_*.ipynb"))


def copy_tutorials(out: Path = OUT, source: Path = NOTEBOOKS) -> list[Path]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    copied = []
    for notebook in notebooks(source):
        copied.append(Path(shutil.copy2(notebook, out / notebook.name)))
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
