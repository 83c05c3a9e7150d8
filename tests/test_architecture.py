"""The package's shape, checked: import layers (import-linter's contracts in pyproject.toml),
no contract ignoring an import, no import cycle, no file over 800 lines, no module writing
another object's ``__dict__``, a light ``import nbagent``. No exceptions are listed: issue 22's
burn-down lists ended empty and are gone. docs/architecture.md describes the layers
(tests/test_architecture_doc.py keeps it in step).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import re
import shutil
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nbagent"
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
MAX_LINES = 800


def _lint_env() -> dict[str, str]:
    # grimp finds the package on sys.path: this checkout's, not an installed copy elsewhere
    return {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "lint-imports is missing: pip install -e '.[dev]' (import-linter)"
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=_lint_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_no_ignored_imports() -> None:
    assert "ignore_imports" not in PYPROJECT  # the burn-down list of issue 22 ended empty


def _graph_edges() -> dict[str, set[str]]:
    """Every import between nbagent's modules, inside functions too, TYPE_CHECKING ones not;
    plus the package ``__init__`` Python also runs to import a module
    of another package."""
    spec = importlib.util.find_spec("nbagent")
    assert spec is not None and spec.origin is not None and Path(spec.origin).parent == PACKAGE
    graph = grimp.build_graph("nbagent", exclude_type_checking_imports=True, cache_dir=None)
    edges: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges[module].add(imported)
            parts = imported.split(".")
            for n in range(1, len(parts)):
                package = ".".join(parts[:n])
                if package != module and not module.startswith(package + "."):
                    edges[module].add(package)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {d for ds in edges.values() for d in ds})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    assert _cycles(_graph_edges()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_file_over_800_lines() -> None:
    over = {str(p.relative_to(ROOT)): _lines(p) for p in sorted(PACKAGE.rglob("*.py")) if _lines(p) > MAX_LINES}
    assert over == {}, f"over {MAX_LINES} lines (split by concept): {over}"


def _dict_writes(path: Path) -> list[int]:
    """Lines that write into ``X.__dict__`` (item assignment, setdefault, update, pop...)
    where ``X`` is not ``self``."""

    def foreign(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "__dict__"
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        )

    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Subscript) and foreign(part.value):
                    lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__")
            and foreign(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_writes_another_objects_dict() -> None:
    writers = {str(p.relative_to(ROOT)): _dict_writes(p) for p in sorted(PACKAGE.rglob("*.py"))}
    assert {k: v for k, v in writers.items() if v} == {}


def test_the_dict_write_finder_finds_writes(tmp_path: Path) -> None:
    sample = tmp_path / "s.py"
    sample.write_text(
        textwrap.dedent(
            """
            def f(runner, out):
                runner.__dict__["_x"] = 1
                out.__dict__.setdefault("y", {})
                self_like = runner.__dict__.get("_x")
            class C:
                def g(self):
                    self.__dict__["ok"] = 1
            """
        )
    )
    assert _dict_writes(sample) == [3, 4]


def test_import_nbagent_and_the_first_names_stays_light() -> None:
    """Nothing heavy is loaded before it is used. Neither are asyncio (and concurrent.futures),
    which the first call that needs an event loop imports (``nbagent._sync``), nor the event
    classes (``nbagent.event_types``, read through ``nbagent.events`` when first emitted), nor
    logging, json or traceback, imported by the functions that use them. Nor pydantic: no model
    is defined until the first task, message or tool is made (``nbagent._lazy``)."""
    code = (
        "import sys\nimport nbagent\nfrom nbagent import AgentRunner, ReActAgent, FunctionTool\n"
        "heavy = ['nbagent.viz', 'nbagent.store', 'nbagent.batch', 'sqlite3', 'openai', 'ipywidgets',"
        " 'graphviz', 'IPython', 'asyncio', 'concurrent.futures', 'nbagent.event_types', 'logging',"
        " 'json', 'traceback', 'pydantic', 'pydantic.main', 'pydantic_core', 'nbagent.schema',"
        " 'nbagent.messages', 'nbagent._lean', 'nbagent.tool_metadata']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_lint_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_first_use_after_the_light_import_loads_the_models() -> None:
    """What the light import leaves out comes on first use, in a fresh process: a tool (its
    metadata and argument model), a call with bad arguments (a validation error caught by
    name), a task and its steps, an approval whose edited arguments are refused, the models'
    old import paths."""
    code = textwrap.dedent(
        """\
        import sys
        from nbagent import AgentRunner, ReActAgent, FunctionTool
        assert 'pydantic' not in sys.modules
        from nbagent import FunctionCallingAgent, ScriptedLLM, tool_call
        def add(a: int, b: int) -> int:
            'Add.'
            return a + b
        tool = FunctionTool.from_defaults(add, requires_approval=True)
        assert 'pydantic.main' in sys.modules
        print(tool.call(a='x', b=1).is_error, tool(2, 3).content)
        agent = FunctionCallingAgent.from_tools([tool], llm=ScriptedLLM([tool_call('add', a=1, b=2), '3']))
        task = agent.create_task('go')
        agent.run_step(task)
        [call] = agent.pending_approvals(task)
        try:
            agent.approve(task, call.call_id, arguments={'a': 'x', 'b': 2})
        except ValueError as err:
            print('refused:', 'invalid arguments' in str(err))
        agent.approve(task, call.call_id)
        out = agent.run_step(task)
        print(out.is_last, [o.content for o in out.output.sources])
        out = agent.run_step(task.task_id)
        print(out.is_last, str(out.output))
        from nbagent.tools import ToolMetadata
        from nbagent.tool_metadata import ToolMetadata as Meta
        from nbagent.schema import TaskStep
        print(ToolMetadata is Meta, isinstance(out.task_step, TaskStep))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], env=_lint_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True 5", "refused: True", "False ['3']", "True 3", "True True"]


