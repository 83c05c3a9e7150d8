"""docs/architecture.md stays the map of the package: every module is on it, its layer table is
the contract's, in the contract's order, and the life of a ``run_step`` names files that exist.

A new module fails the first test until the doc says where it sits and what it is for.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nbagent"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text of the doc's ``## title`` section, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.MULTILINE | re.DOTALL)
    assert match is not None, f"docs/architecture.md has no '## {title}' section"
    return match.group(1)


def _named_paths(text: str) -> set[str]:
    """Every ``.py`` path in a code span, as written (``store/writer.py``)."""
    return set(re.findall(r"`([\w/]+\.py)`", text))


def _module_paths() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def _contract_layers() -> list[str]:
    block = re.search(r"^layers = \[\n(.*?)^\]", PYPROJECT, re.MULTILINE | re.DOTALL)
    assert block is not None, "pyproject.toml has no layers contract"
    return [re.findall(r'"([^"]+)"', line)[0] for line in block.group(1).splitlines() if '"' in line]


def _doc_layers(text: str) -> list[str]:
    """The second cell of each row of a layer table: the layer as the contract writes it."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) >= 2 and cells[1].startswith("`"):
            rows.append(cells[1].strip("`").replace("\\|", "|"))
    return rows


def test_every_module_of_the_package_is_on_the_map() -> None:
    missing = [path for path in _module_paths() if f"`{path}`" not in DOC]
    assert missing == [], f"add each to docs/architecture.md (its folder's paragraph): {missing}"


def test_the_map_names_no_module_that_does_not_exist() -> None:
    named = {p for p in _named_paths(DOC) if not p.startswith(("tests/", "docs/", "bench/"))}
    gone = sorted(p for p in named if not (PACKAGE / p).is_file())
    assert gone == []


def test_the_layer_table_is_the_contracts_in_the_same_order() -> None:
    assert _doc_layers(_section("The layers")) == _contract_layers()


def test_every_file_the_life_of_a_run_step_names_exists() -> None:
    life = _section("The life of one `run_step`")
    named = _named_paths(life)
    assert {"engine/core.py", "engine/txn.py", "engine/state.py", "_sync.py", "events.py"} <= named
    assert sorted(p for p in named if not (PACKAGE / p).is_file()) == []


def test_the_finders_find_what_they_should() -> None:
    text = "| x | `a : b` | y |\n| z | `engine \\| workflow` | w |\n`store/writer.py` and `x.py`, not store/plain.py"
    assert _named_paths(text) == {"store/writer.py", "x.py"}
    assert _doc_layers(text) == ["a : b", "engine | workflow"]
    assert "engine/core.py" in _module_paths() and "__init__.py" in _module_paths()
    assert _contract_layers()[0].startswith("__main__")
