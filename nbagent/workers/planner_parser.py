"""Plans of tool calls, as a model writes them for ``PlannerAgentWorker`` (LLMCompiler style).

A plan is a numbered list of calls, ``$N`` standing for the result of call N::

    Thought: the two populations are independent
    1. population(city="Paris")
    2. population(city="Berlin")
    3. add(a=$1, b=$2)
    4. join()

``parse_plan`` turns the text into ``PlannedCall`` objects and checks everything that can be
checked before running: the syntax, that each tool exists and gets arguments it takes, that
every ``$N`` names a call of the plan, and that the calls have no cycle. Anything wrong is a
``PlanError`` whose message is written for the model, so it can correct its plan.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbagent.tools import FunctionTool

__all__ = [
    "PlanError",
    "PlannedCall",
    "Plan",
    "parse_plan",
    "REF_KEY",
    "find_refs",
    "resolve_refs",
]

REF_KEY = "$ref"  # an argument that is exactly ``$N`` is stored as {"$ref": N} (JSON-friendly)
_JOIN = "join"
_START_RE = re.compile(r"^[ \t]*(?:[-*][ \t]*)?\$?(\d+)[ \t]*[.):=][ \t]*", re.MULTILINE)
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_CALL_RE = re.compile(r"`?[A-Za-z_][A-Za-z0-9_-]*[ \t]*\(")
_JOIN_RE = re.compile(r"`?join\b[ \t]*(?:\([ \t]*\))?`?[ \t]*$", re.MULTILINE | re.IGNORECASE)
_STRING_OR_REF_RE = re.compile(
    r"(\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')|\$(?:\{(\d+)\}|(\d+))"
)
_TEXT_REF_RE = re.compile(r"\$(?:\{(\d+)\}|(\d+))")
_THOUGHT_RE = re.compile(r"^[ \t]*Thought[ \t]*:[ \t]*(.*)$", re.MULTILINE | re.IGNORECASE)
_PLACEHOLDER = "__nbagent_ref_{}__"
_PLACEHOLDER_RE = re.compile(r"^__nbagent_ref_(\d+)__$")
_MAX_ARGS_CHARS = 100_000
_JSON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class PlanError(ValueError):
    """A plan that cannot be run; the message tells the model what to fix."""


@dataclass(frozen=True)
class PlannedCall:
    """One call of a plan: ``index``, the tool, its arguments (``{"$ref": N}`` for ``$N``)."""

    index: int
    tool: str
    args: dict[str, Any]
    deps: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class Plan:
    """A checked plan: calls in the order written, and the thought before them, if any."""

    calls: tuple[PlannedCall, ...]
    thought: str | None = None
    text: str = ""
    joined: bool = field(default=True)

    def __len__(self) -> int:
        return len(self.calls)


def _scan_call(text: str, pos: int) -> tuple[str, str, int]:
    """Read ``name(args)`` at ``pos``; return the name, the argument text and the end."""
    if text.startswith("`", pos):
        pos += 1
    m = _NAME_RE.match(text, pos)
    if m is None:
        line = text[pos:].split("\n", 1)[0].strip()
        raise PlanError(f"expected a tool call like name(arg=value) after the number, got {line!r}")
    name = m.group(0)
    i = m.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != "(":
        raise PlanError(f"call {name!r} needs parentheses with its arguments, e.g. {name}(...)")
    depth = 0
    quote: str | None = None
    start = i + 1
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
        elif text.startswith('"""', i) or text.startswith("'''", i):
            quote = text[i : i + 3]
            i += 3
            continue
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return name, text[start:i], i + 1
        i += 1
    raise PlanError(f"the parentheses of call {name!r} are not closed")


