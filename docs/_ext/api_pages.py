"""The API reference pages, written from ``docs/api.toml`` at build time.

One page per group of the data file, in ``docs/reference/`` (generated, not committed): an
``autoclass`` / ``autofunction`` / ``autodata`` entry per public name, so signatures, type
hints and docstrings come from the code. A class lists its own public members and those it
inherits from nbagent's private classes; members inherited from another public class are left
to that class's entry (unless the data file says ``full = true``). Pydantic models also get
their fields (type, default, description), which live on the fields rather than in docstrings.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
DATA = DOCS / "api.toml"
OUT = DOCS / "reference"
AUDIT = "/reference-audit"
_PUBLIC: set[type] = set()  # the documented classes, filled when the pages are written  # docs/reference-audit.md: the LlamaIndex reference audit


@dataclass
class Entry:
    name: str
    full: bool = False


@dataclass
class Group:
    slug: str
    title: str
    intro: str
    entries: list[Entry]
    aliases: dict[str, str] = field(default_factory=dict)


def load_groups(path: Path = DATA) -> tuple[list[str], list[Group]]:
    """The packages whose ``__all__`` is public, and the groups, as the data file lists them."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    groups = []
    for raw in data["group"]:
        entries = [Entry(e) if isinstance(e, str) else Entry(e["name"], bool(e.get("full"))) for e in raw["names"]]
        groups.append(Group(raw["slug"], raw["title"], raw["intro"].strip(), entries, dict(raw.get("aliases", {}))))
    return list(data["packages"]), groups


