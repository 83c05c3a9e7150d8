"""The view registry (nbagent.registry): core classes find their HTML and their draw/panel/widget
views there, filled from above by nbagent._wiring, and anyone can register their own."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nbagent
from nbagent import AgentRunner, ChatMessage, FunctionTool, ScriptedLLM, Task, register_view
from nbagent._wiring import ROLES, VIEWS
from nbagent.registry import ViewMissingError, ViewRegistry, html_view, provide, provided, show, views
from nbagent.workers.custom import CustomSimpleAgentWorker

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nbagent"


def _class(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


class Echo(CustomSimpleAgentWorker):
    def _initialize_state(self, task, **kwargs):
        return {}

    def _run_step(self, state, task, input=None):
        from nbagent import AgentChatResponse

        return AgentChatResponse(response=task.input), True

    def _finalize_task(self, state, **kwargs):
        pass


@pytest.mark.parametrize(("target", "kind", "view"), VIEWS, ids=[f"{t}:{k}" for t, k, _ in VIEWS])
def test_every_default_view_names_a_real_class_and_a_callable_in_the_views(target: str, kind: str, view: str) -> None:
    cls = _class(target)
    assert f"{cls.__module__}.{cls.__qualname__}" == target  # the dotted name is the class's own
    module, _, name = view.partition(":")
    assert module.startswith("nbagent.viz.")
    assert callable(getattr(importlib.import_module(module), name))
    assert views.for_class(cls, kind) is getattr(importlib.import_module(module), name)


def test_every_role_resolves_to_the_class_it_names() -> None:
    from nbagent.query_pipeline.model import PromptComponent
    from nbagent.runner.base import AgentRunner as Runner
    from nbagent.workflow.multi_agent import AgentWorkflow

    assert set(ROLES) == {"agent_runner", "prompt_component", "agent_workflow"}
    assert provided("agent_runner") is Runner
    assert provided("prompt_component") is PromptComponent
    assert provided("agent_workflow") is AgentWorkflow
    with pytest.raises(LookupError, match=r"no role 'nope' is provided; roles: \['agent_runner'"):
        provided("nope")


def test_core_reprs_are_the_views_own_html() -> None:
    from nbagent.viz import html as H

    runner = AgentRunner(Echo())
    task = runner.create_task("hello")
    out = runner.run_step(task)
    msg = ChatMessage(role="user", content="<b>hi</b>")
    tool = FunctionTool.from_defaults(lambda a: a, name="ident")
    assert task._repr_html_() == H.task_html(task)
    assert out._repr_html_() == H.step_output_html(out)
    assert out.output._repr_html_() == H.chat_response_html(out.output)
    assert msg._repr_html_() == H.transcript_html([msg])
    assert runner.memory._repr_html_() == H.transcript_html(runner.memory.get_all())
    assert tool._repr_html_() == H.tool_html(tool)
    assert runner._repr_html_() == H.runner_html(runner)
    assert runner.agent_worker._repr_html_() == H.worker_html(runner.agent_worker)
    assert ScriptedLLM(["x"])._repr_html_() == H.llm_html(ScriptedLLM(["x"]))


def test_a_user_view_replaces_the_default_and_unregister_puts_it_back() -> None:
    task = Task(input="q")
    default = task._repr_html_()
    register_view(Task, lambda t: f"<p>mine: {t.input}</p>")
    try:
        assert task._repr_html_() == "<p>mine: q</p>"
        register_view("nbagent.schema.Task", lambda t: "<p>by name</p>")  # a class key beats a name
        assert task._repr_html_() == "<p>mine: q</p>"
        views.unregister(Task)
        assert task._repr_html_() == "<p>by name</p>"
        views.unregister("nbagent.schema.Task")
    finally:
        while (Task, "html") in {(t, k) for t, k, _ in views.registered()}:
            views.unregister(Task)
    assert task._repr_html_() == default
    with pytest.raises(KeyError, match="no 'html' view is registered for"):
        views.unregister(Task)


def test_a_subclass_inherits_its_bases_view_unless_it_has_its_own() -> None:
    reg = ViewRegistry()

    class Base:
        pass

    class Child(Base):
        pass

    reg.register(Base, lambda o: "base")
    assert reg.lookup(Child())(Child()) == "base"
    reg.register(Child, lambda o: "child")
    assert reg.lookup(Child())(Child()) == "child"
    assert reg.lookup(Base())(Base()) == "base"
    assert reg.lookup(object()) is None


def test_a_view_named_by_strings_imports_nothing_until_an_object_is_shown(tmp_path: Path) -> None:
    (tmp_path / "reg_thing.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "reg_thing_view.py").write_text("def render(obj):\n    return '<i>thing</i>'\n")
    code = textwrap.dedent(
        """
        import sys
        import nbagent
        from nbagent.registry import html_view
        nbagent.register_view("reg_thing.Thing", "reg_thing_view:render")
        assert "reg_thing" not in sys.modules and "reg_thing_view" not in sys.modules
        from reg_thing import Thing
        assert "reg_thing_view" not in sys.modules
        print(html_view(Thing()), "reg_thing_view" in sys.modules)
        """
    )
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "<i>thing</i> True"


def test_no_view_means_no_html_and_a_named_error_for_other_kinds() -> None:
    class Plain:
        pass

    assert html_view(Plain()) is None
    with pytest.raises(ViewMissingError, match=r"no 'draw' view registered for Plain; register one with "
                       r"nbagent.register_view\(Plain, view, kind='draw'\)"):
        show(Plain(), "draw")


def test_bad_registrations_are_refused_with_what_is_allowed() -> None:
    with pytest.raises(TypeError, match="a class or its dotted name"):
        register_view(42, lambda o: "")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'package.module:name'"):
        register_view(Task, "not a view")
    with pytest.raises(TypeError, match="non-empty string"):
        provide("", "x:y")


def test_views_of_other_kinds_take_the_methods_arguments() -> None:
    from nbagent.workflow import StartEvent, StopEvent, Workflow, step

    class Hello(Workflow):
        @step
        async def only(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result="hi")

    seen: list[tuple[object, dict[str, object]]] = []
    register_view(Hello, lambda wf, **options: seen.append((wf, options)) or "drawn", kind="draw")
    try:
        wf = Hello()
        assert wf.draw(rankdir="LR") == "drawn"
        assert seen == [(wf, {"rankdir": "LR"})]
    finally:
        views.unregister(Hello, kind="draw")
    assert type(Hello().draw()).__name__ == "DotDisplay"


def test_as_agent_builds_the_provided_runner() -> None:
    runner = Echo().as_agent(verbose=False)
    assert type(runner) is AgentRunner
    assert runner.chat("ping").response == "ping"


def _view_methods_outside_the_views() -> list[tuple[str, str, str]]:
    """(module, class, kind) for every class outside nbagent.viz whose methods ask the registry
    (``html_view(self)`` or ``show(self, "kind", ...)``), found in the source."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[1] == "viz":
            continue
        module = ".".join(p for p in rel.parts if p != "__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for call in ast.walk(node):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.args):
                    continue
                if not (isinstance(call.args[0], ast.Name) and call.args[0].id == "self"):
                    continue
                if call.func.id == "html_view":
                    found.append((module, node.name, "html"))
                elif call.func.id == "show" and isinstance(call.args[1], ast.Constant):
                    found.append((module, node.name, call.args[1].value))
    return found


def test_every_class_that_asks_the_registry_has_its_view() -> None:
    asks = _view_methods_outside_the_views()
    assert len(asks) >= 25  # the scan found the classes (see _wiring.VIEWS)
    missing = [
        (m, c, k) for m, c, k in asks if views.for_class(getattr(importlib.import_module(m), c), k) is None
    ]
    assert missing == []


def test_every_repr_html_outside_the_views_asks_the_registry() -> None:
    asks = {(m, c) for m, c, k in _view_methods_outside_the_views() if k == "html"}
    defines = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[1] == "viz":
            continue
        module = ".".join(p for p in rel.parts if p != "__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == "_repr_html_" for f in node.body
            ):
                defines.add((module, node.name))
    assert defines and defines <= asks


def test_importing_nbagent_and_making_a_task_imports_no_view_until_it_is_shown() -> None:
    code = textwrap.dedent(
        """
        import sys
        import nbagent
        from nbagent import Task, ChatMessage
        t = Task(input="q"); m = ChatMessage(role="user", content="x")
        before = sorted(n for n in sys.modules if n.startswith("nbagent.viz"))
        html = t._repr_html_()
        after = "nbagent.viz.html" in sys.modules
        print(before, after, html.startswith('<div class="nbagent nb-task">'))
        """
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] True True"


def test_register_view_is_public() -> None:
    assert "register_view" in nbagent.__all__ and nbagent.register_view is register_view
