"""The API reference covers every public name exactly once (docs/api.toml), grouped by concept.

No Sphinx build here: the data file, the names it lists and the pages written from it.
tests/test_docs_site.py builds the site and checks what a reader sees.
"""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.docs_site import DOCS, docs_module

api_pages = docs_module("api_pages", DOCS / "_ext" / "api_pages.py")
PACKAGES, GROUPS = api_pages.load_groups()
LISTED = [e.name for g in GROUPS for e in g.entries]
ALIASES = {alias: target for g in GROUPS for alias, target in g.aliases.items()}
#: the concepts the reference is grouped by (issue 27)
CONCEPTS = {"runners", "workers", "tasks", "models", "tools", "approval", "typed-answers", "memory",
            "events", "workflows", "store", "batch", "views", "errors"}


def test_every_public_name_is_listed_exactly_once() -> None:
    public = api_pages.public_names(PACKAGES)
    counts = Counter(LISTED + list(ALIASES))
    twice = sorted(name for name, n in counts.items() if n > 1)
    assert not twice, f"listed more than once in docs/api.toml: {twice}"
    missing = sorted(set(public) - set(counts))
    assert not missing, f"public names missing from docs/api.toml (add each to the group of its concept): {missing}"
    unknown = sorted(set(counts) - set(public))
    assert not unknown, f"docs/api.toml lists names that are not public (in no package's __all__): {unknown}"


def test_every_listed_object_is_documented_once() -> None:
    """Two names of one object: one is an alias (so the object has one entry, not two)."""
    objects = Counter(id(api_pages.resolve(name)) for name in LISTED
                      if inspect.isclass(api_pages.resolve(name)) or inspect.isroutine(api_pages.resolve(name)))
    doubled = [name for name in LISTED if objects.get(id(api_pages.resolve(name)), 0) > 1]
    assert not doubled, f"the same object under two entries: {doubled}"
    for alias, target in ALIASES.items():
        assert api_pages.resolve(alias) is api_pages.resolve(target), f"{alias} is not {target}"
        assert target in LISTED, f"alias {alias} names {target}, which has no entry"


def test_groups_are_the_concepts() -> None:
    slugs = [g.slug for g in GROUPS]
    assert len(slugs) == len(set(slugs))
    assert CONCEPTS <= set(slugs), f"missing concepts: {CONCEPTS - set(slugs)}"
    assert all(g.entries and g.intro for g in GROUPS)


def test_public_names_dedupe_re_exports_but_not_other_objects() -> None:
    public = api_pages.public_names(["nbagent", "nbagent.workflow"])
    assert "nbagent.AgentWorkflow" in public and "nbagent.workflow.AgentWorkflow" not in public
    # a different class under the same name stays: the workflow agent is not the step-wise one
    assert public["nbagent.workflow.ReActAgent"] is not public["nbagent.ReActAgent"]


def test_a_class_lists_its_own_members_and_leaves_a_public_base_to_its_entry() -> None:
    import nbagent

    public = {nbagent.AgentRunner, nbagent.BaseAgent, nbagent.ReActAgent}
    runner = api_pages.class_members(nbagent.AgentRunner, public, full=True)
    assert {"run_step", "arun_step", "create_task", "chat", "undo_step"} <= set(runner)
    react = api_pages.class_members(nbagent.ReActAgent, public)
    assert "from_tools" in react and "run_step" not in react and "chat" not in react
    assert not [m for m in runner if m.startswith("_")]
    step = api_pages.class_members(nbagent.TaskStep, public)
    assert "model_dump" not in step, "pydantic's own methods are left to pydantic"


