"""Every item of the three reference pages, against the real LlamaIndex 0.12.52 and nbagent.

The list of items is ``docs/reference-audit.md`` (the seed pages are not in the repository):
each table row names the reference object (an import path into ``llama_index.core``), its
nbagent equivalent, a status and the behaviour test that covers it. This file parses that
table and, for every row, resolves both objects and compares them:

* a method accepts every reference parameter under the same name, positionals in the same
  place and of the same kind, with an equal default; nbagent may add parameters only with a
  default or keyword-only; ``async`` methods are coroutines, class/static methods stay so;
* a property is a property; a pydantic field exists with the same default;
* a class exists, and is a pydantic model where the reference's is.

The status in the table is recomputed here: ``same`` (nothing differs), ``superset``
(everything the reference accepts is accepted, nbagent adds something) or ``different``,
where every difference must be listed in ``ALLOWED`` with its reason and every reason must
still be needed. ``llama_index`` is a dev dependency: without it these tests fail.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "docs" / "reference-audit.md"
HEADER = ["#", "item", "kind", "signature on the reference", "reference", "nbagent", "status", "why", "test"]
KINDS = {"class", "method", "async", "classmethod", "staticmethod", "property", "field", "param", "guide"}
STATUSES = {"same", "superset", "different", "n/a"}

# Differences kept on purpose, by item and by what differs (a parameter name, or "field",
# "missing", "kind", "pydantic"). Every entry must still be needed: a stale one fails.
ALLOWED: dict[str, dict[str, str]] = {
    "Task.callback_manager": {
        "field": "callback_manager= is accepted and has no effect (warns; subscribe is the way)",
    },
    "AgentState": {
        "pydantic": "a live view over the runner's TaskState objects, not a pydantic copy that could drift",
    },
    "TaskState": {
        "pydantic": "a dataclass that also keeps the undo history and failures; the same three fields",
    },
    "QueryPipelineAgentWorker": {
        "pydantic": "a plain BaseAgentWorker: any object with run / arun / update_state is taken as the pipeline, "
        "LlamaIndex's own QueryPipeline included (no pydantic validation of it)",
    },
    "BaseWorkflowAgent.tools": {
        "field": "no tools is [] once validated (tools=None is accepted and becomes [])",
    },
    "BaseWorkflowAgent.llm": {
        "field": "llm= is required (no global Settings): leaving it out is a clear error",
    },
    "PlannerAgentState": {
        "pydantic": "an AgentState (a live view over the runner's tasks) holding the plans, not a pydantic copy",
    },
    "Memory": {
        "pydantic": "a ChatMemoryBuffer subclass holding its messages itself (runners, workflow agents and undo "
        "take it as they are), not a pydantic model over a SQL chat store",
    },
    "Memory.from_defaults": {
        "memory_blocks_template": "there are no memory blocks: None, and a template given is refused by name",
    },
    "LLM.astream_chat": {
        "kind": "a method returning a ChatStream at once: awaited it gives the stream (the reference's "
        "coroutine), iterated it streams (nbagent's async for)",
    },
    "LLM.astream_chat_with_tools": {
        "kind": "a method returning a ChatStream at once: awaited it gives the stream (the reference's "
        "coroutine), iterated it streams",
    },
    "ParallelAgentRunner.chat": {
        "tool_choice": "None means the runner's default_tool_choice ('auto' unless set), as on AgentRunner",
    },
    "ParallelAgentRunner.achat": {
        "tool_choice": "None means the runner's default_tool_choice ('auto' unless set), as on AgentRunner",
    },
    "ParallelAgentRunner.stream_chat": {
        "tool_choice": "None means the runner's default_tool_choice ('auto' unless set), as on AgentRunner",
    },
    "ParallelAgentRunner.astream_chat": {
        "tool_choice": "None means the runner's default_tool_choice ('auto' unless set), as on AgentRunner",
    },
}


# Items whose signature matches but whose behaviour nbagent keeps different ON PURPOSE (the
# decisions of issue 11, README "Coming from LlamaIndex"): their status is "different"; the
# behaviour test named in the audit asserts the difference.
_NO_EFFECT = "callback_manager is accepted and has no effect: a warning says so (subscribe is the way)"
DELIBERATE: dict[str, str] = {
    "AgentRunner(callback_manager)": _NO_EFFECT,
    "ParallelAgentRunner(callback_manager)": _NO_EFFECT,
    "CustomSimpleAgentWorker(callback_manager)": _NO_EFFECT,
    "MultimodalReActAgentWorker(callback_manager)": _NO_EFFECT,
    "BaseAgentWorker.set_callback_manager": _NO_EFFECT,
    "CustomSimpleAgentWorker.set_callback_manager": _NO_EFFECT,
    "MultimodalReActAgentWorker.set_callback_manager": _NO_EFFECT,
    "StructuredPlannerAgent(callback_manager)": _NO_EFFECT,
    "AgentRunner(init_task_state_kwargs)": "deep-copied for each task (the reference shares one dict among tasks)",
    "AgentRunner.run_step": "a step that raises stays at the head of the queue, task state unchanged (retry by calling again)",
    "AgentRunner.undo_step": "works, any number of times (the reference raises NotImplementedError)",
    "ParallelAgentRunner.undo_step": "works, one branch at a time (the reference raises NotImplementedError)",
    "ParallelAgentRunner.run_steps_in_queue": "a join several parents return runs exactly once, after all of them",
    "BaseAgent.update_prompts": "a key that names no prompt is an error (the reference ignores it)",
    "BaseAgentWorker.update_prompts": "a key that names no prompt is an error (the reference ignores it)",
    "AgentWorkflow.update_prompts": "a key that names no prompt is an error (the reference ignores it)",
    "BaseWorkflowAgent.update_prompts": "a key that names no prompt is an error (the reference ignores it)",
    "MultimodalReActAgentWorker.run_step": "unparseable ReAct output is fed back to the model; an empty reply fails the step, kept",
    "AgentWorkflow.run": "stepwise=True: run_step() runs one step per call and returns its events; await finishes the run",
    "AgentRunner.from_llm": "with no llm, an OpenAI agent configured from the environment (there are no global Settings)",
    "ParallelAgentRunner.chat": "returns the first final output; a join runs once, after all its parents",
    "TaskStep.is_ready": "a step created with is_ready=False and nothing to wait for is held (drawn held; "
    "release_step or is_ready=True lets it run); the reference drops it",
}


@dataclass(frozen=True)
class Row:
    num: str
    item: str
    kind: str
    signature: str
    reference: str
    nbagent: str
    status: str
    why: str
    test: str

    @property
    def param(self) -> str:
        match = re.search(r"\((\w+)\)$", self.item)
        assert match, f"{self.item}: a param row names its parameter as Class(name)"
        return match.group(1)


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def load_rows(path: Path = AUDIT) -> list[Row]:
    """The item table of the audit: rows under the header ``| # | item | kind | ...``."""
    rows: list[Row] = []
    in_table = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [_cell(c) for c in line.strip().strip("|").split("|")]
        if cells == HEADER:
            in_table = True
            continue
        if not in_table or set(cells[0]) <= {"-", " ", ":"}:
            continue
        assert len(cells) == len(HEADER), f"audit row has {len(cells)} cells, not {len(HEADER)}: {line}"
        rows.append(Row(*cells))
    return rows


