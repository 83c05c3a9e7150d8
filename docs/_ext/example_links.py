""""Examples:" under each API entry: the tutorials and how-tos whose code uses it.

A newcomer who finds a method in the reference gets one click to code that calls it. The code
of every tutorial (``notebooks/*.ipynb``) and executed page (``{code-cell}`` blocks of
``docs/**/*.md``) is scanned once per build: a class is used where its name appears (a
function also after its module's name: ``tracing.instrument(``); a method
``m`` of class ``C`` where ``.m(`` appears, on pages that also name ``C`` (or a subclass of it,
``ReActAgent`` for ``AgentRunner``) first, then on any other page. A class no code names is
used where a method returning it is called (``agent.panel(task)`` for ``AgentPanel``). At most
``LIMIT`` links.
"""

from __future__ import annotations

import inspect
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
NOTEBOOKS = DOCS.parent / "notebooks"
LIMIT = 3
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def page_code(docs: Path = DOCS, notebooks: Path = NOTEBOOKS) -> dict[str, str]:
    """docname -> the code on that page, tutorials first (in order), then the other pages."""
    code: dict[str, str] = {}
    for nb in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code[f"tutorials/{nb.stem}"] = "\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells if c["cell_type"] == "code")
    for page in sorted(docs.glob("*/*.md")):
        blocks = CODE_CELL.findall(page.read_text(encoding="utf-8"))
        if blocks and not page.parent.name.startswith(("_", "tutorials", "reference")):
            code[f"{page.parent.name}/{page.stem}"] = "\n".join(blocks)
    return code


def _names(cls: type) -> list[str]:
    """The class's name and those of its subclasses defined in nbagent (a use of either is a
    use of the class's methods)."""
    names, todo = [cls.__name__], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        if sub.__module__.startswith("nbagent") and not sub.__name__.startswith("_"):
            names.append(sub.__name__)
        todo += sub.__subclasses__()
    return names


@lru_cache(maxsize=None)
def _word(name: str, module: str = "") -> re.Pattern[str]:
    """``name`` alone, or after its module's last part (``tracing.instrument(``, as code
    that imports the module calls a function of it)."""
    qualified = rf"|\b{re.escape(module)}\.{re.escape(name)}\b" if module else ""
    return re.compile(rf"(?<![\w.]){re.escape(name)}\b{qualified}")


def examples_for(name: str, code: dict[str, str], owner: type | None = None, module: str = "") -> list[str]:
    """The docnames whose code uses ``name``: a class or function's name (alone or after
    ``module``, the last part of its module's name), or with ``owner`` (its class), a method's
    name; best first."""
    if owner is None:
        pattern = _word(name, module)
        return [doc for doc, text in code.items() if pattern.search(text)][:LIMIT]
    call = re.compile(rf"\.{re.escape(name)}\(")
    using = [doc for doc, text in code.items() if call.search(text)]
    names = [_word(n) for n in _names(owner)]
    using.sort(key=lambda doc: not any(p.search(code[doc]) for p in names))  # stable: order kept
    return using[:LIMIT]


def _returned(annotation: object) -> str:
    """The class name a return annotation names (``"AgentPanel"``, ``"TaskStep | None"``),
    or ``""`` for anything else."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    text = re.sub(r"\s*\|\s*None$", "", text.strip("'\""))
    return text.rpartition(".")[2] if re.fullmatch(r"[\w.]+", text) else ""


@lru_cache(maxsize=None)
def makers() -> dict[str, tuple[tuple[type, str], ...]]:
    """Class name -> the methods of the documented classes that return one (``panel`` of
    ``AgentRunner`` for ``AgentPanel``): code that calls them uses the class, unnamed."""
    from api_pages import _documented_classes, load_groups

    found: dict[str, list[tuple[type, str]]] = {}
    for cls in sorted(_documented_classes(load_groups()[1]), key=lambda c: (c.__module__, c.__name__)):
        for name in dir(cls):
            raw = inspect.getattr_static(cls, name, None)
            fn = getattr(raw, "__func__", raw)
            if name.startswith("_") or not inspect.isfunction(fn):
                continue
            made = _returned(fn.__annotations__.get("return", ""))
            if made and made != cls.__name__ and (cls, name) not in found.get(made, []):
                found.setdefault(made, []).append((cls, name))
    return {k: tuple(v) for k, v in found.items()}


def made_by(cls_name: str, code: dict[str, str]) -> list[str]:
    """The docnames that call a method returning ``cls_name``, for a class no code names."""
    docs: list[str] = []
    for owner, method in makers().get(cls_name, ()):
        docs += [d for d in examples_for(method, code, owner) if d not in docs]
    return docs[:LIMIT]


_CODE: dict[str, str] = {}


def _load(app: Any) -> None:
    _CODE.clear()
    _CODE.update(page_code())


def _append(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what not in ("class", "exception", "function", "method", "property") or not name.startswith("nbagent."):
        return
    parent, _, short = name.rpartition(".")
    owner = None
    if what in ("method", "property"):
        from api_pages import resolve

        owner = resolve(parent)
    docs = examples_for(short, _CODE, owner, parent.rpartition(".")[2])
    if not docs and what in ("class", "exception"):
        docs = made_by(short, _CODE)
    if docs:
        lines.extend(["", "*Examples:* " + ", ".join(f":doc:`/{doc}`" for doc in docs), ""])


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _load)
    app.connect("autodoc-process-docstring", _append)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
