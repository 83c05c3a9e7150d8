"""Models the engine builds on every step without validation (``LeanModel._from_valid``): a
step's next step (``TaskStep.get_next_step``) and a worker's output (``schema.step_output``).
Each must be the very instance validation makes of the same values: same class, fields in the
same order, same fields-set (the shared one), same dumps, same repr, same memory; values
validation would change or refuse still go through it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import PrivateAttr, ValidationError

from nbagent._lean import LeanModel
from nbagent.schema import AgentChatResponse, TaskStep, TaskStepOutput, step_output


def _alike(fast: Any, slow: Any) -> None:
    assert type(fast) is type(slow)
    assert list(fast.__dict__.items()) == list(slow.__dict__.items())
    assert fast.__pydantic_fields_set__ == slow.__pydantic_fields_set__
    assert type(fast.__pydantic_fields_set__) is type(slow.__pydantic_fields_set__)
    assert fast.__pydantic_fields_set__ is slow.__pydantic_fields_set__  # the shared one
    assert fast.__pydantic_extra__ is None and slow.__pydantic_extra__ is None
    assert fast.__pydantic_private__ is None and slow.__pydantic_private__ is None
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert repr(fast) == repr(slow)
    assert sys.getsizeof(fast.__dict__) == sys.getsizeof(slow.__dict__)  # keys shared alike
    for name, value in fast.__dict__.items():
        assert type(value) is type(slow.__dict__[name]), name


def test_a_next_step_is_what_validation_makes() -> None:
    step = TaskStep(task_id="task-1", input="question", step_state={"n": 1})
    for kwargs in ({}, {"input": "steer"}, {"step_id": "given-id"}, {"step_state": {"other": [1]}}):
        fast = step.get_next_step(**kwargs)
        values = {
            "task_id": step.task_id,
            "step_id": fast.step_id,
            "input": kwargs.get("input"),
            "step_state": kwargs.get("step_state", step.step_state),
        }
        _alike(fast, TaskStep(**values))
        assert fast.step_state is values["step_state"]  # carried forward, not copied
        assert fast.next_steps == {} and fast.prev_steps == {} and fast.is_ready is True
    a, b = step.get_next_step(), step.get_next_step()
    assert a.next_steps is not b.next_steps and a.prev_steps is not b.prev_steps
    assert a.step_id != b.step_id


def test_a_next_step_changes_and_links_as_a_validated_one_does() -> None:
    step = TaskStep(task_id="t", input="q")
    fast = step.get_next_step()
    slow = TaskStep(task_id="t", step_id=fast.step_id, input=None, step_state=step.step_state)
    for s in (fast, slow):
        s.is_ready = False  # a field not given: both move to the same shared fields-set
        step.link_step(s)
    _alike(fast, slow)
    assert fast.model_fields_set == {"task_id", "step_id", "input", "step_state", "is_ready"}
    assert fast.model_copy().model_dump() == slow.model_dump()


def test_a_next_step_of_odd_values_is_validated() -> None:
    step = TaskStep(task_id="t", input="q")
    with pytest.raises(ValidationError):
        step.get_next_step(input=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step_state must be a dict"):
        step.get_next_step(step_state=[1])  # type: ignore[arg-type]

    class Text(str):
        pass

    odd = step.get_next_step(input=Text("steer"))
    _alike(odd, TaskStep(task_id="t", step_id=odd.step_id, input=Text("steer"), step_state=step.step_state))


def test_a_worker_output_is_what_validation_makes() -> None:
    step = TaskStep(task_id="t", input="q")
    answer = AgentChatResponse(response="ok")
    for output, nxt, last in ((answer, [step.get_next_step()], False), (answer, [], True), ("text", [], False), (None, [], True)):
        fast = step_output(output, step, nxt, last)
        slow = TaskStepOutput(output=output, task_step=step, next_steps=nxt, is_last=last)
        _alike(fast, slow)
        assert fast.next_steps is nxt and fast.task_step is step and fast.output is output
    fast = step_output(answer, step, [], False)
    fast._set_measured(latency_s=0.5, input="q")
    fast.reasoning = "because"  # a field not given: the shared fields-set that has it
    slow = TaskStepOutput(output=answer, task_step=step, next_steps=[], is_last=False)
    slow._set_measured(latency_s=0.5, input="q")
    slow.reasoning = "because"
    _alike(fast, slow)


def test_a_worker_output_of_odd_values_is_validated() -> None:
    step = TaskStep(task_id="t", input="q")
    nxt = step.get_next_step()
    as_tuple = step_output("x", step, (nxt,), False)  # type: ignore[arg-type]
    assert type(as_tuple.next_steps) is list and as_tuple.next_steps == [nxt]
    assert step_output("x", step, [], 1).is_last is True  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="next_steps must be a list of TaskStep"):
        step_output("x", step, ["not a step"], False)  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        step_output("x", "not a step", [], False)  # type: ignore[arg-type]


def test_only_plain_lean_models_are_built_without_validation() -> None:
    class WithPrivate(LeanModel):
        x: int = 0
        _note: str = PrivateAttr(default="")

    with pytest.raises(TypeError, match="private attributes"):
        WithPrivate._field_values()


def test_built_first_in_a_fresh_process_before_any_validated_output() -> None:
    """The models are built on first use (``defer_build``): an output made without validation
    before any validated one still dumps and validates."""
    code = (
        "from nbagent.schema import TaskStep, TaskStepOutput, step_output\n"
        "s = TaskStep(task_id='t', input='q')\n"
        "o = step_output('x', s, [s.get_next_step()], False)\n"
        "d = o.model_dump()\n"
        "assert d['next_steps'] == [o.next_steps[0].step_id] and d['output'] == 'x', d\n"
        "assert TaskStepOutput(output='x', task_step=s, next_steps=o.next_steps, is_last=False).model_dump() == d\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
