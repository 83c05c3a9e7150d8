"""LlamaIndex's "Building a Custom Agent" notebook, ported (issue 23, item 10): a retry agent
written twice, as a stateful function in an FnAgentWorker and as a CustomSimpleAgentWorker
subclass with its own pydantic fields and private attribute. The router over SQL and vector
query engines is a function over function tools; the structured "response eval" program is a
model call whose JSON reply is parsed. Models are scripted.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any, Optional

from pydantic import Field, PrivateAttr

from tests.oracle.docs_api import DocsApi, docs_both, roles_contents

PROMPT_STR = "Given previous question/response pairs, say if an error has occurred and suggest a modified question. Answer in JSON."


def city_stats(query: str) -> str:
    """Useful for translating a natural language query into a SQL query over city_stats."""
    return "Toronto: Canada, Tokyo: Japan, Berlin: Germany" if "countries" in query else "Error: no such column"


def _router(api: DocsApi) -> Any:
    """Stands for the notebook's RouterQueryEngine: answers a question with the one tool."""
    tool = api.FunctionTool.from_defaults(fn=city_stats)

    def query(question: str) -> str:
        return city_stats(question) if tool.metadata.name == "city_stats" else ""

    return query


def _evaluate(api: DocsApi, llm: Any, prompt_str: str, reasoning: list[tuple[str, str]]) -> dict[str, Any]:
    """The notebook's response-eval program: the reasoning so far as chat messages, a JSON
    verdict back."""
    messages = [api.ChatMessage(role="system", content=prompt_str)]
    messages += [api.ChatMessage(role=role, content=text) for role, text in reasoning]
    return json.loads(llm.chat(messages).message.content)


EVAL_SCRIPT = [
    json.dumps({"has_error": True, "new_question": "What are the countries of each city?", "explanation": "bad column"}),
    json.dumps({"has_error": False, "new_question": "", "explanation": ""}),
]


def run_fn_agent(api: DocsApi) -> tuple[str, str, Any]:
    """The notebook's FnAgentWorker retry agent; what it answers, prints, and the model object."""
    if True:
        llm = api.llm(EVAL_SCRIPT)

        def retry_agent_fn(state: dict[str, Any]) -> tuple[dict[str, Any], bool]:
            task, router = state["__task__"], state["router"]
            new_input = state.get("new_input", task.input)
            response = router(new_input)
            state["current_reasoning"].extend([("user", new_input), ("assistant", str(response))])
            verdict = _evaluate(api, state["llm"], state["prompt_str"], state["current_reasoning"])
            state["new_input"] = verdict["new_question"]
            if state.get("verbose", False):
                print(f"> Question: {new_input}")
                print(f"> Response: {response}")
                print(f"> Response eval: {verdict}")
            state["__output__"] = str(response)
            return state, not verdict["has_error"]

        agent = api.FnAgentWorker(
            fn=retry_agent_fn,
            initial_state={"prompt_str": PROMPT_STR, "llm": llm, "router": _router(api), "current_reasoning": [], "verbose": True},
        ).as_agent()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            response = agent.chat("What are the nations of each city?")
        return str(response), out.getvalue(), llm


def test_a_retry_agent_as_a_stateful_function() -> None:
    ref, nb = ((answer, printed) for answer, printed, _llm in (run_fn_agent(api) for api in docs_both()))
    assert ref[0] == "Toronto: Canada, Tokyo: Japan, Berlin: Germany"
    assert ref[1].count("> Question: ") == 2
    assert nb == ref


def test_a_retry_agent_as_a_custom_worker_subclass() -> None:
    seen = []
    for api in docs_both():
        llm = api.llm(EVAL_SCRIPT)

        class RetryAgentWorker(api.CustomSimpleAgentWorker):  # type: ignore[misc, name-defined]
            """Agent worker that adds a retry layer on top of a router."""

            prompt_str: str = Field(default=PROMPT_STR)
            max_iterations: int = Field(default=10)
            _router: Any = PrivateAttr()

            def __init__(self, tools: list[Any], **kwargs: Any) -> None:
                super().__init__(tools=tools, **kwargs)
                self._router = _router(api)

            def _initialize_state(self, task: Any, **kwargs: Any) -> dict[str, Any]:
                return {"count": 0, "current_reasoning": []}

            def _run_step(self, state: dict[str, Any], task: Any, input: Optional[str] = None) -> tuple[Any, bool]:
                new_input = state.get("new_input", task.input)
                response = self._router(new_input)
                state["current_reasoning"].extend([("user", new_input), ("assistant", str(response))])
                verdict = _evaluate(api, self.llm, self.prompt_str, state["current_reasoning"])
                state["new_input"] = verdict["new_question"]
                if self.verbose:
                    print(f"> Question: {new_input}")
                    print(f"> Response: {response}")
                return api.AgentChatResponse(response=str(response)), not verdict["has_error"]

            def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
                pass

        worker = RetryAgentWorker.from_tools([api.FunctionTool.from_defaults(fn=city_stats)], llm=llm, verbose=True)
        agent = worker.as_agent()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            response = agent.chat("What are the nations of each city?")
        seen.append((str(response), out.getvalue(), worker.max_iterations, worker.prompt_str == PROMPT_STR, roles_contents(agent.memory.get_all())))
    ref, nb = seen
    assert ref[0] == "Toronto: Canada, Tokyo: Japan, Berlin: Germany"
    assert ref[1] == (
        "> Question: What are the nations of each city?\n> Response: Error: no such column\n"
        "> Question: What are the countries of each city?\n> Response: Toronto: Canada, Tokyo: Japan, Berlin: Germany\n"
    )
    assert nb == ref