def test_pages_are_written_from_the_data_file(tmp_path: Path) -> None:
    pages = api_pages.write_pages(tmp_path / "reference")
    assert {p.stem for p in pages} == {g.slug for g in GROUPS} | {"index"}
    runners = (tmp_path / "reference" / "runners.rst").read_text(encoding="utf-8")
    assert ".. autoclass:: nbagent.AgentRunner" in runners and "run_step" in runners
    errors = (tmp_path / "reference" / "errors.rst").read_text(encoding="utf-8")
    assert ".. autoexception:: nbagent.PersistError" in errors
    index = (tmp_path / "reference" / "index.rst").read_text(encoding="utf-8")
    assert "/reference-audit" in index, "the LlamaIndex reference audit is a page of the reference"
    (tmp_path / "reference" / "gone.rst").write_text("stale")
    before = (tmp_path / "reference" / "runners.rst").stat().st_mtime_ns
    api_pages.write_pages(tmp_path / "reference")
    assert not (tmp_path / "reference" / "gone.rst").exists()
    assert (tmp_path / "reference" / "runners.rst").stat().st_mtime_ns == before, "unchanged pages are not rewritten"


@pytest.mark.parametrize("text, rst", [
    ("use `run_step`", "use ``run_step``"),
    ("see [Errors](errors.rst)", "see :doc:`Errors <errors>`"),
    ("already ``literal``", "already ``literal``"),
])
def test_intro_markdown_becomes_rst(text: str, rst: str) -> None:
    assert api_pages._md_to_rst(text) == rst


def test_example_links_prefer_pages_that_use_the_class() -> None:
    import nbagent

    links = docs_module("example_links", DOCS / "_ext" / "example_links.py")
    code = {
        "tutorials/01_a": "handler = wf.run(stepwise=True)\nawait handler.run_step()",
        "tutorials/02_b": "agent = ReActAgent.from_tools([])\nagent.run_step(task)",
        "howto/c": "x = FunctionTool.from_defaults(f)",
        "howto/d": "import nbagent.tracing\nnbagent.tracing.instrument(tracer_provider=p)\nlib.uninstrument()",
    }
    assert links.examples_for("run_step", code, nbagent.AgentRunner) == ["tutorials/02_b", "tutorials/01_a"]
    assert links.examples_for("FunctionTool", code) == ["howto/c"]
    assert links.examples_for("Tool", code) == [], "a whole word, not part of one"
    assert links.examples_for("undo_step", code, nbagent.AgentRunner) == []
    assert links.examples_for("instrument", code, module="tracing") == ["howto/d"], "a function after its module"
    assert links.examples_for("uninstrument", code, module="tracing") == [], "not another module's function"
    assert links.examples_for("AgentPanel", code) == [], "no code names the panel's class"
    panel = {"tutorials/05_c": "task = agent.create_task('x')\nagent.panel(task)", **code}
    assert links.made_by("AgentPanel", panel) == ["tutorials/05_c"], "made by AgentRunner.panel"
    assert links._returned("TaskStep | None") == "TaskStep" and links._returned("list[Task]") == ""
    pages = links.page_code()
    assert "tutorials/01_quickstart" in pages and "howto/write-a-worker" in pages
    assert "agent.run_step(task)" in pages["tutorials/01_quickstart"]


def test_with_the_browser_site_each_tutorial_it_holds_links_to_it(tmp_path: Path) -> None:
    import json

    tutorial_pages = docs_module("tutorial_pages", DOCS / "_ext" / "tutorial_pages.py")
    in_lite = set(tutorial_pages.lite_notebooks())
    assert "01_quickstart" in in_lite and "10_mcp_tools" not in in_lite  # 10 needs a subprocess
    plain = tutorial_pages.copy_tutorials(tmp_path / "plain", lite=False)
    linked = tutorial_pages.copy_tutorials(tmp_path / "lite", lite=True)
    assert (tmp_path / "lite" / "cassettes").is_dir()
    for before, after in zip(plain, linked):
        cells = json.loads(after.read_text(encoding="utf-8"))["cells"]
        launch = [c for c in cells if "nbagent-launch" in "".join(c["source"])]
        if after.stem in in_lite:
            assert launch and f'href="../lite/lab/index.html?path={after.stem}.ipynb"' in launch[0]["source"]
            assert len(cells) == len(json.loads(before.read_text(encoding="utf-8"))["cells"]) + 1
        else:
            assert not launch and after.read_bytes() == before.read_bytes()
    assert not [c for p in plain for c in json.loads(p.read_text(encoding="utf-8"))["cells"]
                if "nbagent-launch" in "".join(c["source"])]


