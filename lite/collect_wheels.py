"""nbagent's wheel and every wheel it needs in Pyodide, in one folder, ready to install offline.

The folder (``build/lite/wheels`` by default, ignored by git) gets:

- nbagent's own wheel, built from this checkout (a copy of it, so the checkout stays clean);
- the wheels pinned in ``lite/requirements-pyodide.txt``, downloaded from PyPI with pip for
  the platform of the Pyodide that npm installed in ``lite/node_modules`` (its Python and its
  PEP 783 ABI are read from that Pyodide's ``pyodide-lock.json``), and kept between runs;
- ``pyodide-lock.json``: a lock file of exactly these wheels (with the info of the Pyodide
  from npm), so Pyodide loads each one by name from this folder. Pyodide's own lock names
  files on its CDN, which is never used here.

Before anything is installed, the pins are checked against the requirements Pyodide will see
(markers evaluated for ``sys_platform == "emscripten"``): every requirement of nbagent and of
its dependencies must be met by a pinned wheel, and every pinned wheel must be needed.

Run ``python lite/collect_wheels.py`` (``--out DIR``); the tests import ``collect()``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name, parse_wheel_filename

LITE = Path(__file__).resolve().parent
REPO = LITE.parent
PINS = LITE / "requirements-pyodide.txt"
PYODIDE_DIR = LITE / "node_modules" / "pyodide"
OUT = REPO / "build" / "lite" / "wheels"
LOCK = "pyodide-lock.json"
#: what nbagent's wheel is built from (the rest of the checkout is not needed for it)
SOURCES = ("nbagent", "pyproject.toml", "README.md")


@dataclass(frozen=True)
class PyodideInfo:
    """The Pyodide a wheel must fit: its version, its CPython and its ABI (PEP 783)."""

    version: str
    python: str  # e.g. "3.14.2"
    abi: str  # e.g. "2026_0"
    lock_info: dict[str, str]

    @property
    def platform_tag(self) -> str:
        return f"pyemscripten_{self.abi}_wasm32"

    @property
    def python_tag(self) -> str:
        major, minor = self.python.split(".")[:2]
        return f"cp{major}{minor}"

    def markers(self) -> dict[str, str]:
        """The PEP 508 environment Pyodide's micropip evaluates requirements in."""
        major_minor = ".".join(self.python.split(".")[:2])
        return {
            "implementation_name": "cpython",
            "implementation_version": self.python,
            "os_name": "posix",
            "platform_machine": "wasm32",
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Emscripten",
            "platform_version": "",
            "python_full_version": self.python,
            "python_version": major_minor,
            "sys_platform": "emscripten",
            "extra": "",
        }


@dataclass(frozen=True)
class Wheelhouse:
    """What ``collect`` made: the folder, nbagent's wheel, all wheels, the lock file, and the
    Pyodide (from npm) they are for."""

    folder: Path
    nbagent: Path
    wheels: tuple[Path, ...]
    lock: Path
    pyodide: PyodideInfo
    pyodide_dir: Path


def pinned_npm_version(lite: Path = LITE) -> str:
    return str(json.loads((lite / "package.json").read_text(encoding="utf-8"))["dependencies"]["pyodide"])


def ensure_pyodide(lite: Path = LITE) -> Path:
    """``lite/node_modules/pyodide`` at the version ``lite/package.json`` pins (``npm ci`` if not)."""
    want = pinned_npm_version(lite)
    have = lite / "node_modules" / "pyodide" / "package.json"
    if not have.is_file() or json.loads(have.read_text(encoding="utf-8"))["version"] != want:
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not on PATH: install Node.js 18+ with npm to fetch Pyodide")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=lite, check=True)
    return lite / "node_modules" / "pyodide"


def pyodide_info(pyodide_dir: Path = PYODIDE_DIR) -> PyodideInfo:
    version = json.loads((pyodide_dir / "package.json").read_text(encoding="utf-8"))["version"]
    info = json.loads((pyodide_dir / LOCK).read_text(encoding="utf-8"))["info"]
    return PyodideInfo(version=version, python=info["python"], abi=info["abi_version"], lock_info=info)


