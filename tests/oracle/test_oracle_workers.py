"""FnAgentWorker (item 6), CustomSimpleAgentWorker and ParallelAgentRunner's DAG (item 2) on
llama_index.core 0.12.52 and on nbagent: the same worker code, only the imports change."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Dict, Tuple

import pytest

from tests.oracle.ref import both


def multiply_agent_fn(state: dict) -> Tuple[Dict[str, Any], bool]:
    """The reference docs' FnAgentWorker example, as written there."""
    if "max_count" not in state:
        raise ValueError("max_count must be specified.")
    if "__output__" not in state:
        state["__output__"] = int(state["__task__"].input)
        state["count"] = 0
    else:
        state["__output__"] = state["__output__"] * 2
        state["count"] += 1
    is_done = state["count"] >= state["max_count"]
    return state, is_done


async def amultiply_agent_fn(state: dict) -> Tuple[Dict[str, Any], bool]:
    return multiply_agent_fn(state)


def _fn_run(api: SimpleNamespace, **kwargs: Any) -> dict[str, Any]:
    agent = api.FnAgentWorker(initial_state={"max_count": 2}, **kwargs).as_agent()
    task = agent.create_task("3")
    outs = []
    while True:
        out = agent.run_step(task.task_id)
        outs.append((out.output.response, out.is_last, len(out.next_steps)))
        if out.is_last:
            break
    response = agent.finalize_response(task.task_id)
    return {
        "outs": outs,
        "response": response.response,
        "count": task.extra_state.get("count"),
        "output_in_extra_state": task.extra_state.get("__output__"),
        "chat": api.FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 5}).as_agent().chat("5").response,
        "query": _outcome(lambda: str(api.FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 5}).as_agent().query("5"))),
        "achat": asyncio.run(api.FnAgentWorker(fn=multiply_agent_fn, initial_state={"max_count": 1}).as_agent().achat("7")).response,
    }


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except TypeError as e:
        return f"TypeError: {e}"


def _as_text(obs: dict[str, Any]) -> dict[str, Any]:
    return {
        **obs,
        "outs": [(str(r), last, n) for r, last, n in obs["outs"]],
        "response": str(obs["response"]),
        "chat": str(obs["chat"]),
        "achat": str(obs["achat"]),
    }


@pytest.mark.parametrize("kind", ["fn", "async_fn"])
def test_fn_agent_worker_docs_example_same_as_reference(kind: str) -> None:
    ref, nb = (
        _fn_run(api, **({"fn": multiply_agent_fn} if kind == "fn" else {"fn": multiply_agent_fn, "async_fn": amultiply_agent_fn}))
        for api in both()
    )
    # Deliberate: the reference puts fn's __output__ into AgentChatResponse.response as it is
    # (an int here), so str(response) raises TypeError ("__str__ returned non-string") and the
    # docs' example cannot print its answer; nbagent's response is the output's text.
    # The docs' own agent.query("5") raises TypeError on the reference (query calls str on it).
    assert ref["outs"] == [(3, False, 1), (6, False, 1), (12, True, 0)] and ref["chat"] == 160
    assert ref.pop("query") == "TypeError: __str__ returned non-string (type int)"
    assert nb.pop("query") == "160"
    assert nb == _as_text(ref)


def test_fn_agent_worker_exception_propagates_on_both() -> None:
    kept = []
    for api in both():
        # no max_count: fn raises (initial_state={}: the reference refuses the default None)
        agent = api.FnAgentWorker(fn=multiply_agent_fn, initial_state={}).as_agent()
        task = agent.create_task("5")
        with pytest.raises(ValueError, match="max_count must be specified."):
            agent.run_step(task.task_id)
        kept.append(len(agent.get_upcoming_steps(task.task_id)))
    # Deliberate (deliberate11.md: failure safety): the reference has already taken the step
    # off the queue when fn raises; nbagent keeps it, so it can be run again.
    assert kept == [0, 1]


def _counting_worker(api: SimpleNamespace) -> Any:
    class Counting(api.CustomSimpleAgentWorker):  # type: ignore[name-defined, misc]
        """Counts to 3, one step at a time (the reference's CustomSimpleAgentWorker contract)."""

        def _initialize_state(self, task: Any, **kwargs: Any) -> Dict[str, Any]:
            return {"count": 0}

        def _run_step(self, state: Dict[str, Any], task: Any, input: Any = None) -> Tuple[Any, bool]:
            state["count"] += 1
            return api.AgentChatResponse(response=f"count={state['count']} input={input}"), state["count"] >= 3

        def _finalize_task(self, state: Dict[str, Any], **kwargs: Any) -> None:
            state["finalized"] = True

    return Counting(tools=[], llm=api.llm([]))


def test_custom_simple_agent_worker_same_as_reference() -> None:
    seen = []
    for api in both():
        agent = api.AgentRunner(_counting_worker(api))
        task = agent.create_task("go")
        outs = [agent.run_step(task.task_id) for _ in range(2)]
        outs.append(agent.run_step(task.task_id, input="steer"))
        response = agent.finalize_response(task.task_id)
        seen.append(
            (
                [(str(o.output), o.is_last) for o in outs],
                str(response),
                task.extra_state["count"],
                task.extra_state.get("finalized"),
                str(agent.chat("again")),
                [m.role.value for m in agent.chat_history],
            )
        )
    assert seen[1] == seen[0]
    assert seen[0][0][2] == ("count=3 input=steer", True)


