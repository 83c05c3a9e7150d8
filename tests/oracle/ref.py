"""The two sides of every oracle test: the real LlamaIndex 0.12.52 and nbagent.

A scenario is written once against a namespace ``api`` (``api.AgentRunner``, ``api.FunctionTool``,
``api.llm(replies)`` ...), the way a user's code is written against ``from llama_index.core...``
imports. ``reference()`` fills the namespace from ``llama_index.core`` and a scripted LlamaIndex
model (written here, below) that replays exactly what nbagent's ``ScriptedLLM`` replays;
``nbagent_api()`` fills it from nbagent. Only the imports and the model change.

llama_index is imported lazily (the rest of the suite never pays for it) and offline: its
tokenizer is set to a local function before any memory is built (tiktoken would download).
"""

from __future__ import annotations

import re
import warnings
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

# the same token split as nbagent's offline models stream with
_TOKEN_SPLIT = re.compile(r"\S+\s*|\s+")


def _offline_tokenizer(text: str) -> list[str]:
    return text.split()


@lru_cache(maxsize=None)
def _reference_modules() -> SimpleNamespace:
    with warnings.catch_warnings():
        # pydantic warns about llama_index's own field declarations while importing it
        warnings.simplefilter("ignore")
        import llama_index.core as core
        from llama_index.core import Settings
        from llama_index.core import agent as agent_mod
        from llama_index.core.agent import workflow as wf_mod
        from llama_index.core.agent.react.output_parser import ReActOutputParser
        from llama_index.core.base.llms.types import (
            ChatMessage,
            ChatResponse,
            LLMMetadata,
            MessageRole,
        )
        from llama_index.core.llms.function_calling import FunctionCallingLLM
        from llama_index.core.llms.llm import ToolSelection
        from llama_index.core.memory import ChatMemoryBuffer
        from llama_index.core.tools import FunctionTool, ToolOutput
        from llama_index.core.workflow import Context
        from llama_index.core.workflow.errors import WorkflowRuntimeError
    assert core.__version__ == "0.12.52", f"the oracle compares with 0.12.52, found {core.__version__}"
    Settings.tokenizer = _offline_tokenizer
    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


