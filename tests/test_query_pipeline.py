"""nbagent.query_pipeline on its own, and QueryPipelineAgentWorker inside nbagent's AgentRunner."""

from __future__ import annotations

import asyncio
import copy
import warnings
from typing import Any

import pytest

from nbagent import AgentRunner, ChatMessage, MessageRole, ScriptedLLM
from nbagent.memory import ChatMemoryBuffer
from nbagent.query_pipeline import (
    AgentFnComponent,
    AgentInputComponent,
    FnComponent,
    InputComponent,
    Link,
    QueryPipeline,
    StatefulFnComponent,
)
from nbagent.schema import AgentChatResponse


def make_worker(pipeline: Any, **kwargs: Any) -> Any:
    from nbagent import QueryPipelineAgentWorker

    with pytest.warns(DeprecationWarning, match="FnAgentWorker"):
        return QueryPipelineAgentWorker(pipeline, **kwargs)


# --- the pipeline on its own -------------------------------------------------------------


def test_chain_runs_in_order_with_keyword_positional_and_renamed_input() -> None:
    seen: list[str] = []

    def double(x: int) -> int:
        seen.append("double")
        return 2 * x

    def inc(y: int) -> int:
        seen.append("inc")
        return y + 1

    qp = QueryPipeline(chain=[FnComponent(fn=double), FnComponent(fn=inc)])
    assert qp.run(x=5) == 11
    assert qp.run(5) == 11  # one positional value goes to the root's one required input
    assert qp.run(value=5) == 11  # one keyword for one required input: the name need not match
    assert asyncio.run(qp.arun(x=4)) == 9
    assert seen == ["double", "inc"] * 4
    assert qp.run(x=5, return_values_direct=False) == {"output": 11}


def test_input_component_passes_inputs_on_and_links_pick_outputs() -> None:
    qp = QueryPipeline(
        modules={"in": InputComponent(), "a": FnComponent(fn=lambda v: v * 10), "b": FnComponent(fn=lambda w: -w)},
        links=[Link("in", "a", src_key="first"), Link("in", "b", src_key="second")],
    )
    out = qp.run_multi({"in": {"first": 2, "second": 3}})
    assert out == {"a": {"output": 20}, "b": {"output": -3}}
    out, steps = qp.run_multi_with_intermediates({"in": {"first": 1, "second": 1}})
    assert out == {"a": {"output": 10}, "b": {"output": -1}} and steps["in"].outputs == {"first": 1, "second": 1}
    assert asyncio.run(qp.arun_multi({"in": {"first": 2, "second": 3}})) == {"a": {"output": 20}, "b": {"output": -3}}
    with pytest.raises(ValueError, match=r"run_multi\(batch=True\) is not supported.*once per input"):
        qp.run_multi({"in": {"first": [1], "second": [2]}}, batch=True)
    with pytest.raises(ValueError, match=r"returns one output, but 2 modules ended the run: \['a', 'b'\]"):
        qp.run(first=2, second=3)


def test_diamond_join_runs_once_after_both_parents_sync_and_async() -> None:
    order: list[str] = []

    def tag(name: str, fn: Any) -> FnComponent:
        def run(**kw: Any) -> Any:
            order.append(name)
            return fn(**kw)

        return FnComponent(fn=run, req_params=set(fn.__code__.co_varnames[: fn.__code__.co_argcount]))

    qp = QueryPipeline()
    qp.add_modules({
        "src": tag("src", lambda q: q),
        "left": tag("left", lambda x: x + "L"),
        "right": tag("right", lambda x: x + "R"),
        "join": tag("join", lambda a, b: f"{a}|{b}"),
    })
    qp.add_link("src", "left")
    qp.add_link("src", "right")
    qp.add_link("left", "join", dest_key="a")
    qp.add_link("right", "join", dest_key="b")
    assert qp.get_root_keys() == ["src"] and qp.get_leaf_keys() == ["join"]
    assert qp.run(q="q") == "qL|qR"
    assert order == ["src", "left", "right", "join"]
    order.clear()
    assert asyncio.run(qp.arun(q="z")) == "zL|zR"
    assert order[0] == "src" and order[-1] == "join" and sorted(order[1:3]) == ["left", "right"]
    _, steps = qp.run_with_intermediates(q="i")
    assert steps["join"].inputs == {"a": "iL", "b": "iR"} and steps["join"].outputs == {"output": "iL|iR"}


