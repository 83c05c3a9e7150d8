"""The same query-pipeline agent code run on the real llama-index-core 0.12.52 and on nbagent.

Ported code changes only its imports and its model; the answers, the number of steps, the keys
of ``task.extra_state`` and the memory must come out the same. llama_index is a dev dependency:
it is imported inside each test, and a missing import fails the test (it is not skipped).
"""

from __future__ import annotations

import json
import types
import warnings
from typing import Any

import pytest


def llama() -> types.SimpleNamespace:
    """LlamaIndex's names, imported lazily (tiktoken would download: use a local tokenizer)."""
    from llama_index.core import Settings

    Settings.tokenizer = lambda text: text.split()
    from llama_index.core.agent import AgentRunner, QueryPipelineAgentWorker
    from llama_index.core.chat_engine.types import AgentChatResponse
    from llama_index.core.llms import ChatMessage
    from llama_index.core.query_pipeline import (
        FnComponent,
        InputComponent,
        Link,
        QueryPipeline,
        StatefulFnComponent,
    )

    return types.SimpleNamespace(**locals())


def ours() -> types.SimpleNamespace:
    from nbagent import AgentChatResponse, AgentRunner, ChatMessage, QueryPipelineAgentWorker
    from nbagent.query_pipeline import (
        FnComponent,
        InputComponent,
        Link,
        QueryPipeline,
        StatefulFnComponent,
    )

    return types.SimpleNamespace(**locals())


def llama_scripted_llm(replies: list[str]) -> Any:
    """A LlamaIndex chat model that answers from a script (the reference's side of the test)."""
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

    class Scripted(CustomLLM):
        script: list[str]
        prompts: list[str] = []

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(is_chat_model=True)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self.prompts.append(prompt)
            return CompletionResponse(text=self.script.pop(0))

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Scripted(script=list(replies))