def _ref_llm_class() -> type:
    m = _reference_modules()
    cached = getattr(m, "ScriptedRefLLM", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]

    class ScriptedRefLLM(m.FunctionCallingLLM):  # type: ignore[misc, name-defined]
        """A LlamaIndex model replaying an nbagent script: text, or ``tool_call(...)`` dicts.

        Tool call ids are ``call_1``, ``call_2``... per model, as nbagent's ScriptedLLM numbers
        them; streaming splits the text as nbagent's offline models do. Every request is kept in
        ``requests`` as (messages, tool names, tool_choice).
        """

        replies: list[Any] = []
        position: int = 0
        calls: int = 0
        requests: list[Any] = []
        tool_descriptions: list[Any] = []
        raw: Any = None  # given to every chunk and reply, as a real client's raw response
        function_calling: bool = True

        @property
        def metadata(self) -> Any:
            return m.LLMMetadata(is_chat_model=True, is_function_calling_model=self.function_calling)

        def _next(self, messages: Any, kwargs: dict[str, Any]) -> Any:
            tools = kwargs.get("tools") or []
            self.requests.append((list(messages), [t.metadata.name for t in tools], kwargs.get("tool_choice")))
            self.tool_descriptions.append({t.metadata.name: t.metadata.description for t in tools})
            if self.position >= len(self.replies):
                raise RuntimeError(f"ScriptedRefLLM: no reply left after {len(self.replies)}")
            reply = self.replies[self.position]
            self.position += 1
            if isinstance(reply, Exception):
                raise reply
            if isinstance(reply, str):
                return m.ChatMessage(role=m.MessageRole.ASSISTANT, content=reply)
            calls = []
            for c in reply["tool_calls"]:
                self.calls += 1
                calls.append(
                    m.ToolSelection(
                        tool_id=c.get("id") or f"call_{self.calls}",
                        tool_name=c["name"],
                        tool_kwargs=dict(c.get("arguments", {})),
                    )
                )
            return m.ChatMessage(
                role=m.MessageRole.ASSISTANT,
                content=reply.get("content"),
                additional_kwargs={"tool_calls": calls},
            )

        def chat(self, messages: Any, **kwargs: Any) -> Any:
            return m.ChatResponse(message=self._next(messages, kwargs), raw=self.raw)

        async def achat(self, messages: Any, **kwargs: Any) -> Any:
            return self.chat(messages, **kwargs)

        def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
            message = self._next(messages, kwargs)
            text = message.content or ""
            pieces = _TOKEN_SPLIT.findall(text) or [""]

            def gen() -> Any:
                if not text and not message.additional_kwargs.get("tool_calls"):
                    return  # an empty reply: a stream with no chunk (what item 8 of issue 11 is about)
                so_far = ""
                for i, piece in enumerate(pieces):
                    so_far += piece
                    last = i == len(pieces) - 1
                    yield m.ChatResponse(
                        message=message
                        if last
                        else m.ChatMessage(role=m.MessageRole.ASSISTANT, content=so_far),
                        delta=piece,
                        raw=self.raw,
                    )

            return gen()

        async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
            sync = self.stream_chat(messages, **kwargs)

            async def agen() -> Any:
                for r in sync:
                    yield r

            return agen()

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("the oracle's scripted model only chats")

        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("the oracle's scripted model only chats")

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("the oracle's scripted model only chats")

        async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("the oracle's scripted model only chats")

        def _prepare_chat_with_tools(
            self,
            tools: Any,
            user_msg: Any = None,
            chat_history: Any = None,
            verbose: bool = False,
            allow_parallel_tool_calls: bool = False,
            tool_required: bool = False,
            **kwargs: Any,
        ) -> dict[str, Any]:
            messages = list(chat_history or [])
            if user_msg is not None:
                if isinstance(user_msg, str):
                    user_msg = m.ChatMessage(role=m.MessageRole.USER, content=user_msg)
                messages.append(user_msg)
            return {"messages": messages, "tools": tools, **kwargs}

        def get_tool_calls_from_response(self, response: Any, error_on_no_tool_call: bool = True, **kwargs: Any) -> Any:
            calls = response.message.additional_kwargs.get("tool_calls", [])
            if not calls and error_on_no_tool_call:
                raise ValueError(f"Expected at least one tool call, but got {len(calls)} tool calls.")
            return list(calls)

    m.ScriptedRefLLM = ScriptedRefLLM
    return ScriptedRefLLM


def tool_call(name: str, /, **kwargs: Any) -> dict[str, Any]:
    """The script entry that calls one tool (the same dict as ``nbagent.tool_call`` builds)."""
    return {"tool_calls": [{"name": name, "arguments": kwargs}]}


def reference() -> SimpleNamespace:
    """The reference side: llama_index.core 0.12.52 classes and the scripted LlamaIndex model."""
    m = _reference_modules()
    cls = _ref_llm_class()

    def llm(replies: list[Any], function_calling: bool = True, raw: Any = None) -> Any:
        return cls(replies=list(replies), requests=[], tool_descriptions=[], function_calling=function_calling, raw=raw)

    from llama_index.core.agent.workflow import workflow_events as wev
    from llama_index.core.agent.react.types import ActionReasoningStep, ObservationReasoningStep, ResponseReasoningStep

    from llama_index.core.agent.types import BaseAgentWorker, Task, TaskStep, TaskStepOutput
    from llama_index.core.chat_engine.types import AgentChatResponse

    return SimpleNamespace(
        name="llama_index",
        BaseAgentWorker=BaseAgentWorker,
        Task=Task,
        TaskStep=TaskStep,
        TaskStepOutput=TaskStepOutput,
        AgentChatResponse=AgentChatResponse,
        llm=llm,
        AgentRunner=m.agent_mod.AgentRunner,
        ParallelAgentRunner=m.agent_mod.ParallelAgentRunner,
        CustomSimpleAgentWorker=m.agent_mod.CustomSimpleAgentWorker,
        FnAgentWorker=m.agent_mod.FnAgentWorker,
        ReActAgentWorker=m.agent_mod.ReActAgentWorker,
        FunctionCallingAgentWorker=m.agent_mod.FunctionCallingAgentWorker,
        ReActOutputParser=m.ReActOutputParser,
        FunctionAgent=m.wf_mod.FunctionAgent,
        ReActAgent=m.wf_mod.ReActAgent,
        AgentWorkflow=m.wf_mod.AgentWorkflow,
        Context=m.Context,
        WorkflowRuntimeError=m.WorkflowRuntimeError,
        ChatMessage=m.ChatMessage,
        MessageRole=m.MessageRole,
        ChatMemoryBuffer=m.ChatMemoryBuffer,
        FunctionTool=m.FunctionTool,
        ToolOutput=m.ToolOutput,
        events=wev,
        ActionReasoningStep=ActionReasoningStep,
        ObservationReasoningStep=ObservationReasoningStep,
        ResponseReasoningStep=ResponseReasoningStep,
        requests=lambda llm: [msgs for msgs, _tools, _choice in llm.requests],
        tool_descriptions=lambda llm: llm.tool_descriptions,
        tool_choices=lambda llm: [choice for _msgs, _tools, choice in llm.requests],
    )


