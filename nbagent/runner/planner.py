"""StructuredPlannerAgent: the model writes a plan of sub-tasks; each sub-task is a task of the runner.

The reference's "structured planning agent" (LlamaIndex 0.12, ``llama_index.core.agent``):
``create_plan(input)`` asks the planner model for a ``Plan`` (a list of ``SubTask``: name, input,
expected output, the names of the sub-tasks it depends on) and creates one runner task per
sub-task, its id the sub-task's name. ``chat`` runs the sub-tasks whose dependencies are done
(at the same time), marks them complete, asks the model to refine the rest of the plan, and
goes on until nothing is left; its answer is the last sub-task's.

Every sub-task is an ordinary task of this runner (``run_step``, ``undo_step``, ``graph``,
the panel work on it), and ``draw_plan()`` draws the plan as the DAG it is.

A function-calling model is asked to call a tool named ``Plan`` whose arguments are the plan,
as the reference's structured prediction asks it; a reply without that call (or one that does
not validate) means "no plan": ``create_plan`` falls back to one sub-task named ``default``,
``refine_plan`` keeps the plan as it is. A model without tools is asked for the plan as a JSON
object instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from nbagent import _sync
from nbagent.engine.agent_state import AgentState
from nbagent.ids import new_id
from nbagent.llms.base import LLM
from nbagent.memory import ChatMemoryBuffer
from nbagent.messages import ChatMessage, MessageRole
from nbagent.prompts import PromptTemplate
from nbagent.registry import show
from nbagent.runner.base import AgentRunner, query_text
from nbagent.schema import AgentChatResponse, StreamingAgentChatResponse, TaskStepOutput
from nbagent.structured import json_instructions, parse_json_answer
from nbagent.tools import ToolMetadata
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.viz.graph import DotDisplay

__all__ = [
    "StructuredPlannerAgent",
    "PlannerAgentState",
    "Plan",
    "SubTask",
    "DEFAULT_INITIAL_PLAN_PROMPT",
    "DEFAULT_PLAN_REFINE_PROMPT",
]


class SubTask(BaseModel):
    """A single sub-task in a plan."""

    name: str = Field(..., description="The name of the sub-task.")
    input: str = Field(..., description="The input prompt for the sub-task.")
    expected_output: str = Field(..., description="The expected output of the sub-task.")
    dependencies: list[str] = Field(
        ..., description="The sub-task names that must be completed before this sub-task."
    )


class Plan(BaseModel):
    """A series of sub-tasks to accomplish an overall task."""

    sub_tasks: list[SubTask] = Field(..., description="The sub-tasks in the plan.")


# The reference's prompts, word for word: a model tuned on the docs' examples reads the same.
DEFAULT_INITIAL_PLAN_PROMPT = """\
Think step-by-step. Given a task and a set of tools, create a comprehensive, end-to-end plan to accomplish the task.
Keep in mind not every task needs to be decomposed into multiple sub-tasks if it is simple enough.
The plan should end with a sub-task that can achieve the overall task.

The tools available are:
{tools_str}

Overall Task: {task}
"""

DEFAULT_PLAN_REFINE_PROMPT = """\
Think step-by-step. Given an overall task, a set of tools, and completed sub-tasks, update (if needed) the remaining sub-tasks so that the overall task can still be completed.
The plan should end with a sub-task that can achieve and satisfy the overall task.
If you do update the plan, only create new sub-tasks that will replace the remaining sub-tasks, do NOT repeat tasks that are already completed.
If the remaining sub-tasks are enough to achieve the overall task, it is ok to skip this step, and instead explain why the plan is complete.

The tools available are:
{tools_str}

Completed Sub-Tasks + Outputs:
{completed_outputs}

Remaining Sub-Tasks:
{remaining_sub_tasks}