ROWS = load_rows()


# ----- resolving import paths ---------------------------------------------------------------
def _import_reference() -> None:
    """Import llama_index lazily, silencing its own import-time warnings only here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module("llama_index.core.agent")
        importlib.import_module("llama_index.core.agent.workflow")


def resolve(path: str) -> tuple[Any, Any, str]:
    """``(owner, object, last name)`` for a dotted path ``module[.Class][.member]``."""
    parts = path.split(".")
    module = None
    for i in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        rest = parts[i:]
        break
    if module is None:
        raise ImportError(f"nothing importable in {path!r}")
    owner: Any = None
    obj: Any = module
    for name in rest:
        owner = obj
        obj = inspect.getattr_static(obj, name) if inspect.isclass(obj) else getattr(obj, name)
    return owner, obj, parts[-1]


def member_kind(owner: Any, raw: Any) -> str:
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    func = inspect.unwrap(getattr(raw, "__wrapped__", raw))
    return "async" if inspect.iscoroutinefunction(func) else "method"


def _is_model(cls: Any) -> bool:
    return inspect.isclass(cls) and hasattr(cls, "model_fields")


def call_signature(owner: Any, raw: Any) -> inspect.Signature:
    """The parameters a caller passes (no ``self``/``cls``)."""
    if inspect.isclass(raw):
        if _is_model(raw):
            return inspect.signature(raw)
        sig = inspect.signature(raw.__init__)
    elif isinstance(raw, (classmethod, staticmethod)):
        return inspect.signature(raw.__get__(None, owner))
    else:
        sig = inspect.signature(raw)
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return sig.replace(parameters=params)


# ----- comparing ----------------------------------------------------------------------------
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _same_default(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (getattr(a, "value", a) == getattr(b, "value", b))
    except Exception:  # noqa: BLE001 - objects that refuse == are compared by identity
        return a is b


def compare_params(ref: inspect.Signature, nb: inspect.Signature, only: str | None = None) -> tuple[dict[str, str], list[str]]:
    """``(problems by parameter, additions)`` of nbagent's signature against the reference's."""
    problems: dict[str, str] = {}
    extras: list[str] = []
    nb_params = nb.parameters
    ref_pos = [p.name for p in ref.parameters.values() if p.kind in _POSITIONAL]
    nb_pos = [p.name for p in nb_params.values() if p.kind in _POSITIONAL]
    nb_var_kw = any(p.kind is p.VAR_KEYWORD for p in nb_params.values())
    nb_var_pos = any(p.kind is p.VAR_POSITIONAL for p in nb_params.values())
    for p in ref.parameters.values():
        if only is not None and p.name != only:
            continue
        if p.kind is p.VAR_KEYWORD:
            if not nb_var_kw:
                problems[p.name] = f"**{p.name} not accepted"
            continue
        if p.kind is p.VAR_POSITIONAL:
            if not nb_var_pos:
                problems[p.name] = f"*{p.name} not accepted"
            continue
        q = nb_params.get(p.name)
        if q is None:
            problems[p.name] = "missing"
            continue
        if p.kind in _POSITIONAL:
            if q.kind not in _POSITIONAL:
                problems[p.name] = f"positional in the reference, {q.kind.description} in nbagent"
                continue
            if ref_pos.index(p.name) != nb_pos.index(q.name):
                problems[p.name] = (
                    f"position {ref_pos.index(p.name)} in the reference, {nb_pos.index(q.name)} in nbagent"
                )
                continue
        elif p.kind is p.KEYWORD_ONLY and q.kind is not p.KEYWORD_ONLY:
            extras.append(f"{p.name} may also be passed by position")
        if repr(p.default) == "<factory>":  # a pydantic default_factory: any default will do
            if q.default is q.empty:
                problems[p.name] = "required in nbagent, built by a factory in the reference"
        elif p.default is p.empty:
            if q.default is not q.empty:
                extras.append(f"{p.name} has a default")
        elif q.default is q.empty:
            problems[p.name] = f"required in nbagent, default {p.default!r} in the reference"
        elif not _same_default(p.default, q.default):
            problems[p.name] = f"default {q.default!r}, the reference's is {p.default!r}"
    if only is not None:
        if only not in ref.parameters:
            problems[only] = "not a parameter of the reference"
        return problems, extras
    for q in nb_params.values():
        if q.name in ref.parameters:
            continue
        if q.kind in (q.VAR_KEYWORD, q.VAR_POSITIONAL):
            extras.append(f"{'**' if q.kind is q.VAR_KEYWORD else '*'}{q.name}")
        elif q.kind is q.KEYWORD_ONLY or q.default is not q.empty:
            extras.append(f"adds {q.name}")
        else:
            problems[q.name] = f"nbagent requires a parameter the reference does not have: {q.name}"
    return problems, extras


def _fields(cls: Any) -> dict[str, Any]:
    """Pydantic fields, or a dataclass's (nbagent's TaskState is a dataclass)."""
    if hasattr(cls, "model_fields"):
        return dict(cls.model_fields)
    if dataclasses.is_dataclass(cls):
        return {f.name: f for f in dataclasses.fields(cls)}
    return {}


def _field_default(info: Any) -> tuple[str, Any]:
    if isinstance(info, dataclasses.Field):
        if info.default_factory is not dataclasses.MISSING:
            return ("factory", info.default_factory())
        if info.default is dataclasses.MISSING:
            return ("required", None)
        return ("value", info.default)
    factory = getattr(info, "default_factory", None)
    if factory is not None:
        try:
            value = factory()
        except Exception:  # noqa: BLE001 - e.g. the reference's default LLM needs a package
            return ("factory", "<unavailable>")
        return ("factory", type(value) if isinstance(value, str) else value)
    if info.is_required():
        return ("required", None)
    return ("value", info.default)


def compare(row: Row) -> tuple[dict[str, str], list[str]]:
    """Compare one row's reference object with nbagent's."""
    name = row.reference.rsplit(".", 1)[-1]
    problems: dict[str, str] = {}
    extras: list[str] = []
    if row.kind != "field":
        ref_owner, ref_raw, _ = resolve(row.reference)
        try:
            nb_owner, nb_raw, _ = resolve(row.nbagent)
        except AttributeError as exc:
            return {"missing": f"{row.nbagent}: {exc}"}, extras
    if row.kind == "class":
        assert inspect.isclass(ref_raw), f"{row.reference} is not a class"
        if not inspect.isclass(nb_raw):
            problems["missing"] = f"{row.nbagent} is not a class"
        elif _is_model(ref_raw) and not _is_model(nb_raw):
            problems["pydantic"] = "the reference's is a pydantic model, nbagent's is not"
        return problems, extras
    if row.kind == "field":
        ref_cls = resolve(row.reference.rsplit(".", 1)[0])[1]
        nb_cls = resolve(row.nbagent.rsplit(".", 1)[0])[1]
        assert name in ref_cls.model_fields, f"{row.reference}: not a field of the reference"
        nb_info = _fields(nb_cls).get(name)
        if nb_info is None:
            problems["field"] = f"{nb_cls.__name__} has no field {name}"
            return problems, extras
        ref_default = _field_default(ref_cls.model_fields[name])
        nb_default = _field_default(nb_info)
        if ref_default == nb_default:
            return problems, extras
        if ref_default[0] == "required":
            extras.append(f"{name} has a default")
        elif ref_default[0] == nb_default[0] == "factory" and (
            type(ref_default[1]).__name__ == type(nb_default[1]).__name__ != "str"
        ):
            pass  # a fresh object of the same kind: each side builds its own
        else:
            problems["field"] = f"default {nb_default}, the reference's is {ref_default}"
        return problems, extras
    if row.kind == "param":
        ref_sig = call_signature(ref_owner, ref_raw)
        nb_sig = call_signature(nb_owner, nb_raw)
        return compare_params(ref_sig, nb_sig, only=row.param)
    # methods and properties
    ref_kind = member_kind(ref_owner, ref_raw)
    assert ref_kind == row.kind, f"{row.reference} is a {ref_kind}, the audit says {row.kind}"
    nb_kind = member_kind(nb_owner, nb_raw)
    if nb_kind != ref_kind:
        problems["kind"] = f"a {nb_kind} in nbagent, a {ref_kind} in the reference"
        return problems, extras
    if ref_kind == "property":
        return problems, extras
    return compare_params(call_signature(ref_owner, ref_raw), call_signature(nb_owner, nb_raw))


def _param_text(p: inspect.Parameter) -> str:
    if p.kind is p.VAR_KEYWORD:
        return "**" + p.name
    if p.kind is p.VAR_POSITIONAL:
        return "*" + p.name
    if p.default is p.empty:
        return p.name
    value = getattr(p.default, "value", p.default)
    simple = isinstance(value, (str, int, float, bool, type(None)))
    return f"{p.name}={value!r}" if simple else f"{p.name}=…"


def reference_signature(row: Row) -> str:
    """The audit's "signature on the reference" cell, rendered from the installed reference."""
    if row.kind == "guide":
        return "-"
    if row.kind == "field":
        cls = resolve(row.reference.rsplit(".", 1)[0])[1]
        how, value = _field_default(cls.model_fields[row.reference.rsplit(".", 1)[1]])
        if how == "required":
            return "required"
        if how == "factory":
            return "default_factory"
        return f"default {value!r}"
    owner, raw, _ = resolve(row.reference)
    if row.kind == "class":
        return "bases: " + ", ".join(b.__name__ for b in raw.__bases__)
    if row.kind == "property":
        return "property"
    sig = call_signature(owner, raw)
    if row.kind == "param":
        return _param_text(sig.parameters[row.param])
    parts = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        star = star or p.kind is p.VAR_POSITIONAL
        parts.append(_param_text(p))
    return "(" + ", ".join(parts) + ")"


