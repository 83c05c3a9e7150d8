"""The incremental live graph against the full redraw, after every event of random runs.

Random sequences of steps (chains, fan-outs, joins that reach a step already done, held
steps, tool errors, answers, failures), undo, goto, fork, skip, edits, injected branches,
hold/release, abandon and finalize, on the plain and the parallel runner, with several
collapse settings: after every operation, and inside every step event while steps run,
``LiveDot.render()`` must be exactly ``task_to_dot``'s text, and never need the full walk.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent import AgentRunner, ParallelAgentRunner, Task, TaskStep, TaskStepOutput
from nbagent.events import StepCompleted, StepFailed, StepStarted
from nbagent.messages import ToolOutput
from nbagent.viz.dot import task_to_dot
from nbagent.viz.dot_live import LiveDot
from nbagent.workers.base import BaseAgentWorker

KINDS = ["chain", "chain", "chain", "chain", "fork", "join", "held", "toolerr", "last", "fail", "dead"]
OPS = ["run", "run", "run", "run", "run", "burst", "burst", "wave", "undo", "fail", "goto", "fork", "skip", "edit",
       "inject", "hold", "release", "abandon", "finalize"]
OPTIONS = [
    {},
    {"collapse_after": 3, "keep_ends": 0},
    {"collapse_after": 4, "keep_ends": 1},
    {"collapse_after": 6, "keep_ends": 2, "legend": True, "wrap": 20, "max_label": 12},
    {"collapse_after": None},
]


class FuzzWorker(BaseAgentWorker):
    """Does what ``kinds`` says next (a chain step when it is empty)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        kind = self.kinds.pop(0) if self.kinds else "chain"

        def new(text: str, ready: bool = True) -> TaskStep:
            return TaskStep(task_id=task.task_id, input=text, step_state={}, is_ready=ready)

        if kind == "fail":
            raise ValueError("the <model> said no & left")
        if kind == "last":
            return TaskStepOutput(output="the answer <b>", task_step=step, is_last=True)
        if kind == "dead":
            return TaskStepOutput(output="nothing next", task_step=step)
        if kind == "fork":
            return TaskStepOutput(output="fork", task_step=step, next_steps=[new("left"), new("right")])
        if kind == "join":  # every step that joins returns the same step: it may have run already
            join = task.extra_state.setdefault("join", new("join"))
            return TaskStepOutput(output="to join", task_step=step, next_steps=[join])
        if kind == "held":
            return TaskStepOutput(output="held next", task_step=step, next_steps=[new("wait", ready=False)])
        tools = []
        if kind == "toolerr":
            tools = [ToolOutput(content="division by zero", tool_name="divide", raw_input={"b": 0}, is_error=True)]
        return TaskStepOutput(output=f"out {uuid.uuid4().hex[:4]}", task_step=step, next_steps=[new("next")],
                              tool_outputs=tools)


