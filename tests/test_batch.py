"""run_batch / BatchRun on the asyncio backend: order, bounded concurrency, isolation of
failures and of memory, per-task figures, Stop and Ctrl-C, the store and resume."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbagent import (
    AgentChatResponse,
    ChatMessage,
    FunctionCallingAgent,
    FunctionLLM,
    FunctionTool,
    MessageRole,
    TaskStatus,
    set_pricing,
    tool_call,
)
from nbagent.batch import BatchRun, adopt_record, input_key, task_record
from nbagent.llms.base import ChatResponse


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class SlowLLM(FunctionLLM):
    """A FunctionLLM whose every call awaits ``delay(messages)`` seconds and counts how many
    calls are in flight at once."""

    def __init__(self, fn: Any, delay: Any = 0.0, **kw: Any) -> None:
        super().__init__(fn, **kw)
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0

    async def _achat(self, messages: list[ChatMessage], tools: Any, tool_choice: Any, **kw: Any) -> ChatResponse:
        self.in_flight += 1
        self.calls += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            d = self.delay(messages) if callable(self.delay) else self.delay
            if d:
                await asyncio.sleep(d)
            return await super()._achat(messages, tools, tool_choice, **kw)
        finally:
            self.in_flight -= 1


def numbers(text: str) -> list[int]:
    return [int(x) for x in text.replace("?", " ").split() if x.isdigit()]


def brain(messages: list[ChatMessage], tools: Any) -> Any:
    """Two steps per task: call add(a, b), then answer with the tool's result."""
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return f"The answer is {last.text}"
    user = next(m.text for m in reversed(messages) if m.role == MessageRole.USER)
    if "boom" in user:
        raise ValueError(f"the model broke on {user!r}")
    a, b = numbers(user)[:2]
    return tool_call("add", a=a, b=b)


def make_agent(llm: Any = None, **kw: Any) -> FunctionCallingAgent:
    return FunctionCallingAgent.from_tools(
        [FunctionTool.from_defaults(add)], llm=llm or SlowLLM(brain, model="m1"), **kw
    )


def questions(n: int) -> list[str]:
    return [f"what is {i} + {i * 10} ?" for i in range(n)]


def test_results_come_back_in_input_order_with_concurrency_bounded() -> None:
    # later inputs answer sooner, so completion order is the reverse of input order
    llm = SlowLLM(brain, delay=lambda ms: 0.002 * (20 - numbers(ms[-1].text or "0")[0] % 20) if ms[-1].role == MessageRole.USER else 0.001, model="m1")
    agent = make_agent(llm)
    batch = agent.run_batch(questions(20), max_concurrency=5, progress=False)
    assert [r.response for r in batch.results] == [f"The answer is {i + i * 10}" for i in range(20)]
    assert llm.max_in_flight == 5
    assert batch.counts() == {"queued": 0, "running": 0, "done": 20, "failed": 0, "stopped": 0}
    assert batch.finished and not batch.stopped
    # every task is the runner's, and opens like any other
    for item in batch:
        assert agent.get_task(item.task_id).input == item.input
        assert agent.tasks[item.task_id].status == TaskStatus.FINALIZED
    assert "add" in batch.graph(3).source


def test_one_failing_task_does_not_stop_the_others_and_keeps_its_exception() -> None:
    agent = make_agent()
    inputs = ["what is 1 + 2 ?", "boom 3 4", "what is 5 + 6 ?", "no numbers here"]
    batch = agent.run_batch(inputs, max_concurrency=2, progress=False)
    r = batch.results
    assert r[0].response == "The answer is 3" and r[2].response == "The answer is 11"
    assert isinstance(r[1], ValueError) and "broke on 'boom 3 4'" in str(r[1])
    assert isinstance(r[3], ValueError)  # unpacking no numbers
    assert [it.index for it in batch.failed] == [1, 3]
    assert batch.failed_inputs == ["boom 3 4", "no numbers here"]
    # the failed task is left as the runner leaves a failed step: rolled back, retryable
    state = batch.state(1)
    assert state.status == TaskStatus.FAILED and state.failures[-1].error_type == "ValueError"
    assert len(state.step_queue) == 1 and not state.completed_steps