def test_condition_fn_takes_one_branch_and_input_fn_transforms() -> None:
    ran: list[str] = []

    def even(n: int) -> str:
        ran.append("even")
        return f"{n} is even"

    def odd(n: int) -> str:
        ran.append("odd")
        return f"{n} is odd"

    def report(text: str) -> str:
        return text.upper()

    qp = QueryPipeline(modules={
        "n": FnComponent(fn=lambda n: n), "even": FnComponent(fn=even), "odd": FnComponent(fn=odd),
        "report": FnComponent(fn=report),
    })
    qp.add_link("n", "even", condition_fn=lambda n: n % 2 == 0, input_fn=lambda n: n // 2 * 2)
    qp.add_link("n", "odd", condition_fn=lambda n: n % 2 == 1)
    qp.add_link("even", "report")
    qp.add_link("odd", "report")
    assert qp.run(n=4) == "4 IS EVEN"
    assert qp.run(n=7) == "7 IS ODD"
    assert ran == ["even", "odd"]
    # no branch taken: the run ends at the last module that ran
    qp2 = QueryPipeline(modules={"n": FnComponent(fn=lambda n: n), "big": FnComponent(fn=lambda n: "big")})
    qp2.add_link("n", "big", condition_fn=lambda n: n > 100)
    assert qp2.run(n=3) == 3 and qp2.run(n=300) == "big"


def test_nested_pipeline_and_a_chat_model_as_modules() -> None:
    inner = QueryPipeline(chain=[FnComponent(fn=lambda text: f"Say: {text}")])
    llm = ScriptedLLM(["hello back"])
    qp = QueryPipeline(chain=[inner, llm, FnComponent(fn=lambda reply: reply.message.content)])
    assert qp.run(text="hi") == "hello back"
    assert [m.content for m in llm.requests[0].messages] == ["Say: hi"]


def test_async_modules_ready_together_run_concurrently() -> None:
    async def scenario() -> str:
        a_started, b_started = asyncio.Event(), asyncio.Event()

        async def a(x: str) -> str:
            a_started.set()
            await b_started.wait()  # would deadlock if b only started after a finished
            return "a"

        async def b(x: str) -> str:
            b_started.set()
            await a_started.wait()
            return "b"

        qp = QueryPipeline(modules={
            "in": FnComponent(fn=lambda x: x), "a": FnComponent(fn=a), "b": FnComponent(fn=b),
            "join": FnComponent(fn=lambda p, q: p + q),
        })
        qp.add_link("in", "a")
        qp.add_link("in", "b")
        qp.add_link("a", "join", dest_key="p")
        qp.add_link("b", "join", dest_key="q")
        return await asyncio.wait_for(qp.arun(x="go"), timeout=5)

    assert asyncio.run(scenario()) == "ab"


def test_sync_run_refuses_a_coroutine_function_with_the_fix() -> None:
    async def slow(x: int) -> int:
        return x

    qp = QueryPipeline(chain=[FnComponent(fn=slow)])
    with pytest.raises(TypeError, match=r"arun\(\), or pass the coroutine function as async_fn"):
        qp.run(x=1)
    assert asyncio.run(qp.arun(x=1)) == 1


def test_state_is_shared_and_update_state_hands_components_the_given_dict() -> None:
    def count(state: dict[str, Any], x: int) -> int:
        state["calls"] = state.get("calls", 0) + 1
        return x + state.get("bonus", 0)

    component = StatefulFnComponent(fn=count)
    assert component.input_keys.required_keys == {"x"}  # 'state' is given, not linked
    qp = QueryPipeline(chain=[component], state={"bonus": 10})
    assert qp.run(x=1) == 11 and qp.state["calls"] == 1
    qp.update_state({"bonus": 100})
    assert qp.state == {"bonus": 100, "calls": 1}  # merged into the pipeline's state
    assert component.state == {"bonus": 100}  # the components see the dict given (as LlamaIndex)
    assert qp.run(x=1) == 101
    later = StatefulFnComponent(fn=lambda state: state.get("bonus"))
    qp.add("later", later)
    assert later.state is qp.state  # a module added later gets the pipeline's state
    qp.set_state({"bonus": 1})
    assert component.state is qp.state
    qp.reset_state()
    assert component.state == {} and qp.state == {}


def test_bad_graphs_fail_when_built_naming_what_is_wrong() -> None:
    qp = QueryPipeline(modules={"a": FnComponent(fn=lambda x: x), "b": FnComponent(fn=lambda x: x)})
    qp.add_link("a", "b")
    with pytest.raises(ValueError, match=r"'b' -> 'a' would make a cycle \(b -> a -> b\).*DAG"):
        qp.add_link("b", "a")
    with pytest.raises(ValueError, match=r"cycle \(b -> b\)"):
        qp.add_link("b", "b")
    with pytest.raises(ValueError, match=r"no module 'c' in the pipeline; its modules are \['a', 'b'\]"):
        qp.add_link("a", "c")
    with pytest.raises(ValueError, match=r"no module 'zz'"):
        qp.add_chain(["a", "zz"])
    with pytest.raises(ValueError, match="'a' is already in the pipeline"):
        qp.add("a", FnComponent(fn=lambda x: x))
    with pytest.raises(TypeError, match=r"module 'f' is a function.*FnComponent\(fn=\.\.\.\)"):
        qp.add("f", lambda x: x)
    with pytest.raises(ValueError, match="either chain=.* or modules="):
        QueryPipeline(chain=[FnComponent(fn=lambda x: x)], modules={})
    with pytest.raises(ValueError, match="required parameter 'state'.*takes \\['x'\\]"):
        StatefulFnComponent(fn=lambda x: x)
    with pytest.raises(ValueError, match="required parameters 'task' and 'state'"):
        AgentFnComponent(fn=lambda state: state)
    assert qp.run(x=1) == 1  # the refused links changed nothing


def test_missing_and_unexpected_inputs_fail_naming_the_module_and_the_inputs() -> None:
    qp = QueryPipeline(modules={
        "a": FnComponent(fn=lambda x: x), "b": FnComponent(fn=lambda y: y),
        "join": FnComponent(fn=lambda p, q: p + q),
    })
    qp.add_link("a", "join", dest_key="p")
    qp.add_link("b", "join", dest_key="r")  # a typo: join takes p and q
    with pytest.raises(ValueError, match=r"module 'join' cannot run: missing input\(s\) \['q'\]; it got \['p', 'r'\]"):
        qp.run_multi({"a": {"x": 1}, "b": {"y": 2}})
    with pytest.raises(ValueError, match=r"run\(\) needs a pipeline with exactly one root module.*\['a', 'b'\]"):
        qp.run(x=1)
    with pytest.raises(ValueError, match=r"'nope'\] are not root modules"):
        qp.run_multi({"nope": {}})
    with pytest.raises(ValueError, match=r"root module 'b' needs inputs \['y'\]"):
        qp.run_multi({"a": {"x": 1}})
    chain = QueryPipeline(chain=[FnComponent(fn=lambda x, y=0: x + y)])
    with pytest.raises(ValueError, match=r"unexpected input\(s\) \['z'\]; it takes required \['x'\], optional \['y'\]"):
        chain.run(x=1, z=2)
    ambiguous = QueryPipeline(modules={"a": FnComponent(fn=lambda x: x), "two": FnComponent(fn=lambda p, q: p)})
    ambiguous.add_link("a", "two")
    with pytest.raises(ValueError, match=r"link 'a' -> 'two' has no dest_key.*\['p', 'q'\]"):
        ambiguous.run(x=1)
    fan = QueryPipeline(modules={"in": InputComponent(), "out": FnComponent(fn=lambda v: v)})
    fan.add_link("in", "out")
    with pytest.raises(ValueError, match=r"'in' returned 2 outputs \['a', 'b'\], the link needs one; .*src_key"):
        fan.run(a=1, b=2)
    picky = QueryPipeline(modules={"in": InputComponent(), "out": FnComponent(fn=lambda v: v)})
    picky.add_link("in", "out", src_key="c")
    with pytest.raises(ValueError, match=r"src_key 'c' is not an output of 'in'; it returned \['a'\]"):
        picky.run(a=1)


def test_callback_manager_is_accepted_and_said_to_have_no_effect() -> None:
    with pytest.warns(UserWarning, match="QueryPipeline: callback_manager .* no effect"):
        qp = QueryPipeline(callback_manager=object(), chain=[FnComponent(fn=lambda x: x)])
    with pytest.warns(UserWarning, match="no effect"):
        qp.set_callback_manager(object())
    with pytest.warns(UserWarning, match="no effect"):
        assert qp.run(x=3, callback_manager=object()) == 3
    with pytest.warns(UserWarning, match="FnComponent.set_callback_manager: callback_manager .* no effect"):
        FnComponent(fn=lambda x: x).set_callback_manager(object())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qp.set_callback_manager(None)  # None is no callback manager: nothing to warn about


def test_verbose_prints_each_module_and_its_input(capsys: pytest.CaptureFixture[str]) -> None:
    qp = QueryPipeline(modules={"first": FnComponent(fn=lambda x: x + 1)}, verbose=True)
    qp.run(x=1)
    assert "> Running module first with input: \nx: 1" in capsys.readouterr().out


def test_batch_runs_each_input() -> None:
    qp = QueryPipeline(chain=[FnComponent(fn=lambda x: x * x)])
    assert qp.run(x=[1, 2, 3], batch=True) == [1, 4, 9]
    assert asyncio.run(qp.arun(x=[4, 5], batch=True)) == [16, 25]


# --- QueryPipelineAgentWorker in AgentRunner -----------------------------------------------


def retry_pipeline(fail_on: set[int] | None = None, target: int = 3) -> QueryPipeline:
    """The stateful pattern: try until a condition holds, state in step_state."""

    def attempt(state: dict[str, Any]) -> dict[str, Any]:
        step_state = state["step_state"]
        step_state["attempts"] = step_state.get("attempts", 0) + 1
        step_state.setdefault("log", []).append(state["task"].input)
        if step_state["attempts"] in (fail_on or set()):
            raise RuntimeError(f"pipeline broke on attempt {step_state['attempts']}")
        return {"n": step_state["attempts"]}

    def respond(state: dict[str, Any], result: dict[str, Any]) -> tuple[AgentChatResponse, bool]:
        done = result["n"] >= target
        if done:
            memory = state["step_state"]["memory"]
            memory.put(ChatMessage(role=MessageRole.USER, content=state["task"].input))
            memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=f"done after {result['n']}"))
        return AgentChatResponse(response=f"attempt {result['n']}"), done

    return QueryPipeline(chain=[StatefulFnComponent(fn=attempt), StatefulFnComponent(fn=respond)])