def read_pins(path: Path = PINS) -> dict[NormalizedName, str]:
    pins: dict[NormalizedName, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise ValueError(f"{path.name}: {line!r} is not pinned as name==version")
        pins[canonicalize_name(name.strip())] = version.strip()
    return pins


def _wheel_key(path: Path) -> tuple[NormalizedName, str]:
    name, version, _, _ = parse_wheel_filename(path.name)
    return name, str(version)


def _pip_download(specs: list[str], info: PyodideInfo, dest: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--platform", info.platform_tag, "--platform", "any",
        "--python-version", info.python_tag[2:], "--implementation", "cp",
        "--abi", info.python_tag, "--abi", "abi3", "--abi", "none",
        "--dest", str(dest), *specs,
    ]
    subprocess.run(cmd, check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


def download_pins(pins: dict[NormalizedName, str], info: PyodideInfo, folder: Path) -> dict[NormalizedName, Path]:
    """One wheel per pin in ``folder``: those already there are kept, the rest come from PyPI;
    wheels of anything no longer pinned are removed."""
    folder.mkdir(parents=True, exist_ok=True)

    def present() -> dict[NormalizedName, Path]:
        found: dict[NormalizedName, Path] = {}
        for path in sorted(folder.glob("*.whl")):
            name, version = _wheel_key(path)
            if name == "nbagent":
                continue
            if pins.get(name) != version:
                path.unlink()  # an old pin's wheel
                continue
            found[name] = path
        return found

    have = present()
    missing = [f"{name}=={version}" for name, version in pins.items() if name not in have]
    if missing:
        _pip_download(missing, info, folder)
        have = present()
    still = sorted(set(pins) - set(have))
    if still:
        raise RuntimeError(f"no wheel for Pyodide {info.version} ({info.platform_tag}) was found for: {', '.join(still)}")
    return have


def build_nbagent_wheel(folder: Path, repo: Path = REPO) -> Path:
    """nbagent's wheel from this checkout, built in a temporary copy (no build/ or egg-info
    left in the checkout), replacing any older one in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nbagent-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in SOURCES:
            item = repo / name
            if item.is_dir():
                shutil.copytree(item, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(item, src / name)
        built = Path(tmp) / "dist"
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(built), str(src)],
            check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        (wheel,) = built.glob("nbagent-*.whl")
        for old in folder.glob("nbagent-*.whl"):
            old.unlink()
        return Path(shutil.copy2(wheel, folder / wheel.name))


def wheel_requirements(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as zf:
        (meta,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(zf.read(meta).decode("utf-8"))
    return [Requirement(r) for r in message.get_all("Requires-Dist") or []]


def check_closure(wheels: dict[NormalizedName, Path], roots: list[NormalizedName], env: dict[str, str]) -> None:
    """Every requirement reachable from ``roots`` (markers evaluated in ``env``) is met by one
    of ``wheels``, and every wheel is reachable. Raises ValueError naming what is wrong."""
    versions = {name: _wheel_key(path)[1] for name, path in wheels.items()}
    problems: list[str] = []
    seen: set[NormalizedName] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in wheel_requirements(wheels[name]):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = canonicalize_name(req.name)
            if dep not in versions:
                problems.append(f"{name} requires {req}, which has no wheel here")
            else:
                if not req.specifier.contains(versions[dep], prereleases=True):
                    problems.append(f"{name} requires {req}, but {dep}=={versions[dep]} is pinned")
                todo.append(dep)  # needed, even if at another version
    unused = sorted(set(wheels) - seen)
    if unused:
        problems.append(f"pinned but not needed in Pyodide: {', '.join(unused)}")
    if problems:
        raise ValueError("lite/requirements-pyodide.txt does not fit Pyodide:\n  " + "\n  ".join(problems))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_imports(path: Path) -> list[str]:
    """The top-level names a wheel makes importable (packages and modules), which Pyodide
    maps back to the wheel when a cell imports them."""
    names: set[str] = set()
    with zipfile.ZipFile(path) as zf:
        for entry in zf.namelist():
            top, _, rest = entry.partition("/")
            if top.endswith((".dist-info", ".data")):
                continue
            if rest and entry.endswith(".py"):
                names.add(top)
            elif not rest and top.endswith(".py"):
                names.add(top[:-3])
    return sorted(names)


def lock_entry(path: Path, template: dict[str, object], env: dict[str, str]) -> dict[str, object]:
    """One package of a ``pyodide-lock.json``, shaped as Pyodide's own entries: its file beside
    the lock (Pyodide checks the sha256), what it imports, what it depends on in Pyodide."""
    name, version = _wheel_key(path)
    depends = sorted({
        str(canonicalize_name(req.name))
        for req in wheel_requirements(path)
        if req.marker is None or req.marker.evaluate(env)
    })
    entry = dict(template)
    entry.update(name=str(name), version=version, file_name=path.name, sha256=_sha256(path),
                 imports=wheel_imports(path), depends=depends, install_dir="site", package_type="package")
    return entry


def write_lock(info: PyodideInfo, wheels: list[Path], folder: Path, pyodide_dir: Path = PYODIDE_DIR) -> Path:
    """A ``pyodide-lock.json`` of exactly ``wheels`` (files in ``folder``), with the info of
    the Pyodide from npm. Its packages load by name (``loadPackage``, micropip), or by a
    notebook cell's imports in the JupyterLite kernel; none is looked up on a CDN."""
    upstream = json.loads((pyodide_dir / LOCK).read_text(encoding="utf-8"))
    template = upstream["packages"]["micropip"]  # the fields Pyodide's entries have
    env = info.markers()
    packages = {}
    for path in sorted(wheels):
        entry = lock_entry(path, template, env)
        packages[str(entry["name"])] = entry
    lock = folder / LOCK
    lock.write_text(json.dumps({"info": upstream["info"], "packages": packages}, indent=2) + "\n", encoding="utf-8")
    return lock


def collect(folder: Path = OUT, *, lite: Path = LITE, repo: Path = REPO) -> Wheelhouse:
    pyodide_dir = ensure_pyodide(lite)
    info = pyodide_info(pyodide_dir)
    pins = read_pins(lite / PINS.name)
    wheels = download_pins(pins, info, folder)
    nbagent = build_nbagent_wheel(folder, repo)
    if canonicalize_name("micropip") not in wheels:
        raise ValueError(f"{PINS.name} must pin micropip (Pyodide's lock would fetch it from a CDN)")
    everything = {**wheels, canonicalize_name("nbagent"): nbagent}
    check_closure(everything, [canonicalize_name("nbagent"), canonicalize_name("micropip")], info.markers())
    all_wheels = sorted(everything.values())
    lock = write_lock(info, all_wheels, folder, pyodide_dir)
    return Wheelhouse(folder, nbagent, tuple(all_wheels), lock, info, pyodide_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"the folder (default {OUT.relative_to(REPO)})")
    args = parser.parse_args(argv)
    house = collect(args.out)
    size = sum(p.stat().st_size for p in house.wheels) / 1e6
    print(f"Pyodide {house.pyodide.version} (Python {house.pyodide.python}, {house.pyodide.platform_tag}): "
          f"{len(house.wheels)} wheels, {size:.1f} MB in {house.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