def computed_status(problems: dict[str, str], extras: list[str]) -> str:
    if problems:
        return "different"
    return "superset" if extras else "same"


# ----- the tests ----------------------------------------------------------------------------
def test_llama_index_reference_is_installed() -> None:
    """The reference is a dev dependency: comparing against nothing must fail, not skip."""
    _import_reference()
    from importlib.metadata import version

    assert version("llama-index-core") == "0.12.52"


def test_the_audit_table_is_well_formed() -> None:
    assert len(ROWS) >= 100, "the audit lists every item of the three pages"
    items = [r.item for r in ROWS]
    duplicates = sorted({i for i in items if items.count(i) > 1})
    assert not duplicates, f"items listed twice: {duplicates}"
    assert [r.num for r in ROWS] == [str(i) for i in range(1, len(ROWS) + 1)], "rows are numbered 1..N"
    for r in ROWS:
        assert r.kind in KINDS, f"{r.item}: kind {r.kind!r} not in {sorted(KINDS)}"
        assert r.status in STATUSES, f"{r.item}: status {r.status!r} not in {sorted(STATUSES)}"
        if r.status in ("different", "n/a"):
            assert len(r.why) > 15, f"{r.item}: a {r.status} item says why"
    assert set(ALLOWED) <= set(items), f"ALLOWED names no row: {sorted(set(ALLOWED) - set(items))}"
    assert set(DELIBERATE) <= set(items), f"DELIBERATE names no row: {sorted(set(DELIBERATE) - set(items))}"