def test_worker_steps_until_the_pipeline_says_done() -> None:
    agent = AgentRunner(make_worker(retry_pipeline()))
    task = agent.create_task("hello")
    outputs = []
    while not outputs or not outputs[-1].is_last:
        outputs.append(agent.run_step(task.task_id))
    assert [str(o.output) for o in outputs] == ["attempt 1", "attempt 2", "attempt 3"]
    assert sorted(task.extra_state) == ["attempts", "log", "memory", "sources"]
    assert task.extra_state["log"] == ["hello"] * 3
    response = agent.finalize_response(task.task_id)
    assert str(response) == "attempt 3"
    assert [(m.role, m.content) for m in agent.memory.get_all()] == [
        (MessageRole.USER, "hello"), (MessageRole.ASSISTANT, "done after 3"),
    ]


def test_chat_twice_and_async_chat() -> None:
    agent = AgentRunner(make_worker(retry_pipeline(target=2)))
    assert str(agent.chat("one")) == "attempt 2"
    assert str(asyncio.run(agent.achat("two"))) == "attempt 2"
    assert [m.content for m in agent.memory.get_all()] == ["one", "done after 2", "two", "done after 2"]


def test_undo_takes_back_a_step_and_rerun_gives_the_same() -> None:
    agent = AgentRunner(make_worker(retry_pipeline()))
    task = agent.create_task("u")
    agent.run_step(task.task_id)
    second = agent.run_step(task.task_id)
    assert task.extra_state["attempts"] == 2
    agent.undo_step(task.task_id)
    assert task.extra_state["attempts"] == 1 and task.extra_state["log"] == ["u"]
    again = agent.run_step(task.task_id)
    assert str(again.output) == str(second.output) == "attempt 2"


