"""PlannerAgentWorker: the model plans tool calls as a DAG; independent calls run in parallel.

In the spirit of LLMCompiler (Kim et al., 2023, arXiv 2312.04511). A task goes through
three kinds of steps:

- **plan**: one model call writes a numbered plan (see ``planner_parser``); each tool call
  becomes a step, linked after the calls whose results (``$N``) it uses, and a **join** step
  follows them all. A plan that cannot run (bad syntax, unknown tool or argument, ``$N`` with
  no such call, a cycle) is sent back to the model with the reason, as a new plan step;
- **call**: runs one tool with the results of earlier calls filled in. A call keeps its
  result in its own ``step_state``, so parallel calls never write shared state;
- **join**: one model call reads the results and either answers (the last step) or asks for
  a new plan with what is missing (a new plan step, up to ``max_replans``).

Run it with ``ParallelAgentRunner`` to get the calls in parallel (``AgentRunner`` runs the
same DAG one step at a time). Task state in ``extra_state``: ``planner_messages`` (AppendLog:
the plans and the feedback sent to the planner), ``rounds`` (AppendLog: each round's plan and
results, for the join), ``replans`` and ``plan_errors`` (counts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from nbagent import approval, calls
from nbagent._compat import pop_callback_manager
from nbagent.llms.base import LLM
from nbagent.messages import ChatMessage, MessageRole, ToolOutput, ToolSelection
from nbagent.prompts import PromptDictType, PromptTemplate
from nbagent.snapshot import AppendLog
from nbagent.schema import AgentChatResponse, Task, TaskStep, TaskStepOutput
from nbagent.tools import FunctionTool, acall_tool, as_tools, tools_by_name
from nbagent.workers.base import BaseAgentWorker, person_input
from nbagent.workers.planner_parser import Plan, PlanError, parse_plan, resolve_refs
from nbagent.workers.react.prompt import format_tool_descriptions

__all__ = [
    "PlannerAgentWorker",
    "PlannerError",
    "PLANNER_PROMPT",
    "JOIN_PROMPT",
    "parse_join",
]

PLANNER_PROMPT = """\
You plan how to answer the user's request with tools. Calls that do not depend on each other \
run at the same time, so plan every call you can in one go.
{context}
## Tools

{tool_desc}

## How to reply

Optionally one line "Thought: ...", then a numbered list with one tool call per line, ending \
with join():

1. tool_name(arg="text", other=2)
2. tool_name(arg="more text")
3. other_tool(x=$1, y=$2)
4. join()

- Arguments are keyword arguments with literal values (text in double quotes, numbers, \
lists, objects, true/false).
- $N stands for the result of call N; a call that uses $N runs after call N. Never use the \
result of a call that has not run yet in a way that creates a loop.
- Use only the tools listed above, with the arguments they take.
- join() reads the results and writes the answer; write nothing after it.
- If no tool is needed, reply with just: 1. join()
"""

JOIN_PROMPT = """\
You read the results of tool calls made for the user's question and decide what comes next.

If the results are enough, reply with:

Thought: <how the results answer the question>
Answer: <the answer to the user>

If they are not (a call failed, or something is still missing), reply with:

