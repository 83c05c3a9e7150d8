"""The documentation site, built once per test run (``docs/build.py``, as ``make docs-lite``
does) into a temporary folder, for ``tests/test_docs_site.py`` and the browser test.

With the browser site in ``lite/`` and the tutorials linked to it, where npm can install its
Pyodide (``REQUIRE_BROWSER=1`` insists on it, as CI does); elsewhere as ``make docs`` builds
it, and the tests of the browser site skip, saying why."""

from __future__ import annotations

import atexit
import importlib.util
import os
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
    #: why the browser site was not built ("" when it was)
    no_lite: str = ""


def lite_problem() -> str:
    """Why the browser site cannot be built here ("" when it can): npm installs its Pyodide."""
    if os.environ.get("REQUIRE_BROWSER") == "1":
        return ""  # required: a build without npm fails, saying so
    harness = REPO / "tests" / "pyodide"
    if str(harness) not in sys.path:
        sys.path.insert(0, str(harness))
    from pyodide_harness import node_problem  # type: ignore[import-not-found]

    return node_problem() or ""


_BUILT: BuiltSite | None = None


def built_site() -> BuiltSite:
    """Build the site the first time it is asked for; later calls get the same build."""
    global _BUILT
    if _BUILT is None:
        folder = Path(tempfile.mkdtemp(prefix="nbagent-docs-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        start = time.monotonic()
        no_lite = lite_problem()
        result = build_script().build(folder / "html", doctrees=folder / "doctrees", lite=not no_lite)
        if result.returncode == 0 and not no_lite:
            sphinx_s = time.monotonic() - start
            build_script().add_lite(folder / "html")
            print(f"\nthe browser site added to the documentation in {time.monotonic() - start - sphinx_s:.0f} s")
        _BUILT = BuiltSite(folder / "html", result, time.monotonic() - start, no_lite)
        print(f"\ndocumentation site built in {_BUILT.seconds:.0f} s")
    return _BUILT
