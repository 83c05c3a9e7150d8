"""What an MCP tool call gave back, as nbagent keeps it: ``McpToolResult`` (in
``ToolOutput.raw_output``), plain data that saves and loads without the ``mcp`` package."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from nbagent.messages import ToolOutput

__all__ = ["McpImage", "McpToolResult", "to_tool_result", "tool_server"]


class McpImage(BaseModel):
    """An image a tool returned: base64 data and its MIME type."""

    data: str = Field(description="The image's bytes, base64-encoded.")
    mime_type: str = Field(description="e.g. image/png")


class McpToolResult(BaseModel):
    """What an MCP tool call gave back, kept as ``ToolOutput.raw_output``.

    ``text`` is what the model reads; ``structured`` is the server's structured content (a
    JSON object) if it sent one; ``images`` the image blocks, which the multimodal worker
    shows to its model.
    """

    server: str = Field(description="The server's name, for the views.")
    tool: str = Field(description="The tool's name on the server.")
    text: str = ""
    structured: Any = None
    images: list[McpImage] = Field(default_factory=list)
    is_error: bool = False

    def image_documents(self) -> list[Any]:
        """The images as ``ImageDocument`` s (what the multimodal worker sends to its model).

        Example:

        >>> from nbagent.mcp import McpImage, McpToolResult
        >>> PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
        >>> result = McpToolResult(server="camera", tool="snapshot", text="one photo", images=[McpImage(data=PNG_B64, mime_type="image/png")])
        >>> [(doc.describe(), doc.mimetype()) for doc in result.image_documents()]
        [('inline image', 'image/png')]
        """
        from nbagent.images import ImageDocument

        return [ImageDocument(image=im.data, image_mimetype=im.mime_type) for im in self.images]


def _block_text(block: Any, images: list[McpImage]) -> str | None:
    """One content block as text for the model; images are also collected."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "image":
        images.append(McpImage(data=block.data, mime_type=block.mime_type))
        size = len(block.data) * 3 // 4
        return f"[image {len(images)}: {block.mime_type}, about {size} bytes]"
    if kind == "audio":
        return f"[audio: {block.mime_type}, not shown to the model]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        if text is not None:
            return f"[resource {res.uri}]\n{text}"
        return f"[resource {res.uri}: {res.mime_type or 'binary'}, not shown to the model]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}" + (f" ({block.description})" if block.description else "") + "]"
    return f"[{kind or type(block).__name__} content, not shown to the model]"


def to_tool_result(server: str, tool: str, result: Any) -> McpToolResult:
    """An SDK ``CallToolResult`` as an ``McpToolResult``."""
    images: list[McpImage] = []
    texts = [t for t in (_block_text(b, images) for b in result.content or []) if t is not None]
    structured = result.structured_content
    text = "\n".join(texts)
    if not texts and structured is not None:  # structured only: the model still needs text
        text = json.dumps(structured, ensure_ascii=False, default=str)
    return McpToolResult(
        server=server, tool=tool, text=text, structured=structured, images=images,
        is_error=bool(result.is_error),
    )


def tool_server(out: ToolOutput) -> str | None:
    """The MCP server a tool output came from (None for other tools), for the views."""
    raw = out.raw_output
    return raw.server if isinstance(raw, McpToolResult) and raw.server else None
