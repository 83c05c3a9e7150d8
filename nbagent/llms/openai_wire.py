"""What goes over the wire to an OpenAI-compatible server and back: our messages and tool
choice as OpenAI's request fields, a ``ChatCompletion`` (or a streamed chunk) as ours, and
the error a reply that is not a chat completion becomes.

Pure conversions (no client, no request): ``OpenAILLM`` sends and receives, this module
translates, ``openai_stream`` assembles a streamed reply.
"""

from __future__ import annotations

import json
from typing import Any

from nbagent.llms.base import ChatResponse, IncompleteReplyError, MalformedReplyError, ToolChoice
from nbagent.llms.openai_stream import malformed, new_call_id, parse_arguments, shown, usage_of
from nbagent.messages import ChatMessage, MessageRole, ToolSelection

__all__ = [
    "to_openai_message",
    "to_openai_tool_choice",
    "parse_completion",
    "bad_json",
    "decode_chunk",
    "as_chunk",
]

_TOOL_CHOICE_KEYWORDS = ("auto", "none", "required")


# -- ours -> OpenAI ----------------------------------------------------------------------------


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One ``ChatMessage`` as an OpenAI chat message dict."""
    role = message.role.value
    if message.role == MessageRole.TOOL:
        return {
            "role": "tool",
            # LlamaIndex-style code puts the id in additional_kwargs
            "tool_call_id": message.tool_call_id or str(message.additional_kwargs.get("tool_call_id") or ""),
            "content": message.content if message.content is not None else "",
        }
    out: dict[str, Any] = {"role": role, "content": message.content}
    if message.role == MessageRole.ASSISTANT and message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.tool_id,
                "type": "function",
                "function": {
                    "name": call.tool_name,
                    "arguments": json.dumps(call.tool_kwargs, ensure_ascii=False, default=str),
                },
            }
            for call in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    if message.name and message.role in (MessageRole.USER, MessageRole.SYSTEM):
        out["name"] = message.name
    return out


def to_openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``"auto"``/``"none"``/``"required"`` and dicts pass through; a tool name forces that tool."""
    if isinstance(choice, dict):
        return choice
    if choice in _TOOL_CHOICE_KEYWORDS:
        return choice
    return {"type": "function", "function": {"name": choice}}


# -- OpenAI -> ours ----------------------------------------------------------------------------


def bad_json(base_url: str, err: json.JSONDecodeError) -> MalformedReplyError:
    """A reply body that is not JSON; cut short (the parser ran off its end) says so."""
    doc = err.doc if isinstance(err.doc, str) else ""
    cut = err.msg.startswith("Unterminated") or err.pos >= len(doc.rstrip())
    if cut:
        return IncompleteReplyError(
            f"the model server at {base_url} ended its reply before the end: the JSON stops "
            f"after {len(doc)} characters ({err.msg}). The partial reply was dropped; the step "
            f"stays queued: run it again. Reply: {shown(doc[-200:])}"
        )
    return _malformed(base_url, f"the reply is not valid JSON ({err.msg} at character {err.pos})", doc)


def _malformed(base_url: str, what: str, raw: Any) -> MalformedReplyError:
    text = repr(raw)
    if len(text) > 300:
        text = text[:300] + "…"
    return MalformedReplyError(f"the server at {base_url} sent a malformed chat completion: {what}. Reply: {text}")


def parse_completion(completion: Any, model: str, base_url: str) -> ChatResponse:
    """An OpenAI ``ChatCompletion`` as a ``ChatResponse``; anything missing is a MalformedReplyError."""
    if isinstance(completion, (str, bytes)):
        raise _malformed(base_url, "the reply is not a JSON chat completion", completion)
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise _malformed(base_url, "it has no 'choices'", completion)
    message = getattr(choices[0], "message", None)
    if message is None:
        raise _malformed(base_url, "choices[0] has no 'message'", completion)
    calls: list[ToolSelection] = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if not name or not isinstance(name, str):
            raise _malformed(base_url, f"tool call {i} has no function name", completion)
        arguments = getattr(function, "arguments", None)
        calls.append(
            ToolSelection(
                tool_id=str(getattr(call, "id", None) or new_call_id()),
                tool_name=name,
                tool_kwargs=parse_arguments(arguments if isinstance(arguments, str) else None),
            )
        )
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise _malformed(base_url, "choices[0].message.content is not a string", completion)
    try:
        usage = usage_of(getattr(completion, "usage", None))
    except ValueError as err:
        raise _malformed(base_url, str(err), completion) from None
    return ChatResponse(
        message=ChatMessage(role=MessageRole.ASSISTANT, content=content, tool_calls=calls),
        usage=usage,
        model=getattr(completion, "model", None) or model,
        raw=completion,
    )


# -- a streamed chunk --------------------------------------------------------------------------


def decode_chunk(data: str, line: str, server: str, request: Any) -> Any:
    """One event's data as JSON; an error the server streams (``{"error": ...}``) is raised as
    the openai client raises it (``openai.APIError``)."""
    import openai

    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise malformed(server, line, f"expected 'data: ' followed by a JSON chat.completion.chunk or [DONE], but it is not JSON ({why})") from None
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = f"an error in the middle of the stream: {str(error)[:300]}"
        raise openai.APIError(message=message, request=request, body=error)
    return chunk


def as_chunk(chunk: Any) -> Any:
    """A checked chunk as the openai client's ``ChatCompletionChunk`` (built without
    re-validating, as the client builds it); the dict itself if that is not possible."""
    if not isinstance(chunk, dict):
        return chunk
    try:
        from openai.types.chat import ChatCompletionChunk

        return ChatCompletionChunk.model_construct(**chunk)
    except Exception:  # noqa: BLE001 - an odd chunk stays plain data
        return chunk