Thought: <what is missing>
Replan: <what the next plan must find out>
"""

_NO_MORE_PLANS = (
    "No more plans can be made: reply with an Answer from these results, saying what could "
    "not be found."
)
_ANSWER_RE = re.compile(r"^[ \t]*(?:Final[ \t]+)?Answer[ \t]*:[ \t]*", re.MULTILINE | re.IGNORECASE)
_REPLAN_RE = re.compile(r"^[ \t]*Replan[ \t]*:[ \t]*", re.MULTILINE | re.IGNORECASE)
_THOUGHT_RE = re.compile(r"^[ \t]*Thought[ \t]*:[ \t]*(.*)$", re.MULTILINE | re.IGNORECASE)
_STATE_KEYS = ("planner_messages", "rounds", "replans", "plan_errors")


class PlannerError(RuntimeError):
    """The planner ran out of attempts (plans that could not run, or new plans)."""


def parse_join(text: str) -> tuple[str, str, str | None]:
    """Read a join reply: ``("answer" | "replan", text, thought)``.

    Without an ``Answer:`` or ``Replan:`` label the whole reply is the answer (tolerant: a
    model that just answers is understood).
    """
    thought_m = _THOUGHT_RE.search(text)
    thought = thought_m.group(1).strip() if thought_m else None
    replan = _REPLAN_RE.search(text)
    answer = _ANSWER_RE.search(text)
    if replan is not None and (answer is None or replan.start() < answer.start()):
        return "replan", text[replan.end() :].strip(), thought
    if answer is not None:
        return "answer", text[answer.end() :].strip(), thought
    body = _THOUGHT_RE.sub("", text).strip() if thought_m and thought_m.start() == 0 else text.strip()
    return "answer", body or text.strip(), thought


def _json_value(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_value(v) for k, v in value.items())
    return False


class PlannerAgentWorker(BaseAgentWorker):
    """Plans tool calls as a DAG, runs them (in parallel under ``ParallelAgentRunner``), joins.

    ``max_replans``: new plans the join may ask for; ``max_plan_errors``: plans that could not
    run sent back to the model for correction, in a row, before the task stops with
    ``PlannerError``.
    """

    def __init__(
        self,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None,
        llm: LLM,
        max_replans: int = 2,
        max_plan_errors: int = 3,
        verbose: bool = False,
        planner_prompt: str | None = None,
        join_prompt: str | None = None,
        context: str | None = None,
    ) -> None:
        if llm is None:
            raise ValueError(
                "PlannerAgentWorker needs a model: pass llm=..., e.g. OpenAILLM(model=...) or "
                "ScriptedLLM([plan, answer]) to run offline"
            )
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be an nbagent LLM, got {type(llm).__name__}: {llm!r}")
        for name, value in (("max_replans", max_replans), ("max_plan_errors", max_plan_errors)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.tools: list[FunctionTool] = as_tools(tools)
        self._tools_by_name = tools_by_name(self.tools)
        self.llm = llm
        self.max_replans = max_replans
        self.max_plan_errors = max_plan_errors
        self.verbose = verbose
        self.planner_prompt = PLANNER_PROMPT if planner_prompt is None else planner_prompt
        self.join_prompt = JOIN_PROMPT if join_prompt is None else join_prompt
        self.context = context
        self._system: ChatMessage | None = None

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        llm: LLM | None = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> PlannerAgentWorker:
        """Make the worker from tools (functions are wrapped as ``FunctionTool``) and a
        model, as the other workers' ``from_tools``; ``callback_manager`` is accepted and has
        no effect."""
        pop_callback_manager(kwargs, "PlannerAgentWorker")
        return cls(tools, llm, verbose=verbose, **kwargs)  # type: ignore[arg-type]

    # ----- prompts -----------------------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        return {"planner_prompt": PromptTemplate(self.planner_prompt), "join_prompt": PromptTemplate(self.join_prompt)}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        if "planner_prompt" in prompts_dict:
            self.planner_prompt = prompts_dict["planner_prompt"].template
            self._system = None  # rendered again with the new template
        if "join_prompt" in prompts_dict:
            self.join_prompt = prompts_dict["join_prompt"].template

    def prompt_preview(self) -> str | None:
        return self.system_message().text

    def system_message(self) -> ChatMessage:
        """The planner's system prompt: the tools and the plan format (rendered once).

        Example:

        >>> from nbagent import PlannerAgentWorker, ScriptedLLM
        >>> def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> worker = PlannerAgentWorker.from_tools([add], llm=ScriptedLLM([]))
        >>> message = worker.system_message()
        >>> message.role.value, "add" in message.content
        ('system', True)
        """
        if self._system is None:
            context = f"\n## Context\n\n{self.context.strip()}\n" if self.context and self.context.strip() else ""
            names = ", ".join(t.name for t in self.tools) or "(none)"
            text = (
                self.planner_prompt.replace("{context}", context)
                .replace("{tool_names}", names)
                .replace("{tool_desc}", format_tool_descriptions(self.tools))
            )
            self._system = ChatMessage(role=MessageRole.SYSTEM, content=text)
        return self._system

    # ----- steps -------------------------------------------------------------------------
    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        state = task.extra_state
        state["planner_messages"] = AppendLog()
        state["rounds"] = AppendLog()
        state["replans"] = 0
        state["plan_errors"] = 0
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"kind": "plan", "round": 0})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        kind = step.step_state.get("kind")
        if kind == "call":
            return await self._run_call(step, task)
        missing = [k for k in _STATE_KEYS if k not in task.extra_state]
        if missing:
            raise ValueError(
                f"task {task.task_id!r} has no planner state {missing}: create the task with "
                "runner.create_task(...) so PlannerAgentWorker.initialize_step runs first"
            )
        if kind == "plan":
            return await self._run_plan(step, task)
        if kind == "join":
            return await self._run_join(step, task)
        raise ValueError(f"step {step.step_id!r} has kind {kind!r}; PlannerAgentWorker runs 'plan', 'call' and 'join' steps")

    # ----- plan --------------------------------------------------------------------------
    def _question(self, task: Task) -> str:
        for m in task.scratch_memory.get_all():
            if m.role == MessageRole.USER:
                return m.text
        return task.input

    async def _run_plan(self, step: TaskStep, task: Task) -> TaskStepOutput:
        state = task.extra_state
        errors = int(state["plan_errors"])
        if errors > self.max_plan_errors:
            raise PlannerError(
                f"PlannerAgentWorker got {errors} plans in a row that could not run "
                f"(max_plan_errors={self.max_plan_errors}) in task {task.task_id!r}; the last "
                f"reason was sent to the model: {state['planner_messages'][-1].text!r}. Raise "
                "worker.max_plan_errors and run the step again, or steer it with new input"
            )
        rnd = int(step.step_state.get("round", 0))
        first = not any(m.role == MessageRole.USER for m in task.scratch_memory.get_all())
        if first:
            task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=task.input))
        added = person_input(step, task, first)
        if added is not None:  # human input injected before this plan
            note = ChatMessage(role=MessageRole.USER, content=added)
            task.scratch_memory.put(note)
            state["planner_messages"].append(note)
        question = self._question(task)
        messages = [
            self.system_message(),
            *task.memory.get(input=question),
            ChatMessage(role=MessageRole.USER, content=question),
            *state["planner_messages"],
        ]
        reply = (await self.llm.achat(messages)).message.text
        state["planner_messages"].append(ChatMessage(role=MessageRole.ASSISTANT, content=reply))
        thought_m = _THOUGHT_RE.search(reply)
        try:
            plan = parse_plan(reply, self._tools_by_name)
        except PlanError as error:
            feedback = (
                f"Your plan could not be run: {error}. Write the whole plan again in the "
                "required format."
            )
            state["planner_messages"].append(ChatMessage(role=MessageRole.USER, content=feedback))
            state["plan_errors"] = errors + 1
            if self.verbose:
                print(f"> plan error: {error}")
            retry = TaskStep(task_id=task.task_id, input=None, step_state={"kind": "plan", "round": rnd})
            return TaskStepOutput(
                output=f"plan error: {error}",
                task_step=step,
                next_steps=[retry],
                reasoning=thought_m.group(1).strip() if thought_m else None,
            )
        state["plan_errors"] = 0
        if self.verbose:
            print(f"> plan (round {rnd + 1}): {len(plan)} call(s)")
        return TaskStepOutput(
            output=_plan_summary(plan),
            task_step=step,
            next_steps=self._plan_steps(plan, task, rnd),
            reasoning=plan.thought,
        )

    def _plan_steps(self, plan: Plan, task: Task, rnd: int) -> list[TaskStep]:
        steps: dict[int, TaskStep] = {}
        policy = approval.policy_of(task)
        for call in plan.calls:
            steps[call.index] = TaskStep(
                task_id=task.task_id,
                input=call.text,
                step_state={
                    "kind": "call",
                    "round": rnd,
                    "index": call.index,
                    "tool": call.tool,
                    "args": call.args,
                },
                # a call with no deps is ready; one with deps waits for them (is_ready=False
                # with nothing to wait for would hold it)
                is_ready=not call.deps,
            )
            call_id = calls.issue_call_id(task, f"plan{rnd + 1}_{call.index}")  # unique in the task
            steps[call.index].step_state["call_id"] = call_id
            sel = ToolSelection(tool_id=call_id, tool_name=call.tool, tool_kwargs=call.args)
            if approval.needs_approval(self._tools_by_name.get(call.tool), sel, policy):
                # the call step waits for a person; $N in its arguments are filled when it runs
                steps[call.index].step_state[approval.APPROVAL_KEY] = approval.make_record([sel], [True])
        used: set[int] = set()
        for call in plan.calls:
            for dep in call.deps:
                steps[dep].link_step(steps[call.index])
                used.add(dep)
        join = TaskStep(
            task_id=task.task_id,
            input=None,
            step_state={"kind": "join", "round": rnd, "plan": plan.text},
            is_ready=not steps,  # waits for the calls; with none it is ready at once
        )
        for index, s in steps.items():
            if index not in used:  # the join waits for every call through the last ones
                s.link_step(join)
        return [*steps.values(), join]

    # ----- call --------------------------------------------------------------------------
    async def _run_call(self, step: TaskStep, task: Task) -> TaskStepOutput:
        own = step.step_state
        index = own.get("index")
        tool_name = own.get("tool")
        results: dict[int, Any] = {}
        failed: list[int] = []
        for prev in step.prev_steps.values():
            ps = prev.step_state
            if ps.get("kind") == "call" and "content" in ps:
                results[int(ps["index"])] = ps.get("value", ps["content"])
                if ps.get("is_error"):
                    failed.append(int(ps["index"]))
        call_id = own.get("call_id") or f"plan{int(own.get('round', 0)) + 1}_{index}"  # older runs
        args = own.get("args", {})
        rejected: ToolOutput | None = None
        if approval.record_of(step) is not None:
            ((_, decided, rejected),) = approval.split_decided(step)
            args = decided.tool_kwargs
        if rejected is not None:
            out = rejected
        elif failed:
            refs = ", ".join(f"${n}" for n in sorted(failed))
            out = ToolOutput(
                content=f"Error: not run, because {refs} failed",
                tool_name=str(tool_name),
                raw_input=dict(args),
                is_error=True,
                tool_call_id=call_id,
            )
        else:
            try:
                kwargs = resolve_refs(args, results)
            except KeyError as missing:
                raise ValueError(
                    f"call {index} ({tool_name}) needs the result of ${missing.args[0]}, which is not "
                    "among its previous steps; was the plan's DAG edited?"
                ) from None
            selection = ToolSelection(tool_id=call_id, tool_name=str(tool_name), tool_kwargs=kwargs)
            out = await calls.run_call(  # at most once in this step, retries included
                call_id,
                call_id,
                lambda: acall_tool(
                    self._tools_by_name,
                    selection,
                    in_thread=True,  # calls of one plan run in parallel, sync tools included
                ),
            )
        own["content"] = out.content
        own["value"] = out.raw_output if _json_value(out.raw_output) and out.raw_output is not None else out.content
        own["is_error"] = out.is_error
        if self.verbose:
            print(f"> ${index} {tool_name} -> {out.content}")
        return TaskStepOutput(output=out.content, task_step=step, tool_outputs=[out])

    # ----- join --------------------------------------------------------------------------
    def _round_calls(self, join: TaskStep) -> list[TaskStep]:
        """The call steps of the join's round: its previous steps and theirs, by number."""
        rnd = join.step_state.get("round")
        seen: dict[str, TaskStep] = {}
        todo = list(join.prev_steps.values())
        while todo:
            s = todo.pop()
            if s.step_id in seen or s.step_state.get("kind") != "call" or s.step_state.get("round") != rnd:
                continue
            seen[s.step_id] = s
            todo.extend(s.prev_steps.values())
        return sorted(seen.values(), key=lambda s: int(s.step_state.get("index", 0)))

    async def _run_join(self, step: TaskStep, task: Task) -> TaskStepOutput:
        state = task.extra_state
        rnd = int(step.step_state.get("round", 0))
        lines = []
        for call in self._round_calls(step):
            cs = call.step_state
            mark = " (error)" if cs.get("is_error") else ""
            lines.append(f"${cs.get('index')} = {call.input}{mark}: {cs.get('content', '(no result)')}")
        results = "\n".join(lines) or "(no tool calls)"
        plan_text = str(step.step_state.get("plan", ""))
        earlier = "".join(
            f"Plan {i + 1}:\n{r['plan']}\nResults:\n{r['results']}\nMissing then: {r['reason']}\n\n"
            for i, r in enumerate(state["rounds"])
        )
        question = self._question(task)
        prompt = f"Question: {question}\n\n{earlier}Plan{f' {rnd + 1}' if earlier else ''}:\n{plan_text}\n\nResults:\n{results}"
        can_replan = int(state["replans"]) < self.max_replans
        if not can_replan:
            prompt += f"\n\n{_NO_MORE_PLANS}"
        if step.input is not None:  # human input injected before the join
            task.scratch_memory.put(ChatMessage(role=MessageRole.USER, content=step.input))
            prompt += f"\n\nThe user adds: {step.input}"
        messages = [
            ChatMessage(role=MessageRole.SYSTEM, content=self.join_prompt),
            *task.memory.get(input=question),
            ChatMessage(role=MessageRole.USER, content=prompt),
        ]
        reply = (await self.llm.achat(messages)).message.text
        kind, text, thought = parse_join(reply)
        if kind == "replan":
            if not can_replan:
                raise PlannerError(
                    f"the join asked for a new plan ({text!r}) but max_replans={self.max_replans} "
                    f"new plans were already made in task {task.task_id!r}; raise "
                    "worker.max_replans and run the step again, or steer it with new input"
                )
            state["replans"] = int(state["replans"]) + 1
            state["rounds"].append({"plan": plan_text, "results": results, "reason": text})
            state["planner_messages"].append(
                ChatMessage(
                    role=MessageRole.USER,
                    content=(
                        f"Results of your plan:\n{results}\n\nThis is not enough yet: {text}\n"
                        "Write a new plan for what is still missing (number the calls from 1 "
                        "again; the results above stay known to the answer)."
                    ),
                )
            )
            if self.verbose:
                print(f"> replan: {text}")
            nxt = TaskStep(task_id=task.task_id, input=None, step_state={"kind": "plan", "round": rnd + 1})
            return TaskStepOutput(output=f"replan: {text}", task_step=step, next_steps=[nxt], reasoning=thought)
        task.scratch_memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
        if self.verbose:
            print(f"> answer: {text}")
        return TaskStepOutput(
            output=AgentChatResponse(response=text),
            task_step=step,
            is_last=True,
            reasoning=thought,
        )

    def __repr__(self) -> str:
        names = [t.name for t in self.tools]
        return f"PlannerAgentWorker(llm={self.llm!r}, tools={names}, max_replans={self.max_replans})"


def _plan_summary(plan: Plan) -> str:
    if not plan.calls:
        return "plan: no tool calls"
    calls = "; ".join(f"${c.index} {c.text}" for c in plan.calls)
    return f"plan: {calls}"
