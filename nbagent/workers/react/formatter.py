"""ReActChatFormatter: the messages a ReAct model sees at one step, at a bounded cost.

Each reasoning step is rendered to a message once, when it happens, and its tokens counted
then (the worker keeps both in AppendLogs). Building a prompt only walks back over the newest
steps that fit ``reasoning_token_budget``, so a step costs about the same at step 1,000 as at
step 10, and the prompt never outgrows the budget by more than the newest tool turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from nbagent.memory import count_tokens
from nbagent.messages import ChatMessage, MessageRole
from nbagent.tools import FunctionTool
from nbagent.workers.react.output_parser import (
    ActionReasoningStep,
    HumanReasoningStep,
    ObservationReasoningStep,
    ReasoningStep,
)
from nbagent.prompts import PromptTemplate, template_text
from nbagent.workers.react.prompt import REACT_SYSTEM_PROMPT, render_system_prompt

__all__ = ["ReActChatFormatter", "MESSAGE_OVERHEAD_TOKENS", "omitted_note"]

MESSAGE_OVERHEAD_TOKENS = 4  # role and separators, as ChatMemoryBuffer counts them
_KEEP_NEWEST = 2  # always shown, over budget if need be: the last call and its observation
_CACHE_SIZE = 32


def omitted_note(n: int) -> ChatMessage:
    """The one line that stands for reasoning steps left out of the prompt."""
    return ChatMessage(role=MessageRole.USER, content=f"({n} earlier reasoning steps omitted)")


class ReActChatFormatter:
    """Renders the system prompt, each reasoning step, and the prompt of a step.

    ``system_prompt`` (the reference calls it ``system_header``) is the ReAct header
    template, None for nbagent's default; ``observation_role`` is the role tool results come
    back with (the reference's default, user; or tool).
    """

    def __init__(
        self,
        system_prompt: str | PromptTemplate | None = None,
        context: str | None = None,
        *,
        system_header: str | PromptTemplate | None = None,
        observation_role: MessageRole | str = MessageRole.USER,
    ) -> None:
        if system_prompt is not None and system_header is not None:
            raise ValueError("pass the ReAct header once: system_prompt=... or system_header=...")
        header = system_prompt if system_prompt is not None else system_header
        self.system_prompt = None if header is None else template_text(header, "system_header")
        self.context = context
        self.observation_role = MessageRole(observation_role)
        self._system_cache: dict[tuple[FunctionTool, ...], ChatMessage] = {}

    @classmethod
    def from_defaults(
        cls,
        system_header: str | PromptTemplate | None = None,
        context: str | None = None,
        observation_role: MessageRole | str = MessageRole.USER,
    ) -> ReActChatFormatter:
        """The reference's constructor: nbagent's default header unless one is given."""
        return cls(system_header=system_header, context=context or None, observation_role=observation_role)

    @property
    def system_header(self) -> str:
        """The ReAct header template in use (nbagent's default when none was given)."""
        return REACT_SYSTEM_PROMPT if self.system_prompt is None else self.system_prompt

    @system_header.setter
    def system_header(self, value: str | PromptTemplate) -> None:
        self.system_prompt = template_text(value, "system_header")
        self._system_cache.clear()

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in ("system_prompt", "context") and "_system_cache" in self.__dict__:
            self._system_cache.clear()  # a new header or context: render the prompt again

    def system_message(self, tools: Sequence[FunctionTool]) -> ChatMessage:
        """The system prompt for these tools (rendered once per tool set: schemas are costly)."""
        key = tuple(tools)
        message = self._system_cache.get(key)
        if message is None:
            text = render_system_prompt(tools, self.system_prompt, self.context)
            message = ChatMessage(role=MessageRole.SYSTEM, content=text)
            if len(self._system_cache) >= _CACHE_SIZE:
                self._system_cache.clear()
            self._system_cache[key] = message
        return message

    @staticmethod
    def render(
        step: ReasoningStep, observation_role: MessageRole = MessageRole.USER
    ) -> tuple[ChatMessage, int]:
        """A reasoning step as the message the model sees, with its token count.

        The model's own turns are assistant messages; observations come back with
        ``observation_role`` (user by default), what a person typed as a user message.
        """
        if isinstance(step, ObservationReasoningStep):
            role = observation_role
        elif isinstance(step, HumanReasoningStep):
            role = MessageRole.USER
        else:
            role = MessageRole.ASSISTANT
        message = ChatMessage(role=role, content=step.content)
        return message, MESSAGE_OVERHEAD_TOKENS + count_tokens(step.content)

    @staticmethod
    def window_start(steps: Sequence[ReasoningStep], tokens: Sequence[int], budget: int) -> int:
        """Index of the oldest reasoning step to show: the newest steps that fit ``budget``.

        The newest two are always shown. A window never opens on an observation whose
        action was cut off (the model could not tell what it observes).
        """
        n = len(tokens)
        start = n
        used = 0
        while start > 0 and (n - start < _KEEP_NEWEST or used + tokens[start - 1] <= budget):
            start -= 1
            used += tokens[start]
        if (
            0 < start < n
            and isinstance(steps[start], ObservationReasoningStep)
            and isinstance(steps[start - 1], ActionReasoningStep)
        ):
            start += 1
        return start

    def format(
        self,
        tools: Sequence[FunctionTool],
        chat_history: Sequence[ChatMessage] | None = None,
        current_reasoning: Sequence[ReasoningStep] | None = None,
    ) -> list[ChatMessage]:
        """The reference's call: system prompt, the chat history, then every reasoning step."""
        out = [self.system_message(tools), *(chat_history or [])]
        out.extend(self.render(r, self.observation_role)[0] for r in current_reasoning or [])
        return out

    def format_window(
        self,
        tools: Sequence[FunctionTool],
        history: Sequence[ChatMessage],
        scratch: Sequence[ChatMessage],
        steps: Sequence[ReasoningStep],
        messages: Sequence[ChatMessage],
        tokens: Sequence[int],
        budget: int,
    ) -> list[ChatMessage]:
        """System prompt, conversation history, this task's messages, then recent reasoning.

        ``steps``, ``messages`` and ``tokens`` are parallel: each step, rendered, counted.
        """
        start = self.window_start(steps, tokens, budget)
        out = [self.system_message(tools), *history, *scratch]
        if start > 0:
            out.append(omitted_note(start))
        out.extend(messages[start:])
        return out
