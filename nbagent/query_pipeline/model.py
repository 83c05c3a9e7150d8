"""A chat model, a prompt template and tools as pipeline modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbagent.messages import ChatMessage, MessageRole
from nbagent.query_pipeline.components import InputKeys, OutputKeys, QueryComponent

__all__ = ["LLMChatComponent", "PromptComponent", "ToolRunnerComponent"]


class LLMChatComponent(QueryComponent):
    """A chat model as a module (what a model in ``chain=[...]`` becomes): ``messages`` in
    (a list of ChatMessage, or a string sent as one user message), the ``ChatResponse`` out."""

    def __init__(self, llm: Any) -> None:
        super().__init__()
        self.llm = llm

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({"messages"})

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({"output"})

    def _messages(self, messages: Any) -> list[ChatMessage]:
        if isinstance(messages, str):
            return [ChatMessage(role=MessageRole.USER, content=messages)]
        if isinstance(messages, ChatMessage):
            return [messages]
        if isinstance(messages, Sequence) and all(isinstance(m, ChatMessage) for m in messages):
            return list(messages)
        raise TypeError(
            f"{self!r}: messages must be a string or a list of ChatMessage, got {type(messages).__name__}"
        )

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": self.llm.chat(self._messages(kwargs["messages"]))}

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": await self.llm.achat(self._messages(kwargs["messages"]))}

    def __repr__(self) -> str:
        return f"LLMChatComponent(llm={getattr(self.llm, 'model', type(self.llm).__name__)})"


def _as_text(value: Any) -> str:
    """A prompt variable as text: a model reply is its message's content."""
    message = getattr(value, "message", None)
    if message is not None and isinstance(getattr(message, "content", None), str):
        return message.content
    if isinstance(value, list):
        return str([_as_text(v) for v in value])
    return str(value)


class PromptComponent(QueryComponent):
    """A prompt template as a module (what a ``PromptTemplate`` in a pipeline becomes): its
    placeholders are the inputs, the filled text (or messages) is the output ``prompt``."""

    def __init__(self, prompt: Any, format_messages: bool = False, llm: Any = None) -> None:
        super().__init__()
        from nbagent.prompts import as_template

        self.prompt = as_template(prompt)
        self.format_messages = format_messages
        self.llm = llm

    @property
    def input_keys(self) -> InputKeys:
        # a name-like placeholder is an input; other braces ({"json": ...}) stay as written
        names = {v for v in self.prompt.template_vars if v.isidentifier()}
        return InputKeys(names - set(self.prompt.kwargs))

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({"prompt"})

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        values = {k: _as_text(v) for k, v in kwargs.items()}
        if self.format_messages:
            return {"prompt": self.prompt.format_messages(**values)}
        return {"prompt": self.prompt.format(**values)}

    def __repr__(self) -> str:
        return f"PromptComponent({self.prompt!r})"


class ToolRunnerComponent(QueryComponent):
    """Runs one of ``tools`` by name: inputs ``tool_name`` and ``tool_input`` (a dict of
    arguments), output the ``ToolOutput``. A tool's own error comes back as its output (as
    everywhere in nbagent); an unknown name is an error naming the tools there are."""

    def __init__(self, tools: Sequence[Any], callback_manager: Any = None) -> None:
        super().__init__()
        from nbagent._compat import warn_callback_manager
        from nbagent.tools import as_tools, tools_by_name

        if callback_manager is not None:
            warn_callback_manager("ToolRunnerComponent")
        self.tool_dict = tools_by_name(as_tools(list(tools)))

    @property
    def input_keys(self) -> InputKeys:
        return InputKeys({"tool_name", "tool_input"})

    @property
    def output_keys(self) -> OutputKeys:
        return OutputKeys({"output"})

    def _tool(self, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        name, args = str(kwargs["tool_name"]), kwargs["tool_input"]
        if not isinstance(args, dict):
            raise TypeError(f"{self!r}: tool_input must be a dict of arguments, got {type(args).__name__}")
        tool = self.tool_dict.get(name)
        if tool is None:
            raise ValueError(f"{self!r}: no tool named {name!r}; the tools are {sorted(self.tool_dict)}")
        return tool, args

    def _run_component(self, **kwargs: Any) -> dict[str, Any]:
        tool, args = self._tool(kwargs)
        return {"output": tool.call(**args)}

    async def _arun_component(self, **kwargs: Any) -> dict[str, Any]:
        tool, args = self._tool(kwargs)
        return {"output": await tool.acall(**args)}

    def __repr__(self) -> str:
        return f"ToolRunnerComponent(tools={sorted(self.tool_dict)})"
