"""Links from a page to the repository's own files (``[the engine](../nbagent/engine/)``),
as in ``docs/architecture.md``, which is also read on GitHub: the site has no copy of the
source, so such a link becomes its text and the path, ``the engine (nbagent/engine/)``,
instead of a broken link (a warning, so a failed build). Links inside ``docs/`` are left to
MyST, which checks them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
REPO = DOCS.parent
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(((?:\.\./)+[^)\s#]*)(#[^)\s]*)?\)")


def rewrite(text: str, page_dir: Path) -> str:
    """``text`` with its links to repository paths outside docs/ written as plain text."""

    def plain(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        path = (page_dir / target).resolve()
        if not path.is_relative_to(REPO) or path.is_relative_to(DOCS) or not path.exists():
            return match.group(0)
        shown = path.relative_to(REPO).as_posix() + ("/" if path.is_dir() else "")
        return label if label.strip("`") == shown.rstrip("/") or label.strip("`") == shown else f"{label} (`{shown}`)"

    return LINK.sub(plain, text)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    path = Path(app.env.doc2path(docname))
    if path.suffix == ".md":
        source[0] = rewrite(source[0], path.parent)


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
