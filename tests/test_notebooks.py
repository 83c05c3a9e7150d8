"""Every notebook in notebooks/ passes nbval in strict mode, offline, and is a proper tutorial.

nbval runs each notebook top to bottom in a fresh kernel and compares every output with the
stored one (strict ``--nbval``, not ``--nbval-lax``); ``tests/nbval_sanitize.cfg`` only hides
what cannot be stable (memory addresses, measured step times, Graphviz geometry). It runs in a
child pytest with the OpenAI variables removed and ``NBAGENT_BLOCK_NETWORK=1``, so a
developer's key can neither change the outputs nor spend money. New notebooks are picked up by
the glob: nothing to register.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
BUILD_DIR = NOTEBOOK_DIR / "build"
SANITIZE = REPO / "tests" / "nbval_sanitize.cfg"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TUTORIALS = [
    "01_quickstart",
    "02_react_step_by_step",
    "03_function_calling",
    "04_custom_workers",
    "05_control_panel",
    "06_memory_abandon_chat",
]
REAL_MODEL_HEADING = "Use a real model (optional)"
REAL_MODEL_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "NBAGENT_MODEL", "NBAGENT_LOCAL_MODEL")


_NO_DOT_PATH: str | None = None


def _path_without_system_dot() -> str:
    """PATH with Graphviz's own ``dot`` taken out (made once): the notebooks' graphs must come
    from graphviz-pure, installed by pip, exactly as on a machine with no system package."""
    global _NO_DOT_PATH
    if _NO_DOT_PATH is None:
        import tempfile

        from tests.browser.jlab import path_without

        _NO_DOT_PATH = path_without({"dot"}, Path(tempfile.mkdtemp(prefix="nbagent-nodot-")) / "bin")
    return _NO_DOT_PATH


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*REAL_MODEL_VARS, "NBAGENT_DOT")}
    env["NBAGENT_BLOCK_NETWORK"] = "1"
    env["PATH"] = _path_without_system_dot()
    env.pop("PYTEST_ADDOPTS", None)
    return env


def run_nbval(*paths: Path, cwd: Path = REPO, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval",
        "--nbval-sanitize-with", str(SANITIZE), *map(str, paths),
    ]
    return subprocess.run(cmd, cwd=cwd, env=offline_env(), capture_output=True, text=True, timeout=timeout)


def read(path: Path) -> Any:
    return nbformat.read(path, as_version=4)


def code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code"]


def switch_cell(nb: Any) -> Any | None:
    """The code cell right after the 'Use a real model (optional)' heading."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and REAL_MODEL_HEADING in cell.source:
            later = [c for c in nb.cells[i + 1 :] if c.cell_type == "code"]
            return later[0] if later else None
    return None


ids = [p.stem for p in NOTEBOOKS]


def test_the_tutorials_are_there() -> None:
    missing = [name for name in TUTORIALS if not (NOTEBOOK_DIR / f"{name}.ipynb").exists()]
    assert not missing, f"missing notebooks: {missing}"


