"""ToolMetadata: what the model is told about a tool, and the argument model made from a
function's signature.

Apart from ``nbagent.tools`` because it is a pydantic model: ``from nbagent import FunctionTool``
defines none, the first tool made loads this module (``nbagent.tools.ToolMetadata`` is this class).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = ["ToolMetadata", "schema_from_signature"]


class ToolMetadata(BaseModel):
    """What the model is told about a tool."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    name: str
    description: str
    fn_schema: type[BaseModel] | None = None
    return_direct: bool = False
    requires_approval: bool = False  # a person approves each call first (nbagent.approval)

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments.

        Example:

        >>> from nbagent import FunctionTool
        >>> def add(a: int, b: int = 0) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> FunctionTool.from_defaults(add).metadata.parameters()
        {'additionalProperties': False, 'properties': {'a': {'type': 'integer'}, 'b': {'default': 0, 'type': 'integer'}}, 'required': ['a'], 'type': 'object'}
        """
        if self.fn_schema is None:
            return {"type": "object", "properties": {}}
        schema = self.fn_schema.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return schema

    def get_parameters_dict(self) -> dict[str, Any]:
        """The arguments' JSON schema as the reference gives it (titles kept; only ``type``,
        ``properties``, ``required`` and definitions), e.g. for a prompt that lists tools.

        Example:

        >>> from nbagent import FunctionTool
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> FunctionTool.from_defaults(add).metadata.get_parameters_dict()["required"]
        ['a', 'b']
        """
        if self.fn_schema is None:  # the reference's default: one input string
            return {
                "type": "object",
                "properties": {"input": {"title": "input query string", "type": "string"}},
                "required": ["input"],
            }
        schema = self.fn_schema.model_json_schema()
        return {k: v for k, v in schema.items() if k in ("type", "properties", "required", "definitions", "$defs")}

    @property
    def fn_schema_str(self) -> str:
        """``get_parameters_dict()`` as JSON text, as the reference's LLM-compiler prompt shows it."""
        if self.fn_schema is None:
            raise ValueError(f"tool {self.name!r} has no fn_schema, so no fn_schema_str")
        import json  # here, as in the other functions that need it: import nbagent does not load json

        return json.dumps(self.get_parameters_dict(), ensure_ascii=False)

    def to_openai_tool(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools=[...]`` format.

        Example:

        >>> from nbagent import FunctionTool
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> spec = FunctionTool.from_defaults(add).metadata.to_openai_tool()
        >>> spec["function"]["name"], spec["function"]["parameters"]["required"]
        ('add', ['a', 'b'])
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters(),
            },
        }


def schema_from_signature(fn: Callable[..., Any], name: str, doc_params: dict[str, str]) -> type[BaseModel]:
    """The pydantic model of ``fn``'s arguments (no extra ones), described by ``doc_params``."""
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=doc_params.get(pname)))
    model_name = "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]", name) if p) or "Tool"
    return create_model(f"{model_name}Args", __config__=ConfigDict(extra="forbid"), **fields)