Overall Task: {task}
"""


class PlannerAgentState(AgentState):
    """The runner's tasks plus its plans (``plan_dict``: plan id -> Plan) and, per plan, the
    sub-tasks completed so far."""

    def __init__(self, task_dict: dict[str, Any] | None = None) -> None:
        super().__init__(task_dict)
        self.plan_dict: dict[str, Plan] = {}
        self.completed_sub_tasks: dict[str, list[SubTask]] = {}

    def _plan(self, plan_id: str) -> Plan:
        plan = self.plan_dict.get(plan_id)
        if plan is None:
            known = ", ".join(repr(k) for k in self.plan_dict) or "none"
            raise KeyError(f"unknown plan id {plan_id!r}; known plan ids: {known}")
        return plan

    def get_completed_sub_tasks(self, plan_id: str) -> list[SubTask]:
        """The plan's sub-tasks done so far, in the order they finished."""
        return self.completed_sub_tasks.get(plan_id, [])

    def add_completed_sub_task(self, plan_id: str, sub_task: SubTask) -> None:
        """Mark a sub-task of the plan done, so the sub-tasks that depend on it can run."""
        self.completed_sub_tasks.setdefault(plan_id, []).append(sub_task)

    def _done_names(self, plan_id: str) -> set[str]:
        return {s.name for s in self.completed_sub_tasks.setdefault(plan_id, [])}

    def get_next_sub_tasks(self, plan_id: str) -> list[SubTask]:
        """The sub-tasks not done yet whose dependencies are all done, in plan order."""
        plan = self._plan(plan_id)
        done = self._done_names(plan_id)
        return [s for s in plan.sub_tasks if s.name not in done and all(d in done for d in s.dependencies)]

    def get_remaining_subtasks(self, plan_id: str) -> list[SubTask]:
        """The sub-tasks not done yet, in plan order."""
        plan = self._plan(plan_id)
        done = self._done_names(plan_id)
        return [s for s in plan.sub_tasks if s.name not in done]

    def reset(self) -> None:
        """Forget every task and plan (in place: the runner sees it too)."""
        super().reset()
        self.plan_dict.clear()
        self.completed_sub_tasks.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tasks={list(self.task_dict)}, plans={len(self.plan_dict)})"


def _as_prompt(prompt: str | PromptTemplate, name: str) -> PromptTemplate:
    if isinstance(prompt, PromptTemplate):
        return prompt
    if isinstance(prompt, str):
        return PromptTemplate(prompt)
    raise TypeError(f"{name} must be a str or a PromptTemplate, got {type(prompt).__name__}")


def _plan_lines(title: str, plan: Plan) -> str:
    """What verbose prints for a plan, as the reference prints it."""
    lines = [f"=== {title} ==="]
    for s in plan.sub_tasks:
        lines.append(f"{s.name}:\n{s.input} -> {s.expected_output}\ndeps: {s.dependencies}\n\n")
    return "\n".join(lines)


def _mode_name(mode: Any) -> str:
    """``"wait"``/``"stream"``, from a string or the reference's ``ChatResponseMode``."""
    value = getattr(mode, "value", mode)
    if value not in ("wait", "stream"):
        raise ValueError(f"mode must be 'wait' or 'stream', got {mode!r}")
    return str(value)