def _literal(node: ast.AST, where: str) -> Any:
    """An argument value: a literal (Python or JSON spelling), possibly holding ``$N``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        m = _PLACEHOLDER_RE.match(node.id)
        if m:
            return {REF_KEY: int(m.group(1))}
        if node.id in _JSON_NAMES:
            return _JSON_NAMES[node.id]
        raise PlanError(
            f"{where}: {node.id!r} is not a value; write text in quotes, numbers as numbers, "
            "or $N for the result of call N"
        )
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e, where) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise PlanError(f"{where}: ** is not allowed in a plan")
            key = _literal(k, where)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise PlanError(
                    f"{where}: an object key must be text or a number, not {_expr(k)!r} "
                    "(a $N result cannot be a key)"
                )
            out[key] = _literal(v, where)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, where)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise PlanError(
        f"{where}: only literal values (text, numbers, lists, objects) and $N are allowed, "
        f"not expressions like {_expr(node)!r}"
    )


def _expr(node: ast.AST) -> str:
    """An expression of the plan, shortly, for a message (never fails)."""
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError, MemoryError):
        return "(an expression nested too deeply)"
    text = re.sub(r"__nbagent_ref_(\d+)__", r"$\1", text)
    return text if len(text) <= 80 else text[:79] + "…"


def find_refs(value: Any, known: Sequence[int] | None = None) -> set[int]:
    """The call numbers ``value`` refers to: ``{"$ref": N}`` always, ``$N`` inside text only
    when N is in ``known`` (so "$5" in a price is left alone)."""
    found: set[int] = set()
    if isinstance(value, dict):
        if set(value) == {REF_KEY}:
            found.add(int(value[REF_KEY]))
        else:
            for v in value.values():
                found |= find_refs(v, known)
    elif isinstance(value, list):
        for v in value:
            found |= find_refs(v, known)
    elif isinstance(value, str) and known is not None:
        found |= {int(a or b) for a, b in _TEXT_REF_RE.findall(value) if int(a or b) in known}
    return found


def resolve_refs(value: Any, results: Mapping[int, Any]) -> Any:
    """``value`` with each ``$N`` replaced by the result of call N (text inside text)."""
    if isinstance(value, dict):
        if set(value) == {REF_KEY}:
            return results[int(value[REF_KEY])]
        return {k: resolve_refs(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, results) for v in value]
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            n = int(m.group(1) or m.group(2))
            return str(results[n]) if n in results else m.group(0)

        return _TEXT_REF_RE.sub(sub, value)
    return value


def _parse_args(name: str, index: int, args_text: str, tool: FunctionTool) -> dict[str, Any]:
    def protect(m: re.Match[str]) -> str:
        if m.group(1) is not None:  # a string literal: its $N stay text
            return m.group(1)
        return _PLACEHOLDER.format(m.group(2) or m.group(3))

    source = _STRING_OR_REF_RE.sub(protect, args_text)
    where = f"call {index} ({name})"
    if len(source) > _MAX_ARGS_CHARS:
        raise PlanError(f"{where}: the arguments are {len(source)} characters long; at most {_MAX_ARGS_CHARS} are read")
    try:
        return _read_args(name, where, source, tool)
    except SyntaxError as err:
        shown = args_text.strip()
        shown = shown if len(shown) <= 200 else shown[:199] + "…"
        raise PlanError(f"{where}: the arguments are not valid ({err.msg}): {shown!r}") from None
    except (RecursionError, MemoryError):
        raise PlanError(f"{where}: the arguments are nested too deeply; write plain values") from None


_SCHEMAS: dict[int, tuple[Any, dict[str, Any]]] = {}


def _schema(tool: FunctionTool) -> dict[str, Any]:
    """The tool's argument schema, built once per schema class (pydantic's is slow to make)."""
    model = tool.metadata.fn_schema
    cached = _SCHEMAS.get(id(tool.metadata))
    if cached is None or cached[0] is not model:
        cached = (model, tool.metadata.parameters())
        if len(_SCHEMAS) > 1024:
            _SCHEMAS.clear()
        _SCHEMAS[id(tool.metadata)] = cached
    return cached[1]


def _read_args(name: str, where: str, source: str, tool: FunctionTool) -> dict[str, Any]:
    tree = ast.parse(f"f({source})", mode="eval")
    call = tree.body
    assert isinstance(call, ast.Call)
    schema = _schema(tool)
    params = list(schema.get("properties", {}))
    args: dict[str, Any] = {}
    if len(call.args) > len(params):
        raise PlanError(
            f"{where}: {len(call.args)} positional arguments given, the tool takes {len(params)}: {params}"
        )
    for pname, node in zip(params, call.args):
        if isinstance(node, ast.Starred):
            raise PlanError(f"{where}: * is not allowed in a plan")
        args[pname] = _literal(node, where)
    for kw in call.keywords:
        if kw.arg is None:
            raise PlanError(f"{where}: ** is not allowed in a plan")
        if kw.arg in args:
            raise PlanError(f"{where}: argument {kw.arg!r} is given twice")
        if params and kw.arg not in params:
            raise PlanError(f"{where}: {name} has no argument {kw.arg!r}; its arguments are {params}")
        args[kw.arg] = _literal(kw.value, where)
    required = schema.get("required", [])
    missing = [p for p in required if p not in args]
    if missing:
        raise PlanError(f"{where}: missing required argument(s) {missing} of {name}")
    return args


def _find_cycle(deps: Mapping[int, Sequence[int]]) -> list[int] | None:
    """A cycle among the calls as a list of call numbers (first repeated at the end), or None.

    Iterative depth-first search: a plan of thousands of chained calls must not overflow the
    stack.
    """
    color: dict[int, int] = {}
    for root in deps:
        if root in color:
            continue
        color[root] = 1
        path = [root]
        iters = [iter(deps.get(root, ()))]
        while iters:
            d = next(iters[-1], None)
            if d is None:
                iters.pop()
                color[path.pop()] = 2
                continue
            if color.get(d) == 1:
                return path[path.index(d) :] + [d]
            if d not in color:
                color[d] = 1
                path.append(d)
                iters.append(iter(deps.get(d, ())))
    return None


def parse_plan(text: str, tools: Mapping[str, FunctionTool]) -> Plan:
    """Read and check a plan; raise ``PlanError`` (a message for the model) if it is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise PlanError("the reply is empty; write a numbered plan of tool calls ending with join()")
    thought_m = _THOUGHT_RE.search(text)
    thought = thought_m.group(1).strip() if thought_m else None
    calls: list[tuple[int, str, str, str]] = []
    joined = False
    seen: set[int] = set()
    after = 0  # where the last call read ended: a numbered line inside its arguments is no call
    for m in _START_RE.finditer(text):
        if m.start() < after:
            continue
        index = int(m.group(1))
        if _JOIN_RE.match(text, m.end()):
            if index in seen:
                raise PlanError(f"call number {index} is used twice; number the calls 1, 2, 3...")
            joined = True
            break
        if not _CALL_RE.match(text, m.end()):
            continue  # a numbered line of prose, not a call
        name, args_text, end = _scan_call(text, m.end())
        after = end
        if index in seen:
            raise PlanError(f"call number {index} is used twice; number the calls 1, 2, 3...")
        seen.add(index)
        calls.append((index, name, args_text, text[m.end() : end].strip()))
    if not calls and not joined:
        raise PlanError(
            "no plan found; write one call per line as `1. tool_name(arg=value)` and end with "
            "`N. join()` (just `1. join()` if no tool is needed)"
        )
    names = sorted(tools)
    parsed: list[PlannedCall] = []
    indexes = {c[0] for c in calls}
    for index, name, args_text, call_text in calls:
        tool = tools.get(name)
        if tool is None:
            raise PlanError(f"call {index} uses the unknown tool {name!r}; the tools are: {', '.join(names) or 'none'}")
        args = _parse_args(name, index, args_text, tool)
        refs = find_refs(args, indexes)
        missing = sorted(r for r in refs if r not in seen or r not in indexes)
        if missing:
            listed = ", ".join(f"${r}" for r in missing)
            raise PlanError(f"call {index} ({name}) refers to {listed}, but the plan has no such call")
        parsed.append(PlannedCall(index, name, args, tuple(sorted(refs)), call_text))
    cycle = _find_cycle({c.index: c.deps for c in parsed})
    if cycle:
        path = " -> ".join(f"${n}" for n in cycle)
        raise PlanError(f"the calls depend on each other in a cycle ({path}); a call can only use results of calls that do not need it")
    return Plan(calls=tuple(parsed), thought=thought, text=text.strip(), joined=joined)
