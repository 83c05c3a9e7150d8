"""Errors from the sync API come with a short traceback (issue 29): the learner's call, then
the message; no asyncio / concurrent.futures / bridge frames. A real bug keeps the frames of
the code that raised it and its cause chain. Checked outside and inside a running event loop
(a notebook cell), with Python's own formatting and with IPython's (what Jupyter shows)."""

from __future__ import annotations

import asyncio
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pytest

import nbagent
from nbagent import ReActAgent, ScriptedLLM
from nbagent.engine.errors import TaskStateError
from nbagent.schema import AgentChatResponse
from nbagent.workers.custom import CustomSimpleAgentWorker

_PACKAGE = os.path.dirname(os.path.abspath(nbagent.__file__))
_BRIDGE = ("asyncio", "concurrent", "threading.py", "_sync.py")


def _answered_agent() -> tuple[Any, Any]:
    agent = ReActAgent.from_tools(
        [], llm=ScriptedLLM(["Thought: I can answer without using any more tools.\nAnswer: 4"])
    )
    task = agent.create_task("2+2?")
    agent.run_step(task)
    return agent, task


def _raised(call: Callable[[], Any], in_loop: bool) -> BaseException:
    """The exception ``call`` raises, called plainly or from a coroutine (a notebook cell).

    On a fresh thread, as in a fresh kernel: an error another test left "being handled" on
    this thread (the interrupt tests inject Ctrl-C at every line) would become its context.
    """
    caught: list[BaseException] = []

    async def cell() -> None:
        call()

    def run() -> None:
        try:
            if in_loop:
                asyncio.run(cell())
            else:
                call()
        except Exception as error:  # noqa: BLE001 - what we look at
            caught.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if not caught:
        raise AssertionError("the call did not raise")
    return caught[0]


def _frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The frames from the learner's line (the test's lambda) down: the cell's own
    ``asyncio.run`` around it is not nbagent's doing."""
    frames = list(traceback.extract_tb(error.__traceback__))
    start = next(i for i, f in enumerate(frames) if f.name == "<lambda>")
    return frames[start:]


def _in_package(frame: traceback.FrameSummary) -> bool:
    return os.path.abspath(frame.filename).startswith(_PACKAGE)


@pytest.mark.parametrize("in_loop", [False, True], ids=["plain", "in-running-loop"])
def test_run_step_on_a_finished_task_shows_the_call_then_the_message(in_loop: bool) -> None:
    agent, task = _answered_agent()
    error = _raised(lambda: agent.run_step(task), in_loop)
    assert isinstance(error, TaskStateError)
    frames = _frames(error)
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(error))
    # this test's lambda (and the cell), the public method, and the bridge's one re-raise line
    ours = [f for f in frames if _in_package(f)]
    assert [f.name for f in ours] == ["run_step", "run_sync"], [f.name for f in frames]
    assert not any(part in f.filename for f in frames for part in ("asyncio", "concurrent")), text
    assert text.rstrip().splitlines()[-1].startswith("nbagent.engine.errors.TaskStateError: task ")
    assert "has no queued step to run" in text.rstrip().splitlines()[-1]
    assert len(text.splitlines()) <= 16, text  # it was 21 (23 in a loop) before


def test_undo_past_the_start_is_short_too() -> None:
    agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    task = agent.create_task("2+2?")
    error = _raised(lambda: agent.undo_step(task), False)
    assert isinstance(error, TaskStateError) and "nothing to undo" in str(error)
    ours = [f.name for f in _frames(error) if _in_package(f)]
    assert ours == ["undo_step", "_transact"]  # not _check_undo, the lambda, ...


class _BuggyWorker(CustomSimpleAgentWorker):
    """A custom worker with a bug in it: its own frame must stay in the traceback."""

    def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    def _run_step(self, state: dict[str, Any], task: Any, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        return AgentChatResponse(response=str(1 / state["n"])), True  # ZeroDivisionError

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("in_loop", [False, True], ids=["plain", "in-running-loop"])
def test_a_real_bug_keeps_the_frames_that_raised_it(in_loop: bool) -> None:
    agent = _BuggyWorker().as_agent()
    task = agent.create_task("go")
    error = _raised(lambda: agent.run_step(task), in_loop)
    assert isinstance(error, ZeroDivisionError)
    frames = _frames(error)
    names = [f.name for f in frames]
    assert names[-1] == "_run_step" and frames[-1].filename == __file__  # where the bug is
    assert "_astep" in names and "arun_step" in names  # nbagent's frames between stay
    assert not any(any(part in f.filename for part in _BRIDGE) and f.name != "run_sync" for f in frames), names
    assert agent.get_upcoming_steps(task)  # and the step stays queued, as always


def test_the_cause_of_an_error_is_kept() -> None:
    async def fails() -> None:
        try:
            {}["missing"]
        except KeyError as err:
            raise RuntimeError("could not look it up") from err

    error = _raised(lambda: nbagent._sync.run_sync(fails()), False)
    assert isinstance(error, RuntimeError) and isinstance(error.__cause__, KeyError)
    assert [f.name for f in _frames(error)][-1] == "fails"  # not trimmed: it has a cause


def test_ipython_shows_the_call_and_the_message() -> None:
    ultratb = pytest.importorskip("IPython.core.ultratb")
    agent, task = _answered_agent()
    error = _raised(lambda: agent.run_step(task), True)
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_name != "<lambda>":  # the cell's line
        tb = tb.tb_next
    text = ultratb.VerboseTB(theme_name="nocolor").text(type(error), error, tb)
    assert "asyncio" not in text and "concurrent" not in text
    assert text.rstrip().splitlines()[-1].startswith("TaskStateError: task ")
    assert len(text.splitlines()) <= 30, text