def test_a_raising_pipeline_keeps_the_step_and_the_state() -> None:
    worker = make_worker(retry_pipeline(fail_on={2}))
    agent = AgentRunner(worker)
    task = agent.create_task("f")
    agent.run_step(task.task_id)
    before = copy.deepcopy({k: v for k, v in task.extra_state.items() if k not in ("memory", "sources")})
    queued = agent.get_upcoming_steps(task.task_id)
    with pytest.raises(RuntimeError, match="broke on attempt 2"):
        agent.run_step(task.task_id)
    assert agent.get_upcoming_steps(task.task_id) == queued
    assert {k: v for k, v in task.extra_state.items() if k not in ("memory", "sources")} == before
    assert len(agent.get_completed_steps(task.task_id)) == 1
    # the retry sees the state as it was: attempt 2 again (and fails again, as scripted)
    with pytest.raises(RuntimeError, match="broke on attempt 2"):
        agent.run_step(task.task_id)


def test_finalize_task_moves_a_buffer_the_pipeline_swapped_in_into_memory() -> None:
    def own_memory(state: dict[str, Any]) -> tuple[str, bool]:
        buffer = ChatMemoryBuffer()
        buffer.put(ChatMessage(role=MessageRole.ASSISTANT, content="from my buffer"))
        state["step_state"]["memory"] = buffer  # the reference's finalize_task moves it
        return "ok", True

    agent = AgentRunner(make_worker(QueryPipeline(chain=[StatefulFnComponent(fn=own_memory)])))
    assert str(agent.chat("x")) == "ok"
    assert [m.content for m in agent.memory.get_all()] == ["from my buffer"]