def test_the_counts_in_the_audit_match_the_table() -> None:
    text = AUDIT.read_text(encoding="utf-8")
    counts = {s: sum(r.status == s for r in ROWS) for s in STATUSES}
    match = re.search(
        r"(\d+) items: (\d+) same, (\d+) compatible superset, (\d+) deliberately different, (\d+) not applicable",
        text,
    )
    assert match, "the audit states its counts"
    assert [int(g) for g in match.groups()] == [
        len(ROWS), counts["same"], counts["superset"], counts["different"], counts["n/a"]
    ]


def _test_ids(cell: str) -> list[str]:
    return [t.strip().strip("`") for t in cell.split(",") if t.strip() not in ("", "-")]


_DEFINED: dict[Path, set[str]] = {}


def _defined_tests(path: Path) -> set[str]:
    if path not in _DEFINED:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _DEFINED[path] = {
            n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
    return _DEFINED[path]


def test_every_named_behaviour_test_exists() -> None:
    missing = []
    for r in ROWS:
        ids = _test_ids(r.test)
        assert ids, f"{r.item}: names the test that covers it"
        for node in ids:
            file, _, func = node.partition("::")
            path = ROOT / file
            if not path.exists() or (func and func not in _defined_tests(path)):
                missing.append(f"{r.item}: {node}")
    assert not missing, "tests named in the audit that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind != "guide" and r.status != "n/a"], ids=lambda r: r.item)
def test_item_matches_the_reference(row: Row) -> None:
    _import_reference()
    problems, extras = compare(row)
    allowed = ALLOWED.get(row.item, {})
    unexplained = {k: v for k, v in problems.items() if k not in allowed}
    assert not unexplained, f"{row.item} differs from the reference: {unexplained}"
    stale = sorted(set(allowed) - set(problems))
    assert not stale, f"{row.item}: ALLOWED lists differences there no longer are: {stale}"
    status = "different" if row.item in DELIBERATE else computed_status(problems, extras)
    assert row.status == status, (
        f"{row.item}: the audit says {row.status!r}, it is {status!r} "
        f"(differences {problems}, additions {extras}); update docs/reference-audit.md"
    )


def test_the_signature_column_is_the_references() -> None:
    _import_reference()
    wrong = [
        f"{r.item}: {r.signature!r}, the reference has {reference_signature(r)!r}"
        for r in ROWS
        if r.signature != reference_signature(r)
    ]
    assert not wrong, "signatures in the audit that are not the reference's:\n" + "\n".join(wrong)


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind == "guide" or r.status == "n/a"], ids=lambda r: r.item)
def test_item_without_a_reference_object_exists_in_nbagent(row: Row) -> None:
    """Guide snippets and items the installed reference lacks: nbagent's side resolves, and
    the reference's side really does not (else the row should be compared)."""
    _import_reference()
    resolve(row.nbagent)
    if row.reference not in ("", "-"):
        with pytest.raises((ImportError, AttributeError)):
            resolve(row.reference)


