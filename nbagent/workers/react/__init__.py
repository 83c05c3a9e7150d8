"""The ReAct agent worker: tools described in the prompt, Thought / Action / Observation in text."""

from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    HumanReasoningStep,
    ObservationReasoningStep,
    ReActOutputParser,
    ReActParseError,
    ReasoningStep,
    ResponseReasoningStep,
)
from nbagent.workers.react.prompt import FORMAT_REMINDER, REACT_SYSTEM_PROMPT, render_system_prompt
from nbagent.workers.react.worker import MaxIterationsError, ReActAgentWorker

__all__ = [
    "ReActAgentWorker",
    "MaxIterationsError",
    "ReActChatFormatter",
    "ReActOutputParser",
    "ReActParseError",
    "ReasoningStep",
    "ActionReasoningStep",
    "ObservationReasoningStep",
    "HumanReasoningStep",
    "ResponseReasoningStep",
    "REACT_SYSTEM_PROMPT",
    "FORMAT_REMINDER",
    "render_system_prompt",
]
