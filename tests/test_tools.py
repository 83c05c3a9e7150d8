"""FunctionTool: schema from the signature and docstring; every failure is an observation."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from nbagent import FunctionTool, ToolSelection
from nbagent.tools import acall_tool, as_tools, call_tool, tools_by_name


def multiply(a: int, b: int = 2) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b (int): the second factor
    """
    return a * b


async def fetch(url: str) -> str:
    """Fetch a page.

    :param url: where to go
    """
    await asyncio.sleep(0)
    return f"page at {url}"


def broken(x: int) -> int:
    raise ZeroDivisionError("no")


def test_schema_from_signature_and_docstring() -> None:
    tool = FunctionTool.from_defaults(multiply)
    spec = tool.metadata.to_openai_tool()
    assert spec["function"]["name"] == "multiply"
    assert spec["function"]["description"] == "Multiply two integers."
    params = spec["function"]["parameters"]
    assert params["required"] == ["a"]
    assert params["properties"]["a"] == {"type": "integer", "description": "the first factor"}
    assert params["properties"]["b"]["default"] == 2
    assert params["properties"]["b"]["description"] == "the second factor"
    sphinx = FunctionTool.from_defaults(fetch).metadata.parameters()
    assert sphinx["properties"]["url"]["description"] == "where to go"


def test_overrides_and_invalid_names() -> None:
    tool = FunctionTool.from_defaults(multiply, name="mul", description="times", return_direct=True)
    assert (tool.name, tool.metadata.description, tool.return_direct) == ("mul", "times", True)
    with pytest.raises(ValueError, match="not allowed"):
        FunctionTool.from_defaults(lambda x: x)  # '<lambda>' is no tool name
    with pytest.raises(TypeError):
        FunctionTool.from_defaults("nope")  # type: ignore[arg-type]


def test_sync_and_async_calls() -> None:
    assert FunctionTool.from_defaults(multiply).call(a=3, b=4).raw_output == 12
    out = asyncio.run(FunctionTool.from_defaults(fetch).acall(url="x"))
    assert out.content == "page at x" and not out.is_error
    out = FunctionTool.from_defaults(multiply)(5)  # as on the reference: a ToolOutput
    assert (out.content, out.raw_output, out.raw_input) == ("10", 10, {"a": 5})
    assert FunctionTool.from_defaults(multiply).fn(5) == 10  # the plain function
    with pytest.raises(TypeError, match="tool 'multiply': too many positional arguments"):
        FunctionTool.from_defaults(multiply)(1, 2, 3)


def test_errors_become_observations() -> None:
    tool = FunctionTool.from_defaults(broken)
    out = tool.call(x=1)
    assert out.is_error and out.content == "Error: ZeroDivisionError: no"
    bad = FunctionTool.from_defaults(multiply).call(a="three")
    assert bad.is_error and "invalid arguments for tool 'multiply'" in bad.content and "a:" in bad.content
    extra = FunctionTool.from_defaults(multiply).call(a=1, c=2)
    assert extra.is_error and "c: Extra inputs are not permitted" in extra.content
    tools = tools_by_name([FunctionTool.from_defaults(multiply)])
    unknown = call_tool(tools, ToolSelection(tool_id="1", tool_name="divide", tool_kwargs={}))
    assert unknown.is_error and "no tool named 'divide'" in unknown.content and "multiply" in unknown.content
    assert unknown.tool_call_id == "1"


def test_structured_outputs_reach_the_model_as_their_str_and_stay_in_raw_output() -> None:
    """As on the reference (compared in tests/oracle/test_docs_tool_outputs.py)."""
    class Point(BaseModel):
        x: int

    def point() -> Point:
        return Point(x=1)

    def mapping() -> dict[str, str]:
        return {"name": "Ada"}

    out = FunctionTool.from_defaults(point).call()
    assert out.content == "x=1" and out.raw_output == Point(x=1)
    out = FunctionTool.from_defaults(mapping).call()
    assert out.content == "{'name': 'Ada'}" and out.raw_output == {"name": "Ada"}


def test_tools_by_name_and_as_tools() -> None:
    tools = as_tools([multiply, FunctionTool.from_defaults(fetch)])
    assert [t.name for t in tools] == ["multiply", "fetch"]
    with pytest.raises(ValueError, match="unique"):
        as_tools([multiply, multiply])
    with pytest.raises(TypeError):
        tools_by_name(["x"])  # type: ignore[list-item]
    out = asyncio.run(acall_tool(tools_by_name(tools), ToolSelection(tool_id="c", tool_name="multiply", tool_kwargs={"a": 2})))
    assert out.content == "4" and out.raw_input == {"a": 2}


# ----- arguments that are not JSON ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"a": 1, "b": ', "not valid JSON (Expecting value: line 1 column 15"),
        ("[1, 2]", "a JSON array, not an object"),
        ('"a=1"', "a JSON string, not an object"),
        ("{'a': 1}", "not valid JSON (Expecting property name enclosed in double quotes"),
    ],
)
def test_arguments_that_are_not_a_json_object_tell_the_model_why(raw: str, why: str) -> None:
    from nbagent.llms.openai import parse_arguments
    from nbagent.messages import ToolSelection
    from nbagent.tools import acall_tool

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    tools = {"add": FunctionTool.from_defaults(add)}
    out = asyncio.run(acall_tool(tools, ToolSelection(tool_id="1", tool_name="add", tool_kwargs=parse_arguments(raw))))
    assert out.is_error
    assert why in out.content
    assert repr(raw) in out.content  # what it sent
    assert '"a": {"type": "integer"}' in out.content and "required: ['a', 'b']" in out.content  # what is expected
    assert "Field required" not in out.content and "__raw_arguments__" not in out.content