def build_agent(lib: types.SimpleNamespace, llm: Any) -> Any:
    """The docs' stateful query-pipeline agent: ask the model, parse, retry with the error
    until the reply is valid (conditional links into one response module); state in step_state."""

    def agent_input(state: dict[str, Any]) -> str:
        step_state = state["step_state"]
        step_state["attempts"] = step_state.get("attempts", 0) + 1
        errors = step_state.setdefault("errors", [])
        text = state["task"].input
        if errors:
            text += f"\nYour last reply was invalid ({errors[-1]}). Reply in JSON with key 'answer'."
        return text

    def to_messages(text: str) -> list[Any]:
        return [lib.ChatMessage(role="user", content=text)]

    def parse(state: dict[str, Any], reply: Any) -> dict[str, Any]:
        content = reply.message.content
        try:
            answer = json.loads(content)["answer"]
        except (ValueError, KeyError, TypeError) as err:
            return {"ok": False, "error": type(err).__name__}
        return {"ok": True, "answer": str(answer)}

    def finish(state: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        memory = state["step_state"]["memory"]
        memory.put(lib.ChatMessage(role="user", content=state["task"].input))
        memory.put(lib.ChatMessage(role="assistant", content=result["answer"]))
        return {"response": f"The answer is {result['answer']}", "is_done": True}

    def retry(state: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        state["step_state"]["errors"].append(result["error"])
        return {"response": f"retrying after {result['error']}", "is_done": False}

    def respond(state: dict[str, Any], response_dict: dict[str, Any]) -> tuple[Any, bool]:
        return lib.AgentChatResponse(response=response_dict["response"]), response_dict["is_done"]

    qp = lib.QueryPipeline(modules={
        "agent_input": lib.StatefulFnComponent(fn=agent_input),
        "to_messages": lib.FnComponent(fn=to_messages),
        "llm": llm,
        "parse": lib.StatefulFnComponent(fn=parse),
        "finish": lib.StatefulFnComponent(fn=finish),
        "retry": lib.StatefulFnComponent(fn=retry),
        "respond": lib.StatefulFnComponent(fn=respond),
    })
    qp.add_chain(["agent_input", "to_messages", "llm", "parse"])
    qp.add_link("parse", "finish", condition_fn=lambda r: r["ok"])
    qp.add_link("parse", "retry", condition_fn=lambda r: not r["ok"])
    qp.add_link("finish", "respond", dest_key="response_dict")
    qp.add_link("retry", "respond", dest_key="response_dict")
    return lib.AgentRunner(lib.QueryPipelineAgentWorker(qp))


SCRIPT = ["I think it is 42", '{"result": 42}', '{"answer": 42}', '{"answer": "blue"}']


def run_stepwise(agent: Any, text: str) -> tuple[list[str], list[str], str]:
    task = agent.create_task(text)
    outputs = []
    while not outputs or not outputs[-1].is_last:
        outputs.append(agent.run_step(task.task_id))
    final = agent.finalize_response(task.task_id)
    steps = agent.get_completed_steps(task.task_id)
    assert len(steps) == len(outputs)
    return [str(o.output) for o in outputs], sorted(task.extra_state), str(final)


def transcript(agent: Any) -> list[tuple[str, str]]:
    return [(getattr(m.role, "value", m.role), m.content) for m in agent.memory.get_all()]


def test_the_docs_stateful_pipeline_agent_gives_the_same_run_on_both() -> None:
    from nbagent import ScriptedLLM

    runs = {}
    for name, lib, llm in (
        ("llama_index", llama(), llama_scripted_llm(SCRIPT)),
        ("nbagent", ours(), ScriptedLLM(list(SCRIPT))),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = build_agent(lib, llm)
        stepwise = run_stepwise(agent, "What is six times seven?")
        second = str(agent.chat("Which colour?"))
        runs[name] = (stepwise, second, transcript(agent))
    assert runs["nbagent"] == runs["llama_index"]
    (outputs, keys, final), second, memory = runs["nbagent"]
    # and the run is the one the script implies (so the comparison compared something)
    assert outputs == ["retrying after JSONDecodeError", "retrying after KeyError", "The answer is 42"]
    assert keys == ["attempts", "errors", "memory", "sources"]
    assert final == "The answer is 42" and second == "The answer is blue"
    assert memory == [
        ("user", "What is six times seven?"), ("assistant", "42"),
        ("user", "Which colour?"), ("assistant", "blue"),
    ]


def test_the_retry_prompt_the_model_sees_is_the_same_on_both() -> None:
    from nbagent import ScriptedLLM

    reference = llama_scripted_llm(SCRIPT[:3])
    nb = ScriptedLLM(SCRIPT[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        build_agent(llama(), reference).chat("Q")
        build_agent(ours(), nb).chat("Q")
    ours_prompts = [r.messages[-1].content for r in nb.requests]
    assert len(reference.prompts) == len(ours_prompts) == 3
    # LlamaIndex's CustomLLM turns the one user message into "user: ...\nassistant: "
    assert reference.prompts == [f"user: {text}\nassistant: " for text in ours_prompts]
    assert "Your last reply was invalid (KeyError)" in ours_prompts[2]


def pipeline_cases(lib: types.SimpleNamespace) -> dict[str, Any]:
    """Plain pipelines (no agent), each run with the same call on both libraries."""
    results: dict[str, Any] = {}
    chain = lib.QueryPipeline(chain=[lib.FnComponent(fn=lambda x: x * 2), lib.FnComponent(fn=lambda y: y + 1)])
    results["chain kw"] = chain.run(x=5)
    results["chain positional"] = chain.run(5)
    results["chain renamed kw"] = chain.run(anything=5)
    results["not direct"] = chain.run(x=1, return_values_direct=False)

    diamond = lib.QueryPipeline(modules={
        "in": lib.InputComponent(),
        "left": lib.FnComponent(fn=lambda v: v + "L"),
        "right": lib.FnComponent(fn=lambda v: v + "R"),
        "join": lib.FnComponent(fn=lambda a, b: f"{a}|{b}"),
    })
    diamond.add_links([
        lib.Link("in", "left", src_key="q"), lib.Link("in", "right", src_key="q"),
        lib.Link("left", "join", dest_key="a"), lib.Link("right", "join", dest_key="b"),
    ])
    results["diamond"] = diamond.run(q="x")

    branch = lib.QueryPipeline(modules={
        "n": lib.FnComponent(fn=lambda n: n),
        "even": lib.FnComponent(fn=lambda k: f"{k} even"),
        "odd": lib.FnComponent(fn=lambda k: f"{k} odd"),
        "out": lib.FnComponent(fn=lambda text: text.upper()),
    })
    branch.add_link("n", "even", condition_fn=lambda n: n % 2 == 0, input_fn=lambda n: n * 10)
    branch.add_link("n", "odd", condition_fn=lambda n: n % 2 == 1)
    branch.add_link("even", "out")
    branch.add_link("odd", "out")
    results["branch even"] = branch.run(n=4)
    results["branch odd"] = branch.run(n=3)

    two_roots = lib.QueryPipeline(modules={
        "a": lib.FnComponent(fn=lambda x: x + 1), "b": lib.FnComponent(fn=lambda y: y * 3),
        "sum": lib.FnComponent(fn=lambda p, q: p + q),
    })
    two_roots.add_link("a", "sum", dest_key="p")
    two_roots.add_link("b", "sum", dest_key="q")
    results["run_multi"] = two_roots.run_multi({"a": {"x": 1}, "b": {"y": 2}})

    seen: list[Any] = []
    component = lib.StatefulFnComponent(fn=lambda state, x: seen.append(sorted(state)) or x)
    stateful = lib.QueryPipeline(chain=[component], state={"base": 1})
    stateful.run(x=0)
    stateful.update_state({"task": "t", "step_state": {}})
    stateful.run(x=0)
    results["state seen by components"] = seen
    results["pipeline state"] = sorted(stateful.state)
    return results


def test_plain_pipelines_give_the_same_results_on_both() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = pipeline_cases(llama())
    mine = pipeline_cases(ours())
    assert mine == theirs
    assert mine["diamond"] == "xL|xR" and mine["branch even"] == "40 EVEN"
    assert mine["state seen by components"] == [["base"], ["step_state", "task"]]


def test_nbagent_worker_drives_a_real_llama_index_query_pipeline() -> None:
    from nbagent import AgentChatResponse, AgentRunner, ChatMessage, QueryPipelineAgentWorker

    lib = llama()

    def attempt(state: dict[str, Any]) -> int:
        step_state = state["step_state"]
        step_state["n"] = step_state.get("n", 0) + 1
        return step_state["n"]

    def respond(state: dict[str, Any], n: int) -> tuple[Any, bool]:
        if n == 3:
            state["step_state"]["memory"].put(ChatMessage(role="assistant", content=f"{state['task'].input} x3"))
        if n == 2:  # LlamaIndex's own response type is accepted too
            return lib.AgentChatResponse(response="two"), False
        return AgentChatResponse(response=f"n={n}"), n >= 3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        qp = lib.QueryPipeline(chain=[lib.StatefulFnComponent(fn=attempt), lib.StatefulFnComponent(fn=respond)])
    assert type(qp).__module__.startswith("llama_index")
    with pytest.warns(DeprecationWarning, match="FnAgentWorker"):
        worker = QueryPipelineAgentWorker(qp)
    agent = AgentRunner(worker)
    assert run_stepwise(agent, "hey") == (["n=1", "two", "n=3"], ["memory", "n", "sources"], "n=3")
    assert transcript(agent) == [("assistant", "hey x3")]
    # undo and failure safety hold with a foreign pipeline too
    task = agent.create_task("again")
    agent.run_step(task.task_id)
    agent.run_step(task.task_id)
    agent.undo_step(task.task_id)
    assert task.extra_state["n"] == 1
    assert str(agent.run_step(task.task_id).output) == "two"


def test_llama_index_deprecated_agent_components_are_refused_at_construction() -> None:
    from nbagent import QueryPipelineAgentWorker

    lib = llama()
    from llama_index.core.query_pipeline import AgentInputComponent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        qp = lib.QueryPipeline(chain=[AgentInputComponent(fn=lambda task, state: {"input": task.input})])
        with pytest.raises(TypeError, match="LlamaIndex's AgentInputComponent, which only takes LlamaIndex's Task"):
            QueryPipelineAgentWorker(qp)


def llama_deprecated() -> types.SimpleNamespace:
    lib = llama()
    from llama_index.core import PromptTemplate
    from llama_index.core.query_pipeline import AgentFnComponent, AgentInputComponent

    lib.PromptTemplate, lib.AgentInputComponent, lib.AgentFnComponent = PromptTemplate, AgentInputComponent, AgentFnComponent
    return lib


def ours_deprecated() -> types.SimpleNamespace:
    lib = ours()
    from nbagent.prompts import PromptTemplate
    from nbagent.query_pipeline import AgentFnComponent, AgentInputComponent

    lib.PromptTemplate, lib.AgentInputComponent, lib.AgentFnComponent = PromptTemplate, AgentInputComponent, AgentFnComponent
    return lib


REWRITE = "Rewrite the question for a text-to-SQL engine.\nQuestion: {input}\nFailed attempts:\n{convo_history}\nNew question: "
VALIDATE = "Does this answer the question? Answer YES or NO.\nQuestion: {input}\nSQL: {sql_query}\nResult: {sql_response}\n"


def build_retry_agent(lib: types.SimpleNamespace, llm: Any, max_iter: int = 3) -> Any:
    """The docs' "agent around a query pipeline" retry layer (deprecated flow): an
    AgentInputComponent, a prompt, the model, a text-to-SQL engine (here a stand-in function),
    and an AgentFnComponent that asks the model, in a mini pipeline, whether to stop."""
    retry_prompt = lib.PromptTemplate(REWRITE)
    validate_prompt = lib.PromptTemplate(VALIDATE)

    def agent_input_fn(task: Any, state: dict[str, Any]) -> dict[str, Any]:
        if "convo_history" not in state:
            state["convo_history"] = []
            state["count"] = 0
        state["convo_history"].append(f"User: {task.input}")
        return {"input": task.input, "convo_history": "\n".join(state["convo_history"])}

    def sql_engine(input: Any) -> dict[str, Any]:
        question = input.message.content
        return {"sql_query": f"SELECT answer FROM facts WHERE q = '{question}'", "sql_response": f"rows for {question}"}

    def agent_output_fn(task: Any, state: dict[str, Any], output: Any) -> tuple[Any, bool]:
        state["convo_history"].append(f"Assistant (inferred SQL query): {output['sql_query']}")
        state["convo_history"].append(f"Assistant (response): {output['sql_response']}")
        check = validate_prompt.as_query_component(
            partial={"sql_query": output["sql_query"], "sql_response": str(output["sql_response"])}
        )
        verdict = lib.QueryPipeline(chain=[check, llm]).run(input=task.input)
        state["count"] += 1
        is_done = state["count"] >= max_iter or "YES" in verdict.message.content
        return lib.AgentChatResponse(response=str(output["sql_response"])), is_done

    qp = lib.QueryPipeline(modules={
        "input": lib.AgentInputComponent(fn=agent_input_fn),
        "retry_prompt": retry_prompt,
        "llm": llm,
        "sql_query_engine": lib.FnComponent(fn=sql_engine),
        "output_component": lib.AgentFnComponent(fn=agent_output_fn),
    })
    qp.add_link("input", "retry_prompt", src_key="input", dest_key="input")
    qp.add_link("input", "retry_prompt", src_key="convo_history", dest_key="convo_history")
    qp.add_chain(["retry_prompt", "llm", "sql_query_engine", "output_component"])
    return lib.AgentRunner(lib.QueryPipelineAgentWorker(qp))


def test_the_docs_retry_agent_deprecated_flow_gives_the_same_run_on_both() -> None:
    from nbagent import ScriptedLLM

    # per step: the rewritten question, then the validator's verdict
    script = ["albums by AC/DC", "NO", "albums whose artist is AC/DC", "YES"]
    runs = {}
    reference, nb = llama_scripted_llm(script), ScriptedLLM(list(script))
    for name, lib, llm in (("llama_index", llama_deprecated(), reference), ("nbagent", ours_deprecated(), nb)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = build_retry_agent(lib, llm)
        runs[name] = run_stepwise(agent, "How many albums did AC/DC make?")
        task = agent.list_tasks()[-1]
        runs[name] += (task.extra_state["convo_history"], task.extra_state["count"])
    assert runs["nbagent"] == runs["llama_index"]
    outputs, keys, final, history, count = runs["nbagent"]
    assert outputs == ["rows for albums by AC/DC", "rows for albums whose artist is AC/DC"] and count == 2
    assert keys == ["convo_history", "count", "memory", "sources"] and final == outputs[-1]
    assert history[-1] == "Assistant (response): rows for albums whose artist is AC/DC"
    # the model saw the same prompts, filled from the same state (4 calls: rewrite, validate, x2)
    sent = [r.messages[-1].content for r in nb.requests]
    assert reference.prompts == [f"user: {text}\nassistant: " for text in sent]
    assert "Failed attempts:\nUser: How many albums did AC/DC make?\nAssistant (inferred SQL query)" in sent[2]


def llama_react() -> types.SimpleNamespace:
    lib = llama()
    from llama_index.core.agent.react.formatter import ReActChatFormatter
    from llama_index.core.agent.react.output_parser import ReActOutputParser
    from llama_index.core.agent.react.types import ObservationReasoningStep
    from llama_index.core.query_pipeline import ToolRunnerComponent
    from llama_index.core.tools import FunctionTool

    lib.__dict__.update(
        ReActChatFormatter=ReActChatFormatter, ReActOutputParser=ReActOutputParser,
        ObservationReasoningStep=ObservationReasoningStep, ToolRunnerComponent=ToolRunnerComponent,
        FunctionTool=FunctionTool,
    )
    return lib


def ours_react() -> types.SimpleNamespace:
    lib = ours()
    from nbagent import FunctionTool
    from nbagent.query_pipeline import ToolRunnerComponent
    from nbagent.workers.react import ObservationReasoningStep, ReActChatFormatter, ReActOutputParser

    lib.__dict__.update(
        ReActChatFormatter=ReActChatFormatter, ReActOutputParser=ReActOutputParser,
        ObservationReasoningStep=ObservationReasoningStep, ToolRunnerComponent=ToolRunnerComponent,
        FunctionTool=FunctionTool,
    )
    return lib


def build_react_agent(lib: types.SimpleNamespace, llm: Any) -> Any:
    """The docs' ReAct agent written as a query pipeline (stateful flow): prompt from the
    reasoning so far, the model, the parser, then either a tool run or the answer."""

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    tools = [lib.FunctionTool.from_defaults(fn=add)]

    def agent_input_fn(state: dict[str, Any]) -> str:
        reasoning = state["step_state"].setdefault("current_reasoning", [])
        if not reasoning:
            reasoning.append(lib.ObservationReasoningStep(observation=state["task"].input))
        return state["task"].input

    def react_prompt_fn(state: dict[str, Any], input: str) -> list[Any]:
        return lib.ReActChatFormatter().format(
            tools, chat_history=state["task"].memory.get(), current_reasoning=state["step_state"]["current_reasoning"]
        )

    def parse_react_output_fn(state: dict[str, Any], chat_response: Any) -> dict[str, Any]:
        step = lib.ReActOutputParser().parse(chat_response.message.content)
        return {"done": step.is_done, "reasoning_step": step}

    def run_tool_fn(state: dict[str, Any], reasoning_step: Any) -> dict[str, Any]:
        runner = lib.ToolRunnerComponent(tools)
        out = runner.run_component(tool_name=reasoning_step.action, tool_input=reasoning_step.action_input)
        observation = lib.ObservationReasoningStep(observation=str(out["output"]))
        state["step_state"]["current_reasoning"].append(observation)
        return {"response_str": observation.get_content(), "is_done": False}

    def process_response_fn(state: dict[str, Any], response_step: Any) -> dict[str, Any]:
        state["step_state"]["current_reasoning"].append(response_step)
        memory = state["step_state"]["memory"]
        memory.put(lib.ChatMessage(role="user", content=state["task"].input))
        memory.put(lib.ChatMessage(role="assistant", content=response_step.response))
        return {"response_str": response_step.response, "is_done": True}

    def process_agent_response_fn(state: dict[str, Any], response_dict: dict[str, Any]) -> tuple[Any, bool]:
        return lib.AgentChatResponse(response=response_dict["response_str"]), response_dict["is_done"]

    qp = lib.QueryPipeline()
    qp.add_modules({
        "agent_input": lib.StatefulFnComponent(fn=agent_input_fn),
        "react_prompt": lib.StatefulFnComponent(fn=react_prompt_fn),
        "llm": llm,
        "react_output_parser": lib.StatefulFnComponent(fn=parse_react_output_fn),
        "run_tool": lib.StatefulFnComponent(fn=run_tool_fn),
        "process_response": lib.StatefulFnComponent(fn=process_response_fn),
        "process_agent_response": lib.StatefulFnComponent(fn=process_agent_response_fn),
    })
    qp.add_chain(["agent_input", "react_prompt", "llm", "react_output_parser"])
    qp.add_link("react_output_parser", "run_tool", condition_fn=lambda x: not x["done"], input_fn=lambda x: x["reasoning_step"])
    qp.add_link("react_output_parser", "process_response", condition_fn=lambda x: x["done"], input_fn=lambda x: x["reasoning_step"])
    qp.add_link("process_response", "process_agent_response")
    qp.add_link("run_tool", "process_agent_response")
    return lib.AgentRunner(lib.QueryPipelineAgentWorker(qp))


def test_the_docs_react_pipeline_agent_gives_the_same_run_on_both() -> None:
    from nbagent import ScriptedLLM

    script = [
        'Thought: I need to add.\nAction: add\nAction Input: {"a": 2, "b": 3}',
        "Thought: I can answer now.\nAnswer: 2 + 3 is 5",
        "Thought: I remember.\nAnswer: it was 5",
    ]
    runs = {}
    for name, lib, llm in (
        ("llama_index", llama_react(), llama_scripted_llm(script)),
        ("nbagent", ours_react(), ScriptedLLM(list(script))),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = build_react_agent(lib, llm)
        stepwise = run_stepwise(agent, "What is 2 + 3?")
        task = agent.list_tasks()[-1]
        reasoning = [type(s).__name__ for s in task.extra_state["current_reasoning"]]
        second = str(agent.chat("What was it?"))
        runs[name] = (stepwise, reasoning, second, transcript(agent))
    assert runs["nbagent"] == runs["llama_index"]
    (outputs, keys, final), reasoning, second, _ = runs["nbagent"]
    assert outputs == ["Observation: 5", "2 + 3 is 5"] and final == "2 + 3 is 5" and second == "it was 5"
    assert keys == ["current_reasoning", "memory", "sources"]
    assert reasoning == ["ObservationReasoningStep", "ObservationReasoningStep", "ResponseReasoningStep"]