def resolve(dotted: str) -> Any:
    """The object a dotted public name stands for (``nbagent.workflow.Context``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"{dotted}: no module of it can be imported")


def public_names(packages: list[str]) -> dict[str, Any]:
    """Every public name, qualified by the first package (in the data file's order) exporting
    it: a later package re-exporting the same object under the same name adds nothing."""
    names: dict[str, Any] = {}
    seen: dict[tuple[str, int], str] = {}
    for package in packages:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            key = (name, id(obj))
            if key in seen and (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            seen[key] = f"{package}.{name}"
            names[f"{package}.{name}"] = obj
    return names


def _documented_classes(groups: list[Group]) -> set[type]:
    return {obj for g in groups for e in g.entries if inspect.isclass(obj := resolve(e.name))}


def class_members(cls: type, public: set[type], *, full: bool = False) -> list[str]:
    """The public members a class's entry lists (see the module docstring)."""
    chosen = []
    # a member a public base has (itself, or through its private bases) is left to that base
    public_bases = [k for k in cls.__mro__[1:] if k in public]
    pydantic_names = set(dir(_base_model())) if issubclass(cls, _base_model()) else set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("nbagent"):
            continue  # object, pydantic's BaseModel, Exception, Enum...: their own docs
        if pydantic_names and name in pydantic_names:
            continue  # model_config, model_post_init...: pydantic's hooks, set per class
        if owner is not cls and not full and any(issubclass(k, owner) for k in public_bases):
            continue
        chosen.append(name)
    return chosen


def _base_model() -> type:
    from pydantic import BaseModel

    return BaseModel


def _directive(obj: Any) -> str:
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if inspect.isroutine(obj):
        return "autofunction"
    return "autodata"


def page_text(group: Group, public: set[type]) -> str:
    lines = [group.title, "=" * len(group.title), "", ".. currentmodule:: nbagent", ""]
    lines += [".. This page is written by docs/_ext/api_pages.py from docs/api.toml: edit those.", ""]
    lines += [".. rst-class:: lead", "", *("   " + line for line in _md_to_rst(group.intro).splitlines()), ""]
    for entry in group.entries:
        obj = resolve(entry.name)
        directive = _directive(obj)
        lines.append(f".. {directive}:: {entry.name}")
        if inspect.isclass(obj):
            members = class_members(obj, public, full=entry.full)
            lines.append("   :show-inheritance:")
            if members:
                lines.append("   :members: " + ", ".join(members))
                lines.append("   :undoc-members:")
        lines.append("")
    for alias, target in group.aliases.items():
        obj = resolve(target)
        kind = "class" if inspect.isclass(obj) else "function" if inspect.isroutine(obj) else "data"
        module, _, short = alias.rpartition(".")
        lines += [f".. py:{kind}:: {short}", f"   :module: {module}", "",
                  f"   Another name for :py:obj:`{target}` (the same object).", ""]
    return "\n".join(lines)


def _md_to_rst(text: str) -> str:
    """The intro is Markdown with `code` and [links](page.rst): the RST for both."""
    text = re.sub(r"\[([^\]]+)\]\(([\w-]+)\.rst\)", r":doc:`\1 <\2>`", text)
    return re.sub(r"(?<![`:])`([^`]+)`(?!`)", r"``\1``", text)


def index_text(groups: list[Group]) -> str:
    lines = ["API reference", "=============", "",
             ".. This page is written by docs/_ext/api_pages.py from docs/api.toml: edit those.", "",
             "Every public name of nbagent, grouped by concept, with its signature, type hints and "
             "docstring. Names are importable from ``nbagent`` unless their path says otherwise "
             "(``nbagent.workflow``, ``nbagent.store``, ``nbagent.mcp``, ...).", "",
             ".. toctree::", "   :maxdepth: 1", ""]
    lines += [f"   {g.slug}" for g in groups]
    lines += [f"   LlamaIndex reference audit <{AUDIT}>", ""]
    return "\n".join(lines)


def write_pages(out: Path = OUT, data: Path = DATA) -> list[Path]:
    """Write the reference pages; a page whose text is unchanged is not touched (so Sphinx
    does not read it again). Pages of groups no longer in the data file are removed."""
    _, groups = load_groups(data)
    public = _documented_classes(groups)
    pages = {out / "index.rst": index_text(groups)}
    pages.update({out / f"{g.slug}.rst": page_text(g, public) for g in groups})
    out.mkdir(parents=True, exist_ok=True)
    for stale in set(out.glob("*.rst")) - set(pages):
        stale.unlink()
    for path, text in pages.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return sorted(pages)


def _pydantic_fields(obj: Any) -> list[str]:
    fields = getattr(obj, "model_fields", None)
    if not isinstance(fields, dict) or not fields or "model_fields" not in dir(obj):
        return []
    lines = ["", ".. rubric:: Fields", ""]
    for name, info in fields.items():
        if info.exclude or name.startswith("_"):
            continue
        default = "required" if info.is_required() else (
            "a new one each time" if info.default_factory is not None else f"default ``{info.default!r}``")
        text = f"- ``{name}``: ``{_hint(info.annotation)}``, {default}"
        if info.description:
            text += ". " + " ".join(info.description.split())
        lines.append(text)
    return lines + [""]


def _hint(annotation: Any) -> str:
    """A type as a reader writes it: ``dict[str, Any]``, ``TaskStep | None`` (no module paths;
    pydantic keeps ``Annotated`` metadata apart, so validators do not show)."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(r"\b(?:[a-z_]\w*\.)+(?=[A-Za-z_]\w*)", "", text)


def _pydantic_signature(app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None,
                        return_annotation: str | None) -> tuple[str, str | None] | None:
    """A model's constructor as its fields: pydantic's synthesized signature spells every
    validator and module path out."""
    fields = getattr(obj, "model_fields", None) if inspect.isclass(obj) else None
    if what not in ("class", "exception") or not isinstance(fields, dict) or "model_fields" not in dir(obj):
        return None
    parts = []
    for field_name, info in fields.items():
        if info.exclude or field_name.startswith("_"):
            continue
        default = "" if info.is_required() else " = <factory>" if info.default_factory is not None else f" = {info.default!r}"
        parts.append(f"{info.alias or field_name}: {_hint(info.annotation)}{default}")
    return ("(*, " + ", ".join(parts) + ")" if parts else "()"), return_annotation


_TYPED: set[str] = set()  # the modules whose type-checking names of the models are made real
#: what nbagent's modules import on first use (``nbagent/_lazy.py``), so that ``import nbagent``
#: defines no pydantic model: their annotations name these under ``TYPE_CHECKING`` only
_LAZY = ("nbagent.schema", "nbagent.messages", "nbagent.memory", "nbagent.tool_metadata", "pydantic")


def _type_checking_names(app: Any, obj: Any, bound_method: bool) -> None:
    """Make the models a module imports for type checkers only (``if TYPE_CHECKING:``, from
    ``_LAZY``) real in it, for this build: its signatures then show them as a type checker reads
    them (``TaskRef`` as ``Task | str``), as they did when the modules imported them at once."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if module is None or module.__name__ in _TYPED or module.__name__.split(".")[0] != "nbagent":
        return
    _TYPED.add(module.__name__)
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return
    names: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                if not (isinstance(statement, ast.ImportFrom) and statement.module in _LAZY):
                    continue
                try:
                    exec(compile(ast.Module([statement], []), module.__name__, "exec"), names)
                except ImportError:  # an optional library this build does not have
                    continue
    for name, value in names.items():
        if name != "__builtins__" and name not in vars(module):  # (not hasattr: a module's __getattr__)
            setattr(module, name, value)


def _nbagent_modules() -> list[str]:
    return sorted(name for name in sys.modules if name == "nbagent" or name.startswith("nbagent."))


def _comment(module: str, key: tuple[str, str]) -> str:
    """The ``#:`` comment (or string after the assignment) of a module's or class's attribute."""
    from sphinx.pycode import ModuleAnalyzer
    from sphinx.errors import PycodeError

    try:
        lines = ModuleAnalyzer.for_module(module).find_attr_docs().get(key, [])
    except (PycodeError, ImportError):
        return ""
    return "\n".join(lines).strip()


def constant_doc(dotted: str) -> str:
    """The ``#:`` comment over a constant, read in the module that defines it: autodoc reads
    only the package that re-exports it, and otherwise shows the docstring of ``str``."""
    package, _, short = dotted.rpartition(".")
    obj = resolve(dotted)
    for module in [package] + [m for m in _nbagent_modules() if m != package]:
        if getattr(sys.modules.get(module), short, _MISSING) is obj and (doc := _comment(module, ("", short))):
            return doc
    return ""


_MISSING = object()


def docstring(dotted: str, owner: type | None = None) -> str:
    """The description nbagent itself writes for an entry (``owner``: the class a member is
    listed under): a docstring, a field's ``#:`` comment, a constant's comment, inherited only
    from nbagent's classes. Empty: the reference would show nothing, or another library's text."""
    if owner is None:
        obj = resolve(dotted)
        if inspect.isclass(obj):
            return next((d for k in obj.__mro__ if k.__module__.startswith("nbagent")
                         and (d := (vars(k).get("__doc__") or "").strip())), "")
        return (obj.__doc__ or "").strip() if inspect.isroutine(obj) else constant_doc(dotted)
    name = dotted.rpartition(".")[2]
    for klass in owner.__mro__:
        if not klass.__module__.startswith("nbagent"):
            continue
        raw = vars(klass).get(name, _MISSING)
        fn = getattr(raw, "__func__", raw)
        fn = fn.fget if isinstance(fn, property) else fn
        if inspect.isroutine(fn) and (doc := (fn.__doc__ or "").strip()):
            return doc
        if doc := _comment(klass.__module__, (klass.__qualname__, name)):
            return doc
    return ""


def _data_docs(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A constant's own comment instead of its type's docstring (``str(object='') -> str``)."""
    if what == "data" and name.startswith("nbagent."):
        lines[:] = constant_doc(name).splitlines()


def _add_fields(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what in ("class", "exception") and inspect.isclass(obj):
        lines.extend(_pydantic_fields(obj))


def _plural_literals(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """``Name``s (a plural of a literal, common in nbagent's docstrings) is not valid RST: make
    it ``Name``\\ s, which reads the same."""
    lines[:] = [re.sub(r"``(?=s\b)", r"``\\ ", line) if "``s" in line else line for line in lines]


def _public_bases(app: Any, name: str, obj: Any, options: Any, bases: list[type]) -> None:
    """Show public bases only: a private nbagent base gives way to its own bases."""
    public = _PUBLIC

    def expand(base: type) -> list[type]:
        if not base.__module__.startswith("nbagent") or base in public:
            return [base]
        return [b for parent in base.__bases__ for b in expand(parent) if b is not object]

    shown: list[type] = []
    for base in bases:
        shown += [b for b in expand(base) if b not in shown]
    bases[:] = shown or [object]


def _write(app: Any) -> None:
    write_pages()
    _PUBLIC.update(_documented_classes(load_groups()[1]))


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _write)
    app.connect("autodoc-process-docstring", _data_docs)
    app.connect("autodoc-process-docstring", _add_fields)
    app.connect("autodoc-process-docstring", _plural_literals)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("autodoc-process-signature", _pydantic_signature)
    app.connect("autodoc-before-process-signature", _type_checking_names)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # python docs/_ext/api_pages.py: write the pages only
    sys.path.insert(0, str(DOCS.parent))
    for page in write_pages():
        print(page)
