"""Tools for workflow agents: plain functions, FunctionTools, and functions that take the run's
``Context`` (``async def ask(ctx: Context, question: str)``): the model never sees ``ctx``; it
is passed in when the tool runs inside a workflow step.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from nbagent.tools import FunctionTool, tools_by_name
from nbagent.workflow.context import Context, current_context

__all__ = ["workflow_tool", "as_workflow_tools", "context_param"]


def context_param(fn: Callable[..., Any]) -> inspect.Parameter | None:
    """The parameter of ``fn`` that receives the Context: annotated ``Context`` or named ``ctx``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the name
        hints = {}
    for p in params:
        ann = hints.get(p.name, p.annotation)
        if ann is Context or ann == "Context" or p.name == "ctx":
            return p
    return None


def workflow_tool(
    fn: Callable[..., Any],
    name: str | None = None,
    description: str | None = None,
    return_direct: bool = False,
) -> FunctionTool:
    """A FunctionTool for ``fn``; if ``fn`` takes the Context, it is hidden from the model."""
    if isinstance(fn, FunctionTool):
        return fn
    if not callable(fn):
        raise TypeError(f"a tool must be a function or a FunctionTool, got {type(fn).__name__}: {fn!r}")
    param = context_param(fn)
    if param is None:
        return FunctionTool.from_defaults(fn, name=name, description=description, return_direct=return_direct)
    sig = inspect.signature(fn)
    is_async = inspect.iscoroutinefunction(fn)
    positional = param.kind == inspect.Parameter.POSITIONAL_ONLY

    async def with_context(**kwargs: Any) -> Any:
        ctx = current_context()
        result = fn(ctx, **kwargs) if positional else fn(**{param.name: ctx}, **kwargs)
        if is_async or inspect.isawaitable(result):
            result = await result
        return result

    functools.update_wrapper(with_context, fn)
    with_context.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.name != param.name]
    )
    with_context.__annotations__ = {
        k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != param.name
    }
    return FunctionTool.from_defaults(
        with_context,
        name=name or getattr(fn, "__name__", None),
        description=description,
        return_direct=return_direct,
    )


def as_workflow_tools(tools: Sequence[FunctionTool | Callable[..., Any]] | None) -> list[FunctionTool]:
    """FunctionTools for a list of tools and functions (names must be unique)."""
    out = [workflow_tool(t) for t in tools or []]
    tools_by_name(out)
    return out