class StructuredPlannerAgent(AgentRunner):
    """A runner that plans: sub-tasks as its tasks, a planner model to write and refine the plan.

    ``agent_worker`` runs every sub-task; ``llm`` writes the plan (default: the worker's
    model); ``tools`` are listed in the planning prompts (default: the worker's tools).
    ``initial_plan_prompt`` and ``plan_refine_prompt`` take ``{tools_str}`` and ``{task}``
    (and the refine prompt ``{completed_outputs}`` and ``{remaining_sub_tasks}``).
    ``run_task(name)`` runs one sub-task to its answer, as on the reference.
    """

    state: PlannerAgentState
    llm: LLM
    tools: list[Any] | None
    tool_retriever: Any
    initial_plan_prompt: PromptTemplate
    plan_refine_prompt: PromptTemplate

    def __init__(
        self,
        agent_worker: BaseAgentWorker,
        tools: Sequence[Any] | None = None,
        tool_retriever: Any = None,
        chat_history: Sequence[ChatMessage] | None = None,
        state: PlannerAgentState | None = None,
        memory: ChatMemoryBuffer | None = None,
        llm: LLM | None = None,
        initial_plan_prompt: str | PromptTemplate = DEFAULT_INITIAL_PLAN_PROMPT,
        plan_refine_prompt: str | PromptTemplate = DEFAULT_PLAN_REFINE_PROMPT,
        callback_manager: Any = None,
        init_task_state_kwargs: dict[str, Any] | None = None,
        delete_task_on_finish: bool = False,
        default_tool_choice: str | dict[str, Any] = "auto",
        verbose: bool = False,
        **runner_kwargs: Any,
    ) -> None:
        if state is None:
            state = PlannerAgentState()
        elif not isinstance(state, PlannerAgentState):
            raise TypeError(f"state must be a PlannerAgentState, got {type(state).__name__}")
        planner_llm = llm if llm is not None else getattr(agent_worker, "llm", None)
        if not isinstance(planner_llm, LLM):
            raise TypeError(
                "StructuredPlannerAgent needs llm=... (an nbagent LLM that writes the plan), "
                f"got {type(planner_llm).__name__}"
            )
        super().__init__(
            agent_worker,
            chat_history=chat_history,
            state=state,
            memory=memory,
            llm=planner_llm,
            callback_manager=callback_manager,
            init_task_state_kwargs=init_task_state_kwargs,
            delete_task_on_finish=delete_task_on_finish,
            default_tool_choice=default_tool_choice,
            verbose=verbose,
            **runner_kwargs,
        )
        self.state = state
        self.llm = planner_llm
        self.tools = None if tools is None else list(tools)
        self.tool_retriever = tool_retriever
        self.initial_plan_prompt = _as_prompt(initial_plan_prompt, "initial_plan_prompt")
        self.plan_refine_prompt = _as_prompt(plan_refine_prompt, "plan_refine_prompt")

    # ----- tools and prompts -------------------------------------------------------------
    def get_tools(self, input: str) -> list[Any]:
        """The tools the plan may use: ``tools``, else the retriever's for ``input``, else the
        worker's."""
        if self.tools is not None:
            return self.tools
        if self.tool_retriever is not None:
            return list(self.tool_retriever.retrieve(input))
        worker_tools = getattr(self.agent_worker, "tools", None)
        if worker_tools is not None:
            return list(worker_tools)
        raise ValueError("No tools provided or retriever set.")

    def _tools_str(self, input: str) -> str:
        return "".join(f"{t.metadata.name or ''}: {t.metadata.description}\n" for t in self.get_tools(input))

    def get_refine_plan_prompt_kwargs(
        self, plan_id: str, task: str, completed_sub_task_pairs: list[tuple[SubTask, TaskStepOutput]]
    ) -> dict[str, str]:
        """The refine prompt's fields: the tools, the task, what the completed sub-tasks
        answered and the sub-tasks still to do (written as the reference writes them)."""
        completed = "".join(f"{s.name}:\n\t{out.output!s}\n" for s, out in completed_sub_task_pairs)
        remaining = self.state.get_remaining_subtasks(plan_id)
        remaining_str = "" if remaining else "None"
        for s in remaining:
            remaining_str += (
                f"SubTask(name='{s.name}', input='{s.input}', "
                f"expected_output='{s.expected_output}', dependencies='{s.dependencies}')\n"
            )
        return {
            "tools_str": self._tools_str(remaining_str).strip(),
            "task": task.strip(),
            "completed_outputs": completed.strip(),
            "remaining_sub_tasks": remaining_str.strip(),
        }

    async def _apredict_plan(self, prompt: PromptTemplate, **fields: str) -> Plan:
        """Ask the planner model for a Plan; ``ValueError`` when its reply holds none."""
        text = prompt.format(**fields)
        if self.llm.is_function_calling_model:
            tool = ToolMetadata(name="Plan", description=Plan.__doc__ or "", fn_schema=Plan)
            response = await self.llm.achat([ChatMessage(role=MessageRole.USER, content=text)], tools=[tool])
            calls = response.message.tool_calls
            if not calls:
                raise ValueError(f"Expected at least one tool call, but got {len(calls)} tool calls.")
            return Plan.model_validate(calls[0].tool_kwargs)
        ask = f"{text}\n\n{json_instructions(Plan, lead='Your answer must be')}"
        response = await self.llm.achat([ChatMessage(role=MessageRole.USER, content=ask)])
        plan = parse_json_answer(response.message.text, Plan)
        assert isinstance(plan, Plan)
        return plan

    # ----- plans -------------------------------------------------------------------------
    async def acreate_plan(self, input: str, **kwargs: Any) -> str:
        """Ask the model for a plan, create a task per sub-task; returns the plan's id."""
        try:
            plan = await self._apredict_plan(self.initial_plan_prompt, tools_str=self._tools_str(input), task=input)
        except (ValueError, ValidationError):  # no plan in the reply: one sub-task does it all
            if self.verbose:
                print("No complex plan predicted. Defaulting to a single task plan.")
            plan = Plan(sub_tasks=[SubTask(name="default", input=input, expected_output="", dependencies=[])])
        if self.verbose:
            print(_plan_lines("Initial plan", plan))
        plan_id = new_id()
        self.state.plan_dict[plan_id] = plan
        for sub_task in plan.sub_tasks:
            self.create_task(sub_task.input, task_id=sub_task.name)
        return plan_id

    def create_plan(self, input: str, **kwargs: Any) -> str:
        """Ask the model for a plan, create a task per sub-task; returns the plan's id."""
        return _sync.run_sync(self.acreate_plan(input, **kwargs))

    def _update_plan(self, plan_id: str, new_plan: Plan) -> None:
        self.state.plan_dict[plan_id] = new_plan
        for sub_task in new_plan.sub_tasks:
            if sub_task.name not in self.state.task_dict:
                self.create_task(sub_task.input, task_id=sub_task.name)
        if self.verbose:
            print(_plan_lines("Refined plan", new_plan))

    async def arefine_plan(self, input: str, plan_id: str, **kwargs: Any) -> None:
        """Show the model what is done and what remains; a new plan it writes replaces the
        plan (new sub-tasks become tasks); a reply with no plan keeps it."""
        self.state._plan(plan_id)
        pairs = [(s, self.get_task_output(s.name)) for s in self.state.get_completed_sub_tasks(plan_id)]
        fields = self.get_refine_plan_prompt_kwargs(plan_id, input, pairs)
        try:
            new_plan = await self._apredict_plan(self.plan_refine_prompt, **fields)
        except (ValueError, ValidationError):
            return
        self._update_plan(plan_id, new_plan)

    def refine_plan(self, input: str, plan_id: str, **kwargs: Any) -> None:
        """Show the model what is done and what remains; keep the plan it writes, if any."""
        _sync.run_sync(self.arefine_plan(input, plan_id, **kwargs))

    def get_next_tasks(self, plan_id: str, **kwargs: Any) -> list[str]:
        """The ids (sub-task names) of the tasks ready to run in this plan."""
        return [s.name for s in self.state.get_next_sub_tasks(plan_id)]

    def mark_task_complete(self, plan_id: str, task_id: str, **kwargs: Any) -> None:
        """Count the sub-task named ``task_id`` as done in this plan."""
        by_name = {s.name: s for s in self.state._plan(plan_id).sub_tasks}
        if task_id not in by_name:
            raise KeyError(f"plan {plan_id!r} has no sub-task {task_id!r}; it has: {', '.join(by_name)}")
        self.state.add_completed_sub_task(plan_id, by_name[task_id])

    # ----- running sub-tasks -------------------------------------------------------------
    async def arun_task(  # type: ignore[override]
        self, task_id: str, mode: Any = "wait", tool_choice: str | dict[str, Any] = "auto", **kwargs: Any
    ) -> AgentChatResponse | StreamingAgentChatResponse:
        """Run the sub-task's steps to the end and return its answer (finalized, as the
        reference's planner does; ``AgentRunner.arun_task`` returns the last step instead)."""
        output = await self._arun_to_end(self.state_of(task_id).task_id, _mode_name(mode), tool_choice)
        return self.finalize_response(task_id, output)

    def run_task(
        self, task_id: str, mode: Any = "wait", tool_choice: str | dict[str, Any] = "auto", **kwargs: Any
    ) -> AgentChatResponse | StreamingAgentChatResponse:
        """Run the sub-task's steps to the end and return its answer."""
        return _sync.run_sync(self.arun_task(task_id, mode, tool_choice, **kwargs))

    async def _achat(
        self,
        message: str,
        chat_history: Sequence[ChatMessage] | None,
        tool_choice: str | dict[str, Any] | None,
        mode: Any,
        **_: Any,
    ) -> Any:
        """Plan, then rounds of (the ready sub-tasks at once, mark them done, refine the plan)
        until no sub-task is ready; the answer is the last sub-task's."""
        if chat_history is not None:
            self.memory.set(chat_history)
        choice = "auto" if tool_choice is None else tool_choice
        plan_id = await self.acreate_plan(message)
        results: list[Any] = []
        while True:
            ready = self.get_next_tasks(plan_id)
            if not ready:
                break
            results = list(await asyncio.gather(*(self.arun_task(t, "wait", choice) for t in ready), return_exceptions=True))
            failed = [r for r in results if isinstance(r, BaseException)]
            for task_id, result in zip(ready, results):
                if not isinstance(result, BaseException):  # a failing sub-task loses no other's answer
                    self.mark_task_complete(plan_id, task_id)
            if failed:  # the failed sub-task stays queued in its task: run_task retries it
                raise failed[0]
            await self.arefine_plan(message, plan_id)
        if not results:
            raise ValueError(f"plan {plan_id!r} has no sub-task that can run (check their dependencies)")
        response = results[-1]
        if _mode_name(mode) == "stream" and isinstance(response, AgentChatResponse):
            return StreamingAgentChatResponse(iter([response.response]), sources=response.sources)
        return response

    async def aquery(self, str_or_query_bundle: str | Any) -> AgentChatResponse:
        """As on the reference: ``chat`` with the question (the plan's sub-tasks share the
        runner's memory)."""
        return await self.achat(query_text(str_or_query_bundle))

    def reset(self) -> None:
        """Forget the conversation, every task and every plan."""
        super().reset()
        self.state.reset()

    # ----- views -------------------------------------------------------------------------
    def draw_plan(self, plan_id: str | None = None, **options: Any) -> DotDisplay:
        """The plan as the DAG it is: a node per sub-task (done, running, ready, waiting),
        an edge from each dependency; default: the newest plan. ``options``: the drawing's
        ``title``, ``rankdir`` ("TB" or "LR"), ``max_label`` and ``wrap`` (label length and
        line width, in characters). Displays itself in a notebook; ``.source`` is its DOT."""
        if plan_id is None:
            if not self.state.plan_dict:
                raise ValueError("the agent has no plan yet; create one with create_plan(...) or chat(...)")
            plan_id = next(reversed(self.state.plan_dict))
        self.state._plan(plan_id)
        return show(self, "draw_plan", plan_id, **options)  # type: ignore[no-any-return]
