"""Typed answers of a function-calling worker (``output_cls``): what the request adds (the
answer tool, a response format or JSON instructions), how a reply's answer is validated, and
the visible retry step a bad answer becomes until ``max_output_retries`` runs out.

``TypedAnswerSteps`` is that part of ``FunctionCallingAgentWorker``; the rules themselves live
in ``nbagent.structured``.
"""

from __future__ import annotations

from typing import Any

from nbagent import structured
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.snapshot import AppendLog
from nbagent.tools import FunctionTool
from nbagent.workers.tool_calls import SOURCES_KEY, as_assistant

__all__ = ["TypedAnswerSteps"]


class TypedAnswerSteps:
    """Asks for, checks and retries a typed answer (a mixin of ``FunctionCallingAgentWorker``:
    it reads the worker's settings declared here)."""

    llm: Any
    output_cls: type[Any] | None
    structured_mode: str
    max_output_retries: int
    verbose: bool

    def _typed_request(
        self, tools: list[FunctionTool], messages: list[ChatMessage], choice: Any
    ) -> tuple[list[Any], Any, dict[str, Any]]:
        """With ``output_cls``: add the answer tool, the response format or the JSON prompt."""
        cls = self.output_cls
        if cls is None:
            return list(tools), choice, {}
        mode = structured.pick_mode(self.structured_mode, self.llm)
        if mode == "tool":
            if choice == "none":  # the tool budget is spent: answering is all that is left
                choice = {"type": "function", "function": {"name": structured.FINAL_TOOL}}
            return [*tools, structured.final_tool(cls)], choice or "auto", {}
        if mode == "response_format":
            return list(tools), choice, {"response_format": structured.response_format(cls)}
        at = 1 if messages and messages[0].role == MessageRole.SYSTEM else 0
        messages.insert(at, ChatMessage(role=MessageRole.SYSTEM, content=structured.json_instructions(cls)))
        return list(tools), choice, {}

    def _retry(self, task: Task, problem: str) -> str:
        """Count a bad typed answer; the feedback for the model, or raise when out of retries."""
        assert self.output_cls is not None
        used = int(task.extra_state.get(structured.RETRIES_KEY, 0))
        if used >= self.max_output_retries:
            raise structured.StructuredOutputError(
                f"the answer did not fit {self.output_cls.__name__} after {used} retries "
                f"(max_output_retries={self.max_output_retries}): {problem}. The step stays "
                "queued: raise worker.max_output_retries and run it again, or steer it with input"
            )
        task.extra_state[structured.RETRIES_KEY] = used + 1
        mode = structured.pick_mode(self.structured_mode, self.llm)
        return structured.feedback(problem, mode, self.output_cls)

    def _typed_answer(
        self, step: TaskStep, task: Task, reply: ChatMessage, calls: list[ToolSelection]
    ) -> TaskStepOutput | None:
        """Handle a reply when ``output_cls`` is set and the reply answers (a ``final_result``
        call, or text): the typed answer, or a visible retry step. None: not an answer."""
        cls = self.output_cls
        if cls is None:
            return None
        final = next((c for c in calls if c.tool_name == structured.FINAL_TOOL), None)
        if calls and final is None:
            return None  # ordinary tool calls
        sources: AppendLog[ToolOutput] = task.extra_state[SOURCES_KEY]
        task.scratch_memory.put(as_assistant(reply))
        try:
            if final is not None:
                obj = structured.validate_args(final.tool_kwargs, cls)
            else:
                obj = structured.parse_json_answer(reply.text, cls)
        except ValueError as error:
            note = self._retry(task, str(error))
            outputs: list[ToolOutput] = []
            if final is None:
                task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=note))
            for c in calls:
                content = note if c is final else (
                    f"Error: not run: {structured.FINAL_TOOL} was called in the same reply"
                )
                out = ToolOutput(
                    content=content, tool_name=c.tool_name, raw_input=dict(c.tool_kwargs),
                    is_error=True, tool_call_id=c.tool_id,
                )
                outputs.append(out)
                task.scratch_memory.put(
                    ChatMessage(role=MessageRole.TOOL, content=content, tool_call_id=c.tool_id, name=c.tool_name)
                )
            if self.verbose:
                print(f"=== Typed answer rejected ===\n{error}")
            return TaskStepOutput(
                output=AgentChatResponse(response=note, metadata={"output_error": str(error)}),
                task_step=step,
                next_steps=[step.get_next_step(step_state={})],
                is_last=False,
                reasoning=reply.text or None,
                tool_outputs=outputs,
            )
        text = structured.answer_text(obj)
        for c in calls:  # keep the transcript valid: every call gets its reply
            content = "Answer accepted." if c is final else (
                f"Error: not run: the answer was given with {structured.FINAL_TOOL}"
            )
            task.scratch_memory.put(
                ChatMessage(role=MessageRole.TOOL, content=content, tool_call_id=c.tool_id, name=c.tool_name)
            )
        if calls:
            task.scratch_memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        if self.verbose:
            print(f"=== Answer ({cls.__name__}) ===\n{text}")
        answer = AgentChatResponse(response=text, sources=list(sources), structured_response=obj)
        return TaskStepOutput(output=answer, task_step=step, is_last=True, reasoning=(reply.text or None) if calls else None)