# ----- behaviour of the items this audit added or changed ----------------------------------
def _multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def test_query_takes_the_references_query_bundle_as_well_as_a_string() -> None:
    """Code written for the reference passes a QueryBundle, by position or by its name."""
    import asyncio

    from nbagent import AgentRunner
    from tests.helpers import CountingWorker

    _import_reference()
    from llama_index.core.schema import QueryBundle

    runner = AgentRunner(CountingWorker(target=1))
    by_text = str(runner.query("how many?"))
    assert str(runner.query(QueryBundle(query_str="how many?"))) == by_text
    assert str(runner.query(str_or_query_bundle=QueryBundle("how many?"))) == by_text
    assert str(asyncio.run(runner.aquery(QueryBundle("how many?")))) == by_text
    assert runner.chat_history == []  # a query leaves no conversation behind
    with pytest.raises(TypeError, match="a string or a query bundle with a query_str string, got int"):
        runner.query(42)


def test_base_agent_is_the_runners_base_and_its_streaming_is_optional() -> None:
    from nbagent import AgentChatResponse, AgentRunner, BaseAgent, ChatMessage
    from tests.helpers import CountingWorker

    runner = AgentRunner(CountingWorker(target=1))
    assert isinstance(runner, BaseAgent)
    runner.chat("keep me")
    before = [m.text for m in runner.chat_history]
    assert str(runner.query("one-off")).startswith("count=1")
    assert [m.text for m in runner.chat_history] == before  # a query leaves the conversation

    class Echo(BaseAgent):
        """A non-step-wise agent written against the reference's BaseAgent."""

        def __init__(self) -> None:
            self.history: list[ChatMessage] = []
            self.seen: list[Any] = []

        @property
        def chat_history(self) -> list[ChatMessage]:
            return self.history

        def reset(self) -> None:
            self.history = []

        def chat(self, message: str, chat_history: Any = None) -> AgentChatResponse:
            self.seen.append(chat_history)
            return AgentChatResponse(response=message.upper())

        async def achat(self, message: str, chat_history: Any = None) -> AgentChatResponse:
            return self.chat(message, chat_history)

    echo = Echo()
    assert str(echo.query("hi")) == "HI" and echo.seen == [[]]  # as the page: chat(q, chat_history=[])
    with pytest.raises(NotImplementedError, match="stream_chat not implemented"):
        echo.stream_chat("hi")
    with pytest.raises(TypeError, match="abstract"):
        BaseAgent()  # type: ignore[abstract]