def _queued(state: Any) -> list[TaskStep]:
    return list(state.step_queue)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_live_graph_equals_a_full_redraw_after_every_event(data: st.DataObject) -> None:
    parallel = data.draw(st.booleans(), label="parallel")
    options = data.draw(st.sampled_from(OPTIONS), label="options")
    worker = FuzzWorker()
    runner: AgentRunner = ParallelAgentRunner(worker, max_concurrency=3) if parallel else AgentRunner(worker)
    task = runner.create_task("fuzz <task> & \"quotes\"")
    state = runner.state_of(task)
    live = LiveDot(state, **options)
    checked = []
    quiet = []  # a burst: drawn after each step only, as a LiveGraph draws fast steps

    def check(where: str) -> None:
        assert live.render() == task_to_dot(state, **options), where
        checked.append(where)

    def on_event(event: Any) -> None:
        if isinstance(event, (StepStarted, StepCompleted, StepFailed)) and not quiet:
            check(type(event).__name__)

    runner.subscribe(on_event)
    check("start")
    for _ in range(data.draw(st.integers(10, 60), label="ops")):
        op = data.draw(st.sampled_from(OPS), label="op")
        done = [sid for sid in state.steps if sid in state.outputs]
        queued = _queued(state)
        try:
            if op in ("run", "wave", "fail"):
                worker.kinds = [data.draw(st.sampled_from(KINDS)) for _ in range(4)]
                if op == "fail":
                    worker.kinds = ["fail"] * 4
                if op == "wave" and parallel:
                    runner.run_steps_in_queue(task)  # type: ignore[attr-defined]
                else:
                    runner.run_step(task)
            elif op == "burst":
                quiet.append(True)
                try:
                    for _ in range(data.draw(st.integers(1, 8), label="burst")):
                        worker.kinds = [data.draw(st.sampled_from(["chain", "chain", "chain", "toolerr", "held"]))]
                        runner.run_step(task)
                        check("burst step")
                finally:
                    quiet.clear()
            elif op == "undo":
                runner.undo_step(task, input=data.draw(st.sampled_from([None, "again"])))
            elif op == "goto" and done:
                runner.goto_step(task, data.draw(st.sampled_from(done)), before=data.draw(st.booleans()))
            elif op == "fork" and done:
                runner.fork(task, data.draw(st.sampled_from(done)), input="forked")
            elif op == "skip" and queued:
                runner.skip_step(task, data.draw(st.sampled_from(queued)).step_id)
            elif op == "edit" and queued:
                runner.edit_step(task, data.draw(st.sampled_from(queued)).step_id, input="edited <x>")
            elif op == "inject" and done:  # a side branch, linked by hand to a step already done
                parent = state.steps[data.draw(st.sampled_from(done))]
                extra = parent.get_next_step(input="side branch")
                parent.link_step(extra)
                state.register(extra)
                state.step_queue.append(extra)
            elif op == "hold" and queued:
                runner.hold_step(task, data.draw(st.sampled_from(queued)).step_id)
            elif op == "release":
                runner.release_step(task)
            elif op == "abandon" and data.draw(st.integers(0, 5)) == 0:
                runner.abandon_task(task)
            elif op == "finalize" and data.draw(st.integers(0, 3)) == 0:
                runner.finalize_response(task)
        except Exception:  # noqa: BLE001 - refused operations (nothing to undo, a failing step...) are events too
            pass
        check(op)
    assert live.full_renders == 0
    assert len(checked) > 10


def test_the_fuzz_reaches_undo_rollbacks_and_joins_into_done_steps() -> None:
    """A fixed run through the rare paths: a join returned to a step that already ran, an
    undo that reaches back into the settled steps, a branch injected at an old step."""
    worker = FuzzWorker()
    runner = ParallelAgentRunner(worker, max_concurrency=2)
    task = runner.create_task("go")
    state = runner.state_of(task)
    options = {"collapse_after": 4, "keep_ends": 1}
    live = LiveDot(state, **options)

    def step(*kinds: str) -> None:
        worker.kinds = list(kinds)
        runner.run_step(task)
        assert live.render() == task_to_dot(state, **options)

    for _ in range(12):
        step("chain")
    step("fork")
    step("join")  # the join runs as soon as its first parent is done...
    step("chain")
    step("join")  # ... and the second parent links to it afterwards
    for _ in range(10):
        step("chain")
    rollbacks = live.rollbacks
    first_done = next(iter(state.outputs))
    parent = state.steps[list(state.outputs)[3]]
    extra = parent.get_next_step(input="side")
    parent.link_step(extra)
    state.register(extra)
    state.step_queue.append(extra)
    assert live.render() == task_to_dot(state, **options)
    runner.goto_step(task, list(state.outputs)[5])
    assert live.render() == task_to_dot(state, **options)
    for _ in range(8):
        step("chain")
    assert live.rollbacks > rollbacks
    assert live.full_renders == 0 and live.restarts <= 1
    assert first_done in state.steps
