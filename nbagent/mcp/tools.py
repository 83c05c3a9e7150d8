"""MCP tools as nbagent tools: ``McpTool`` (a ``FunctionTool`` with the server's JSON
schema) and ``McpToolSpec`` (a server's tools, as LlamaIndex names it)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field

from nbagent.mcp.client import BasicMCPClient, MCPServerError
from nbagent.mcp.results import McpToolResult, to_tool_result
from nbagent.messages import ToolOutput
from nbagent.registry import html_view
from nbagent.tools import RAW_ARGUMENTS_KEY, FunctionTool, ToolMetadata, _not_json_message, check_local_refs

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["McpTool", "McpToolMetadata", "McpToolSpec", "get_tools_from_mcp_url", "aget_tools_from_mcp_url"]

_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


class McpToolMetadata(ToolMetadata):
    """A tool's metadata, with the server's JSON schema as the arguments' schema."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] | None = None
    server: str = Field(default="", description="The MCP server the tool lives on.")
    mcp_name: str = Field(default="", description="The tool's name on the server.")

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments as the model is sent it: the server's
        input schema, without its title, always an object with properties.

        Example:

        >>> from nbagent.mcp import McpToolMetadata
        >>> meta = McpToolMetadata(name="convert_time", description="Convert a time.", server="time", mcp_name="convert_time",
        ...                        input_schema={"title": "convertArgs", "properties": {"time": {"type": "string"}}, "required": ["time"]})
        >>> meta.parameters()  # what the model is sent: the server's schema, without its title
        {'properties': {'time': {'type': 'string'}}, 'required': ['time'], 'type': 'object'}
        """
        schema = dict(self.input_schema)
        schema.pop("title", None)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return schema


def _tool_name(name: str) -> str:
    """A server's tool name as one the models accept (letters, digits, '_' and '-', 64 max)."""
    clean = _BAD_NAME_CHARS.sub("_", name)
    if not clean or not (clean[0].isalpha() or clean[0] == "_"):
        clean = "_" + clean
    return clean[:64]


class McpTool(FunctionTool):
    """A tool on an MCP server, usable wherever a ``FunctionTool`` is.

    Arguments are checked against the server's schema before the call (an error the model
    sees and can fix); the result is an ``McpToolResult`` in ``ToolOutput.raw_output``.
    """

    metadata: McpToolMetadata

    def __init__(self, client: BasicMCPClient, metadata: McpToolMetadata, *, resource_uri: str | None = None) -> None:
        self.mcp_client = client
        self.resource_uri = resource_uri
        self._validator: Any = None

        def call_server(**kwargs: Any) -> McpToolResult:
            """Call the tool on its server (sync); transport failures raise MCPServerError."""
            return client._run_sync(lambda c: self._send(c, kwargs), self._what())

        call_server.__name__ = metadata.name
        super().__init__(call_server, metadata)
        self.is_async = True  # ainvoke awaits the server: never a thread for it

    @property
    def server(self) -> str:
        """The name of the MCP server the tool lives on."""
        return self.metadata.server

    def _what(self) -> str:
        if self.resource_uri is not None:
            return f"reading resource {self.resource_uri!r}"
        return f"calling tool {self.metadata.mcp_name!r}"

    async def _send(self, client: Client, kwargs: dict[str, Any]) -> McpToolResult:
        if self.resource_uri is not None:
            res = await client.read_resource(self.resource_uri)
            texts = []
            for item in res.contents:
                text = getattr(item, "text", None)
                texts.append(text if text is not None else f"[{item.mime_type or 'binary'} data, not shown to the model]")
            return McpToolResult(server=self.server, tool=self.metadata.mcp_name, text="\n".join(texts))
        result = await client.call_tool(self.metadata.mcp_name, kwargs)
        return to_tool_result(self.server, self.metadata.mcp_name, result)

    def argument_problems(self, kwargs: dict[str, Any]) -> list[str]:
        """What is wrong with ``kwargs`` by the server's schema (empty: fine). Approval checks
        an edited call with it too."""
        try:
            return self._schema_problems(kwargs)
        except Exception:  # noqa: BLE001 - a schema the validator cannot read: let the server judge
            return []

    def _schema_problems(self, kwargs: dict[str, Any]) -> list[str]:
        if self._validator is None:
            self._validator = local_validator(self.metadata.input_schema)
        problems = []
        for e in sorted(self._validator.iter_errors(kwargs), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in e.path) or "(arguments)"
            problems.append(f"{where}: {e.message}")
        return problems

    async def ainvoke(self, kwargs: dict[str, Any], *, in_thread: bool | None = None) -> ToolOutput:
        """Validate, call the server, wrap the result; ``MCPServerError`` if it cannot answer.

        ``in_thread`` is ignored: the call is a request on the client's own loop already, and
        cancelling the awaiting task (an interrupt, Stop) cancels the request too.
        """
        from mcp import MCPError

        if not isinstance(kwargs, dict) or RAW_ARGUMENTS_KEY in kwargs:  # the model's text was not JSON
            return self._error(
                kwargs if isinstance(kwargs, dict) else {RAW_ARGUMENTS_KEY: kwargs},
                _not_json_message(self, kwargs.get(RAW_ARGUMENTS_KEY) if isinstance(kwargs, dict) else kwargs),
            )
        problems = self.argument_problems(kwargs)
        if problems:
            expected = json.dumps(self.metadata.parameters().get("properties", {}), ensure_ascii=False)
            msg = f"invalid arguments for tool {self.name!r}: " + "; ".join(problems) + f". Expected arguments: {expected}"
            out = self._error(kwargs, msg)
            out.raw_output = McpToolResult(server=self.server, tool=self.metadata.mcp_name, text=msg, is_error=True)
            return out
        try:
            result = await self.mcp_client._run(lambda c: self._send(c, kwargs), self._what())
        except MCPServerError:
            raise  # the step fails and stays queued
        except MCPError as err:  # the server answered with an error: the model sees it
            result = McpToolResult(
                server=self.server, tool=self.metadata.mcp_name, text=f"{err} (MCP error {err.code})", is_error=True
            )
        except (ValueError, RuntimeError) as err:  # a reply the SDK rejected (e.g. against the output schema)
            result = McpToolResult(
                server=self.server, tool=self.metadata.mcp_name, text=f"{type(err).__name__}: {err}", is_error=True
            )
        result = _scrubbed(self.mcp_client, result)
        content = result.text
        if result.is_error and not content.lower().startswith("error"):
            content = f"Error: {content}"
        return ToolOutput(
            content=content, tool_name=self.name, raw_input=kwargs, raw_output=result, is_error=result.is_error
        )

    def __repr__(self) -> str:
        flag = ", return_direct=True" if self.return_direct else ""
        return f"McpTool(name={self.name!r}, server={self.server!r}{flag})"


