"""Typed answers: ``output_cls=SomeModel`` makes an agent's answer a validated pydantic object.

How the model is asked for it (``structured_mode``):

- ``"tool"``: a function-calling model gets one more tool, ``final_result``, whose arguments
  are the model's fields; calling it is answering.
- ``"response_format"``: the request carries OpenAI's ``response_format`` (a JSON schema), for
  servers that support it (``llm.supports_response_format``); the answer text is the JSON.
- ``"json"``: any model; the prompt asks for a JSON object matching the schema.
- ``"auto"`` (default): ``response_format`` if the model says it supports it, else ``tool``
  for function-calling models, else ``json``.

An answer that does not validate goes back to the model with the validation errors, at most
``max_output_retries`` times, each retry a visible step; after that the step fails with
``StructuredOutputError`` (the step stays queued: raise the limit and run it again). The
final ``AgentChatResponse.structured_response`` holds the instance; ``response`` its JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from nbagent.tools import ToolMetadata

__all__ = [
    "FINAL_TOOL",
    "MODES",
    "StructuredOutputError",
    "check_output_cls",
    "pick_mode",
    "final_tool",
    "response_format",
    "json_instructions",
    "parse_json_answer",
    "validate_args",
    "feedback",
    "RETRIES_KEY",
]

FINAL_TOOL = "final_result"
MODES = ("auto", "tool", "response_format", "json")
RETRIES_KEY = "output_retries"

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class StructuredOutputError(ValueError):
    """The model's answer still did not fit ``output_cls`` after the allowed retries."""


def check_output_cls(output_cls: Any, mode: str = "auto", retries: int = 2) -> None:
    """Clear errors for a bad ``output_cls`` / ``structured_mode`` / ``max_output_retries``."""
    if output_cls is not None and not (
        isinstance(output_cls, type) and issubclass(output_cls, BaseModel)
    ):
        raise TypeError(
            f"output_cls must be a pydantic BaseModel subclass, got {output_cls!r}"
        )
    if mode not in MODES:
        raise ValueError(f"structured_mode must be one of {MODES}, got {mode!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"max_output_retries must be an int >= 0, got {retries!r}")
    allow_in_files(output_cls)  # runs holding its answers can be saved and loaded


def _models_in(annotation: Any, seen: set[type]) -> None:
    """Every pydantic model class reachable from a field annotation (lists, unions, nesting)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _models_in(field.annotation, seen)
        return
    for arg in get_args(annotation):
        _models_in(arg, seen)


def allow_in_files(output_cls: Any) -> None:
    """Let runs holding typed answers of ``output_cls`` (and the models inside it) be saved and
    loaded: building an agent with ``output_cls`` is the user naming the class, in the saving
    process and in the loading one alike. Classes defined inside a function cannot be loaded
    again; they are left out (saving such a run names them in its error)."""
    if output_cls is None:
        return
    from nbagent.allowlist import PersistError, allow_type

    found: set[type] = set()
    _models_in(output_cls, found)
    for cls in found:
        try:
            allow_type(cls)
        except PersistError:
            pass


def pick_mode(mode: str, llm: Any) -> str:
    """Resolve ``"auto"`` for this model (see the module docstring)."""
    if mode != "auto":
        return mode
    if getattr(llm, "supports_response_format", False):
        return "response_format"
    if getattr(llm, "is_function_calling_model", False):
        return "tool"
    return "json"


def schema_of(output_cls: type[BaseModel]) -> dict[str, Any]:
    return output_cls.model_json_schema()


def final_tool(output_cls: type[BaseModel]) -> ToolMetadata:
    """The tool a function-calling model calls to answer: its arguments are the fields."""
    return ToolMetadata(
        name=FINAL_TOOL,
        description=(
            f"Give your final answer as a {output_cls.__name__}. Call this once you know the "
            "answer; its arguments are the answer's fields."
        ),
        fn_schema=output_cls,
    )


def response_format(output_cls: type[BaseModel]) -> dict[str, Any]:
    """OpenAI's ``response_format`` for ``output_cls`` (a JSON schema)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": output_cls.__name__, "schema": schema_of(output_cls)},
    }


def json_instructions(
    output_cls: type[BaseModel], lead: str = "When you give your final answer, it must be"
) -> str:
    """The prompt text asking for a JSON answer."""
    schema = json.dumps(schema_of(output_cls), ensure_ascii=False)
    return (
        f"{lead} a single JSON object (no other text) that is a valid {output_cls.__name__} "
        f"with this JSON schema: {schema}"
    )


def _json_text(text: str) -> str:
    """The JSON part of an answer: inside a ```json fence, or from the first ``{`` to the last ``}``."""
    m = _FENCE.search(text)
    if m:
        return m.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        return text[start : end + 1]
    return text.strip()


def _problems(err: ValidationError) -> str:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(the object)"
        out.append(f"{loc}: {e['msg']}")
    return "; ".join(out)


def parse_json_answer(text: str, output_cls: type[BaseModel]) -> BaseModel:
    """Validate an answer text as ``output_cls``; raises ``ValueError`` naming what is wrong."""
    raw = _json_text(text or "")
    try:
        return output_cls.model_validate_json(raw)
    except ValidationError as err:
        if any(e["type"] == "json_invalid" for e in err.errors()):
            raise ValueError(f"the answer is not valid JSON ({_problems(err)})") from None
        raise ValueError(f"the answer is not a valid {output_cls.__name__}: {_problems(err)}") from None


def validate_args(arguments: Any, output_cls: type[BaseModel]) -> BaseModel:
    """Validate a ``final_result`` call's arguments; raises ``ValueError`` naming what is wrong."""
    try:
        return output_cls.model_validate(arguments)
    except ValidationError as err:
        raise ValueError(
            f"the arguments of {FINAL_TOOL} are not a valid {output_cls.__name__}: {_problems(err)}"
        ) from None


def feedback(problem: str, mode: str, output_cls: type[BaseModel]) -> str:
    """What the model is told after a bad answer, so it can correct it."""
    if mode == "tool":
        how = f"Call {FINAL_TOOL} again with arguments that fit its schema."
    elif mode == "react":
        how = "Give the Answer again, with only the corrected JSON object after 'Answer:'."
    else:
        how = "Reply again with only the corrected JSON object."
    return f"Your final answer was rejected: {problem}. {how}"


def typed_text(obj: Any) -> str:
    """A typed answer in one line, ``Form(name='Ada', age=36)`` (plain text, not escaped)."""
    fields = getattr(type(obj), "model_fields", None)
    if not fields:
        return str(obj)
    return f"{type(obj).__name__}(" + ", ".join(f"{k}={getattr(obj, k, None)!r}" for k in fields) + ")"


def answer_text(obj: BaseModel) -> str:
    """The answer's text form: the object's JSON."""
    return obj.model_dump_json()
