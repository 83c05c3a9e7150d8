"""The documentation site, built once per test run (``docs/build.py``, as ``make docs`` does)
into a temporary folder, for ``tests/test_docs_site.py`` and the browser test."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def docs_module(name: str, path: Path) -> ModuleType:
    """A module of docs/ (not a package), by file."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_script() -> ModuleType:
    return docs_module("nbagent_docs_build", DOCS / "build.py")


@dataclass
class BuiltSite:
    html: Path
    result: subprocess.CompletedProcess[str]
    seconds: float


_BUILT: BuiltSite | None = None


def built_site() -> BuiltSite:
    """Build the site the first time it is asked for; later calls get the same build."""
    global _BUILT
    if _BUILT is None:
        folder = Path(tempfile.mkdtemp(prefix="nbagent-docs-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        start = time.monotonic()
        result = build_script().build(folder / "html", doctrees=folder / "doctrees")
        _BUILT = BuiltSite(folder / "html", result, time.monotonic() - start)
        print(f"\ndocumentation site built in {_BUILT.seconds:.0f} s")
    return _BUILT
