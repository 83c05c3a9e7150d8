"""LlamaIndex's "Structured Planning Agent" notebook, ported (issue 23, item 6). The 10-K query
engines are function tools with the notebook's names and descriptions; the planner and the
worker have their own scripted models (the plan is the model's call of a ``Plan`` tool, as the
reference's structured prediction asks of a function-calling model). Sub-tasks depend on each
other in a chain, so the scripts are read in one order (both run independent sub-tasks at the
same time; tests/test_planner_agent.py checks that on nbagent).

The notebook's ``agent.refine_plan(plan_id, text, completed_tasks)`` does not run on 0.12.52
(its signature is ``refine_plan(input, plan_id)``): the scenario uses 0.12.52's order.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents
from tests.oracle.ref import tool_call


def lyft_2021(input: str) -> str:
    """Useful for asking questions about Lyft's 2021 10-K filling."""
    return "Lyft's key risks: competition and driver supply."


def uber_2021(input: str) -> str:
    """Useful for asking questions about Uber's 2021 10-K filling."""
    return "Uber's key risks: regulation and competition."


PLAN = [
    {"name": "Lyft Risks", "input": "Summarize Lyft's risk factors.", "expected_output": "Lyft's risks.", "dependencies": []},
    {"name": "Uber Risks", "input": "Summarize Uber's risk factors.", "expected_output": "Uber's risks.", "dependencies": ["Lyft Risks"]},
    {"name": "Combine", "input": "Combine both summaries.", "expected_output": "One summary.", "dependencies": ["Lyft Risks", "Uber Risks"]},
]
WORKER_SCRIPT = [
    tool_call("lyft_2021", input="risk factors"), "Lyft: competition and driver supply.",
    tool_call("uber_2021", input="risk factors"), "Uber: regulation and competition.",
    "Both face competition; Lyft driver supply, Uber regulation.",
]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _agent(api: DocsApi, planner_script: list[Any], **kwargs: Any) -> tuple[Any, Any, Any]:
    planner_llm, worker_llm = api.llm(planner_script), api.llm(WORKER_SCRIPT)
    tools = [  # the notebook's QueryEngineTools: a name and a description each
        api.FunctionTool.from_defaults(fn=lyft_2021, name="lyft_2021", description=lyft_2021.__doc__),
        api.FunctionTool.from_defaults(fn=uber_2021, name="uber_2021", description=uber_2021.__doc__),
    ]
    worker = api.FunctionCallingAgentWorker.from_tools(tools, llm=worker_llm, verbose=True)
    agent = api.StructuredPlannerAgent(worker, tools=tools, llm=planner_llm, verbose=True, **kwargs)
    return agent, planner_llm, worker_llm


