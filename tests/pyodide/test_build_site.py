"""lite/build_site.py's own check of a built site, on small sites made here: it must refuse any
way the site could reach past itself at run time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lite.build_site import KERNEL_PLUGIN, NOTEBOOKS, check_site  # noqa: E402


def fake_site(root: Path, kernel: dict, lock_files: dict[str, str], present: list[str]) -> Path:
    (root / "static" / "pyodide").mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / "01_quickstart.ipynb").write_text("{}")
    config = {"jupyter-config-data": {"litePluginSettings": {KERNEL_PLUGIN: kernel}}}
    (root / "jupyter-lite.json").write_text(json.dumps(config))
    lock = {"info": {}, "packages": {name: {"file_name": f} for name, f in lock_files.items()}}
    (root / "static" / "pyodide" / "pyodide-lock.json").write_text(json.dumps(lock))
    for name in present:
        (root / "static" / "pyodide" / name).write_bytes(b"")
    return root


GOOD = {"pyodideUrl": "./static/pyodide/pyodide.mjs", "disablePyPIFallback": True,
        "pipliteUrls": ["./extensions/@jupyterlite/pyodide-kernel-extension/static/pypi/all.json"]}


def test_a_self_contained_site_passes(tmp_path: Path) -> None:
    site = fake_site(tmp_path, GOOD, {"nbagent": "nbagent-0.1.0-py3-none-any.whl"}, ["nbagent-0.1.0-py3-none-any.whl"])
    assert check_site(site) == {"pyodide_lock": ["nbagent"], "contents": ["01_quickstart.ipynb"]}


def test_every_way_out_is_named(tmp_path: Path) -> None:
    kernel = {"pyodideUrl": "https://cdn.jsdelivr.net/pyodide/v314.0.6/full/pyodide.mjs",
              "pipliteUrls": ["https://pypi.org/simple/all.json"]}
    lock = {"nbagent": "nbagent-0.1.0-py3-none-any.whl", "numpy": "https://cdn.example/numpy.whl"}
    site = fake_site(tmp_path, kernel, lock, [])
    with pytest.raises(RuntimeError) as err:
        check_site(site)
    text = str(err.value)
    assert "pyodideUrl is 'https://cdn.jsdelivr.net/pyodide/v314.0.6/full/pyodide.mjs'" in text
    assert "piplite may fall back to PyPI" in text
    assert "piplite indexes outside the site: ['https://pypi.org/simple/all.json']" in text
    assert "the lock names nbagent's nbagent-0.1.0-py3-none-any.whl, which the site lacks" in text
    assert "the lock names numpy's https://cdn.example/numpy.whl" in text


def test_the_site_has_the_notebooks_a_browser_can_run() -> None:
    names = set(NOTEBOOKS)
    # a subprocess, a local model, the otel extra (not among the browser's wheels)
    assert not names & {"10_mcp_tools", "13_local_model", "14_tracing"}
    for name in names:
        assert (REPO / "notebooks" / f"{name}.ipynb").is_file(), name
    on_disk = {p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert on_disk - names == {"10_mcp_tools", "13_local_model", "14_tracing"}  # a new notebook must be sorted in


def test_notebooks_go_to_the_site_with_each_text_in_one_piece(tmp_path: Path) -> None:
    """JupyterLite shows an output stored as a list of lines with a comma between the lines
    (jupyterlite/jupyterlite#1105); the site's copies hold each text as one string, and are
    the same notebook."""
    import nbformat

    from lite.build_site import write_for_lite

    source = REPO / "notebooks" / "01_quickstart.ipynb"
    raw = json.loads(source.read_text(encoding="utf-8"))
    assert any(isinstance(v, list) for c in raw["cells"] for o in c.get("outputs", []) for v in o.get("data", {}).values())
    write_for_lite(source, tmp_path / "01.ipynb")
    copied = json.loads((tmp_path / "01.ipynb").read_text(encoding="utf-8"))
    lists = [
        (i, key) for i, c in enumerate(copied["cells"])
        for key, v in [("source", c["source"]), *((k, v) for o in c.get("outputs", []) for k, v in {**o.get("data", {}), "text": o.get("text", "")}.items())]
        if isinstance(v, list)
    ]
    assert lists == []
    assert nbformat.reads(json.dumps(copied), as_version=4) == nbformat.read(source, as_version=4)
    schema = next(v for c in copied["cells"] for o in c.get("outputs", []) for k, v in o.get("data", {}).items()
                  if k == "text/html" and "JSON schema" in v)
    assert '{\n  &quot;additionalProperties&quot;' in schema