def test_a_lazy_module_imports_on_the_first_name_read_and_once() -> None:
    from nbagent._lazy import LazyModule

    loads: list[str] = []

    def load() -> Any:
        import json

        loads.append("json")
        return json

    lazy = LazyModule(load)
    assert not hasattr(lazy, "__wrapped__") and copy.copy(lazy) is not None  # probes do not import
    assert loads == []
    assert lazy.dumps is lazy.dumps and lazy.dumps([1]) == "[1]"
    assert loads == ["json"]  # the name is kept: one import
    with pytest.raises(AttributeError, match="nope"):
        lazy.nope
    with pytest.raises(AttributeError, match="on the module itself"):
        lazy.dumps = None


def test_a_plain_step_imports_no_opentelemetry() -> None:
    """Tracing is off until asked for: importing nbagent and running steps (model and tool
    calls included) loads neither the tracing service nor OpenTelemetry."""
    code = (
        "import sys\nfrom nbagent import FunctionCallingAgent, FunctionTool, ScriptedLLM, tool_call\n"
        "def add(a: int, b: int) -> int:\n    'Add.'\n    return a + b\n"
        "agent = FunctionCallingAgent.from_tools([FunctionTool.from_defaults(add)],"
        " llm=ScriptedLLM([tool_call('add', a=1, b=2), '3']))\n"
        "assert str(agent.chat('go')) == '3'\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('opentelemetry', 'nbagent.tracing'))}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_lint_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _layer_of() -> dict[str, int]:
    block = re.search(r'^layers = \[\n(.*?)^\]', PYPROJECT, re.MULTILINE | re.DOTALL)
    assert block is not None
    rows = [re.findall(r'"([^"]+)"', line)[0] for line in block.group(1).splitlines() if '"' in line]
    return {
        name.strip(): len(rows) - i  # higher number = higher layer
        for i, row in enumerate(rows)
        for name in re.split(r"[:|]", row)
    }


def test_every_top_level_module_is_in_a_layer() -> None:
    layers = _layer_of()
    children = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    children |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert children == set(layers)


@pytest.mark.parametrize(
    ("role", "layer_of_target"),
    [("agent_runner", "runner"), ("prompt_component", "query_pipeline"), ("agent_workflow", "workflow")],
)
def test_a_role_is_provided_from_the_layer_its_class_lives_in(role: str, layer_of_target: str) -> None:
    from nbagent._wiring import ROLES

    module = ROLES[role].partition(":")[0]
    assert module.split(".")[1] == layer_of_target
