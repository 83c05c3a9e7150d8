"""The README's two commands besides `make test`: `make demo` (headless quick start, HTML report
and SVG DAG) and `make lab` (JupyterLab on notebooks/)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import re
from pathlib import Path

import pytest

from nbagent import demo

REPO = Path(__file__).resolve().parent.parent


def test_demo_writes_a_report_and_the_dag_as_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "answer: 121 * 3 is 363." in printed and "steps: 3 (1 undone)" in printed
    svg = (tmp_path / "out" / "dag.svg").read_text(encoding="utf-8")
    # two live steps, the undone run with what it did, and the step it had queued (never ran)
    assert svg.count('class="node"') == 4 and "answer: 121 * 3 is 363." in svg
    assert "#1 undone run" in svg and "thought: I need to multiply." in svg
    assert 'stroke-dasharray' in svg  # the undone branch is drawn dashed
    report = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert report.startswith("<!DOCTYPE html>") and "<svg" in report and "121 * 3 is 363." in report
    assert "<script" not in report.lower()  # self-contained, opens offline


def test_demo_without_dot_still_writes_the_report_and_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no `dot` on PATH
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all
    assert demo.main(["--out", str(tmp_path / "out")]) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["dag.dot", "report.html"]
    assert "digraph" in (tmp_path / "out" / "dag.dot").read_text(encoding="utf-8")
    assert "apt-get install graphviz" in capsys.readouterr().err


def test_demo_without_system_graphviz_draws_with_graphviz_pure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no `dot` on PATH: graphviz-pure (a dependency) draws
    monkeypatch.delenv("NBAGENT_DOT", raising=False)
    assert demo.main(["--out", str(tmp_path / "out")]) == 0
    svg = (tmp_path / "out" / "dag.svg").read_text(encoding="utf-8")
    assert "graphviz-pure" in svg and svg.count('class="node"') == 4


def test_demo_is_reproducible(tmp_path: Path) -> None:
    demo.main(["--out", str(tmp_path / "a")])
    demo.main(["--out", str(tmp_path / "b")])
    # byte for byte, but for the measured step times ("0.00 s" on a quiet machine)
    def same(name: str) -> str:
        return re.sub(r"\b\d+\.\d\d s\b", "N.NN s", (tmp_path / name / "dag.svg").read_text(encoding="utf-8"))

    assert same("a") == same("b")


def _make(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload]


def test_makefile_targets_do_what_the_readme_says() -> None:
    dry = {target: _make("-n", target).stdout for target in ("test", "lab", "demo", "nbval")}
    assert "-m pytest tests" in dry["test"] and "NBAGENT_BLOCK_NETWORK=1" in dry["test"]
    assert "pip install -q -e '.[dev]'" in _make("-n", "-B", "test").stdout  # sets up .venv first
    assert "-m jupyterlab --ServerApp.root_dir=notebooks" in dry["lab"]
    assert "-m nbagent.demo --out demo_output" in dry["demo"]
    assert "--nbval --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks" in dry["nbval"]


def _venv_is_this_one() -> bool:
    return Path(sys.prefix).resolve() == (REPO / ".venv").resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_make_lab_serves_the_notebooks(tmp_path: Path) -> None:
    """Start `make lab` for real (no browser, a free port), check it serves notebooks/, stop it."""
    if not _venv_is_this_one():
        pytest.skip("make lab uses the repo's .venv; these tests run in another environment")
    if _make("-q", ".venv/.installed").returncode != 0:
        pytest.skip(".venv is not up to date with pyproject.toml: make lab would install first")
    port, token = _free_port(), "make-lab-test"
    flags = f"--no-browser --ServerApp.port={port} --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    env = dict(os.environ)
    for name, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_WORKSPACES_DIR", "ws")):
        env[name] = str(tmp_path / sub)
    proc = subprocess.Popen(
        ["make", "-C", str(REPO), "lab", f"LAB_FLAGS={flags}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"make lab did not start JupyterLab (exit {proc.poll()})") from None
                time.sleep(0.3)
        listing = json.loads(urllib.request.urlopen(f"{base}/api/contents/?token={token}", timeout=10).read())
        assert "01_quickstart.ipynb" in {item["name"] for item in listing["content"]}
        page = urllib.request.urlopen(f"{base}/lab/tree/01_quickstart.ipynb?token={token}", timeout=10)
        assert page.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make and the server it started: our own group
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_readme_links_to_files_that_exist() -> None:
    """The picture, the notebooks and the commands the README names are really there."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme):
        assert (REPO / target).is_file(), f"README shows {target}, which does not exist"
    for name in re.findall(r"\| `(\d\d_[a-z_]+)` \|", readme):
        assert (REPO / "notebooks" / f"{name}.ipynb").is_file(), f"README lists notebook {name}"
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("lab", "test", "demo"):
        assert f"make {target}" in readme and re.search(rf"^{target}:", makefile, re.M)


def test_a_thread_making_ids_meanwhile_does_not_change_a_seeded_block() -> None:
    """The root cause of the demo's rare "SVG differs" flake: another thread (a leftover timer,
    a panel run, a background loop) made ids while the demo's ``seeded_ids(0)`` block ran,
    drawing from its sequence. The block's sequence is its own, also in tasks it starts."""
    import asyncio
    import threading

    from nbagent.ids import new_id, seeded_ids

    with seeded_ids(0):
        clean = [new_id() for _ in range(3)]
    other: list[str] = []
    with seeded_ids(0):
        first = new_id()
        t = threading.Thread(target=lambda: other.extend(new_id() for _ in range(5)))
        t.start()
        t.join()

        async def in_a_task() -> str:
            return new_id()

        rest = [asyncio.run(in_a_task()), new_id()]
    assert [first, *rest] == clean
    assert not set(other) & set(clean)


def test_a_seeded_block_reaches_a_sync_call_made_from_inside_a_running_call() -> None:
    """run_sync re-entered from its own loop runs the work on a new thread: in the block's
    context all the same, so its ids come from the block's sequence."""
    import asyncio

    from nbagent._sync import run_sync
    from nbagent.ids import new_id, seeded_ids

    async def make() -> str:
        return new_id()

    async def outer() -> list[str]:
        return [new_id(), run_sync(make())]  # a sync call made on the running loop

    with seeded_ids(1):
        clean = [new_id(), new_id()]
    async def notebook_cell() -> list[str]:  # a loop runs: outer runs on the portal loop
        return run_sync(outer())

    with seeded_ids(1):
        assert asyncio.run(notebook_cell()) == clean