def test_tasks_are_independent_and_leave_the_runner_memory_alone() -> None:
    seen: list[list[str]] = []

    def spy(messages: list[ChatMessage], tools: Any) -> Any:
        if messages[-1].role == MessageRole.USER:
            seen.append([m.text for m in messages])
        return brain(messages, tools)

    history = [ChatMessage(role=MessageRole.USER, content="earlier: 0 0"), ChatMessage(role=MessageRole.ASSISTANT, content="ok")]
    agent = make_agent(SlowLLM(spy, model="m1"), chat_history=history)
    batch = agent.run_batch(questions(6), max_concurrency=3, progress=False)
    assert not batch.failed
    assert [m.text for m in agent.chat_history] == ["earlier: 0 0", "ok"]  # untouched
    for prompt in seen:  # each task saw the history and its own question, no other task
        assert prompt[:2] == ["earlier: 0 0", "ok"]
        assert sum(1 for t in prompt if t.startswith("what is")) == 1
    transcript = [m.text for m in batch.transcript(2)]
    assert transcript[:3] == ["earlier: 0 0", "ok", "what is 2 + 20 ?"]
    assert transcript[-1] == "The answer is 22"


@pytest.mark.parametrize("target", ["runs.db", "run.json"])
def test_autosave_during_a_batch_saves_every_task_as_it_is_without_a_warning(tmp_path: Path, target: str) -> None:
    """The runner's own autosave sees each batch task finalized, as it is live, and the
    conversation untouched (a batch once swapped a memory autosave could not save into the
    runner while it finalized: a warning per task and a stale status in the store)."""
    import warnings

    from nbagent import AgentRunner

    history = [ChatMessage(role=MessageRole.USER, content="earlier: 0 0"), ChatMessage(role=MessageRole.ASSISTANT, content="ok")]
    agent = make_agent(SlowLLM(brain, delay=0.002, model="m1"), chat_history=history)
    agent.autosave = tmp_path / target
    inputs = [*questions(5), "boom 1 2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = agent.run_batch(inputs, max_concurrency=3, progress=False)
    assert [str(w.message) for w in caught] == []  # AutosaveWarning: one per task before
    assert [it.index for it in batch.failed] == [5]
    agent.autosave = None  # (a run file autosave writes its last change now)
    loaded = AgentRunner.load(tmp_path / target)
    assert {tid: s.status for tid, s in loaded.tasks.items()} == {tid: s.status for tid, s in agent.tasks.items()}
    assert [m.text for m in loaded.chat_history] == ["earlier: 0 0", "ok"] == [m.text for m in agent.chat_history]
    for item in batch:
        if item.status == "done":
            assert loaded.tasks[item.task_id].final_response.response == item.response.response
    if target.endswith(".db"):
        from nbagent.store.sqlite import RunStore

        with RunStore(tmp_path / target) as store:
            assert {t.task_id: t.status for t in store.tasks()} == {
                tid: s.status.value for tid, s in agent.tasks.items()
            }
    # a batch task, loaded and finalized again by hand, still leaves the conversation alone
    state = loaded.tasks[batch[0].task_id]
    assert state.adds_to_memory is False


def test_per_task_steps_tokens_cost_and_latency_match_the_runner(tmp_path: Path) -> None:
    agent = make_agent(SlowLLM(brain, delay=0.01, model="m1"))
    agent.pricing = {"m1": (1.0, 2.0)}
    batch = agent.run_batch(questions(4) + ["boom 1 1"], max_concurrency=2, progress=False)
    total_cost = 0.0
    for item in batch:
        cost = agent.cost(item.task_id).total
        assert item.prompt_tokens == cost.prompt_tokens
        assert (item.prompt_tokens > 0) == (item.status == "done")  # a failed call reports no usage
        assert item.completion_tokens == cost.completion_tokens
        assert item.cost == pytest.approx(cost.amount)
        total_cost += cost.amount or 0.0
    done = [it for it in batch if it.status == "done"]
    assert all(it.steps == 2 and it.latency_s >= 0.02 for it in done)
    assert batch[4].steps == 0 and batch[4].status == "failed"
    assert batch.tokens == sum(it.total_tokens for it in batch)
    assert batch.cost == pytest.approx(total_cost)
    df = batch.to_pandas()
    assert list(df.index) == [0, 1, 2, 3, 4]
    assert df.loc[1, "response"] == "The answer is 11" and df.loc[4, "status"] == "failed"
    assert df["total_tokens"].sum() == batch.tokens
    assert "ValueError" in df.loc[4, "error"]


def test_stop_keeps_what_finished_and_starts_nothing_new() -> None:
    llm = SlowLLM(brain, delay=0.03, model="m1")
    agent = make_agent(llm)
    batch = agent.run_batch(questions(40), max_concurrency=4, progress=False, background=True)
    deadline = time.monotonic() + 20
    while batch.counts()["done"] < 6 and time.monotonic() < deadline:
        time.sleep(0.005)
    batch.stop()
    batch.wait()
    c = batch.counts()
    assert batch.stopped and batch.finished
    assert c["done"] >= 6 and c["done"] + c["stopped"] == 40 and c["running"] == c["queued"] == 0
    started = [it for it in batch if it.task_id is not None]
    assert len(started) <= c["done"] + 4  # only the running ones were cut short
    for it in batch:
        if it.status == "stopped":
            assert it.result is None
            if it.task_id is not None:  # cancelled mid-step: rolled back, nothing completed lost
                state = agent.tasks[it.task_id]
                assert state.status == TaskStatus.FAILED and state.step_queue
        else:
            assert it.result.response.startswith("The answer is")
    calls = llm.calls
    time.sleep(0.1)
    assert llm.calls == calls  # nothing keeps running after stop


def test_ctrl_c_in_a_script_stops_the_batch_and_returns_it() -> None:
    def interrupting(messages: list[ChatMessage], tools: Any) -> Any:
        user = messages[-1].text or ""
        if messages[-1].role == MessageRole.USER and user.startswith("what is 8 "):
            signal.raise_signal(signal.SIGINT)  # as if the user pressed Ctrl-C now
        return brain(messages, tools)

    agent = make_agent(SlowLLM(interrupting, delay=0.005, model="m1"))
    assert threading.current_thread() is threading.main_thread()
    batch = agent.run_batch(questions(30), max_concurrency=2, progress=False)  # no KeyboardInterrupt
    assert batch.interrupted and batch.stopped
    assert batch.counts()["done"] >= 7 and batch.counts()["stopped"] >= 20
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


def test_kernel_interrupt_while_a_notebook_cell_waits_stops_the_batch() -> None:
    """Inside a running loop (a notebook cell) the batch runs on the background loop; the
    interrupt lands in the waiting thread and becomes batch.stop()."""
    main = threading.main_thread()

    def interrupting(messages: list[ChatMessage], tools: Any) -> Any:
        user = messages[-1].text or ""
        if messages[-1].role == MessageRole.USER and user.startswith("what is 5 "):
            assert threading.current_thread() is not main
            signal.pthread_kill(main.ident, signal.SIGINT)
        return brain(messages, tools)

    agent = make_agent(SlowLLM(interrupting, delay=0.01, model="m1"))

    async def cell() -> BatchRun:
        return agent.run_batch(questions(30), max_concurrency=2, progress=False)

    loop = asyncio.new_event_loop()  # like ipykernel's: Ctrl-C raises KeyboardInterrupt
    try:
        batch = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert batch.interrupted and batch.stopped
    assert 4 <= batch.counts()["done"] < 30


def test_arun_batch_awaits_on_the_running_loop_and_a_timeout_fails_only_slow_tasks() -> None:
    # margins wide enough for a cold first run in CI (12 tasks starting at once), still far apart
    llm = SlowLLM(brain, delay=lambda ms: 6.0 if "9 +" in (ms[-1].text or "") else 0.0, model="m1")
    agent = make_agent(llm)

    async def main() -> BatchRun:
        return await agent.arun_batch(questions(12), max_concurrency=12, timeout_s=2.0)

    t0 = time.perf_counter()
    batch = asyncio.run(main())
    assert time.perf_counter() - t0 < 4.0  # the slow task is given up at its timeout, not awaited
    assert [it.index for it in batch.failed] == [9]
    assert isinstance(batch.results[9], TimeoutError) and "timeout_s=2.0" in str(batch.results[9])


def test_bad_arguments_are_clear_errors() -> None:
    agent = make_agent()
    with pytest.raises(TypeError, match="list .* of str"):
        agent.run_batch("what is 1 + 1")
    with pytest.raises(TypeError, match=r"inputs\[1\] must be a str"):
        agent.run_batch(["a 1 2", 3])
    with pytest.raises(ValueError, match="max_concurrency must be an int >= 1, got 0"):
        agent.run_batch(["a 1 2"], max_concurrency=0)
    with pytest.raises(ValueError, match="unknown backend 'dask'"):
        agent.run_batch(["a 1 2"], backend="dask")
    with pytest.raises(ValueError, match="needs factory"):
        agent.run_batch(["a 1 2"], backend="ray")
    with pytest.raises(ValueError, match="factory=... is for backend='ray'"):
        agent.run_batch(["a 1 2"], factory=make_agent)
    with pytest.raises(ValueError, match="progress must be"):
        agent.run_batch(["a 1 2"], progress="bar")
    with pytest.raises(TypeError, match="store must be a file path .* or a RunStore"):
        agent.run_batch(["a 1 2"], store=42)
    assert agent.tasks == {}  # nothing ran
    with pytest.raises(TypeError, match=r"run_batch needs an AgentRunner \(e.g. .*\), got object"):
        BatchRun(object(), ["a 1 2"])  # type: ignore[arg-type]


def test_a_record_round_trips_to_a_task_that_draws_the_same() -> None:
    agent = make_agent()
    batch = agent.run_batch(questions(2), progress=False)
    state = batch.state(1)
    import json

    doc = json.loads(json.dumps(task_record(agent, state)))  # plain JSON, nothing live
    other = make_agent()
    adopted = adopt_record(other, doc)
    assert other.get_task(state.task_id).input == state.task.input
    assert other.graph(state.task_id).source == agent.graph(state.task_id).source
    assert adopted.final_response.response == "The answer is 11"
    assert other.cost(state.task_id).total == agent.cost(state.task_id).total


# ----- the store: persist as tasks finish, resume what is left -------------------------------


def test_resume_skips_what_succeeded_and_runs_failed_and_unfinished(tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    inputs = questions(12)
    flaky = {3, 7}

    def first(messages: list[ChatMessage], tools: Any) -> Any:
        user = next(m.text for m in reversed(messages) if m.role == MessageRole.USER)
        if numbers(user)[0] in flaky:
            raise RuntimeError("rate limited")
        return brain(messages, tools)

    agent = make_agent(SlowLLM(first, delay=0.01, model="m1"))
    b1 = agent.run_batch(inputs, store=db, max_concurrency=3, progress=False, background=True)
    while b1.counts()["done"] < 6:
        time.sleep(0.005)
    b1.stop()  # the "crash": half the batch never ran
    b1.wait()
    finished_1 = {it.index: it for it in b1 if it.status == "done"}
    assert 6 <= len(finished_1) < 12
    from nbagent.store.sqlite import RunStore

    with RunStore(db) as store:  # every finished task was written as it finished, labelled
        stored = store.tasks(tag="batch")
        assert {t.key for t in stored if t.status == "finalized"} == {b1[i].key for i in finished_1}
        failed_keys = {t.key for t in stored if t.status == "failed"}
        assert failed_keys == {it.key + "!failed" for it in b1 if it.status == "failed"}
        assert store.task(key=b1[min(finished_1)].key, tag="batch").response.startswith("The answer is")

    # a new kernel: a new runner, the same batch, a fixed model
    llm2 = SlowLLM(brain, model="m1")
    agent2 = make_agent(llm2)
    b2 = agent2.run_batch(inputs, store=db, max_concurrency=3, progress=False)
    assert not b2.failed and b2.counts()["done"] == 12
    assert {it.index for it in b2 if it.resumed} == set(finished_1)
    assert llm2.calls == 2 * (12 - len(finished_1))  # two model calls per task that ran
    for i, it in finished_1.items():  # the resumed tasks are the first run's, opened here
        assert b2[i].task_id == it.task_id and b2[i].response.response == it.response.response
        assert b2[i].total_tokens == it.total_tokens and b2[i].steps == 2
        assert agent2.get_task(it.task_id).input == inputs[i]
    assert [r.response for r in b2.results] == [f"The answer is {i * 11}" for i in range(12)]

    # a third run has nothing to do; a changed input runs again
    llm3 = SlowLLM(brain, model="m1")
    changed = list(inputs)
    changed[5] = "what is 100 + 1 ?"
    b3 = make_agent(llm3).run_batch(changed, store=db, progress=False)
    assert llm3.calls == 2 and [it.index for it in b3 if not it.resumed] == [5]
    assert b3.results[5].response == "The answer is 101"


def test_batches_of_different_names_share_a_store_without_mixing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent = make_agent()
    agent.run_batch(questions(3), store=db, name="v1", progress=False)
    llm = SlowLLM(brain, model="m1")
    b = make_agent(llm).run_batch(questions(3), store=db, name="v2", progress=False)
    assert llm.calls == 6 and not any(it.resumed for it in b)
    assert input_key(0, "a") != input_key(1, "a") != input_key(0, "b")


def test_store_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("these are my notes, not a database" * 50)
    with pytest.raises(ValueError, match="is not an nbagent run store"):
        make_agent().run_batch(questions(1), store=bad, progress=False)
    with pytest.raises(ValueError, match="is a directory"):
        make_agent().run_batch(questions(1), store=tmp_path, progress=False)


def test_check_grades_answers_and_rejected_ones_are_failures_rerun_on_resume(tmp_path: Path) -> None:
    expected = {q: f"The answer is {i * 11}" for i, q in enumerate(questions(5))}
    expected[questions(5)[2]] = "The answer is 999"  # a wrong key: the agent's right answer is rejected

    def check(question: str, response: AgentChatResponse) -> bool:
        return response.response == expected[question]

    def strict(question: str, response: AgentChatResponse) -> None:
        assert response.response.endswith("0"), "not a round number"

    agent = make_agent()
    batch = agent.run_batch(questions(5), check=check, store=tmp_path / "b.db", progress=False)
    assert [it.index for it in batch.failed] == [2]
    err = batch.results[2]
    from nbagent.batch import AnswerRejected

    assert isinstance(err, AnswerRejected) and err.response.response == "The answer is 22"
    assert "check rejected the answer 'The answer is 22'" in str(err)
    assert agent.tasks[batch[2].task_id].status == TaskStatus.FINALIZED  # the task itself ended well
    assert batch.to_pandas().loc[2, "response"] == "The answer is 22"

    expected[questions(5)[2]] = "The answer is 22"  # fix the key: only the rejected one runs again
    llm = SlowLLM(brain, model="m1")
    again = make_agent(llm).run_batch(questions(5), check=check, store=tmp_path / "b.db", progress=False)
    assert llm.calls == 2 and not again.failed and [it.index for it in again if not it.resumed] == [2]

    msgs = make_agent().run_batch(questions(3), check=strict, progress=False)
    assert [it.index for it in msgs.failed] == [1, 2]
    assert "not a round number" in str(msgs.results[1])
    with pytest.raises(TypeError, match="check must be a function"):
        agent.run_batch(questions(1), check="yes")


def test_rerunning_in_the_same_kernel_writes_to_the_same_run_without_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "same.db"
    broken = {"on": True}

    def sometimes(messages: list[ChatMessage], tools: Any) -> Any:
        if broken["on"] and "3 +" in (messages[-1].text or ""):
            raise RuntimeError("down")
        return brain(messages, tools)

    agent = make_agent(SlowLLM(sometimes, model="m1"))
    first = agent.run_batch(questions(6), store=db, progress=False)
    assert [it.index for it in first.failed] == [3]
    broken["on"] = False
    second = agent.run_batch(questions(6), store=db, progress=False)
    assert [it.index for it in second if not it.resumed] == [3] and not second.failed
    assert second[0].task_id == first[0].task_id  # the live task, not a copy
    assert not [r for r in caplog.records if "could not write" in r.getMessage()]
    from nbagent.store.sqlite import RunStore

    from nbagent.batch.store import BatchStores

    # the open store is the runner's service state, in its declared slots: no attribute of its own
    kept = agent._services.get(BatchStores)
    assert kept is not None and list(kept.by_path) == [str(db.absolute())]
    assert "_batch_stores" not in vars(agent)
    with RunStore(db) as store:
        assert len(store.runs()) == 1  # one runner, one run
        done = store.tasks(tag="batch", status="finalized")
        assert sorted(t.key for t in done) == sorted(it.key for it in second)
        loaded = store.load()
        assert loaded.get_task(second[3].task_id).input == questions(6)[3]


def test_a_batch_killed_mid_run_resumes_in_a_new_process(tmp_path: Path) -> None:
    """kill -9 a process running a batch; a new process runs the same batch with the same
    store and runs only what the dead one had not finished."""
    import os
    import subprocess
    import sys

    from nbagent.store.sqlite import RunStore

    db = tmp_path / "crash.db"
    repo = Path(__file__).resolve().parent.parent
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(repo)!r})\n"
        "from tests.test_batch import SlowLLM, brain, make_agent, questions\n"
        f"make_agent(SlowLLM(brain, delay=0.05, model='m1')).run_batch(questions(40), store={str(db)!r},"
        " max_concurrency=2, progress=False)\n"
    )
    env = {**os.environ, "NBAGENT_BLOCK_NETWORK": "1", "PYTHONPATH": str(repo)}
    child = subprocess.Popen([sys.executable, str(script)], env=env)
    try:
        deadline = time.monotonic() + 60
        done = 0
        while time.monotonic() < deadline and child.poll() is None:
            if db.exists():
                with RunStore(db) as store:
                    done = len(store.tasks(tag="batch", status="finalized"))
                if done >= 5:
                    break
            time.sleep(0.05)
        assert child.poll() is None, "the batch finished before it could be killed"
        child.kill()  # SIGKILL: no cleanup of any kind
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    with RunStore(db) as store:
        saved = {t.key for t in store.tasks(tag="batch", status="finalized")}
    assert 5 <= len(saved) < 40

    llm = SlowLLM(brain, model="m1")
    agent = make_agent(llm)
    batch = agent.run_batch(questions(40), store=db, progress=False)
    resumed = {it.key for it in batch if it.resumed}
    assert resumed == saved  # every task the dead process finished, and only those
    assert llm.calls == 2 * (40 - len(saved)) and batch.counts()["done"] == 40
    assert [r.response for r in batch.results] == [f"The answer is {i * 11}" for i in range(40)]
    some = next(it for it in batch if it.resumed)
    assert agent.graph(some.task_id).source.count("add(") >= 1  # a resumed task opens here
