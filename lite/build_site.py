"""Build the JupyterLite site of the tutorials: static files that run nbagent in the browser.

Everything comes from PyPI and npm packages, and nothing is fetched at run time:

- Pyodide is npm's ``pyodide`` (``lite/node_modules``), copied into the site and named as the
  kernel's ``pyodideUrl``; its ``pyodide-lock.json`` is ``collect_wheels``'s, holding micropip
  only, so no package can be looked up on Pyodide's CDN.
- nbagent's wheel and its dependencies (``collect_wheels``) sit beside Pyodide with a lock
  file of exactly them, so ``from nbagent import ...`` in a cell loads them (the kernel loads
  a cell's imports from the lock); ``%pip install`` finds them there too, as piplite's PyPI
  fallback is switched off (``disablePyPIFallback``).
- The front end is jupyterlite-core and jupyterlite-pyodide-kernel (``requirements-build.txt``)
  in a virtualenv of their own (``build/lite/venv``), so no other front-end extension that
  happens to be installed gets in; the widget extensions come from the very wheels the kernel
  installs (jupyterlab-widgets for ipywidgets, anywidget for the live graph).
- The contents are the notebooks that need no subprocess, MCP server or local model
  (``NOTEBOOKS``), and the cassette notebook 03 replays.

``python lite/build_site.py`` (``make lite``) writes ``build/lite/site``; ``lite/serve.py``
(``make lite-serve``) serves it on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lite.collect_wheels import LITE, REPO, Wheelhouse, collect  # noqa: E402

BUILD = REPO / "build" / "lite"
SITE = BUILD / "site"
VENV = BUILD / "venv"
STAGE = BUILD / "site-stage"
#: the tutorials a browser can run: 10 needs an MCP server (a subprocess), 13 a local model,
#: 14 the otel extra (OpenTelemetry is not among the browser's wheels)
NOTEBOOKS = (
    "01_quickstart", "02_react_step_by_step", "03_function_calling", "04_custom_workers",
    "05_control_panel", "06_memory_abandon_chat", "07_parallel_dag", "08_agent_workflow",
    "09_save_resume_fork", "11_batch_eval", "12_approval_typed_answers",
)
#: data files the notebooks read, relative to notebooks/
NOTEBOOK_DATA = ("cassettes",)
KERNEL_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
#: front-end extensions taken from the wheels the kernel installs (each ships a labextension)
FRONTEND_WHEELS = ("jupyterlab_widgets", "anywidget")
APPS = ("lab", "notebooks", "tree")


def build_venv(venv_dir: Path = VENV, requirements: Path = LITE / "requirements-build.txt") -> Path:
    """A virtualenv with exactly the pinned JupyterLite build tools; rebuilt when the pins change."""
    stamp = venv_dir / ".requirements-sha256"
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    python = venv_dir / "bin" / "python"
    if python.exists() and stamp.is_file() and stamp.read_text() == want:
        return venv_dir
    shutil.rmtree(venv_dir, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(requirements)],
        check=True,
    )
    stamp.write_text(want)
    return venv_dir


def write_for_lite(source: Path, target: Path) -> None:
    """Copy a notebook with every multi-line text as one string, not a list of lines.

    nbformat writes a stored output's HTML or text as a list of lines, and a Jupyter server
    joins them again when it serves the file; JupyterLite serves the file as it is, and its
    front end shows such an output with a comma between lines (jupyterlite/jupyterlite#1105:
    a tool card's JSON schema read ``,  "properties": {``)."""
    import nbformat

    nb = nbformat.read(source, as_version=4)  # (reading joins the lines)
    target.write_text(nbformat.writes(nb, split_lines=False), encoding="utf-8")


def stage(
    house: Wheelhouse,
    stage_dir: Path = STAGE,
    notebooks: Path = REPO / "notebooks",
    *,
    extra_files: Sequence[Path] = (),
    expose_app: bool = False,
) -> Path:
    """The ``lite_dir`` jupyter lite builds from: config, Pyodide, wheels and contents.

    Tests add ``extra_files`` to the contents and ``expose_app`` (``window.jupyterapp``, which
    lets them read cell outputs from the notebook model); the published site has neither."""
    shutil.rmtree(stage_dir, ignore_errors=True)
    stage_dir.mkdir(parents=True)

    pyodide = stage_dir / "static" / "pyodide"  # the kernel addon's well-known place for it
    shutil.copytree(house.pyodide_dir, pyodide, ignore=shutil.ignore_patterns("*.map", "*.d.ts", "*.html", "README.md"))
    shutil.copy2(house.lock, pyodide / "pyodide-lock.json")  # replaces the CDN one
    for wheel in house.wheels:
        shutil.copy2(wheel, pyodide / wheel.name)

    files = stage_dir / "files"
    files.mkdir()
    for name in NOTEBOOKS:
        write_for_lite(notebooks / f"{name}.ipynb", files / f"{name}.ipynb")
    for name in NOTEBOOK_DATA:
        shutil.copytree(notebooks / name, files / name)
    for extra in extra_files:
        shutil.copy2(extra, files / extra.name)

    frontend = [str(p) for p in house.wheels if p.name.split("-")[0] in FRONTEND_WHEELS]
    if len(frontend) != len(FRONTEND_WHEELS):
        raise RuntimeError(f"the front-end extensions need these wheels: {FRONTEND_WHEELS}; found {frontend}")
    config = {
        "LiteBuildConfig": {
            "apps": list(APPS),
            "contents": ["files"],
            "federated_extensions": frontend,
            "no_sourcemaps": True,
            "no_unused_shared_packages": True,
            "settings_overrides": ["overrides.json"],
        },
    }
    (stage_dir / "jupyter_lite_config.json").write_text(json.dumps(config, indent=2))
    (stage_dir / "overrides.json").write_text(json.dumps({
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    }, indent=2))
    runtime = {
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {
            "appName": "nbagent tutorials",
            **({"exposeAppInBrowser": "true"} if expose_app else {}),
            "litePluginSettings": {
                KERNEL_PLUGIN: {
                    "pyodideUrl": "./static/pyodide/pyodide.mjs",
                    "disablePyPIFallback": True,
                },
            },
        },
    }
    (stage_dir / "jupyter-lite.json").write_text(json.dumps(runtime, indent=2))
    return stage_dir


def jupyter_lite_build(venv_dir: Path, stage_dir: Path, site: Path, *, quiet: bool = False) -> None:
    """``jupyter lite build``; ``quiet`` keeps its log unless it fails."""
    shutil.rmtree(site, ignore_errors=True)
    cmd = [str(venv_dir / "bin" / "jupyter"), "lite", "build", "--lite-dir", str(stage_dir), "--output-dir", str(site)]
    done = subprocess.run(cmd, cwd=stage_dir, capture_output=quiet, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"jupyter lite build failed ({done.returncode})" + (f":\n{done.stdout[-6000:]}{done.stderr[-6000:]}" if quiet else ""))


def check_site(site: Path) -> dict[str, object]:
    """What the built site runs with, read back from its files; raises if it would reach
    outside itself (a CDN Pyodide, a PyPI fallback, a lock file naming other packages)."""
    config = json.loads((site / "jupyter-lite.json").read_text(encoding="utf-8"))["jupyter-config-data"]
    kernel = config["litePluginSettings"][KERNEL_PLUGIN]
    problems = []
    if kernel.get("pyodideUrl") != "./static/pyodide/pyodide.mjs":
        problems.append(f"pyodideUrl is {kernel.get('pyodideUrl')!r}, not the site's own Pyodide")
    if kernel.get("disablePyPIFallback") is not True:
        problems.append("piplite may fall back to PyPI (disablePyPIFallback is not true)")
    lock = json.loads((site / "static" / "pyodide" / "pyodide-lock.json").read_text(encoding="utf-8"))
    for name, entry in lock["packages"].items():
        if not (site / "static" / "pyodide" / entry["file_name"]).is_file():
            problems.append(f"the lock names {name}'s {entry['file_name']}, which the site lacks")
    urls = [u for u in kernel.get("pipliteUrls", []) if "://" in u]
    if urls:
        problems.append(f"piplite indexes outside the site: {urls}")
    if problems:
        raise RuntimeError("the site would not be self-contained:\n  " + "\n  ".join(problems))
    return {"pyodide_lock": sorted(lock["packages"]), "contents": sorted(p.name for p in (site / "files").iterdir())}


def build(
    site: Path = SITE, *, extra_files: Sequence[Path] = (), expose_app: bool = False, quiet: bool = False
) -> Path:
    house = collect()
    tools = build_venv()
    stage_dir = stage(house, site.parent / f"{site.name}-stage", extra_files=extra_files, expose_app=expose_app)
    jupyter_lite_build(tools, stage_dir, site, quiet=quiet)
    check_site(site)
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=SITE, help="the site folder (default build/lite/site)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    site = build(args.out)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 1e6
    print(f"JupyterLite site: {site} ({size:.0f} MB, built in {time.monotonic() - start:.0f} s); "
          f"serve it with `make lite-serve`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