def nbagent_api() -> SimpleNamespace:
    """The nbagent side, under the same names."""
    import nbagent
    from nbagent.workflow import Context
    from nbagent.workflow import agent_events as wev
    from nbagent.workflow.errors import WorkflowRuntimeError
    from nbagent.workers.react.output_parser import (
        ActionReasoningStep,
        ObservationReasoningStep,
        ReActOutputParser,
        ResponseReasoningStep,
    )
    from nbagent.workflow import AgentWorkflow, FunctionAgent, ReActAgent

    def llm(replies: list[Any], function_calling: bool = True, raw: Any = None) -> Any:
        if raw is None:
            return nbagent.ScriptedLLM(list(replies), function_calling=function_calling)
        return _raw_scripted(raw)(list(replies), function_calling=function_calling)

    return SimpleNamespace(
        name="nbagent",
        BaseAgentWorker=nbagent.BaseAgentWorker,
        Task=nbagent.Task,
        TaskStep=nbagent.TaskStep,
        TaskStepOutput=nbagent.TaskStepOutput,
        AgentChatResponse=nbagent.AgentChatResponse,
        llm=llm,
        AgentRunner=nbagent.AgentRunner,
        ParallelAgentRunner=nbagent.ParallelAgentRunner,
        CustomSimpleAgentWorker=nbagent.CustomSimpleAgentWorker,
        FnAgentWorker=nbagent.FnAgentWorker,
        ReActAgentWorker=nbagent.ReActAgentWorker,
        FunctionCallingAgentWorker=nbagent.FunctionCallingAgentWorker,
        ReActOutputParser=ReActOutputParser,
        FunctionAgent=FunctionAgent,
        ReActAgent=ReActAgent,
        AgentWorkflow=AgentWorkflow,
        Context=Context,
        WorkflowRuntimeError=WorkflowRuntimeError,
        ChatMessage=nbagent.ChatMessage,
        MessageRole=nbagent.MessageRole,
        ChatMemoryBuffer=nbagent.ChatMemoryBuffer,
        FunctionTool=nbagent.FunctionTool,
        ToolOutput=nbagent.ToolOutput,
        events=wev,
        ActionReasoningStep=ActionReasoningStep,
        ObservationReasoningStep=ObservationReasoningStep,
        ResponseReasoningStep=ResponseReasoningStep,
        requests=lambda llm: [r.messages for r in llm.requests],
        tool_descriptions=lambda llm: [{t.name: t.description for t in r.tools} for r in llm.requests],
        tool_choices=lambda llm: [r.tool_choice for r in llm.requests],
    )


def _raw_scripted(raw: Any) -> type:
    """nbagent's ScriptedLLM whose replies carry ``raw`` (as a real client's chunks do)."""
    import nbagent

    class RawScripted(nbagent.ScriptedLLM):
        async def _astream(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> Any:
            async for chunk in super()._astream(messages, tools, tool_choice, **kwargs):
                yield chunk.model_copy(update={"raw": raw})

        async def _achat(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> Any:
            reply = await super()._achat(messages, tools, tool_choice, **kwargs)
            return reply.model_copy(update={"raw": raw})

    return RawScripted


def both() -> list[SimpleNamespace]:
    return [reference(), nbagent_api()]
