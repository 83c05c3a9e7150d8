"""ParallelAgentRunner DAG semantics: joins several parents return, and held steps.

A join returned by several parents is registered, queued and run once, after all of them;
a step created with ``is_ready=False`` and nothing to wait for is held until released.
Also the reference's own DAG test (``test_dag_agent``), ported.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, ParallelAgentRunner, StepStatus, Task, TaskStep, TaskStepOutput
from nbagent.runner.base import TaskStateError
from nbagent.viz.dot import task_to_dot
from nbagent.workers.base import BaseAgentWorker


class ForkJoin(BaseAgentWorker):
    """root -> a, b; a and b each return the same join step j (linked to both up front);
    j answers. ``join_ready`` is the flag j is created with."""

    def __init__(self, join_ready: bool = True, prelink: bool = True) -> None:
        self.join_ready = join_ready
        self.prelink = prelink
        self.calls: list[str] = []

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"name": "root"})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        self.calls.append(name)
        if name == "root":
            a = TaskStep(task_id=task.task_id, input="a", step_state={"name": "a"})
            b = TaskStep(task_id=task.task_id, input="b", step_state={"name": "b"})
            j = TaskStep(task_id=task.task_id, input="j", step_state={"name": "j"}, is_ready=self.join_ready)
            if self.prelink:
                a.link_step(j)
                b.link_step(j)
            task.extra_state["join"] = j
            return TaskStepOutput(output="fork", task_step=step, next_steps=[a, b])
        if name in ("a", "b"):
            return TaskStepOutput(output=name, task_step=step, next_steps=[task.extra_state["join"]])
        return TaskStepOutput(
            output=AgentChatResponse(response="joined " + "+".join(sorted(p.input or "" for p in step.prev_steps.values()))),
            task_step=step,
            is_last=True,
        )


def _names(outputs: list[TaskStepOutput]) -> list[str]:
    return [o.task_step.step_state["name"] for o in outputs]


@pytest.mark.parametrize("join_ready", [True, False])
def test_join_runs_once_after_both_parents_wave_by_wave(join_ready: bool) -> None:
    worker = ForkJoin(join_ready=join_ready)
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("go")
    assert _names(runner.run_steps_in_queue(task.task_id)) == ["root"]
    assert sorted(_names(runner.run_steps_in_queue(task.task_id))) == ["a", "b"]
    queue = runner.get_upcoming_steps(task.task_id)
    assert [s.step_state["name"] for s in queue] == ["j"]  # once, though both returned it
    assert runner.state_of(task).step_status(queue[0].step_id) == StepStatus.QUEUED
    last = runner.run_steps_in_queue(task.task_id)
    assert _names(last) == ["j"] and last[0].is_last
    assert str(last[0].output) == "joined a+b"
    assert runner.get_upcoming_steps(task.task_id) == []
    assert worker.calls.count("j") == 1
    assert str(runner.finalize_response(task.task_id)) == "joined a+b"


@pytest.mark.parametrize("join_ready", [True, False])
def test_join_runs_once_through_run_until_done_and_chat(join_ready: bool) -> None:
    worker = ForkJoin(join_ready=join_ready)
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("go")
    out = runner.run_until_done(task.task_id)
    assert str(out.output) == "joined a+b"
    assert worker.calls.count("j") == 1 and worker.calls[-1] == "j"
    assert runner.get_upcoming_steps(task.task_id) == []
    worker2 = ForkJoin(join_ready=join_ready)
    runner2 = ParallelAgentRunner(worker2)
    assert str(runner2.chat("go")) == "joined a+b"
    assert worker2.calls.count("j") == 1
    assert len(runner2.get_completed_steps(runner2.list_tasks()[0].task_id)) == 4


def test_join_not_linked_up_front_is_linked_to_each_parent_that_returns_it() -> None:
    worker = ForkJoin(prelink=False)
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("go")
    runner.run_steps_in_queue(task.task_id)
    runner.run_steps_in_queue(task.task_id)  # a and b both return j
    j = runner.get_upcoming_steps(task.task_id)[0]
    assert sorted(p.step_state["name"] for p in j.prev_steps.values()) == ["a", "b"]
    assert len(runner.get_upcoming_steps(task.task_id)) == 1


def test_undoing_one_parent_keeps_the_join_waiting_for_it() -> None:
    worker = ForkJoin()
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("go")
    runner.run_steps_in_queue(task.task_id)
    runner.run_steps_in_queue(task.task_id)
    state = runner.state_of(task)
    j = runner.get_upcoming_steps(task.task_id)[0]
    undone = runner.undo_step(task.task_id)  # the parent that finished last
    assert undone.step_state["name"] in ("a", "b")
    assert state.step_status(j.step_id) == StepStatus.BLOCKED  # waits for the undone parent again
    assert undone.step_id in j.prev_steps
    out = runner.run_until_done(task.task_id)
    assert str(out.output) == "joined a+b"
    assert worker.calls.count("j") == 1
    assert runner.get_upcoming_steps(task.task_id) == []


class HeldWorker(BaseAgentWorker):
    """root returns a step created with is_ready=False and no parent of its own: it is held."""

    def __init__(self, root_ready: bool = True) -> None:
        self.root_ready = root_ready
        self.ran: list[str] = []

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"name": "root"}, is_ready=self.root_ready)

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        self.ran.append(name)
        if name == "root":
            gate = TaskStep(task_id=task.task_id, input="check", step_state={"name": "gate"}, is_ready=False)
            return TaskStepOutput(output="asked", task_step=step, next_steps=[gate])
        return TaskStepOutput(output=AgentChatResponse(response="approved"), task_step=step, is_last=True)


def test_held_step_is_not_run_is_drawn_held_and_released_by_a_runner_method() -> None:
    worker = HeldWorker()
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("go")
    runner.run_steps_in_queue(task.task_id)
    gate = runner.get_upcoming_steps(task.task_id)[0]
    state = runner.state_of(task)
    assert state.step_status(gate.step_id) == StepStatus.HELD and gate.is_ready is False
    with pytest.raises(TaskStateError, match=r"only held step.*release_step"):
        runner.run_steps_in_queue(task.task_id)
    with pytest.raises(TaskStateError, match="held"):
        runner.run_until_done(task.task_id)
    assert worker.ran == ["root"] and runner.get_upcoming_steps(task.task_id) == [gate]
    assert "#2 held" in task_to_dot(state)
    assert "release_step" in task_to_dot(state)
    with pytest.raises(ValueError, match="is not queued"):
        runner.release_step(task.task_id, state.completed_steps[0].task_step.step_id)
    assert runner.release_step(task.task_id, gate.step_id) == [gate]
    assert gate.is_ready and state.step_status(gate.step_id) == StepStatus.QUEUED
    with pytest.raises(ValueError, match=r"is not held; held steps: \[\]"):
        runner.release_step(task.task_id, gate.step_id)
    with pytest.raises(ValueError, match="no held step"):
        runner.release_step(task.task_id)
    assert str(runner.run_until_done(task.task_id).output) == "approved"


def test_held_step_released_by_setting_is_ready() -> None:
    runner = ParallelAgentRunner(HeldWorker())
    task = runner.create_task("go")
    runner.run_steps_in_queue(task.task_id)
    gate = runner.get_upcoming_steps(task.task_id)[0]
    gate.is_ready = True
    assert _names(runner.run_steps_in_queue(task.task_id)) == ["gate"]


def test_held_first_step_in_the_sequential_runner_and_hold_step() -> None:
    worker = HeldWorker(root_ready=False)
    runner = AgentRunner(worker)
    task = runner.create_task("go")
    with pytest.raises(TaskStateError, match=r"held \(is_ready=False\).*release_step"):
        runner.run_step(task.task_id)
    assert worker.ran == []
    (root,) = runner.release_step(task.task_id)
    assert root.step_state["name"] == "root"
    runner.run_step(task.task_id)
    gate = runner.get_upcoming_steps(task.task_id)[0]
    runner.release_step(task.task_id, gate.step_id)
    runner.hold_step(task.task_id, gate.step_id)  # and back
    assert runner.state_of(task).step_status(gate.step_id) == StepStatus.HELD
    with pytest.raises(ValueError, match="already held"):
        runner.hold_step(task.task_id, gate.step_id)
    with pytest.raises(ValueError, match="not queued"):
        runner.hold_step(task.task_id, "nope")
    runner.release_step(task.task_id)
    assert runner.run_step(task.task_id).is_last


def test_held_survives_save_and_load(tmp_path: Any) -> None:
    runner = ParallelAgentRunner(HeldWorker())
    task = runner.create_task("go")
    runner.run_steps_in_queue(task.task_id)
    path = runner.save(tmp_path / "run.json")
    loaded = ParallelAgentRunner.load(path, HeldWorker())
    state = loaded.state_of(task.task_id)
    gate = state.step_queue[0]
    assert state.step_status(gate.step_id) == StepStatus.HELD
    loaded.release_step(task.task_id)
    assert str(loaded.run_until_done(task.task_id).output) == "approved"


def test_panel_release_button_and_its_python_twin() -> None:
    from nbagent.viz.panel import AgentPanel

    runner = ParallelAgentRunner(HeldWorker())
    task = runner.create_task("go")
    panel = AgentPanel(runner, task, throttle_s=0)
    assert not panel.buttons["release"]
    runner.run_steps_in_queue(task.task_id)
    assert panel.buttons["release"] and not panel.buttons["step"]
    assert "1 held" in panel.status_text()
    panel.press("release")  # what a click on Release does
    assert not panel.buttons["release"] and panel.buttons["step"]
    assert runner.get_upcoming_steps(task.task_id)[0].is_ready
    # the twin: hold it again from code, release from Python
    gate = runner.get_upcoming_steps(task.task_id)[0]
    runner.hold_step(task.task_id, gate.step_id)
    assert [s.step_id for s in panel.release()] == [gate.step_id]


# ----- the reference's own DAG test (llama_index tests/agent/runner/test_base.py), ported ----


class MockForkStepEngine(BaseAgentWorker):
    """Mock agent worker that adds an exponential # steps."""

    def __init__(self, limit: int = 2):
        self.limit = limit

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        counter = 0
        return TaskStep(
            task_id=task.task_id,
            step_id=str(uuid.uuid4()),
            input=task.input,
            memory=task.memory,
            step_state={"num": "0", "counter": counter},
        )

    def run_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        counter = step.step_state["counter"] + 1
        step.step_state["counter"] = counter
        is_done = counter >= self.limit
        cur_num = step.step_state["num"]
        if is_done:
            new_steps = []
        else:
            new_steps = [
                step.get_next_step(step_id=str(uuid.uuid4()), step_state={"num": cur_num + "0", "counter": counter}),
                step.get_next_step(step_id=str(uuid.uuid4()), step_state={"num": cur_num + "1", "counter": counter}),
            ]
        return TaskStepOutput(
            output=AgentChatResponse(response=cur_num), task_step=step, is_last=is_done, next_steps=new_steps
        )

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        return self.run_step(step=step, task=task, **kwargs)

    def finalize_task(self, task: Task, **kwargs: Any) -> None:
        """Finalize task, after all the steps are completed."""


def test_dag_agent() -> None:
    agent_runner = ParallelAgentRunner(agent_worker=MockForkStepEngine(limit=2))
    task = agent_runner.create_task("hello world")
    step_outputs = agent_runner.run_steps_in_queue(task_id=task.task_id)
    step_output = step_outputs[0]
    assert step_output.task_step.step_state["num"] == "0"
    assert str(step_output.output) == "0"
    assert step_output.is_last is False
    step_outputs = agent_runner.run_steps_in_queue(task_id=task.task_id)
    assert step_outputs[0].task_step.step_state["num"] == "00"
    assert step_outputs[1].task_step.step_state["num"] == "01"
    assert step_outputs[0].is_last is True
    assert step_outputs[1].is_last is True
    assert len(agent_runner.state.task_dict[task.task_id].completed_steps) == 3


def test_root_step_as_dag_task_state_has_it() -> None:
    runner = ParallelAgentRunner(ForkJoin())
    task = runner.create_task("go")
    root = runner.get_upcoming_steps(task.task_id)[0]
    runner.run_until_done(task.task_id)
    assert runner.state.task_dict[task.task_id].root_step is root