def test_old_agent_names_are_the_step_wise_agents() -> None:
    from nbagent import OldOpenAIAgent, OldReActAgent, OpenAIAgent, ReActAgent, ScriptedLLM

    assert OldOpenAIAgent is OpenAIAgent and OldReActAgent is ReActAgent
    agent = OldReActAgent.from_tools([_multiply], llm=ScriptedLLM(["Thought: easy.\nAnswer: 6"], function_calling=False))
    assert str(agent.chat("2*3?")) == "6"


def test_set_callback_manager_warns_that_it_has_no_effect() -> None:
    from nbagent import MultimodalReActAgentWorker, ScriptedLLM
    from tests.helpers import CountingWorker

    with pytest.warns(UserWarning, match="MultimodalReActAgentWorker: callback_manager .* no effect"):
        mm = MultimodalReActAgentWorker([], ScriptedLLM(["x"]), 10, None, None, object())  # 6th: callback_manager
    with pytest.warns(UserWarning, match="MultimodalReActAgentWorker.set_callback_manager"):
        mm.set_callback_manager(object())

    worker = CountingWorker()
    with pytest.warns(UserWarning, match=r"CountingWorker.set_callback_manager: callback_manager .*subscribe"):
        worker.set_callback_manager(object())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        worker.set_callback_manager(None)  # nothing given, nothing said


def test_custom_simple_worker_takes_the_reference_arguments_by_position() -> None:
    from nbagent import FunctionTool, ScriptedLLM
    from tests.helpers import CountingWorker

    llm = ScriptedLLM(["x"])
    tool = FunctionTool.from_defaults(_multiply)
    worker = CountingWorker([tool], llm, None, True, target=2)
    assert worker.tools == [tool] and worker.llm is llm and worker.verbose is True and worker.target == 2
    with pytest.warns(UserWarning, match="callback_manager"):
        CountingWorker.from_tools([tool], None, llm, object(), True)
    built = CountingWorker.from_tools([tool], None, llm, None, True)
    assert built.verbose is True and built.llm is llm
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        CountingWorker(tool=[tool])  # misspelt: refused, not silently ignored