def need_dot() -> None:
    """The stored graphs are SVG from graphviz-pure (a dependency): without it every graph
    cell would differ."""
    from nbagent.viz.graph import pure_dot

    if pure_dot() is None:
        pytest.fail("graphviz-pure is not installed (pip install -e '.[dev]' installs it)")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_notebook_passes_strict_nbval_offline(notebook: Path) -> None:
    need_dot()
    result = run_nbval(notebook.relative_to(REPO))
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-80:])
    assert result.returncode == 0, f"nbval failed for {notebook.name}:\n{tail}"
    assert re.search(r"\b\d+ passed\b", result.stdout) and " failed" not in result.stdout, tail


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_notebook_is_stored_executed_in_order_without_errors(notebook: Path) -> None:
    nb = read(notebook)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    counts = [c.execution_count for c in code_cells(nb) if c.source.strip()]
    assert counts == list(range(1, len(counts) + 1)), f"{notebook.name}: not run top to bottom once: {counts}"
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{notebook.name} cell {i} stores an error: {out.get('evalue')}"
            if out.output_type == "stream":
                assert out.name == "stdout", f"{notebook.name} cell {i} stores stderr: {out.text[:300]}"
    assert "widgets" not in nb.metadata, f"{notebook.name}: stored widget state (build with store_widget_state=False)"
    assert notebook.stat().st_size < 1_500_000, f"{notebook.name} is {notebook.stat().st_size} bytes"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "starts with a title"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_notebook_has_one_marked_real_model_cell(notebook: Path) -> None:
    nb = read(notebook)
    headings = [c for c in nb.cells if c.cell_type == "markdown" and REAL_MODEL_HEADING in c.source]
    assert len(headings) == 1, f"{notebook.name}: needs exactly one '{REAL_MODEL_HEADING}' heading"
    cell = switch_cell(nb)
    assert cell is not None
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "NBAGENT_MODEL"):
        assert var in cell.source or var in headings[0].source, f"{notebook.name}: {var} not mentioned"
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert "offline" in printed, f"{notebook.name}: the stored run must say it stayed offline"


class _OfflineModels(dict):  # type: ignore[type-arg]
    """The switch cell's namespace: any model variable it reads (``llm``, ``writer_llm``...)
    starts as an offline model, as in the notebook; other names fall through to builtins."""

    def __missing__(self, key: str) -> Any:
        if key == "llm" or key.endswith("_llm"):
            from nbagent import ScriptedLLM

            self[key] = ScriptedLLM(["hi"])
            return self[key]
        raise KeyError(key)