def test_the_site_check_follows_the_launch_links_into_the_browser_site(tmp_path: Path) -> None:
    build = docs_module("nbagent_docs_build", DOCS / "build.py")
    (tmp_path / "tutorials").mkdir()
    (tmp_path / "index.html").write_text("<p>index</p>")
    (tmp_path / "tutorials" / "01.html").write_text('<a href="../lite/lab/index.html?path=01.ipynb">launch</a>')
    assert build.check_site(tmp_path) == ["tutorials/01.html links to ../lite/lab/index.html?path=01.ipynb, which is not in the site"]
    (tmp_path / "lite" / "lab").mkdir(parents=True)
    (tmp_path / "lite" / "lab" / "index.html").write_text("<p>JupyterLite</p>")
    assert build.check_site(tmp_path) == []


def test_links_to_repository_files_become_text_and_docs_links_stay() -> None:
    repo_links = docs_module("repo_links", DOCS / "_ext" / "repo_links.py")
    text = ("[the engine](../nbagent/engine/) and [txn](../nbagent/runner/txn.py), [README](../README.md#quick-start), "
            "[`tests/conftest.py`](../tests/conftest.py), [a page](explain/store.md), ![img](../docs/panel.png), "
            "[gone](../no/such/file.py)")
    out = repo_links.rewrite(text, DOCS)
    assert "the engine (`nbagent/engine/`)" in out and "txn (`nbagent/runner/txn.py`)" in out
    assert "README (`README.md`)" in out and "`tests/conftest.py`" in out and "(../tests" not in out
    assert "[a page](explain/store.md)" in out, "links inside docs/ are MyST's to check"
    assert "![img](../docs/panel.png)" in out and "[gone](../no/such/file.py)" in out
    assert repo_links.rewrite("[x](../../nbagent/tools.py)", DOCS / "howto") == "x (`nbagent/tools.py`)"


def test_a_build_that_lost_a_cells_output_fails() -> None:
    """nbclient goes on without a cell's output that came too late (a busy machine) and only
    logs it: the build fails instead of publishing a page with the output missing."""
    import subprocess

    build = docs_module("nbagent_docs_build", DOCS / "build.py")
    lost = subprocess.CompletedProcess([], 0, "", "INFO traitlets -- Executing\nWARNING Timeout waiting for IOPub output\n")
    build.refuse_lost_outputs(lost)
    assert lost.returncode == 1 and "a cell's output was lost" in lost.stderr
    fine = subprocess.CompletedProcess([], 0, "", "INFO traitlets -- Executing notebook with kernel: python3\n")
    build.refuse_lost_outputs(fine)
    assert fine.returncode == 0 and fine.stderr.endswith("python3\n")


def reference_entries() -> list[tuple[str, type | None]]:
    """Every entry the reference shows: each listed name, and each member its class's entry
    lists (with that class)."""
    public = api_pages._documented_classes(GROUPS)
    found: list[tuple[str, type | None]] = []
    for group in GROUPS:
        for entry in group.entries:
            found.append((entry.name, None))
            obj = api_pages.resolve(entry.name)
            if inspect.isclass(obj):
                found += [(f"{entry.name}.{m}", obj) for m in api_pages.class_members(obj, public, full=entry.full)]
    return found