def test_deprecated_flow_agent_input_and_agent_fn_components() -> None:
    def agent_input(task: Any, state: dict[str, Any]) -> dict[str, Any]:
        state["count"] = state.get("count", 0) + 1
        return {"input": f"{task.input}#{state['count']}"}

    def agent_output(task: Any, state: dict[str, Any], input: str) -> tuple[str, bool]:
        return input, state["count"] >= 2

    qp = QueryPipeline(chain=[AgentInputComponent(fn=agent_input), AgentFnComponent(fn=agent_output)])
    worker = make_worker(qp)
    assert worker.describe()["flow"] == "deprecated (AgentInputComponent)"
    agent = AgentRunner(worker)
    assert str(agent.chat("hi")) == "hi#2"
    assert worker.agent_components == [qp.module_dict[qp.get_leaf_keys()[0]]]


def test_stateful_flow_has_no_agent_input_component() -> None:
    worker = make_worker(retry_pipeline())
    with pytest.raises(ValueError, match="first component must be AgentInputComponent"):
        worker.agent_input_component
    assert worker.agent_components == []
    assert worker.task_key == "task" and worker.step_state_key == "step_state"


def test_custom_state_keys_and_direct_worker_calls() -> None:
    def fn(state: dict[str, Any]) -> tuple[str, bool]:
        return f"{state['the_task'].input}:{sorted(state['mine'])}", True

    worker = make_worker(QueryPipeline(chain=[StatefulFnComponent(fn=fn)]), task_key="the_task", step_state_key="mine")
    from nbagent.schema import Task

    task = Task(input="direct")
    step = worker.initialize_step(task)
    out = worker.run_step(step, task)  # the sync path runs pipeline.run
    assert out.is_last and str(out.output) == "direct:['memory', 'sources']" and out.next_steps == []
    out = asyncio.run(worker.arun_step(step, task))
    assert str(out.output) == "direct:['memory', 'sources']"