def local_validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator for ``schema`` that can never fetch anything.

    jsonschema's default registry retrieves any ``$ref`` it does not know over the network
    (deprecated, still on); an explicit empty ``referencing.Registry`` has no retrieval at
    all, so references resolve within the schema and the bundled metaschemas only. A
    reference outside it is an error of the check, never a request. (Tools with such a
    reference are refused when they are made; this is the guard underneath.)
    """
    from jsonschema.validators import validator_for
    from referencing import Registry

    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=Registry())


def _scrubbed(client: BasicMCPClient, result: McpToolResult) -> McpToolResult:
    """``result`` with the client's credentials masked in its text and structured content
    (a server may echo the URL or the headers it got; the model, the run file and the report
    must not see them)."""
    if not client._secrets:
        return result
    text = client._scrub_text(result.text)
    structured = result.structured
    if structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False, default=str)
        clean = client._scrub_text(dumped)
        if clean != dumped:
            try:
                structured = json.loads(clean)
            except ValueError:
                structured = clean
    return result.model_copy(update={"text": text, "structured": structured})


# ----- the tool spec -----------------------------------------------------------------------


class McpToolSpec:
    """The tools of one MCP server as nbagent tools (LlamaIndex's ``McpToolSpec``).

    ``allowed_tools``: only these (by the server's names); a name the server does not have is
    an error. ``include_resources``: also one tool per resource, which reads it.
    ``requires_approval``: True (every tool), or the names of the tools whose calls wait for a
    person to approve them (``nbagent.approval``), as ``FunctionTool(requires_approval=True)``.
    """

    def __init__(
        self,
        client: BasicMCPClient,
        allowed_tools: Sequence[str] | None = None,
        include_resources: bool = False,
        *,
        requires_approval: bool | Sequence[str] = False,
    ) -> None:
        if not isinstance(client, BasicMCPClient):
            raise TypeError(f"McpToolSpec needs a BasicMCPClient, got {type(client).__name__}: {client!r}")
        if isinstance(allowed_tools, str):
            raise TypeError(f"allowed_tools must be a list of names, got the string {allowed_tools!r}")
        self.client = client
        self.allowed_tools = list(allowed_tools) if allowed_tools is not None else None
        self.include_resources = bool(include_resources)
        if isinstance(requires_approval, str) or not (
            isinstance(requires_approval, bool)
            or all(isinstance(n, str) for n in requires_approval)
        ):
            raise TypeError(
                f"requires_approval must be True, False or a list of tool names, got {requires_approval!r}"
            )
        self.requires_approval = requires_approval if isinstance(requires_approval, bool) else list(requires_approval)
        self.tools: list[McpTool] | None = None  # the last to_tool_list(), for the views

    async def fetch_tools(self) -> list[Any]:
        """The server's tool listings (SDK ``Tool`` objects), filtered by ``allowed_tools``."""
        return self._filter(list((await self.client.list_tools()).tools))

    async def fetch_resources(self) -> list[Any]:
        """The server's resource listings (SDK ``Resource`` objects: a URI and a name each),
        to read with ``client.read_resource(uri)``."""
        return list((await self.client.list_resources()).resources)

    def _approval_of(self, listed: list[Any]) -> Callable[[str], bool]:
        flag = self.requires_approval
        if isinstance(flag, bool):
            return lambda name: flag
        names = {t.name for t in listed}
        missing = [n for n in flag if n not in names]
        if missing:
            raise ValueError(
                f"requires_approval names {missing} that server {self.client.name!r} does not offer here; "
                f"its tools: {sorted(names)}"
            )
        return lambda name: name in flag

    def _make_tools(self, listed: list[Any], resources: list[Any]) -> list[McpTool]:
        out: list[McpTool] = []
        approval = self._approval_of(listed)
        taken: dict[str, str] = {}
        for t in listed:
            name = _tool_name(t.name)
            if name in taken:
                raise ValueError(
                    f"server {self.client.name!r} has tools {taken[name]!r} and {t.name!r}, which both "
                    f"become {name!r}; pick one with allowed_tools=[...]"
                )
            taken[name] = t.name
            check_local_refs(
                name, t.input_schema or {},
                f" (MCP server {self.client.name!r}: its author can), or leave the tool out: "
                f"McpToolSpec(client, allowed_tools=[...]) without {t.name!r}",
            )
            meta = McpToolMetadata(
                name=name,
                description=(t.description or t.title or f"{t.name} (MCP tool on {self.client.name})").strip(),
                input_schema=dict(t.input_schema or {}),
                output_schema=dict(t.output_schema) if t.output_schema else None,
                server=self.client.name,
                mcp_name=t.name,
                requires_approval=approval(t.name),
            )
            out.append(McpTool(self.client, meta))
        for r in resources:
            name = _tool_name(f"read_{r.name}")
            if name in taken:
                raise ValueError(f"resource {r.name!r} of {self.client.name!r} would be named {name!r}, like a tool")
            taken[name] = r.name
            about = r.description or r.title or f"the resource {r.name}"
            meta = McpToolMetadata(
                name=name,
                description=f"Read {about} ({r.uri}).",
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                server=self.client.name,
                mcp_name=str(r.name),
            )
            out.append(McpTool(self.client, meta, resource_uri=str(r.uri)))
        self.tools = out
        return out

    async def to_tool_list_async(self) -> list[McpTool]:
        """The server's tools as nbagent tools (starts the session if needed)."""
        listed = await self.fetch_tools()
        resources = await self.fetch_resources() if self.include_resources else []
        return self._make_tools(listed, resources)

    def to_tool_list(self) -> list[McpTool]:
        """``to_tool_list_async`` for sync code (also inside Jupyter's running loop)."""
        listed = self.client.list_tools_sync().tools
        listed = self._filter(list(listed))
        resources: list[Any] = []
        if self.include_resources:
            resources = list(self.client._run_sync(lambda c: c.list_resources(), "listing resources").resources)
        return self._make_tools(listed, resources)

    def _filter(self, listed: list[Any]) -> list[Any]:
        if self.allowed_tools is None:
            return listed
        names = {t.name for t in listed}
        missing = [n for n in self.allowed_tools if n not in names]
        if missing:
            raise ValueError(
                f"allowed_tools names {missing} that server {self.client.name!r} does not have; "
                f"it has: {sorted(names)}"
            )
        return [t for t in listed if t.name in self.allowed_tools]

    def __repr__(self) -> str:
        return f"McpToolSpec({self.client!r}, allowed_tools={self.allowed_tools!r})"

    def _repr_html_(self) -> str | None:
        return html_view(self)


async def aget_tools_from_mcp_url(
    command_or_url: str,
    client: BasicMCPClient | None = None,
    allowed_tools: Sequence[str] | None = None,
    include_resources: bool = False,
) -> list[McpTool]:
    """A server's tools in one call (LlamaIndex's helper): a new client unless one is given."""
    client = client if client is not None else BasicMCPClient(command_or_url)
    return await McpToolSpec(client, allowed_tools, include_resources).to_tool_list_async()


def get_tools_from_mcp_url(
    command_or_url: str,
    client: BasicMCPClient | None = None,
    allowed_tools: Sequence[str] | None = None,
    include_resources: bool = False,
) -> list[McpTool]:
    """``aget_tools_from_mcp_url`` for sync code."""
    client = client if client is not None else BasicMCPClient(command_or_url)
    return McpToolSpec(client, allowed_tools, include_resources).to_tool_list()