def _fork_join(api: SimpleNamespace, calls: list[str]) -> Any:
    """root -> a, b; a and b each return the same join step j (linked to both); j answers."""

    class ForkJoin(api.BaseAgentWorker):  # type: ignore[name-defined, misc]
        def initialize_step(self, task: Any, **kwargs: Any) -> Any:
            return api.TaskStep(task_id=task.task_id, step_id="root", input=task.input, step_state={"name": "root"})

        def run_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            name = step.step_state["name"]
            calls.append(name)
            if name == "root":
                a = api.TaskStep(task_id=task.task_id, step_id="a", input="a", step_state={"name": "a"})
                b = api.TaskStep(task_id=task.task_id, step_id="b", input="b", step_state={"name": "b"})
                j = api.TaskStep(task_id=task.task_id, step_id="j", input="j", step_state={"name": "j"})
                a.link_step(j)
                b.link_step(j)
                task.extra_state["join"] = j
                return api.TaskStepOutput(output=api.AgentChatResponse(response="fork"), task_step=step, next_steps=[a, b])
            if name in ("a", "b"):
                return api.TaskStepOutput(
                    output=api.AgentChatResponse(response=name), task_step=step, next_steps=[task.extra_state["join"]]
                )
            return api.TaskStepOutput(output=api.AgentChatResponse(response="joined"), task_step=step, next_steps=[], is_last=True)

        async def arun_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task, **kwargs)

        def stream_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task, **kwargs)

        async def astream_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task, **kwargs)

        def finalize_task(self, task: Any, **kwargs: Any) -> None:
            pass

    return ForkJoin()


def test_parallel_runner_dag_join_runs_once_unlike_reference() -> None:
    seen = []
    for api in both():
        calls: list[str] = []
        agent = api.ParallelAgentRunner(_fork_join(api, calls))
        task = agent.create_task("go")
        waves = []
        while True:
            outputs = agent.run_steps_in_queue(task.task_id)
            waves.append(sorted(o.task_step.step_id for o in outputs))
            if any(o.is_last for o in outputs):
                break
        left = [s.step_id for s in agent.get_upcoming_steps(task.task_id)]
        seen.append((waves, calls, left, str(agent.finalize_response(task.task_id))))
    ref, nb = seen
    # the same fork: root, then a and b side by side
    assert ref[0][:2] == nb[0][:2] == [["root"], ["a", "b"]]
    # Deliberate (deliberate11.md): the reference queues the join once per parent that returns
    # it and runs it twice in the same wave; nbagent runs a join exactly once, after all its
    # parents, and leaves nothing stale in the queue.
    assert ref[0][2] == ["j", "j"] and ref[1].count("j") == 2
    assert nb[0][2] == ["j"] and nb[1].count("j") == 1
    assert nb[2] == []
    assert ref[3] == nb[3] == "joined"


def test_parallel_runner_chat_on_the_dag() -> None:
    seen = []
    for api in both():
        calls: list[str] = []
        agent = api.ParallelAgentRunner(_fork_join(api, calls))
        try:
            seen.append(("answered", str(agent.chat("go")), sorted(calls)))
        except ValueError as err:
            seen.append(("raised", str(err), sorted(calls)))
    # Deliberate (deliberate11.md): the reference runs the join once per parent, both runs are
    # last, and its chat() gives up; nbagent runs the join once and answers.
    assert seen[0] == ("raised", "More than one step output returned in final step.", ["a", "b", "j", "j", "root"])
    assert seen[1] == ("answered", "joined", ["a", "b", "j", "root"])


def _holder(api: SimpleNamespace, calls: list[str]) -> Any:
    """root returns a step x created with is_ready=False (no parents to wait for)."""

    class Holder(api.BaseAgentWorker):  # type: ignore[name-defined, misc]
        def initialize_step(self, task: Any, **kwargs: Any) -> Any:
            return api.TaskStep(task_id=task.task_id, step_id="root", input=task.input, step_state={"name": "root"})

        def run_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            calls.append(step.step_state["name"])
            if step.step_state["name"] == "root":
                x = api.TaskStep(task_id=task.task_id, step_id="x", input="x", step_state={"name": "x"}, is_ready=False)
                return api.TaskStepOutput(output=api.AgentChatResponse(response="r"), task_step=step, next_steps=[x])
            return api.TaskStepOutput(output=api.AgentChatResponse(response="done"), task_step=step, next_steps=[], is_last=True)

        async def arun_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task)

        def stream_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task)

        async def astream_step(self, step: Any, task: Any, **kwargs: Any) -> Any:
            return self.run_step(step, task)

        def finalize_task(self, task: Any, **kwargs: Any) -> None:
            pass

    return Holder()


def test_a_step_created_not_ready_is_held_not_dropped() -> None:
    ref_api, nb_api = both()
    calls: list[str] = []
    ref = ref_api.ParallelAgentRunner(_holder(ref_api, calls))
    task = ref.create_task("go")
    ref.run_steps_in_queue(task.task_id)
    # The reference silently drops a returned step whose is_ready is False: never queued,
    # never run, the task can no longer finish.
    assert ref.get_upcoming_steps(task.task_id) == [] and ref.run_steps_in_queue(task.task_id) == []
    assert calls == ["root"]
    # nbagent holds it (issue 11, item 2): queued and shown, not run until released
    calls = []
    nb = nb_api.ParallelAgentRunner(_holder(nb_api, calls))
    task = nb.create_task("go")
    nb.run_steps_in_queue(task.task_id)
    assert [s.step_id for s in nb.get_upcoming_steps(task.task_id)] == ["x"]
    with pytest.raises(Exception, match=r"held step\(s\) \['x'\].*release"):
        nb.run_steps_in_queue(task.task_id)
    nb.release_step(task.task_id, "x")
    assert [o.task_step.step_id for o in nb.run_steps_in_queue(task.task_id)] == ["x"]
    assert calls == ["root", "x"] and str(nb.finalize_response(task.task_id)) == "done"