def test_every_entry_of_the_reference_has_a_docstring() -> None:
    """A newcomer reading an entry gets nbagent's words for it: not nothing, and not the
    docstring of ``str`` or of a traitlets trait that autodoc shows in their place."""
    entries = reference_entries()
    missing = [name for name, owner in entries if not api_pages.docstring(name, owner)]
    assert not missing, f"{len(missing)} of {len(entries)} reference entries have no docstring: {missing}"


def test_a_constant_is_described_by_its_own_comment_not_its_types_docstring() -> None:
    doc = api_pages.docstring("nbagent.tracing.CAPTURE_ENV")  # re-exported by nbagent.tracing
    assert doc.startswith("the standard switch") and "str(object" not in doc
    import nbagent

    assert api_pages.docstring("nbagent.AgentRunner.run_step", nbagent.ReActAgent).startswith("Run the next step")
    assert api_pages.docstring("nbagent.MessageRole.USER", nbagent.MessageRole), "an enum member's #: comment counts"


def _routine(owner: type | None, name: str) -> Any:
    """The function behind an entry (a method, classmethod, property's getter), or None."""
    if owner is None:
        obj = api_pages.resolve(name)
    else:
        obj = next((vars(k)[name.rpartition(".")[2]] for k in owner.__mro__ if name.rpartition(".")[2] in vars(k)), None)
    obj = getattr(obj, "__func__", obj)
    obj = obj.fget if isinstance(obj, property) else obj
    return obj if inspect.isfunction(obj) else None


def _hints(fn: Any) -> dict[str, Any]:
    """``fn``'s annotations evaluated, with the names its module imports only for type checkers
    (``if TYPE_CHECKING:``) imported too: a name there that does not exist fails here."""
    import ast
    import sys
    import typing

    module = sys.modules[fn.__module__]
    names = dict(vars(module))
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            exec(compile(ast.Module(node.body, []), module.__name__, "exec"), names)
    return typing.get_type_hints(fn, globalns=names)


#: public entries whose result is whatever the caller put in (a stored value, a step's or a
#: pipeline's output): ``Any`` is their precise type
RETURNS_WHAT_WAS_STORED = {
    "nbagent.workflow.Context.get", "nbagent.workflow.ContextStore.get", "nbagent.workflow.Event.get",
    "nbagent.workflow.WorkflowHandler.result", "nbagent.Workflow.run_sync", "nbagent.workflow.StepSpec.invoke",
    "nbagent.store.ValueDecoder.value", "nbagent.store.ValueDecoder.mark",
    "nbagent.query_pipeline.QueryPipeline.run", "nbagent.query_pipeline.QueryPipeline.arun",
}


def test_public_signatures_name_real_types_and_return_any_only_for_stored_values() -> None:
    """Each annotation of a public function or method resolves (a type imported for type
    checkers only must exist there), and a result is ``Any`` only where the caller chose it."""
    import typing

    returns_any, checked = [], 0
    for name, owner in reference_entries():
        fn = _routine(owner, name)
        if fn is None:
            continue
        hints = _hints(fn)
        checked += 1
        if hints.get("return") is typing.Any and name not in RETURNS_WHAT_WAS_STORED:
            returns_any.append(name)
    assert checked > 400, checked
    assert not returns_any, f"public entries returning Any (annotate what they return): {returns_any}"
    for name in RETURNS_WHAT_WAS_STORED:
        assert name in dict(reference_entries()), f"{name} is no longer in the reference"


def test_every_example_in_the_reference_runs_and_shows_what_it_prints() -> None:
    """The ``>>>`` examples of the entries' docstrings (what the reference shows under a
    signature) run offline, each in a namespace of its own, and print what they say."""
    import doctest

    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    reports: list[str] = []
    ran = []
    for name, owner in reference_entries():
        doc = api_pages.docstring(name, owner)
        if ">>>" in doc:
            runner.run(parser.get_doctest(doc, {}, name, None, 0), out=reports.append)
            ran.append(name)
    assert not reports, "\n".join(reports)
    assert runner.summarize(verbose=False).attempted >= 3 * len(ran) >= 45, ran
