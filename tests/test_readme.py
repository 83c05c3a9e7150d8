"""The README's quick start runs as written (offline) and prints what it says."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_quick_start_runs_and_prints_the_answer() -> None:
    blocks = python_blocks()
    assert blocks, "the README should hold a python quick start"
    out = io.StringIO()
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert out.getvalue().split() == ["363", "363"]
    graph = namespace["agent"].graph(namespace["task"])  # type: ignore[attr-defined]
    assert "digraph" in graph.source