def test_parallel_runner_takes_the_reference_arguments_by_position() -> None:
    from nbagent import ChatMessage, MessageRole, ParallelAgentRunner
    from tests.helpers import CountingWorker

    history = [ChatMessage(role=MessageRole.USER, content="earlier")]
    with pytest.warns(UserWarning, match="ParallelAgentRunner: callback_manager .* no effect"):
        runner = ParallelAgentRunner(CountingWorker(target=1), history, None, None, None, object(), {"k": [1]}, True)
    assert [m.text for m in runner.chat_history] == ["earlier"]
    task = runner.create_task("go")
    assert task.extra_state["k"] == [1]
    runner.run_steps_in_queue(task.task_id)
    runner.finalize_response(task.task_id)
    assert runner.list_tasks() == []  # delete_task_on_finish=True, the 8th positional
    tuned = ParallelAgentRunner(CountingWorker(), max_concurrency=2, default_tool_choice="none", verbose=True)
    assert tuned.max_concurrency == 2 and tuned.default_tool_choice == "none" and tuned.verbose is True


def _run(workflow: Any, **kwargs: Any) -> Any:
    """Await ``workflow.run(**kwargs)`` on a fresh event loop (run() needs a running one)."""
    import asyncio

    async def go() -> Any:
        return await workflow.run(**kwargs)

    return asyncio.run(go())


def test_handoff_output_prompt_is_what_the_handoff_tool_answers() -> None:
    from nbagent import ScriptedLLM, tool_call
    from nbagent.workflow import AgentWorkflow, FunctionAgent

    a_llm = ScriptedLLM([tool_call("handoff", to_agent="b", reason="it knows")])
    b_llm = ScriptedLLM(["from b"])
    a = FunctionAgent(name="a", description="first", llm=a_llm)
    b = FunctionAgent(name="b", description="second", llm=b_llm)
    wf = AgentWorkflow([a, b], None, "a", None, "Over to {to_agent}, because {reason}.")  # 5th: handoff_output_prompt
    assert wf.get_prompts()["handoff_output_prompt"].template == "Over to {to_agent}, because {reason}."
    assert str(_run(wf, user_msg="hello")) == "from b"
    assert any(m.text == "Over to b, because it knows." for m in b_llm.requests[0].messages)
    with pytest.raises(ValueError, match=r"Handoff output prompt must contain \{to_agent\} and \{reason\}"):
        AgentWorkflow([a, b], root_agent="a", handoff_output_prompt="no placeholders")
    wf.update_prompts({"handoff_output_prompt": "Now {to_agent} ({reason})"})
    assert wf.handoff_output_prompt.template == "Now {to_agent} ({reason})"


def test_from_tools_or_functions_takes_output_cls_and_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic import BaseModel

    from nbagent import ScriptedLLM
    from nbagent.workflow import AgentWorkflow

    class Product(BaseModel):
        value: int

    wf = AgentWorkflow.from_tools_or_functions(
        [_multiply], ScriptedLLM(['{"value": 6}']), None, None, None, Product, None, 30.0, True
    )
    assert wf.output_cls is Product and wf.timeout == 30.0 and wf.verbose is True
    result = _run(wf, user_msg="2*3 as JSON")
    assert result.structured_response == Product(value=6)
    assert "Running step" in capsys.readouterr().out


def test_run_takes_a_start_event_by_name() -> None:
    from nbagent import ScriptedLLM
    from nbagent.workflow import AgentWorkflowStartEvent, FunctionAgent

    agent = FunctionAgent(llm=ScriptedLLM(["hi there"]))
    assert str(_run(agent, start_event=AgentWorkflowStartEvent(user_msg="hi"))) == "hi there"
    assert agent.llm.requests[0].messages[-1].text == "hi"


def test_runner_llm_sizes_the_memory_and_create_task_refuses_unknown_keywords() -> None:
    from nbagent import AgentRunner, ChatMemoryBuffer
    from tests.helpers import CountingWorker

    class Model:
        """Stands for a model that knows its context window (LocalLLM has context_window)."""

        context_window = 1000

    runner = AgentRunner(CountingWorker(), llm=Model())
    assert runner.memory.token_limit == 750  # 3/4 of the window, as on the reference
    assert AgentRunner(CountingWorker()).memory.token_limit == ChatMemoryBuffer.from_defaults().token_limit
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['chat_store'\]"):
        ChatMemoryBuffer.from_defaults(chat_store=object())
    task = runner.create_task("x", task_id="mine", extra_state={"k": 1})
    assert task.task_id == "mine" and task.extra_state == {"k": 1}
    with pytest.raises(TypeError, match=r"create_task got unexpected keyword argument\(s\) \['extra_stat'\]"):
        runner.create_task("x", extra_stat={"k": 1})  # misspelt: refused, not silently dropped
    assert [t.task_id for t in runner.list_tasks()] == ["mine"]


