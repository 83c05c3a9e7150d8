"""The attribute names spans carry, and the switch for capturing content.

GenAI semantic conventions (OpenTelemetry, development status): what Phoenix, Langfuse,
Logfire and any OTLP backend read. OpenInference's span kinds ride along so Phoenix and
Arize draw an agent, a chain, a model call and a tool call each their own way. nbagent's own
facts (step ids, numbers, statuses, approvals) go under ``nbagent.``. Stdlib only.
"""

from __future__ import annotations

import os

__all__ = [
    "OPERATION", "AGENT_NAME", "CONVERSATION_ID", "PROVIDER", "REQUEST_MODEL", "RESPONSE_MODEL",
    "INPUT_TOKENS", "OUTPUT_TOKENS", "FINISH_REASONS", "INPUT_MESSAGES", "OUTPUT_MESSAGES",
    "TOOL_NAME", "TOOL_CALL_ID", "TOOL_TYPE", "TOOL_ARGUMENTS", "TOOL_RESULT", "WORKFLOW_NAME",
    "ERROR_TYPE", "OI_KIND", "OI_INPUT", "OI_OUTPUT", "OI_SESSION", "OI_MODEL", "OI_PROVIDER",
    "OI_PROMPT_TOKENS", "OI_COMPLETION_TOKENS", "OI_TOTAL_TOKENS", "OI_TOOL_NAME",
    "CAPTURE_ENV", "capture_from_env", "SCOPE",
]

#: the instrumentation scope every tracer of nbagent is named by
SCOPE = "nbagent"

# GenAI semantic conventions
OPERATION = "gen_ai.operation.name"  # invoke_agent, chat, execute_tool, invoke_workflow
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
WORKFLOW_NAME = "gen_ai.workflow.name"
ERROR_TYPE = "error.type"

# OpenInference
OI_KIND = "openinference.span.kind"  # AGENT, CHAIN, LLM, TOOL
OI_INPUT = "input.value"
OI_OUTPUT = "output.value"
OI_SESSION = "session.id"
OI_MODEL = "llm.model_name"
OI_PROVIDER = "llm.provider"
OI_PROMPT_TOKENS = "llm.token_count.prompt"
OI_COMPLETION_TOKENS = "llm.token_count.completion"
OI_TOTAL_TOKENS = "llm.token_count.total"
OI_TOOL_NAME = "tool.name"

#: the standard switch of GenAI instrumentations: message content goes on spans only when set
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = ("true", "1", "yes", "span_only", "span_and_event")


def capture_from_env() -> bool:
    """Whether the environment asks for message content on spans (``true``, ``SPAN_ONLY``...)."""
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in _CAPTURE_ON
