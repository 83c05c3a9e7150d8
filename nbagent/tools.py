"""Tools: Python functions a model may call, with a JSON schema taken from the signature.

A tool never crashes a run: an unknown name, arguments that do not fit the schema and an
exception inside the tool all become ``ToolOutput(is_error=True)``, which the model sees as
an observation and can correct.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nbagent._lazy import LazyModule
from nbagent.registry import html_view

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from nbagent.messages import ToolOutput, ToolSelection
    from nbagent.tool_metadata import ToolMetadata


# imported on first use: ``from nbagent import FunctionTool`` defines no pydantic model
@LazyModule
def messages() -> ModuleType:
    from nbagent import messages as module

    return module


@LazyModule
def tool_metadata() -> ModuleType:
    from nbagent import tool_metadata as module

    return module


@LazyModule
def pydantic() -> ModuleType:
    import pydantic as module

    return module


def __getattr__(name: str) -> Any:
    """``nbagent.tools.ToolMetadata``, as before: it lives in ``nbagent.tool_metadata``."""
    if name == "ToolMetadata":
        return tool_metadata.ToolMetadata
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# what the model is told when a function tool raises; acall_tool(error=...) sets it per agent
_ERROR_TEXT: ContextVar[str] = ContextVar("nbagent_tool_error_text", default="Error: {type}: {error}")
#: The journal entry of the tool call being started (``nbagent.calls``): a sync tool's thread
#: reports to it when it starts and ends. None outside a runner's step.
THREAD_CALL: ContextVar[Any] = ContextVar("nbagent_thread_call", default=None)

__all__ = [
    "ToolMetadata",
    "FunctionTool",
    "call_tool",
    "acall_tool",
    "tools_by_name",
    "SchemaReferenceError",
    "nonlocal_refs",
]

RAW_ARGUMENTS_KEY = "__raw_arguments__"  # a model's tool-call arguments that were not a JSON object
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


# keys whose values are schemas by name (walked), and keys whose values are data (not walked)
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_DATA_KEYS = frozenset({"enum", "const", "default", "examples"})
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


class SchemaReferenceError(ValueError):
    """A tool's JSON schema refers to a schema outside itself (a URL, a file, another id).

    nbagent never fetches a schema: a ``$ref`` that is not local (``#/...``) would make the
    argument check reach whatever it names, so such a tool is refused when it is made.
    """

    def __init__(self, tool: str, refs: list[tuple[str, str]], hint: str = "") -> None:
        where, ref = refs[0]
        shown = ref if len(ref) <= 120 else ref[:119] + "…"
        more = f" (and {len(refs) - 1} more)" if len(refs) > 1 else ""
        super().__init__(
            f"tool {tool!r}: its argument schema refers outside itself ({where} = {shown!r}{more}). "
            "nbagent resolves only local references ('#/...') and never fetches a schema, so the "
            "tool is refused; put the referenced schema under '$defs' and refer to it as "
            f"'#/$defs/<name>'{hint}"
        )
        self.tool = tool
        self.refs = refs


def nonlocal_refs(schema: Any) -> list[tuple[str, str]]:
    """Every reference in a JSON schema that does not point inside it, as (where, ref) pairs.

    Local means a fragment of this document (``#``, ``#/$defs/x``, ``#anchor``). Values of
    ``enum``/``const``/``default``/``examples`` are data, not schemas, and are not looked at.
    Iterative, so a deeply nested schema from a server cannot exhaust the stack.
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str, bool]] = [(schema, "", False)]  # (node, path, node is a name->schema map)
    seen: set[int] = set()
    while stack:
        node, path, is_map = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{path}[{i}]", False) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if is_map:
                stack.append((value, here, False))
            elif key in _REF_KEYS and isinstance(value, str):
                if not value.startswith("#"):
                    found.append((here, value))
            elif key not in _DATA_KEYS and isinstance(value, (dict, list)):
                stack.append((value, here, key in _SCHEMA_MAPS and isinstance(value, dict)))
    return sorted(found)


def check_local_refs(tool: str, schema: Any, hint: str = "") -> None:
    """Refuse a schema with a non-local reference (``SchemaReferenceError``)."""
    refs = nonlocal_refs(schema)
    if refs:
        raise SchemaReferenceError(tool, refs, hint)