def test_workflow_agent_takes_the_0_12_52_arguments_and_runs_with_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Beyond the page: llama-index-core 0.12.52's FunctionAgent(name, description, ...,
    initial_state, state_prompt, output_cls, structured_output_fn, timeout, verbose)."""
    from nbagent import ScriptedLLM
    from nbagent.workflow import FunctionAgent

    llm = ScriptedLLM(["done"])
    agent = FunctionAgent(
        "calc", "Does sums", "Be brief.", [_multiply], None, None, llm,
        {"unit": "cm"}, "[{state}] {msg}", None, None, 5.0, True,
    )
    assert (agent.name, agent.description, agent.system_prompt) == ("calc", "Does sums", "Be brief.")
    assert [t.name for t in agent.tools] == ["_multiply"] and agent.initial_state == {"unit": "cm"}
    assert str(_run(agent, user_msg="2*3?")) == "done"
    assert llm.requests[0].messages[-1].text == "[{'unit': 'cm'}] 2*3?"  # state_prompt and initial_state
    assert agent._as_workflow().timeout == 5.0
    assert "Running step" in capsys.readouterr().out  # verbose
    copy = agent.model_copy(update={"name": "calc2"})
    assert copy._as_workflow().timeout == 5.0 and copy.initial_state == {"unit": "cm"}
    with pytest.raises(ValueError, match=r"State prompt must contain \{state\} and \{msg\}"):
        FunctionAgent(llm=llm, state_prompt="no placeholders")
    with pytest.raises(ValueError, match="timeout must be"):
        FunctionAgent(llm=llm, timeout=-1)


def test_function_agent_without_parallel_tool_calls_runs_one_call_per_step() -> None:
    from nbagent import ScriptedLLM
    from nbagent.workflow import FunctionAgent

    two = {"tool_calls": [{"name": "_multiply", "arguments": {"a": 2, "b": 3}},
                          {"name": "_multiply", "arguments": {"a": 4, "b": 5}}]}
    serial = FunctionAgent(tools=[_multiply], llm=ScriptedLLM([two, "done"]), allow_parallel_tool_calls=False)
    assert str(_run(serial, user_msg="go")) == "done"
    tool_msgs = [m for m in serial.llm.requests[1].messages if m.role.value == "tool"]
    assert [m.text for m in tool_msgs] == ["6"]  # only the first call ran, as on the reference
    parallel = FunctionAgent(tools=[_multiply], llm=ScriptedLLM([two, "done"]))
    assert str(_run(parallel, user_msg="go")) == "done"
    assert [m.text for m in parallel.llm.requests[1].messages if m.role.value == "tool"] == ["6", "20"]


def test_multimodal_worker_builds_the_first_message_with_generate_chat_message_fn() -> None:
    from nbagent import AgentRunner, ChatMessage, MultimodalReActAgentWorker, ScriptedLLM

    seen: dict[str, Any] = {}

    def one_part(prompt: str, role: Any, image_documents: list[Any], image_detail: Any = None) -> ChatMessage:
        seen.update(prompt=prompt, n=len(image_documents), detail=image_detail)
        return ChatMessage(role=role, content=[{"type": "text", "text": f"[{len(image_documents)} image] {prompt}"}])

    llm = ScriptedLLM(["Thought: seen.\nAnswer: red"])
    # the 9th positional, as in llama-index-core 0.12.52
    worker = MultimodalReActAgentWorker([], llm, 10, None, None, None, False, None, one_part, image_detail="low")
    runner = AgentRunner(worker)
    task = runner.create_task("What colour?", extra_state={"image_docs": ["https://example.org/red.png"]})
    runner.run_step(task)
    user = [m for m in llm.requests[0].messages if m.role.value == "user"][0]
    assert user.content == [{"type": "text", "text": "[1 image] What colour?"}]
    assert seen == {"prompt": "What colour?", "n": 1, "detail": "low"}
    with pytest.raises(TypeError, match="must be callable"):
        MultimodalReActAgentWorker([], llm, generate_chat_message_fn="nope")
    bad = AgentRunner(MultimodalReActAgentWorker([], ScriptedLLM(["x"]), generate_chat_message_fn=lambda **_: "text"))
    bad_task = bad.create_task("q", extra_state={"image_docs": []})
    with pytest.raises(TypeError, match="must return an nbagent ChatMessage"):
        bad.run_step(bad_task)
    assert len(bad.get_upcoming_steps(bad_task)) == 1  # the failed step is kept