def _run_switch(cell: Any, name: str) -> _OfflineModels:
    namespace = _OfflineModels()
    exec(compile(cell.source, f"{name}:switch", "exec"), {"__builtins__": __builtins__}, namespace)  # noqa: S102
    return namespace


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_real_model_cell_switches_on_the_environment(notebook: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from nbagent import OpenAILLM

    cell = switch_cell(read(notebook))
    assert cell is not None
    for var in REAL_MODEL_VARS:
        monkeypatch.delenv(var, raising=False)
    offline = _run_switch(cell, notebook.name)
    assert not [v for v in offline.values() if isinstance(v, OpenAILLM)], "no variable set: stays offline"
    assert "offline" in capsys.readouterr().out

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("NBAGENT_MODEL", "my-local-model")
    real = [v for v in _run_switch(cell, notebook.name).values() if isinstance(v, OpenAILLM)]
    assert real, f"{notebook.name}: with OPENAI_BASE_URL set, the cell makes no OpenAILLM"
    for model in real:
        assert model.model == "my-local-model" and model.base_url == "http://127.0.0.1:9/v1"
    assert "my-local-model" in capsys.readouterr().out


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_real_model_cell_offers_the_local_model_third(notebook: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No key, no URL, NBAGENT_LOCAL_MODEL set: the cell makes a LocalLLM (a stand-in class
    here; tests/test_local_llm.py starts the real one). A key or a URL still wins."""
    import nbagent

    made: list[str] = []

    class FakeLocal:
        def __init__(self, model: str) -> None:
            made.append(model)

        def __repr__(self) -> str:
            return f"LocalLLM({made[-1]!r})"

    monkeypatch.setattr(nbagent, "LocalLLM", FakeLocal, raising=False)
    cell = switch_cell(read(notebook))
    assert cell is not None
    for var in REAL_MODEL_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NBAGENT_LOCAL_MODEL", "smollm2-135m")
    local = [v for v in _run_switch(cell, notebook.name).values() if isinstance(v, FakeLocal)]
    assert local and made == ["smollm2-135m"] * len(local), notebook.name
    assert "local model" in capsys.readouterr().out
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    made.clear()
    _run_switch(cell, notebook.name)
    assert made == [], f"{notebook.name}: a base URL must win over the local model"


def _builder(notebook: Path) -> Any | None:
    """The module of notebooks/build/build_NN.py, if it lists its cells as NAME and CELLS."""
    path = BUILD_DIR / f"build_{notebook.stem[:2]}.py"
    if not path.exists():
        return None
    sys.path.insert(0, str(BUILD_DIR))
    try:
        spec = importlib.util.spec_from_file_location(f"_nb_builder_{notebook.stem[:2]}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BUILD_DIR))
    if getattr(module, "NAME", None) != notebook.stem or not hasattr(module, "CELLS"):
        return None
    return module


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_notebook_matches_its_builder(notebook: Path) -> None:
    """A builder edited without rebuilding its notebook is caught here."""
    module = _builder(notebook)
    assert module is not None, (
        f"{notebook.name} has no builder: notebooks/build/build_{notebook.stem[:2]}.py with NAME and CELLS"
    )
    built = [(c.cell_type, c.source) for c in module.CELLS]
    stored = [(c.cell_type, c.source) for c in read(notebook).cells]
    assert stored == built, (
        f"{notebook.name} differs from notebooks/build/build_{notebook.stem[:2]}.py: "
        f"rebuild it with `.venv/bin/python notebooks/build/build_{notebook.stem[:2]}.py`"
    )


def test_notebooks_that_replay_a_cassette_say_so() -> None:
    from nbagent import ReplayLLM

    replaying = 0
    for notebook in NOTEBOOKS:
        nb = read(notebook)
        source = "\n".join(c.source for c in code_cells(nb))
        cassettes = re.findall(r"ReplayLLM\(\s*[\"']([^\"']+\.json)[\"']\s*\)", source)
        if not cassettes:
            continue
        replaying += 1
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
        assert "cassette" in prose and "recorded" in prose, f"{notebook.name} must say its replies are recorded"
        for rel in cassettes:
            llm = ReplayLLM(NOTEBOOK_DIR / rel)  # exists, is a cassette of this version
            assert llm.recorded > 0
            data = json.loads((NOTEBOOK_DIR / rel).read_text(encoding="utf-8"))
            if data.get("model") == "scripted":  # recorded from a stand-in: the text must be honest
                assert "scriptedllm" in prose and "not** recorded from a real model" in prose, notebook.name
    assert replaying, "03_function_calling replays a cassette"


def test_strict_mode_catches_a_changed_output(tmp_path: Path) -> None:
    """The wiring is strict: a changed printed line and a changed graph label both fail."""
    need_dot()
    source = NOTEBOOK_DIR / "01_quickstart.ipynb"
    nb = read(source)
    mutated = copy.deepcopy(nb)
    printed = svg = 0
    for cell in mutated.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and "observation: 363" in out.text and not printed:
                out.text = out.text.replace("observation: 363", "observation: 364")
                printed += 1
            svg_text = out.get("data", {}).get("image/svg+xml")
            if svg_text and ">obs: 363<" in svg_text and not svg:
                out.data["image/svg+xml"] = svg_text.replace(">obs: 363<", ">obs: 364<")
                svg += 1
    assert printed == 1 and svg == 1, "01_quickstart changed: update this test's mutations"
    target = tmp_path / "01_quickstart.ipynb"
    nbformat.write(mutated, target)
    result = run_nbval(target, cwd=tmp_path)
    assert result.returncode != 0 and re.search(r"\b2 failed\b", result.stdout), result.stdout[-3000:]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=ids)
def test_the_cell_after_the_title_says_what_differs_in_a_browser(notebook: Path) -> None:
    """Issue 24: a tutorial run in the browser says so. Its first code cell calls browser_note,
    which prints nothing here (stored outputs unchanged); the notebooks the browser site leaves
    out say what they need that a browser cannot give."""
    sys.path.insert(0, str(REPO))
    from lite.build_site import NOTEBOOKS as IN_THE_SITE

    nb = read(notebook)
    cell = nb.cells[1]
    assert cell.cell_type == "code" and cell.source.startswith("from nbagent.runtime import browser_note\n")
    assert cell.outputs == []
    assert ("cannot=" in cell.source) is (notebook.stem not in IN_THE_SITE), cell.source