def test_item6_the_planner_agent_plans_runs_sub_tasks_and_answers() -> None:
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(api, [tool_call("Plan", sub_tasks=PLAN), "no change", "no change", "no change"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            response = agent.chat("Summarize the key risk factors for Lyft and Uber in their 2021 10-K filings.")
        seen.append((str(response), _UUID.sub("<id>", out.getvalue()), len(api.requests(planner_llm))))
    ref, nb = seen
    assert ref[0] == "Both face competition; Lyft driver supply, Uber regulation."
    assert ref[1].startswith("=== Initial plan ===\nLyft Risks:\nSummarize Lyft's risk factors. -> Lyft's risks.\ndeps: []\n\n\n")
    assert ref[2] == 4  # the plan, then a refinement after each round of sub-tasks
    assert nb == ref


def test_item6_the_low_level_api_create_plan_run_task_refine_plan() -> None:
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(api, [tool_call("Plan", sub_tasks=PLAN), "no change"])
        with contextlib.redirect_stdout(io.StringIO()):
            plan_id = agent.create_plan("Summarize the key risk factors for Lyft and Uber.")
            plan = agent.state.plan_dict[plan_id]
            rounds = []
            next_tasks = agent.state.get_next_sub_tasks(plan_id)
            rounds.append([(t.name, t.expected_output, t.dependencies) for t in next_tasks])
            for sub_task in next_tasks:
                response = agent.run_task(sub_task.name)
                agent.state.add_completed_sub_task(plan_id, sub_task)
            agent.refine_plan("Summarize the key risk factors for Lyft and Uber.", plan_id)
            rounds.append([t.name for t in agent.state.get_next_sub_tasks(plan_id)])
        seen.append(
            (
                type(plan).__name__,
                [type(t).__name__ for t in plan.sub_tasks],
                [t.name for t in plan.sub_tasks],
                rounds,
                str(response),
                roles_contents(api.requests(planner_llm)[1])[-1][1].count("Lyft Risks"),
            )
        )
    ref, nb = seen
    assert ref[:4] == ("Plan", ["SubTask"] * 3, ["Lyft Risks", "Uber Risks", "Combine"], [[("Lyft Risks", "Lyft's risks.", [])], ["Uber Risks"]])
    assert ref[4] == "Lyft: competition and driver supply."
    assert ref[5] > 0  # the refine prompt lists the completed sub-task and its output
    assert nb == ref


def test_item6_a_custom_initial_plan_prompt_is_what_the_model_reads() -> None:
    prompt = "Plan this task: {task}\nWith these tools:\n{tools_str}\nAnswer with a Plan."
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(api, [tool_call("Plan", sub_tasks=PLAN[:1])], initial_plan_prompt=prompt)
        with contextlib.redirect_stdout(io.StringIO()):
            agent.create_plan("Summarize Lyft's risks.")
        text = "\n".join(c for _r, c in roles_contents(api.requests(planner_llm)[0]) if c)
        seen.append(text)
    assert seen[0].startswith("Plan this task: Summarize Lyft's risks.\nWith these tools:\nlyft_2021: ")
    assert seen[1] == seen[0]


def test_item6_a_refined_plan_adds_a_sub_task_which_then_runs() -> None:
    """After the first sub-task the model rewrites the rest of the plan: the new sub-task becomes
    a task and runs, verbose prints the refined plan, and the refine prompt lists what was
    completed (with its answer) and what remained."""
    refined = [PLAN[0], {"name": "Uber Only", "input": "Summarize Uber's risk factors.", "expected_output": "Uber's risks.", "dependencies": ["Lyft Risks"]}]
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(
            api, [tool_call("Plan", sub_tasks=PLAN[:1]), tool_call("Plan", sub_tasks=refined), "no change"]
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            response = agent.chat("Summarize the risks of Lyft, then Uber.")
        refine_prompt = roles_contents(api.requests(planner_llm)[1])[-1][1]
        plan_id = next(iter(agent.state.plan_dict))
        seen.append(
            (
                str(response),
                _UUID.sub("<id>", out.getvalue()),
                refine_prompt,
                [t.name for t in agent.state.plan_dict[plan_id].sub_tasks],
                [t.name for t in agent.state.get_completed_sub_tasks(plan_id)],
                api.tool_choices(planner_llm),
            )
        )
    ref, nb = seen
    assert ref[0] == "Uber: regulation and competition."
    assert "=== Refined plan ===\nLyft Risks:" in ref[1]
    assert "Completed Sub-Tasks + Outputs:\nLyft Risks:\n\tLyft: competition and driver supply." in ref[2]
    assert ref[3] == ["Lyft Risks", "Uber Only"] and ref[4] == ["Lyft Risks", "Uber Only"]
    assert nb == ref


def test_item6_a_reply_without_a_plan_is_one_default_sub_task() -> None:
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(api, ["I would just ask the tools.", "fine"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            response = agent.chat("Summarize Lyft's risk factors.")
        plan = next(iter(agent.state.plan_dict.values()))
        seen.append(
            (str(response), _UUID.sub("<id>", out.getvalue()), [(t.name, t.input, t.expected_output) for t in plan.sub_tasks])
        )
    ref, nb = seen
    assert ref[1].startswith("No complex plan predicted. Defaulting to a single task plan.\n=== Initial plan ===\ndefault:\n")
    assert ref[2] == [("default", "Summarize Lyft's risk factors.", "")]
    assert nb == ref


def test_item6_a_custom_refine_prompt_is_what_the_model_reads() -> None:
    prompt = "Refine: {task}\nDone:\n{completed_outputs}\nLeft:\n{remaining_sub_tasks}\nTools:\n{tools_str}"
    seen = []
    for api in docs_both():
        agent, planner_llm, _ = _agent(api, [tool_call("Plan", sub_tasks=PLAN[:2]), "no change", "no change"], plan_refine_prompt=prompt)
        with contextlib.redirect_stdout(io.StringIO()):
            response = agent.chat("Summarize the risks of Lyft, then Uber.")
        seen.append((str(response), [roles_contents(r)[-1][1] for r in api.requests(planner_llm)[1:]]))
    first, second = seen[0][1]
    assert first.startswith("Refine: Summarize the risks of Lyft, then Uber.\nDone:\nLyft Risks:\n\tLyft: competition and driver supply.\nLeft:\nSubTask(name='Uber Risks'")
    assert second.startswith("Refine: Summarize the risks of Lyft, then Uber.\nDone:\nLyft Risks:") and "Left:\nNone\nTools:\nlyft_2021: " in second
    assert seen[1] == seen[0]
