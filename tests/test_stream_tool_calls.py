"""A streamed reply is the same reply as unstreamed (issue 29, item 1).

Real models often stream some text and then tool calls ("Two files look old; I will delete
them." plus two ``delete_file`` calls). ``stream_step``, ``stream_chat`` and the panel used to
take the text for the answer and drop the calls. Now the text streams to the caller as it
comes, and the end of the reply decides the step exactly as ``run_step`` would: the calls run
(or wait for approval) and the step is not the last one.

Checked here with the offline models (the same script through ``run_step`` and ``stream_step``
gives the same memory, tool runs and graph), and over real HTTP: the shared fake OpenAI server,
and a server below that holds the tool calls back until the test has read the text, which
shows the text reaches the caller while the reply is still coming.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nbagent import (
    AgentRunner,
    FunctionTool,
    OpenAILLM,
    ParallelAgentRunner,
    ScriptedLLM,
    seed_ids,
)
from nbagent import events as ev
from nbagent.runner.approvals import AwaitingApprovalError
from nbagent.runner.base import TaskStateError
from nbagent.runner.state import TaskStatus
from nbagent.schema import StreamingAgentChatResponse
from nbagent.viz.dot import task_to_dot
from nbagent.viz.panel import AgentPanel
from nbagent.workers.function_calling import FunctionCallingAgentWorker
from nbagent.workers.react import ReActAgentWorker

try:
    from tests.openai_server import serve
except ImportError:  # run from inside tests/
    from openai_server import serve  # type: ignore[no-redef]

WORDS = "Two files look old; I will delete them."
TEXT_THEN_CALLS = {
    "content": WORDS,
    "tool_calls": [
        {"name": "delete_file", "arguments": {"name": "a.txt"}},
        {"name": "delete_file", "arguments": {"name": "b.txt"}},
    ],
}
DONE = "Deleted a.txt and b.txt."


class Files:
    """Tools with a record of what really ran."""

    def __init__(self, approval: bool = False) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

        def delete_file(name: str) -> str:
            """Delete a file."""
            self.ran.append(("delete_file", {"name": name}))
            return f"deleted {name}"

        def lookup(key: str) -> str:
            """Look a key up; its value is the answer."""
            self.ran.append(("lookup", {"key": key}))
            return f"value of {key}"

        self.tools = [
            FunctionTool.from_defaults(delete_file, requires_approval=approval),
            FunctionTool.from_defaults(lookup, return_direct=True),
        ]


def _agent(script: list[Any], files: Files, **kw: Any) -> tuple[AgentRunner, ScriptedLLM]:
    llm = ScriptedLLM(script)
    return AgentRunner(FunctionCallingAgentWorker(files.tools, llm, **kw)), llm


_SECONDS = re.compile(r"\d+\.\d+ s")


def _dot(runner: AgentRunner, task: Any) -> str:
    return _SECONDS.sub("_ s", task_to_dot(runner.state_of(task)))


def _messages(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (m.role.value, m.content, tuple((c.tool_id, c.tool_name, json.dumps(c.tool_kwargs)) for c in m.tool_calls),
         m.tool_call_id)
        for m in messages
    ]


def _run(script: list[Any], streamed: bool, approve: bool = False, **kw: Any) -> dict[str, Any]:
    """One task from start to answer, step by step; with ``approve``, every waiting call is
    approved before the next step."""
    seed_ids(0)
    files = Files(approval=approve)
    runner, llm = _agent(script, files, **kw)
    task = runner.create_task("Clean up the old files.")
    outs = []
    while True:
        if approve:
            for call in runner.pending_approvals(task):
                runner.approve(task, call.call_id)
        out = runner.stream_step(task) if streamed else runner.run_step(task)
        if isinstance(out.output, StreamingAgentChatResponse):
            "".join(out.output.response_gen)  # the caller reads the reply to its end
        text = out.output.response  # what the step says once it has ended
        outs.append((out.is_last, text.rstrip(), [o.content for o in out.tool_outputs], out.reasoning))
        if out.is_last:
            break
    answer = runner.finalize_response(task)
    seed_ids(None)
    return {
        "outs": outs,
        "answer": str(answer).rstrip(),
        "ran": files.ran,
        "memory": _messages(runner.memory.get_all()),
        "requests": [_messages(r.messages) for r in llm.requests],
        "dot": _dot(runner, task),
        "usage": [o.usage and (o.usage.prompt_tokens, o.usage.completion_tokens) for o in runner.get_completed_steps(task)],
    }


SCRIPTS = {
    "text then calls": ([TEXT_THEN_CALLS, DONE], {}),
    "calls, then text then a call, then text": (
        [{"tool_calls": [{"name": "delete_file", "arguments": {"name": "x"}}]},
         {"content": "One more.", "tool_calls": [{"name": "delete_file", "arguments": {"name": "y"}}]},
         "All gone."],
        {},
    ),
    "text then a return_direct call": ([{"content": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}], {}),
    "text then calls past the budget": ([TEXT_THEN_CALLS, DONE], {"max_function_calls": 1}),
    "text then calls, one at a time": ([TEXT_THEN_CALLS, DONE], {"allow_parallel_tool_calls": False}),
    "text then a call to no tool": ([{"content": "Hmm.", "tool_calls": [{"name": "nope", "arguments": {}}]}, DONE], {}),
    "text alone": (["Nothing to delete."], {}),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_stream_step_gives_the_same_run_as_run_step(name: str) -> None:
    script, kw = SCRIPTS[name]
    plain = _run(script, streamed=False, **kw)
    streamed = _run(script, streamed=True, **kw)
    assert streamed["ran"] == plain["ran"]
    assert streamed["memory"] == plain["memory"]
    assert streamed["requests"] == plain["requests"]
    assert streamed["outs"] == plain["outs"]
    assert streamed["answer"] == plain["answer"]
    assert streamed["usage"] == plain["usage"]  # the streamed step's tokens count too
    assert streamed["dot"] == plain["dot"]


def test_the_same_run_waits_for_approval_streamed_or_not() -> None:
    plain = _run([TEXT_THEN_CALLS, DONE], streamed=False, approve=True)
    streamed = _run([TEXT_THEN_CALLS, DONE], streamed=True, approve=True)
    assert plain["ran"] == [("delete_file", {"name": "a.txt"}), ("delete_file", {"name": "b.txt"})]
    assert [o[0] for o in plain["outs"]] == [False, False, True]  # waits, runs the calls, answers
    for key in ("ran", "memory", "requests", "outs", "answer", "usage", "dot"):
        assert streamed[key] == plain[key], key


def test_the_text_streams_before_the_reply_decides_the_step() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    seen: list[Any] = []
    runner.subscribe(seen.append)
    task = runner.create_task("Clean up.")
    out = runner.stream_step(task)
    # the reply has started with text: it streams now, the step is still running
    assert out.is_last and isinstance(out.output, StreamingAgentChatResponse)
    assert runner.state_of(task).status == TaskStatus.RUNNING and files.ran == []
    tokens = out.output.response_gen
    assert next(tokens) == "Two "
    assert files.ran == [] and not any(isinstance(e, ev.StepCompleted) for e in seen)
    rest = list(tokens)
    assert "Two " + "".join(rest) == WORDS
    # the reply ended with two calls: they ran, and the step is not the last one
    assert not out.is_last and len(out.next_steps) == 1
    assert [o.content for o in out.tool_outputs] == ["deleted a.txt", "deleted b.txt"]
    assert out.reasoning == WORDS and len(files.ran) == 2
    assert [s.content for s in out.output.sources] == ["deleted a.txt", "deleted b.txt"]
    done = [e for e in seen if isinstance(e, ev.StepCompleted)]
    assert len(done) == 1 and done[0].is_last is False
    streamed = "".join(e.token for e in seen if isinstance(e, ev.TokenStreamed))
    assert streamed == WORDS  # each token reported once, as the caller read it
    assert runner.state_of(task).status == TaskStatus.ACTIVE
    assert str(runner.stream_step(task).output) == DONE


def test_the_streamed_step_waits_for_approval_like_run_step() -> None:
    files = Files(approval=True)
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    out = runner.stream_step(task)
    assert str(out.output) == WORDS
    assert not out.is_last and files.ran == []
    waiting = runner.pending_approvals(task)
    assert [(c.tool_name, c.arguments) for c in waiting] == [
        ("delete_file", {"name": "a.txt"}), ("delete_file", {"name": "b.txt"})
    ]
    assert out.output.metadata["awaiting_approval"] == [c.call_id for c in waiting]
    with pytest.raises(AwaitingApprovalError):
        runner.stream_step(task)
    runner.approve(task, waiting[0].call_id)
    runner.reject(task, waiting[1].call_id, reason="keep b")
    out = runner.stream_step(task)  # runs the decided calls
    assert files.ran == [("delete_file", {"name": "a.txt"})]
    assert "keep b" in [o.content for o in out.tool_outputs][1]
    assert str(runner.stream_step(task).output) == DONE


def test_an_unread_stream_ends_before_the_next_call_on_its_task() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    first = runner.stream_step(task)
    out = runner.run_step(task)  # reads the rest of the first reply first: its calls run
    assert not first.is_last and len(files.ran) == 2
    assert first.output.response == WORDS and out.is_last and out.output.response == DONE
    assert [s.output.response if hasattr(s.output, "response") else s.output
            for s in runner.get_completed_steps(task)] == [WORDS, DONE]


def test_undo_after_an_unread_streamed_step_takes_back_the_whole_step() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    runner.stream_step(task)
    undone = runner.undo_step(task)
    state = runner.state_of(task)
    assert state.completed_steps == [] and [s.step_id for s in state.step_queue] == [undone.step_id]
    assert task.scratch_memory.get_all() == [] and state.streaming is None


def test_finalizing_a_reply_that_turns_out_to_call_tools_says_so_at_its_end() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    out = runner.stream_step(task)
    response = runner.finalize_response(task)  # the reference's loop: is_last said True
    assert response is out.output
    with pytest.raises(TaskStateError, match=r"ended with tool calls.*'delete_file', 'delete_file'\] ran.*not finalized"):
        response.print_response_stream()
    state = runner.state_of(task)
    assert not state.finalized and not out.is_last and len(state.step_queue) == 1
    assert runner.chat_history == []
    runner.run_step(task)
    assert str(runner.finalize_response(task)) == DONE


def test_finalizing_a_streamed_answer_still_waits_for_its_end() -> None:
    runner, _ = _agent(["All clean already."], Files())
    task = runner.create_task("Clean up.")
    runner.stream_step(task)
    response = runner.finalize_response(task)
    assert runner.chat_history == []
    assert str(response) == "All clean already."
    assert [m.content for m in runner.chat_history] == ["Clean up.", "All clean already."]


def test_stream_chat_goes_on_to_the_answer() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    response = runner.stream_chat("Clean up.")
    tokens = list(response.response_gen)
    assert "".join(tokens) == WORDS + "\n\n" + DONE  # everything said, as it came
    assert response.response == DONE  # the answer: what chat answers
    assert [s.content for s in response.sources] == ["deleted a.txt", "deleted b.txt"]
    streamed_memory = _messages(runner.memory.get_all())
    plain, _ = _agent([TEXT_THEN_CALLS, DONE], Files())
    assert plain.chat("Clean up.").response == DONE
    assert streamed_memory == _messages(plain.memory.get_all())


def test_async_stream_chat_goes_on_to_the_answer() -> None:
    async def main() -> tuple[str, str, int]:
        files = Files()
        runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
        response = await runner.astream_chat("Clean up.")
        text = "".join([t async for t in response.async_response_gen()])
        return text, response.response, len(files.ran)

    assert asyncio.run(main()) == (WORDS + "\n\n" + DONE, DONE, 2)


def test_stream_chat_stops_where_chat_stops_for_approval() -> None:
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], Files(approval=True))
    response = runner.stream_chat("Clean up.")
    with pytest.raises(AwaitingApprovalError):
        list(response.response_gen)
    plain, _ = _agent([TEXT_THEN_CALLS, DONE], Files(approval=True))
    with pytest.raises(AwaitingApprovalError):
        plain.chat("Clean up.")


def test_the_panel_runs_the_calls_of_a_streamed_reply() -> None:
    files = Files()
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    panel = AgentPanel(runner, task)
    out = panel.step()
    assert not isinstance(out, BaseException) and out is not None
    assert not out.is_last and len(files.ran) == 2  # not taken for the answer
    assert panel.streamed_text == WORDS
    assert runner.state_of(task).status == TaskStatus.ACTIVE
    panel.step()
    assert runner.state_of(task).finalized and str(runner.state_of(task).final_response) == DONE


def test_the_panel_waits_for_approval_after_a_streamed_reply() -> None:
    files = Files(approval=True)
    runner, _ = _agent([TEXT_THEN_CALLS, DONE], files)
    task = runner.create_task("Clean up.")
    panel = AgentPanel(runner, task)
    panel.run()  # Run to end stops at the calls that wait
    assert files.ran == [] and len(runner.pending_approvals(task)) == 2
    assert not runner.state_of(task).finalized


def test_a_parallel_runner_reads_each_streamed_reply_inside_its_step() -> None:
    files = Files()
    worker = FunctionCallingAgentWorker(files.tools, ScriptedLLM([TEXT_THEN_CALLS, DONE]))
    runner = ParallelAgentRunner(worker)
    task = runner.create_task("Clean up.")
    outs = runner.run_steps_in_queue(task, mode="stream")
    assert [o.is_last for o in outs] == [False] and len(files.ran) == 2
    assert isinstance(outs[0].output, StreamingAgentChatResponse) and outs[0].output.is_done
    assert runner.state_of(task).streaming is None


def test_stream_chat_ends_with_a_return_direct_answer() -> None:
    script = [{"content": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}]
    runner, _ = _agent(script, Files())
    response = runner.stream_chat("What is k?")
    assert list(response.response_gen)[-2:] == ["\n\n", "value of k"]
    assert response.response == "value of k" == runner.chat_history[-1].content


def test_react_streams_its_answer_and_records_it_inside_the_step() -> None:
    answer = "Thought: I can answer without using any more tools.\nAnswer: All clean."
    runner = AgentRunner(ReActAgentWorker.from_tools([], llm=ScriptedLLM([answer])))
    task = runner.create_task("Clean up.")
    out = runner.stream_step(task)
    assert runner.state_of(task).status == TaskStatus.RUNNING and task.scratch_memory.get_all()[-1].role.value == "user"
    assert str(out.output) == "All clean."
    assert out.is_last and runner.state_of(task).status == TaskStatus.COMPLETED
    assert task.scratch_memory.get_all()[-1].content == "All clean."
    assert runner.get_completed_steps(task)[-1] is out


# ----- over real HTTP ------------------------------------------------------------------------


def _http_run(script: list[Any], streamed: bool) -> dict[str, Any]:
    with serve(script) as server:
        seed_ids(0)
        files = Files()
        llm = OpenAILLM(model="fake-model", base_url=server.base_url, api_key="sk-test", max_retries=0)
        runner = AgentRunner(FunctionCallingAgentWorker(files.tools, llm))
        task = runner.create_task("Clean up the old files.")
        while True:
            out = runner.stream_step(task) if streamed else runner.run_step(task)
            str(out.output)
            if out.is_last:
                break
        answer = str(runner.finalize_response(task))
        seed_ids(None)
        return {
            "answer": answer.rstrip(),
            "ran": files.ran,
            "memory": _messages(runner.memory.get_all()),
            "sent": [r["messages"] for r in server.requests],
            "streamed": [bool(r.get("stream")) for r in server.requests],
            "dot": _dot(runner, task),
        }


def test_over_http_a_streamed_reply_with_text_then_calls_is_the_same_reply() -> None:
    plain = _http_run([TEXT_THEN_CALLS, DONE], streamed=False)
    streamed = _http_run([TEXT_THEN_CALLS, DONE], streamed=True)
    assert streamed["streamed"] == [True, True] and plain["streamed"] == [False, False]
    assert plain["ran"] == [("delete_file", {"name": "a.txt"}), ("delete_file", {"name": "b.txt"})]
    for key in ("answer", "ran", "memory", "sent", "dot"):
        assert streamed[key] == plain[key], key


class _GatedStream:
    """An OpenAI-compatible server on 127.0.0.1 that streams a reply's text, then waits for
    ``release`` before it sends the tool calls: the test reads the text in between."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                gate.requests.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                n = len(gate.requests)

                def send(delta: dict[str, Any] | None, finish: str | None = None, raw: str | None = None) -> None:
                    data = raw or json.dumps({"id": f"c{n}", "object": "chat.completion.chunk", "created": 0,
                                              "model": "gated", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                    event = f"data: {data}\n\n".encode()
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()

                if n == 1:
                    for word in ("Two ", "files ", "look ", "old."):
                        send({"content": word})
                    gate.release.wait(10)  # the calls come only once the test has read the text
                    for i, name in enumerate(("a.txt", "b.txt")):
                        send({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                              "function": {"name": "delete_file", "arguments": json.dumps({"name": name})}}]})
                    send({}, "tool_calls")
                else:
                    send({"content": DONE})
                    send({}, "stop")
                send(None, raw="[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"


@contextmanager
def _gated() -> Iterator[_GatedStream]:
    server = _GatedStream()
    server._thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server._httpd.shutdown()
        server._httpd.server_close()


def test_over_http_the_text_reaches_the_caller_before_the_calls_arrive() -> None:
    with _gated() as server:
        files = Files()
        llm = OpenAILLM(model="gated", base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=20)
        runner = AgentRunner(FunctionCallingAgentWorker(files.tools, llm))
        task = runner.create_task("Clean up the old files.")
        out = runner.stream_step(task)  # returns with the text, while the server holds the calls
        tokens = out.output.response_gen
        read = [next(tokens) for _ in range(4)]
        assert "".join(read) == "Two files look old."
        assert not server.release.is_set() and files.ran == []
        assert runner.state_of(task).status == TaskStatus.RUNNING
        server.release.set()  # now the server sends the two calls
        assert list(tokens) == []
        assert not out.is_last and len(files.ran) == 2
        assert [o.content for o in out.tool_outputs] == ["deleted a.txt", "deleted b.txt"]
        out = runner.stream_step(task)
        assert str(out.output) == DONE and out.is_last
        tool_msgs = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1"]


def test_finalizing_a_streamed_return_direct_step_gives_the_tools_answer() -> None:
    script = [{"content": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}]
    runner, _ = _agent(script, Files())
    task = runner.create_task("What is k?")
    runner.stream_step(task)
    response = runner.finalize_response(task)
    assert str(response) == "Let me look."  # what streamed: the model's words
    state = runner.state_of(task)
    assert state.finalized and state.final_response.response == "value of k"  # the answer


class _BreaksMidReply(ScriptedLLM):
    """Streams the start of its reply's text, then the connection is lost."""

    async def _astream(self, messages: Any, tools: Any, tool_choice: Any, **kwargs: Any) -> Any:
        n = 0
        async for chunk in super()._astream(messages, tools, tool_choice, **kwargs):
            if n == 2:
                raise ConnectionError("the connection was lost mid-reply")
            n += 1
            yield chunk


def test_a_reply_that_breaks_mid_text_puts_its_step_back() -> None:
    files = Files()
    llm = _BreaksMidReply([TEXT_THEN_CALLS])
    runner = AgentRunner(FunctionCallingAgentWorker(files.tools, llm))
    seen: list[Any] = []
    runner.subscribe(seen.append)
    task = runner.create_task("Clean up.")
    out = runner.stream_step(task)
    with pytest.raises(ConnectionError):
        list(out.output.response_gen)
    state = runner.state_of(task)
    assert state.status == TaskStatus.FAILED and state.streaming is None and not state.running
    assert [s.step_id for s in state.step_queue] == [out.task_step.step_id] and state.completed_steps == []
    assert task.scratch_memory.get_all() == [] and files.ran == []
    assert [type(e).__name__ for e in seen if isinstance(e, (ev.StepCompleted, ev.StepFailed))] == ["StepFailed"]


REACT_SCRIPTS = {
    "action then answer": [
        'Thought: I should delete it.\nAction: delete_file\nAction Input: {"name": "a.txt"}',
        "Thought: I can answer without using any more tools.\nAnswer: Deleted a.txt.",
    ],
    "a reply that does not parse, then an answer": [
        "Thought: hmm\nAction: delete_file\nAction Input: not json",
        "Thought: done.\nAnswer:   Nothing deleted.  \n",
    ],
    "an answer in a fence": ["```\nThought: easy.\nAnswer: All clean.\n```"],
}


@pytest.mark.parametrize("name", list(REACT_SCRIPTS))
def test_react_stream_step_gives_the_same_run_as_run_step(name: str) -> None:
    def run(streamed: bool) -> dict[str, Any]:
        seed_ids(0)
        files = Files()
        llm = ScriptedLLM(REACT_SCRIPTS[name])
        runner = AgentRunner(ReActAgentWorker.from_tools(files.tools, llm=llm))
        task = runner.create_task("Clean up.")
        while True:
            out = runner.stream_step(task) if streamed else runner.run_step(task)
            str(out.output)
            if out.is_last:
                break
        answer = str(runner.finalize_response(task))
        seed_ids(None)
        return {"answer": answer.strip(), "ran": files.ran, "memory": _messages(runner.memory.get_all()),
                "requests": [_messages(r.messages) for r in llm.requests], "dot": _dot(runner, task),
                "reasoning": [s.get_content() for s in task.extra_state["reasoning"]]}

    plain, streamed = run(False), run(True)
    for key in ("answer", "ran", "memory", "requests", "reasoning", "dot"):
        assert streamed[key] == plain[key], key