def _doc_params(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary and per-parameter descriptions.

    Understands Google style (``x: text`` / ``x (int): text`` under Args:) and Sphinx style
    (``:param x: text``).
    """
    params: dict[str, str] = {}
    summary_lines: list[str] = []
    in_args = False
    for raw in doc.splitlines():
        line = raw.strip()
        m = re.match(r":param\s+(?:\w+\s+)?(\w+):\s*(.*)", line)
        if m:
            params[m.group(1)] = m.group(2)
            continue
        if re.match(r"^(Args|Arguments|Parameters):\s*$", line):
            in_args = True
            continue
        if re.match(r"^(Returns|Raises|Yields|Examples?):\s*$", line):
            in_args = False
            continue
        if in_args:
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
            if m:
                params[m.group(1)] = m.group(2)
            continue
        if not line.startswith(":"):
            summary_lines.append(line)
    summary = " ".join(" ".join(summary_lines).split())
    return summary, params


class FunctionTool:
    """A tool backed by a Python function (sync or async)."""

    #: run a sync function in a worker thread, so a blocking tool never blocks the loop (see
    #: ``ainvoke``); False for a function that must run on the loop's thread
    sync_in_thread: bool = True

    def __init__(self, fn: Callable[..., Any], metadata: ToolMetadata) -> None:
        try:
            schema = metadata.parameters()
        except Exception:  # noqa: BLE001 - a schema pydantic cannot write fails where it is sent, as before
            schema = None
        check_local_refs(metadata.name, schema)
        self.fn = fn
        self.metadata = metadata
        self.is_async = inspect.iscoroutinefunction(fn)

    @classmethod
    def from_defaults(
        cls,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        return_direct: bool = False,
        fn_schema: type[BaseModel] | None = None,
        requires_approval: bool = False,
    ) -> FunctionTool:
        """Build a tool; name, description and schema default to the function's own.

        ``requires_approval=True``: a model's call of it waits until a person approves it
        (``runner.approve`` / ``runner.reject``; see ``nbagent.approval``).
        """
        if not callable(fn):
            raise TypeError(f"FunctionTool needs a callable, got {type(fn).__name__}: {fn!r}")
        name = name or getattr(fn, "__name__", None)
        if not name or not _NAME_RE.match(name):
            raise ValueError(
                f"tool name {name!r} is not allowed: use 1-64 letters, digits, '_' or '-', "
                "starting with a letter or '_' (pass name=...)"
            )
        summary, params = _doc_params(inspect.getdoc(fn) or "")
        if fn_schema is None:
            fn_schema = tool_metadata.schema_from_signature(fn, name, params)
        if description is None:
            description = summary or f"{name}{inspect.signature(fn)}"
        if not isinstance(requires_approval, bool):
            raise TypeError(f"requires_approval must be True or False, got {requires_approval!r}")
        meta = tool_metadata.ToolMetadata(
            name=name,
            description=description,
            fn_schema=fn_schema,
            return_direct=return_direct,
            requires_approval=requires_approval,
        )
        return cls(fn, meta)

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``metadata.name``)."""
        return self.metadata.name

    @property
    def return_direct(self) -> bool:
        """Whether the tool's result is the task's answer as it is, with no model turn after it."""
        return self.metadata.return_direct

    @property
    def requires_approval(self) -> bool:
        """Whether a person approves each call of the tool before it runs (``approve`` /
        ``reject`` on the runner)."""
        return self.metadata.requires_approval

    def _validate(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.metadata.fn_schema is None:
            return kwargs
        model = self.metadata.fn_schema.model_validate(kwargs)
        return {k: getattr(model, k) for k in type(model).model_fields}

    def _output(self, kwargs: dict[str, Any], raw: Any) -> ToolOutput:
        if isinstance(raw, messages.ToolOutput):
            return raw
        # as on the reference: the model reads str() of the value (a dict's repr, an agent
        # output's text); the value itself stays in raw_output
        return messages.ToolOutput(content=str(raw), tool_name=self.name, raw_input=kwargs, raw_output=raw)

    def _error(self, kwargs: dict[str, Any], message: str) -> ToolOutput:
        return messages.ToolOutput(
            content=f"Error: {message}", tool_name=self.name, raw_input=kwargs, is_error=True
        )

    async def acall(self, **kwargs: Any) -> ToolOutput:
        """Call the tool; any failure becomes an error ``ToolOutput``."""
        return await self.ainvoke(kwargs)

    async def ainvoke(self, kwargs: dict[str, Any], *, in_thread: bool | None = None) -> ToolOutput:
        """Call the tool with ``kwargs``; any failure becomes an error ``ToolOutput``.

        A sync function runs in a worker thread (``in_thread``, default: the tool's
        ``sync_in_thread``, True): several calls made together (a model's parallel tool calls)
        overlap instead of queueing on the loop, and a tool that blocks does not block the
        loop, so an interrupt or Stop rolls the step back at once; the thread runs on, and a
        retry of the step takes what it returns instead of calling the tool again (see
        ``nbagent.calls``). Set ``tool.sync_in_thread = False`` for a function that must run
        on the loop's thread.

        Example:

        >>> import asyncio
        >>> from nbagent import FunctionTool
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> out = asyncio.run(FunctionTool.from_defaults(add).ainvoke({"a": 2, "b": 3}))
        >>> out.content, out.is_error
        ('5', False)
        """
        if in_thread is None:
            in_thread = self.sync_in_thread
        if not isinstance(kwargs, dict) or RAW_ARGUMENTS_KEY in kwargs:
            return self._error(
                kwargs if isinstance(kwargs, dict) else {RAW_ARGUMENTS_KEY: kwargs},
                _not_json_message(self, kwargs.get(RAW_ARGUMENTS_KEY) if isinstance(kwargs, dict) else kwargs),
            )
        try:
            args = self._validate(kwargs)
        except pydantic.ValidationError as e:
            return self._error(kwargs, _validation_message(self, e))
        if in_thread and not self.is_async:
            import asyncio  # not at import: nbagent's import stays light

            return await asyncio.to_thread(self._run_in_thread, kwargs, args)
        try:
            if self.is_async:
                raw = await self.fn(**args)
            else:
                raw = self.fn(**args)
        except Exception as e:  # the model sees the error and may try again
            return self._raised(kwargs, e)
        return self._output(kwargs, raw)

    def _raised(self, kwargs: dict[str, Any], error: Exception) -> ToolOutput:
        return messages.ToolOutput(
            content=_ERROR_TEXT.get().format(type=type(error).__name__, error=error).strip(),
            tool_name=self.name,
            raw_input=kwargs,
            is_error=True,
        )

    def _run_in_thread(self, kwargs: dict[str, Any], args: dict[str, Any]) -> ToolOutput:
        """What a worker thread runs: the tool, then its output. The call's journal entry
        (``THREAD_CALL``, set by ``nbagent.calls``) hears of it even if the step that started
        the call was interrupted meanwhile, so a retry takes this output instead of running
        the tool again."""
        call = THREAD_CALL.get()
        if call is not None and not call.begin():
            import asyncio

            raise asyncio.CancelledError("the step gave this call up before it started")
        out: ToolOutput | None = None
        try:
            try:
                raw = self.fn(**args)
            except Exception as e:  # the model sees the error and may try again
                out = self._raised(kwargs, e)
            else:
                out = self._output(kwargs, raw)
            return out
        finally:
            if call is not None:
                call.end(out)

    def call(self, **kwargs: Any) -> ToolOutput:
        """Run the tool with arguments by name, from sync code (``acall`` awaited): the
        arguments are checked against its schema, and an error the function raises comes back
        as an error ``ToolOutput`` the model can read, not as an exception."""
        from nbagent._sync import run_sync

        return run_sync(self.acall(**kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """Call the tool as on the reference: a ``ToolOutput`` (``content`` is what a model
        would read, ``raw_output`` the function's own value; a failure is an error output, as
        in ``call``). Arguments by name, or by position as the function takes them; the plain
        function is ``tool.fn``."""
        if args:
            try:
                kwargs = dict(inspect.signature(self.fn).bind_partial(*args, **kwargs).arguments)
            except TypeError as err:
                raise TypeError(f"tool {self.name!r}: {err}") from None
        return self.call(**kwargs)

    def __repr__(self) -> str:
        flag = ", return_direct=True" if self.return_direct else ""
        flag += ", requires_approval=True" if self.requires_approval else ""
        return f"FunctionTool(name={self.name!r}{flag})"

    def _repr_html_(self) -> str | None:
        return html_view(self)


def _expected(tool: FunctionTool) -> str:
    import json

    schema = tool.metadata.parameters()
    props = json.dumps(schema.get("properties", {}), ensure_ascii=False)
    required = schema.get("required", [])
    return f"a JSON object with the arguments {props}" + (f", required: {required}" if required else "")


def _not_json_message(tool: FunctionTool, raw: Any) -> str:
    """What the model is told when its arguments were not a JSON object: the parser's own
    message (where it stopped), what it sent, and what the tool expects."""
    import json

    text = raw if isinstance(raw, str) else repr(raw)
    shown = text if len(text) <= 200 else text[:199] + "…"
    why: str
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as err:
            why = f"not valid JSON ({err})"
        except RecursionError:
            why = "not valid JSON (nested too deeply)"
        else:
            why = f"a JSON {_json_type(value)}, not an object"
    else:
        why = f"a {type(raw).__name__}, not a JSON object"
    return (
        f"the arguments for tool {tool.name!r} are {why}: {shown!r}. "
        f"Send {_expected(tool)}"
    )


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _validation_message(tool: FunctionTool, err: ValidationError) -> str:
    import json

    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(arguments)"
        problems.append(f"{loc}: {e['msg']}")
    schema = json.dumps(tool.metadata.parameters().get("properties", {}), ensure_ascii=False)
    return (
        f"invalid arguments for tool {tool.name!r}: " + "; ".join(problems)
        + f". Expected arguments: {schema}"
    )


def tools_by_name(tools: Sequence[FunctionTool]) -> dict[str, FunctionTool]:
    """Index tools by name; two tools with one name is an error."""
    out: dict[str, FunctionTool] = {}
    for t in tools:
        if not isinstance(t, FunctionTool):
            raise TypeError(
                f"tools must be FunctionTool objects (or plain functions where accepted), "
                f"got {type(t).__name__}: {t!r}"
            )
        if t.name in out:
            raise ValueError(f"two tools are named {t.name!r}; tool names must be unique")
        out[t.name] = t
    return out


def as_tools(tools: Sequence[FunctionTool | Callable[..., Any]] | None) -> list[FunctionTool]:
    """Accept FunctionTools and plain functions alike."""
    out = []
    for t in tools or []:
        out.append(t if isinstance(t, FunctionTool) else FunctionTool.from_defaults(t))
    tools_by_name(out)
    return out


async def acall_tool(
    tools: dict[str, FunctionTool],
    selection: ToolSelection,
    *,
    in_thread: bool | None = None,
    missing: str = "Error: there is no tool named {name!r}.",
    error: str | None = None,
) -> ToolOutput:
    """Run the tool a model selected; an unknown name is an error observation.

    ``in_thread``: run a sync tool in a worker thread (see ``FunctionTool.ainvoke``).
    ``missing``: what the model is told about an unknown name (``{name}``; each agent uses
    the reference's words for its kind), followed by the tools there are. ``error``: what it
    is told when the tool raises (``{error}``, ``{type}``), likewise.
    """
    if error is not None:
        token = _ERROR_TEXT.set(error)
        try:
            return await acall_tool(tools, selection, in_thread=in_thread, missing=missing)
        finally:
            _ERROR_TEXT.reset(token)
    tool = tools.get(selection.tool_name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "(none)"
        out = messages.ToolOutput(
            content=f"{missing.format(name=selection.tool_name)} Available tools: {known}",
            tool_name=selection.tool_name,
            raw_input=selection.tool_kwargs,
            is_error=True,
        )
    else:
        out = await tool.ainvoke(selection.tool_kwargs, in_thread=in_thread)
    out.tool_call_id = selection.tool_id
    return out




def call_tool(tools: dict[str, FunctionTool], selection: ToolSelection) -> ToolOutput:
    from nbagent._sync import run_sync

    return run_sync(acall_tool(tools, selection))