def test_streaming_is_refused_and_the_step_kept() -> None:
    agent = AgentRunner(make_worker(retry_pipeline()))
    task = agent.create_task("s")
    with pytest.raises(NotImplementedError, match="This agent does not support streaming."):
        agent.stream_step(task.task_id)
    assert len(agent.get_upcoming_steps(task.task_id)) == 1
    assert str(agent.run_step(task.task_id).output) == "attempt 1"


def test_bad_pipelines_and_bad_results_get_clear_errors() -> None:
    from nbagent import QueryPipelineAgentWorker

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(TypeError, match=r"needs a query pipeline.*object has no \['run', 'arun'"):
            QueryPipelineAgentWorker(object())
        with pytest.raises(ValueError, match="the pipeline has no modules"):
            QueryPipelineAgentWorker(QueryPipeline())
    agent = AgentRunner(make_worker(QueryPipeline(chain=[StatefulFnComponent(fn=lambda state: "just text")])))
    task = agent.create_task("b")
    with pytest.raises(TypeError, match=r"must return \(response, is_done\).*'just text'"):
        agent.run_step(task.task_id)
    assert len(agent.get_upcoming_steps(task.task_id)) == 1


def test_worker_callback_manager_warns_and_html_escapes_module_keys() -> None:
    qp = QueryPipeline(modules={"<b>bold</b>": StatefulFnComponent(fn=lambda state: ("x", True))})
    with pytest.warns(UserWarning, match="QueryPipelineAgentWorker: callback_manager .* no effect"):
        worker = make_worker(qp, callback_manager=object())
    html = worker._repr_html_()
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html
    assert "QueryPipelineAgentWorker" in AgentRunner(worker)._repr_html_()


def test_the_panel_steps_shows_a_failure_retries_undoes_and_runs_to_the_end() -> None:
    import re

    from nbagent import TaskStatus

    failed: set[int] = set()

    def attempt(state: dict[str, Any]) -> tuple[AgentChatResponse, bool]:
        step_state = state["step_state"]
        n = step_state["n"] = step_state.get("n", 0) + 1
        if n == 2 and not failed:
            failed.add(n)
            raise ValueError("pipeline failed once")
        return AgentChatResponse(response=f"the answer is {n}" if n >= 4 else f"partial {n}"), n >= 4

    agent = AgentRunner(make_worker(QueryPipeline(chain=[StatefulFnComponent(fn=attempt)])))
    task = agent.create_task("panel")
    panel = agent.panel(task)

    def statuses() -> list[str]:
        return re.findall(r"^\s+s\d+ \[label=<<B>#\d+ (\w+)", panel.dot, re.M)

    panel.step()
    result = panel.step()
    assert isinstance(result, ValueError) and "pipeline failed once" in panel.status_text()
    assert statuses() == ["done", "failed"] and task.extra_state["n"] == 1
    assert not isinstance(panel.retry(), BaseException)
    assert statuses() == ["done", "done", "queued"] and task.extra_state["n"] == 2
    panel.undo()
    assert task.extra_state["n"] == 1
    out = panel.run()
    assert out is not None and not isinstance(out, BaseException) and out.is_last
    assert agent.state_of(task).status == TaskStatus.FINALIZED
    assert "the answer is 4" in panel.transcript["messages"][-1]["text"]


