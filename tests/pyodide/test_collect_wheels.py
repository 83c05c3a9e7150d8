"""lite/collect_wheels.py without Node or the network: the pin file, the closure check with
Pyodide's markers, and the lock file that points micropip at PyPI's wheel."""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lite.collect_wheels import (  # noqa: E402
    PyodideInfo,
    check_closure,
    read_pins,
    write_lock,
)

INFO = PyodideInfo(version="314.0.6", python="3.14.2", abi="2026_0", lock_info={})


def wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                      *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def house(tmp_path: Path, *wheels: Path) -> dict:
    return {canonicalize_name(p.name.split("-")[0]): p for p in wheels}


def test_markers_are_pyodides() -> None:
    env = INFO.markers()
    assert (env["sys_platform"], env["platform_system"], env["platform_machine"]) == ("emscripten", "Emscripten", "wasm32")
    assert (env["python_version"], env["python_full_version"]) == ("3.14", "3.14.2")
    assert (INFO.platform_tag, INFO.python_tag) == ("pyemscripten_2026_0_wasm32", "cp314")


def test_a_complete_closure_passes_and_emscripten_markers_drop_native_deps(tmp_path: Path) -> None:
    wheels = house(
        tmp_path,
        wheel(tmp_path, "app", "1.0", "lib>=2", "native-tool; sys_platform != 'emscripten'", "extra-only; extra == 'x'"),
        wheel(tmp_path, "lib", "2.1", "tiny; python_version >= '3.12'"),
        wheel(tmp_path, "tiny", "0.1"),
    )
    check_closure(wheels, [canonicalize_name("app")], INFO.markers())  # raises if wrong


def test_a_missing_or_wrong_pin_and_an_unneeded_one_are_named(tmp_path: Path) -> None:
    wheels = house(
        tmp_path,
        wheel(tmp_path, "app", "1.0", "lib>=3", "gone", "js-only; sys_platform == 'emscripten'"),
        wheel(tmp_path, "lib", "2.1"),
        wheel(tmp_path, "spare", "1.0"),
    )
    with pytest.raises(ValueError) as err:
        check_closure(wheels, [canonicalize_name("app")], INFO.markers())
    text = str(err.value)
    assert "app requires lib>=3, but lib==2.1 is pinned" in text
    assert "app requires gone, which has no wheel here" in text
    assert "js-only" in text  # required on emscripten only, and not pinned: still missing
    assert "pinned but not needed in Pyodide: spare" in text


def test_pins_are_exact_and_include_micropip_and_the_compiled_wheels() -> None:
    pins = read_pins()
    assert {"micropip", "pydantic-core", "jiter", "pydantic", "openai"} <= set(pins)
    assert "graphviz-pure" not in pins


def test_an_unpinned_line_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "req.txt"
    bad.write_text("# comment\npydantic>=2\n")
    with pytest.raises(ValueError, match="'pydantic>=2' is not pinned as name==version"):
        read_pins(bad)


def test_the_lock_lists_exactly_the_wheels_with_their_imports_and_pyodide_depends(tmp_path: Path) -> None:
    pyodide = tmp_path / "pyodide"
    pyodide.mkdir()
    upstream = {
        "info": {"python": "3.14.2", "abi_version": "2026_0"},
        "packages": {
            "micropip": {"name": "micropip", "version": "0.11.1", "file_name": "micropip-0.11.1-py3-none-any.whl",
                         "sha256": "0" * 64, "install_dir": "site", "package_type": "package",
                         "imports": ["micropip"], "depends": [], "unvendored_tests": False},
            "numpy": {"name": "numpy"},
        },
    }
    (pyodide / "pyodide-lock.json").write_text(json.dumps(upstream))
    app = wheel(tmp_path, "my-app", "1.0", "Dep_Lib>=1", "native; sys_platform != 'emscripten'", "x; extra == 'dev'")
    with zipfile.ZipFile(app, "a") as zf:
        zf.writestr("my_app/__init__.py", "")
        zf.writestr("my_app/sub/mod.py", "")
        zf.writestr("helper.py", "")
        zf.writestr("my_app-1.0.data/scripts/tool", "")
    dep = wheel(tmp_path, "dep-lib", "1.2")
    lock = json.loads(write_lock(INFO, [app, dep], tmp_path, pyodide).read_text())
    assert lock["info"] == upstream["info"]
    assert sorted(lock["packages"]) == ["dep-lib", "my-app"]  # nothing else: nothing from a CDN
    entry = lock["packages"]["my-app"]
    assert entry["file_name"] == app.name and entry["version"] == "1.0"
    assert entry["sha256"] == hashlib.sha256(app.read_bytes()).hexdigest()
    assert entry["imports"] == ["helper", "my_app"]
    assert entry["depends"] == ["dep-lib"]  # native is not for emscripten, x is an extra
    assert (entry["install_dir"], entry["package_type"], entry["unvendored_tests"]) == ("site", "package", False)
    assert lock["packages"]["dep-lib"]["depends"] == [] and lock["packages"]["dep-lib"]["imports"] == []
