"""StepGraph: DOT source, SVG through the real ``dot``, and the HTML fallback when it is missing."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nbagent import TaskStep, seed_ids
from nbagent.viz.dot import model as dot_model
from nbagent.viz import graph as graph_module
from nbagent.viz.dot import task_to_dot
from nbagent.viz.graph import GraphvizError, GraphvizNotFoundError, StepGraph
from tests.test_viz_dot import HOSTILE, dot_available, hostile_state, run_plan

PLAN: list[Any] = [{"out": "a"}, {"out": "b"}, {"out": "done <now>", "last": True}]


def _graph_runner(steps: int = 3) -> Any:
    runner, task = run_plan([dict(p) for p in PLAN], steps=steps)
    return runner, task


def _hide_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # and no graphviz-pure: no dot at all


def test_runner_graph_source_is_the_dot_text_and_follows_the_state() -> None:
    runner, task = _graph_runner(steps=1)
    g = runner.graph(task)
    state = runner.state_of(task)
    assert isinstance(g, StepGraph) and g.source == task_to_dot(state)
    runner.run_step(task)
    assert "#2 done" in g.source  # a live view: re-displaying shows the current state
    assert runner.graph(task, rankdir="LR").source == task_to_dot(state, rankdir="LR")
    assert runner.graph().state is state  # the latest task by default


def test_mimebundle_with_dot_is_svg() -> None:
    if not dot_available():
        return
    runner, task = _graph_runner()
    bundle = runner.graph(task)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "image/svg+xml"}
    svg = bundle["image/svg+xml"]
    assert svg.startswith("<svg") and svg.count('class="node"') == 3
    assert "done &lt;now&gt;" in svg
    assert "StepGraph(task=" in bundle["text/plain"] and "3 done" in bundle["text/plain"]
    assert runner.graph(task).svg() == svg
    assert runner.graph(task).pipe("svg").decode().endswith(svg)


def test_mimebundle_without_dot_is_html_timeline_with_escaped_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, task = hostile_state()
    g = runner.graph(task)
    _hide_dot(monkeypatch, tmp_path)
    bundle = g._repr_mimebundle_()
    # the browser draws the picture (graphviz-anywidget's WASM Graphviz); the HTML is its fallback
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"}
    page = bundle["text/html"]
    for status in ("done", "failed", "blocked"):
        assert f'<span class="nb-badge nb-s-{status}">{status}</span>' in page
    assert "<details><summary>DOT source</summary><pre>digraph task {" in page
    assert "label=&lt;&lt;TABLE" in page and "&lt;B&gt;task" in page  # the DOT source, escaped once more
    assert "&amp;lt;script&amp;gt;alert(1)" in page
    for raw in (HOSTILE[0], HOSTILE[1], HOSTILE[3]):
        assert raw not in page
    assert page.count("</style>") == 1  # only our own style block
    assert g.svg() is None
    with pytest.raises(GraphvizNotFoundError, match="no Graphviz 'dot' program was found"):
        g.pipe()
    with pytest.raises(GraphvizNotFoundError):
        g.save(tmp_path / "g.svg")


def test_forced_html_renderer_even_with_dot() -> None:
    runner, task = _graph_runner()
    bundle = StepGraph(runner.state_of(task), renderer="html")._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert "nb-timeline" in bundle["text/html"] and "done &lt;now&gt;" in bundle["text/html"]
    with pytest.raises(ValueError, match="renderer must be one of"):
        StepGraph(runner.state_of(task), renderer="png")  # type: ignore[arg-type]


def test_include_exclude_keep_text_plain() -> None:
    runner, task = _graph_runner()
    g = StepGraph(runner.state_of(task), renderer="html")
    assert set(g._repr_mimebundle_(exclude=["text/html"])) == {"text/plain"}
    assert set(g._repr_mimebundle_(include=["text/html"])) == {"text/plain", "text/html"}
    assert set(g._repr_mimebundle_(include=["image/svg+xml"])) == {"text/plain"}


def test_failing_dot_falls_back_to_html(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner, task = _graph_runner()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dot"
    fake.write_text("#!/bin/sh\necho 'Error: broken dot' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("NBAGENT_DOT", "system")  # the broken `dot` on PATH, not graphviz-pure
    g = runner.graph(task)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"} and "nb-timeline" in bundle["text/html"]
    with pytest.raises(GraphvizError, match="exit code 3: Error: broken dot"):
        g.pipe()


def test_repr_never_raises_on_odd_or_broken_state(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, task = _graph_runner(steps=1)
    state = runner.state_of(task)
    ghost = TaskStep(task_id=task.task_id, step_id="ghost", input=HOSTILE[0])
    next(iter(state.steps.values())).link_step(ghost)  # linked but never registered
    state.undone_edges.append(("nowhere", "ghost"))
    bundle = runner.graph(task)._repr_mimebundle_()
    assert "text/plain" in bundle and len(bundle) == 2

    def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("renderer <exploded>")

    g = runner.graph(task)
    monkeypatch.setattr("nbagent.viz.graph.task_to_dot", broken)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert "RuntimeError: renderer &lt;exploded&gt;" in bundle["text/html"]
    monkeypatch.setattr(dot_model, "STATUS_ORDER", ())  # status_summary now fails inside repr
    assert "StepGraph(" in repr(g)


def test_bad_options_fail_at_construction() -> None:
    runner, task = _graph_runner(steps=0)
    with pytest.raises(ValueError, match="rankdir"):
        runner.graph(task, rankdir="up")
    with pytest.raises(TypeError, match="unknown graph option"):
        runner.graph(task, colour="red")


def test_save_by_suffix(tmp_path: Path) -> None:
    runner, task = _graph_runner()
    g = runner.graph(task)
    assert g.save(tmp_path / "g.dot") == str(tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text(encoding="utf-8") == g.source
    g.save(tmp_path / "g.gv")
    with pytest.raises(ValueError, match=r"cannot save a step graph as '\.txt'.*\.dot, \.gv, \.svg"):
        g.save(tmp_path / "g.txt")
    if dot_available():
        g.save(tmp_path / "g.svg")
        assert (tmp_path / "g.svg").read_text(encoding="utf-8").count('class="node"') == 3
        g.save(tmp_path / "g.png")
        assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")


def test_pipe_rejects_odd_formats() -> None:
    runner, task = _graph_runner(steps=0)
    with pytest.raises(ValueError, match="format must be a Graphviz output format"):
        runner.graph(task).pipe("svg; rm -rf /")


def test_same_state_same_bundle() -> None:
    seed_ids(0)
    runner, task = _graph_runner()
    g = runner.graph(task)
    assert g._repr_mimebundle_() == g._repr_mimebundle_()
    assert StepGraph(runner.state_of(task), renderer="html").html() == StepGraph(
        runner.state_of(task), renderer="html"
    ).html()


# ----- which dot: graphviz-pure (a dependency) by default, the system one on request ---------


def _no_system_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "no-dot-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(graph_module.DOT_ENV, raising=False)


def test_without_system_graphviz_graphs_are_drawn_by_graphviz_pure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_system_dot(monkeypatch, tmp_path)
    assert shutil.which("dot") is None
    exe = graph_module.find_dot()
    assert exe is not None and os.path.basename(exe) == "graphviz-pure"
    runner, task = _graph_runner()
    bundle = runner.graph(task)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "image/svg+xml"}  # a picture, not the fallback list
    svg = bundle["image/svg+xml"]
    assert svg.startswith("<svg") and svg.count('class="node"') == 3 and "answer: done &lt;now&gt;" in svg
    runner.graph(task).save(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")
    # graphviz-pure writes no PDF yet: a clear error, not a crash, when no system dot can
    with pytest.raises(GraphvizError, match="graphviz-pure cannot write PDF yet.*save as .svg or .png"):
        runner.graph(task).save(tmp_path / "g.pdf")


def test_graphviz_pure_output_is_the_same_bytes_every_time() -> None:
    state, _ = _hostile_and_undo_states()
    source = task_to_dot(state)
    first = graph_module.pipe_dot(source, "svg")
    assert first == graph_module.pipe_dot(source, "svg")
    assert b"graphviz-pure" in first  # the default program


def test_nbagent_dot_chooses_the_program(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(graph_module.DOT_ENV, "pure")
    assert os.path.basename(graph_module.find_dot() or "") == "graphviz-pure"
    monkeypatch.setenv(graph_module.DOT_ENV, "system")
    assert graph_module.find_dot() == shutil.which("dot")
    if shutil.which("dot"):
        runner, task = _graph_runner()
        assert b"graphviz-pure" not in runner.graph(task).pipe("svg")
        assert runner.graph(task).pipe("pdf").startswith(b"%PDF")
    monkeypatch.setenv(graph_module.DOT_ENV, str(tmp_path / "nowhere" / "dot"))
    assert graph_module.find_dot() is None
    runner, task = _graph_runner()
    with pytest.raises(GraphvizNotFoundError, match=r"NBAGENT_DOT='.*nowhere.*' names no program"):
        runner.graph(task).pipe()
    assert "text/html" in runner.graph(task)._repr_mimebundle_()  # the display still falls back


def _hostile_and_undo_states() -> tuple[Any, Any]:
    hostile = hostile_state()
    runner, task = hostile
    undo_runner, undo_task = run_plan(
        [{"out": "a", "fanout": 2}, {"out": "b", "thought": "t"}, {"out": "c", "last": True}], steps=3)
    undo_runner.undo_step(undo_task)
    undo_runner.undo_step(undo_task)
    undo_runner.run_step(undo_task)
    return runner.state_of(task), undo_runner.state_of(undo_task)


def _svg_parts(svg: bytes) -> list[tuple[Any, ...]]:
    """What a drawing says, without where: per node/edge/cluster its id, title, texts, colours."""
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svg)
    parts = []
    for g in root.iter(ns + "g"):
        if g.get("class") not in ("node", "edge", "cluster", "graph"):
            continue
        title = g.find(ns + "title")
        texts = tuple(t.text or "" for t in g.iter(ns + "text"))
        paint = tuple(
            (c.tag, c.get("fill"), c.get("stroke"), c.get("stroke-dasharray"), c.get("font-weight"), c.get("font-style"))
            for c in g.iter() if c is not g and c.tag != ns + "title"
        )
        parts.append((g.get("class"), g.get("id"), title.text if title is not None else None, texts, paint))
    return parts


def test_graphviz_pure_draws_what_the_system_dot_draws() -> None:
    """graphviz-pure against Graphviz itself, on every kind of graph nbagent draws: the same
    nodes, edges, clusters, texts and colours (only positions differ: different font metrics)."""
    system = shutil.which("dot")
    if system is None:
        pytest.skip("Graphviz's own dot is not installed: nothing to compare graphviz-pure with")
    from tests.test_viz_dot import _long_run
    from tests.test_workflow_viz import handoff_workflow, traced_run
    from nbagent.viz.workflow_dot import agents_to_dot, run_to_dot

    hostile, undone = _hostile_and_undo_states()
    trace, _ = traced_run(handoff_workflow())
    sources = {
        "hostile": task_to_dot(hostile, legend=True),
        "undo": task_to_dot(undone, rankdir="LR"),
        "collapsed": task_to_dot(_long_run(60)),
        "agents": agents_to_dot(handoff_workflow()),
        "workflow run": run_to_dot(trace),
    }
    pure = graph_module.pure_dot()
    assert pure is not None
    for name, source in sources.items():
        ours, theirs = (
            subprocess.run([exe, "-Tsvg"], input=source.encode(), capture_output=True, check=True).stdout
            for exe in (pure, system)
        )
        a, b = _svg_parts(ours), _svg_parts(theirs)
        # Graphviz 2.x paints an invisible background "transparent", graphviz-pure "none"
        norm = [[tuple(tuple("none" if v == "transparent" else v for v in p) for p in part[4])] for part in b]
        assert [p[:4] for p in a] == [p[:4] for p in b], name
        assert [[p[4]] for p in a] == norm, name