def test_a_saved_run_loads_and_finishes_with_the_same_answer_and_memory(tmp_path: Any) -> None:
    agent = AgentRunner(make_worker(retry_pipeline()))
    task = agent.create_task("save me")
    agent.run_step(task.task_id)
    path = agent.save(tmp_path / "run.json")
    loaded = AgentRunner.load(path, make_worker(retry_pipeline()))
    assert loaded.get_task(task.task_id).extra_state["attempts"] == 1
    while not loaded.run_step(task.task_id).is_last:
        pass
    assert str(loaded.finalize_response(task.task_id)) == "attempt 3"
    assert [m.content for m in loaded.memory.get_all()] == ["save me", "done after 3"]


def test_chainable_objects_and_custom_components_plug_in() -> None:
    from nbagent.query_pipeline import ChainableMixin, CustomAgentComponent, CustomQueryComponent

    class Shout(CustomQueryComponent):
        @property
        def _input_keys(self) -> set[str]:
            return {"text"}

        @property
        def _output_keys(self) -> set[str]:
            return {"loud"}

        def _run_component(self, **kwargs: Any) -> dict[str, Any]:
            return {"loud": kwargs["text"].upper() + kwargs.get("suffix", "")}

    class Trimmed(Shout):
        def _validate_component_inputs(self, input: dict[str, Any]) -> dict[str, Any]:
            return {**input, "text": input["text"].strip()}  # the reference's hook: convert inputs

        def _validate_component_outputs(self, output: dict[str, Any]) -> dict[str, Any]:
            return {"loud": f"[{output['loud']}]"}

    assert QueryPipeline(chain=[Trimmed()]).run(text="  hi ") == "[HI]"

    class Excited(ChainableMixin):
        def _as_query_component(self, **kwargs: Any) -> Shout:
            return Shout()

    qp = QueryPipeline(chain=[Excited(), FnComponent(fn=lambda loud: loud + "!")])
    assert qp.run(text="hi") == "HI!"
    partial = Excited().as_query_component(partial={"text": "fixed"})
    assert partial.free_req_input_keys == set()

    class Counter(CustomAgentComponent):
        @property
        def _input_keys(self) -> set[str]:
            return {"x"}

        @property
        def _output_keys(self) -> set[str]:
            return {"output"}

        def _run_component(self, **kwargs: Any) -> dict[str, Any]:
            kwargs["state"]["n"] = kwargs["state"].get("n", 0) + kwargs["x"]
            return {"output": (f"{kwargs['task'].input}:{kwargs['state']['n']}", kwargs["state"]["n"] >= 2)}

    def agent_input(task: Any, state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    counter = Counter()
    worker = make_worker(QueryPipeline(chain=[AgentInputComponent(fn=agent_input), counter]))
    assert worker.agent_components == [counter]
    assert str(AgentRunner(worker).chat("c")) == "c:2"


def test_a_prompt_template_is_a_module_and_takes_partials() -> None:
    from nbagent.prompts import PromptTemplate

    llm = ScriptedLLM(["fine"])
    template = PromptTemplate('Q: {question} ({style}) {"json": "braces stay"}')
    qp = QueryPipeline(chain=[template.as_query_component(partial={"style": "short"}), llm])
    assert qp.module_dict[qp.get_root_keys()[0]].free_req_input_keys == {"question"}
    assert qp.run(question="how?").message.content == "fine"
    assert llm.requests[0].messages[0].content == 'Q: how? (short) {"json": "braces stay"}'
    bare = QueryPipeline(chain=[PromptTemplate("{a}+{b}")], modules=None)
    assert bare.run_multi({bare.get_root_keys()[0]: {"a": 1, "b": 2}}) == {bare.get_root_keys()[0]: {"prompt": "1+2"}}


def test_concurrent_tasks_in_a_batch_each_see_their_own_task_and_state() -> None:
    """The pipeline's state is shared by its components: steps of different tasks running at
    once (run_batch) must not see each other's task or step_state."""

    async def think(state: dict[str, Any]) -> str:
        text = state["task"].input
        await asyncio.sleep(0.01)  # another task's step would start here
        return text

    def answer(state: dict[str, Any], text: str) -> tuple[str, bool]:
        step_state = state["step_state"]
        step_state["n"] = step_state.get("n", 0) + 1
        same = text == state["task"].input
        return f"{text}:{state['task'].input}:{same}:{step_state['n']}", step_state["n"] >= 2

    qp = QueryPipeline(chain=[StatefulFnComponent(fn=think, async_fn=think), StatefulFnComponent(fn=answer)])
    agent = AgentRunner(make_worker(qp))
    inputs = [f"q{i}" for i in range(6)]
    batch = agent.run_batch(inputs, max_concurrency=6)
    assert [str(r) for r in batch.results] == [f"{q}:{q}:True:2" for q in inputs]


def test_state_reaches_stateful_components_of_a_nested_pipeline() -> None:
    inner_component = StatefulFnComponent(fn=lambda state, x: f"{state['task'].input}/{x}")
    inner = QueryPipeline(chain=[inner_component])
    outer = QueryPipeline(chain=[FnComponent(fn=lambda state_free: state_free), inner])
    assert outer.stateful_components == [inner_component]

    def finish(state: dict[str, Any], output: str) -> tuple[str, bool]:
        return output, True

    outer.add("finish", StatefulFnComponent(fn=finish))
    outer.add_link(outer.get_leaf_keys()[0], "finish")

    def start(state: dict[str, Any]) -> str:
        return "from-start"

    pipeline = QueryPipeline(chain=[StatefulFnComponent(fn=start), outer])
    agent = AgentRunner(make_worker(pipeline))
    assert str(agent.chat("nested")) == "nested/from-start"


def test_tool_runner_runs_a_tool_by_name_and_names_the_tools_on_a_bad_name() -> None:
    from nbagent.query_pipeline import ToolRunnerComponent

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    runner = ToolRunnerComponent([add])
    qp = QueryPipeline(chain=[runner, FnComponent(fn=lambda out: (out.tool_name, out.content, out.is_error))])
    assert qp.run(tool_name="add", tool_input={"a": 2, "b": 5}) == ("add", "7", False)
    assert asyncio.run(qp.arun(tool_name="add", tool_input={"a": 1, "b": 1})) == ("add", "2", False)
    name, content, is_error = qp.run(tool_name="add", tool_input={"a": 1})
    assert is_error and "b" in content  # the tool's own error is its output, as elsewhere in nbagent
    with pytest.raises(ValueError, match=r"no tool named 'mul'; the tools are \['add'\]"):
        qp.run(tool_name="mul", tool_input={})
    with pytest.raises(TypeError, match="tool_input must be a dict of arguments, got str"):
        qp.run(tool_name="add", tool_input="2, 5")


def test_a_custom_component_declares_fields_as_the_references_pydantic_components_do() -> None:
    """LlamaIndex's own test_qp_agent_custom writes ``separator: str = Field(default=":")``."""
    from pydantic import Field

    from nbagent.query_pipeline import CustomQueryComponent

    class Join(CustomQueryComponent):
        separator: str = Field(default=":", description="Separator")
        times: int = 2
        tags: list[str] = Field(default_factory=list)
        prefix: str

        @property
        def _input_keys(self) -> set[str]:
            return {"a"}

        @property
        def _output_keys(self) -> set[str]:
            return {"output"}

        def _run_component(self, **kwargs: Any) -> dict[str, Any]:
            return {"output": self.prefix + self.separator.join([kwargs["a"]] * self.times)}

    join = Join(separator="/", prefix=">")
    assert join.run_component(a="foo") == {"output": ">foo/foo"}
    one, two = Join(prefix=""), Join(prefix="")
    one.tags.append("x")
    assert (one.separator, one.times, two.tags) == (":", 2, [])  # defaults, factories fresh
    with pytest.raises(TypeError, match=r"Join got unexpected keyword argument\(s\) \['sep'\]; its fields are \['prefix', 'separator', 'tags', 'times'\]"):
        Join(sep="/", prefix="")
    with pytest.raises(TypeError, match="Join needs the field 'prefix'"):
        Join()
