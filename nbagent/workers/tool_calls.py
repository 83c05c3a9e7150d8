"""Running the tool calls of a function-calling reply, and recording them.

``ToolCallSteps`` is the part of ``FunctionCallingAgentWorker`` that runs the calls a reply
asked for, within the task's budget (``max_function_calls``), each at most once in a step
(``nbagent.calls``), concurrently unless told not to; runs the calls a person decided on
(approved, with edited arguments, or rejected with a reason); and turns their outputs into
the step's output: the tool replies in the scratch memory, then the answer (a
``return_direct`` tool) or the next model call.

State between steps lives in ``task.extra_state``: ``SOURCES_KEY`` (an ``AppendLog`` of every
``ToolOutput`` of the task) and ``CALLS_KEY`` (how many tool calls have run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nbagent import approval
from nbagent import calls as calls_
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.snapshot import AppendLog
from nbagent.tools import FunctionTool, acall_tool, tools_by_name

__all__ = [
    "ToolCallSteps",
    "SOURCES_KEY",
    "CALLS_KEY",
    "check_tool_choice",
    "as_assistant",
    "dump_calls",
    "args_json",
]

SOURCES_KEY = "sources"
CALLS_KEY = "function_calls"
_CHOICE_KEYWORDS = ("auto", "none", "required")
_MISSING_TOOL = "Tool with name {name} not found, please double check."  # the reference's words
_TOOL_ERROR = "Encountered error: {error} ({type})"  # the reference's words, then the exception's type


class ToolCallSteps:
    """Runs a reply's tool calls and makes the step's output from their replies (a mixin of
    ``FunctionCallingAgentWorker``: it reads the worker's settings declared here)."""

    max_function_calls: int | None
    allow_parallel_tool_calls: bool
    verbose: bool

    if TYPE_CHECKING:  # the worker's

        async def aget_tools(self, input: str) -> list[FunctionTool]: ...

    def _budget_left(self, task: Task) -> int | None:
        """How many more tool calls the task may run (None: no limit)."""
        if self.max_function_calls is None:
            return None
        return max(0, self.max_function_calls - int(task.extra_state[CALLS_KEY]))

    async def _run_decided(self, step: TaskStep, task: Task) -> TaskStepOutput:
        """Run the calls of a reply once a person decided: approved ones (with edited
        arguments), the others of the reply; rejected ones answer with the reason."""
        tools = await self.aget_tools(task.input)
        decided = approval.split_decided(step)
        to_run = [d for d in decided if d.rejected is None]
        ran = iter(await self._run_calls(task, tools, [d.call for d in to_run], [d.call_id for d in to_run]))
        outputs = [d.rejected if d.rejected is not None else next(ran) for d in decided]
        return self._after_calls(step, task, tools, [d.call for d in decided], outputs, "", carry_input=step.input)

    def _after_calls(
        self,
        step: TaskStep,
        task: Task,
        tools: list[FunctionTool],
        calls: list[ToolSelection],
        outputs: list[ToolOutput],
        text: str,
        carry_input: str | None = None,
    ) -> TaskStepOutput:
        """Record the tool replies; answer (return_direct) or queue the next model call."""
        sources: AppendLog[ToolOutput] = task.extra_state[SOURCES_KEY]
        for call, out in zip(calls, outputs):
            task.scratch_memory.put(
                ChatMessage(
                    role=MessageRole.TOOL,
                    content=out.content,
                    tool_call_id=call.tool_id,
                    name=call.tool_name,
                )
            )
        sources.extend(outputs)
        by_name = tools_by_name(tools)
        direct = next(
            (
                out
                for out in outputs
                if not out.is_error
                and out.tool_name in by_name
                and by_name[out.tool_name].return_direct
            ),
            None,
        )
        if direct is not None:  # the tool's reply is the answer (memory ends with it, as on the reference)
            answer = AgentChatResponse(
                response=direct.content,
                sources=list(outputs),
                metadata={"return_direct": direct.tool_name},
            )
            return TaskStepOutput(
                output=answer, task_step=step, is_last=True, reasoning=text or None, tool_outputs=outputs
            )
        progress = AgentChatResponse(response=text, sources=list(outputs))
        return TaskStepOutput(
            output=progress,
            task_step=step,
            next_steps=[step.get_next_step(input=carry_input, step_state={})],
            is_last=False,
            reasoning=text or None,
            tool_outputs=outputs,
        )

    async def _run_calls(
        self, task: Task, tools: list[FunctionTool], calls: list[ToolSelection], ids: list[str]
    ) -> list[ToolOutput]:
        """Run the calls within the budget (concurrently unless told not to), in call order;
        each at most once in the step (``ids``: their task-unique ids, see ``nbagent.calls``)."""
        by_name = tools_by_name(tools)
        left = self._budget_left(task)
        runnable = calls if left is None else calls[:left]
        # sync tools go to threads when several run together, so that they overlap like async ones
        together = self.allow_parallel_tool_calls and len(runnable) > 1
        in_thread = True if together else None

        def run(c: ToolSelection) -> Callable[[], Any]:
            return lambda: acall_tool(by_name, c, in_thread=in_thread, missing=_MISSING_TOOL, error=_TOOL_ERROR)

        outputs = await calls_.run_calls([(cid, c.tool_id, run(c)) for c, cid in zip(runnable, ids)], together)
        for call in calls[len(runnable) :]:
            outputs.append(
                ToolOutput(
                    content=(
                        f"Error: not run: this agent may make at most {self.max_function_calls} "
                        "tool calls per task and has made them all; answer with what you have"
                    ),
                    tool_name=call.tool_name,
                    raw_input=call.tool_kwargs,
                    is_error=True,
                    tool_call_id=call.tool_id,
                )
            )
        task.extra_state[CALLS_KEY] = int(task.extra_state[CALLS_KEY]) + len(runnable)
        if self.verbose:  # one call and its output after the other
            for call, out in zip(runnable, outputs):
                self._print_call(call, out)
        return outputs

    def _print_call(self, call: ToolSelection, out: ToolOutput) -> None:
        """``verbose=True``: a call and its output, in core ``FunctionCallingAgent``'s words."""
        print("=== Calling Function ===")
        print(f"Calling function: {call.tool_name} with args: {args_json(call.tool_kwargs)}")
        print(f"=== Function Output ===\n{out.content}")


def check_tool_choice(choice: Any, tools: list[FunctionTool]) -> Any:
    """Validate a tool choice against the offered tools; None when no tools are offered."""
    names = [t.name for t in tools]
    if choice is None:
        choice = "auto"
    forced: str | None = None
    if isinstance(choice, str):
        if choice not in _CHOICE_KEYWORDS:
            forced = choice
    elif isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and "name" in function:
            forced = str(function["name"])
    else:
        raise TypeError(
            f"tool_choice must be 'auto', 'none', 'required', a tool name or an OpenAI "
            f"tool_choice dict, got {type(choice).__name__}: {choice!r}"
        )
    if forced is not None and forced not in names:
        raise ValueError(
            f"tool_choice {forced!r} is not a tool of this agent; use 'auto', 'none', "
            f"'required' or one of the tool names: {names or '(no tools)'}"
        )
    if choice == "required" and not names:
        raise ValueError("tool_choice='required' needs at least one tool, and this agent has none")
    return choice if tools else None


def as_assistant(reply: ChatMessage) -> ChatMessage:
    """The model's reply as an assistant message (a copy, so the model's object stays its own)."""
    return reply.model_copy(update={"role": MessageRole.ASSISTANT})


def dump_calls(calls: list[ToolSelection]) -> list[dict[str, Any]]:
    """The calls as plain dicts (the response's ``unexecuted_tool_calls`` metadata)."""
    return [c.model_dump() for c in calls]


def args_json(kwargs: dict[str, Any]) -> str:
    """Tool arguments as the reference prints them (``json.dumps``; anything else as text)."""
    return json.dumps(kwargs, default=str)
