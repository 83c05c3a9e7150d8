"""A session ``Memory`` (LlamaIndex's ``Memory``: a FIFO queue that archives its oldest
messages past a share of its token limit) saved and loaded, in a run file and in the SQLite
store (autosaved as it changes): its session id, its settings, its archived messages and
where the active ones start all come back, also after an undo that un-archives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbagent import AgentChatResponse, AgentRunner, ChatMessage, CustomSimpleAgentWorker, MessageRole, Task, seed_ids
from nbagent.persist import PersistError
from nbagent.session_memory import Memory
from nbagent.store import RunStore


class Talker(CustomSimpleAgentWorker):
    """Each step puts a long message into the runner's memory (which archives as it fills)."""

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"n": 0}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["n"] += 1
        role = MessageRole.USER if state["n"] % 2 else MessageRole.ASSISTANT
        task.memory.put(ChatMessage(role=role, content=f"message {state['n']} " + "word " * 12))
        return AgentChatResponse(response=f"step {state['n']}"), state["n"] >= 50

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        pass


class ScratchTalker(Talker):
    """The same into the task's scratch memory, which every step's undo snapshot holds."""

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["n"] += 1
        role = MessageRole.USER if state["n"] % 2 else MessageRole.ASSISTANT
        task.scratch_memory.put(ChatMessage(role=role, content=f"message {state['n']} " + "word " * 12))
        return AgentChatResponse(response=f"step {state['n']}"), state["n"] >= 50


def memory() -> Memory:
    return Memory(token_limit=80, session_id="workshop-7", chat_history_token_ratio=0.5, token_flush_size=5)


def facts(mem: Any) -> dict[str, Any]:
    return {
        "type": type(mem).__name__,
        "settings": mem.settings(),
        "token_limit": mem.token_limit,
        "archived": [m.text for m in mem.archived],
        "active": [m.text for m in mem.get()],
        "counts": list(mem._counts),
    }


def test_a_memory_that_archives_is_what_the_test_needs() -> None:
    runner = AgentRunner(Talker(), memory=memory())
    task = runner.create_task("go")
    for _ in range(6):
        runner.run_step(task)
    assert len(runner.memory.archived) >= 2 and runner.memory.get()  # some archived, some active


@pytest.mark.parametrize("name", ["run.json", "runs.db"])
def test_a_session_memory_comes_back_whole(tmp_path: Path, name: str) -> None:
    runner = AgentRunner(Talker(), memory=memory())
    task = runner.create_task("go")
    for _ in range(6):
        runner.run_step(task)
    runner.save(tmp_path / name)
    loaded = AgentRunner.load(tmp_path / name, Talker())
    assert facts(loaded.memory) == facts(runner.memory)
    assert loaded.state_of(task.task_id).task.memory is loaded.memory  # still one object
    # and it goes on as the live one does
    for r in (runner, loaded):
        r.run_step(task.task_id)
    assert facts(loaded.memory) == facts(runner.memory)


def test_autosaved_as_it_archives(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    live = AgentRunner(Talker(), memory=memory(), store=RunStore(db))
    task = live.create_task("go")
    seen: list[int] = []
    for _ in range(7):
        live.run_step(task)
        seen.append(len(live.memory.archived))
        assert facts(AgentRunner.load(db, Talker()).memory) == facts(live.memory)
    assert len(set(seen)) > 2  # the archived count moved while the store followed it


def test_an_undo_that_unarchives_is_saved_and_a_loaded_run_undoes_the_same(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    live = AgentRunner(ScratchTalker(), store=RunStore(db))
    task = live.create_task("go")
    live.state_of(task).task.scratch_memory = memory()
    seen: list[int] = []

    def scratch(r: AgentRunner) -> Any:
        return r.state_of(task.task_id).task.scratch_memory

    for _ in range(7):
        live.run_step(task)
        seen.append(len(scratch(live).archived))
        assert facts(scratch(AgentRunner.load(db, ScratchTalker()))) == facts(scratch(live))
    assert len(set(seen)) > 2
    for _ in range(4):
        live.undo_step(task)
        assert facts(scratch(AgentRunner.load(db, ScratchTalker()))) == facts(scratch(live))
    assert len(scratch(live).archived) == seen[2] < seen[-1]  # the undo took the archiving back
    loaded = AgentRunner.load(db, ScratchTalker())
    for r in (live, loaded):  # the loaded run's undo history restores the Memory the same way
        seed_ids(5)
        r.undo_step(task.task_id)
        r.run_step(task.task_id)
    assert facts(scratch(loaded)) == facts(scratch(live)) and type(scratch(loaded)) is Memory


def _words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("name", ["run.json", "runs.db"])
def test_a_registered_tokenizer_is_kept_by_name_and_an_unregistered_one_refused(tmp_path: Path, name: str) -> None:
    from nbagent import persist
    from nbagent.store import values

    for ref in [k for k, v in values._ALLOWED.items() if v is _words]:  # registered by another case
        del values._ALLOWED[ref]
    mem = Memory(token_limit=80, session_id="s", tokenizer_fn=_words)
    runner = AgentRunner(Talker(), memory=mem)
    runner.run_step(runner.create_task("go"))
    with pytest.raises(PersistError, match=r"tokenizer_fn: .*_words is not nbagent's token counter.*allow_type"):
        runner.save(tmp_path / name)
    persist.allow_type(_words)
    runner.save(tmp_path / name)
    loaded = AgentRunner.load(tmp_path / name, Talker()).memory
    assert type(loaded) is Memory and loaded.given_tokenizer is _words and loaded.tokenizer_fn("a b c") == 3


def test_a_damaged_memory_record_is_named(tmp_path: Path) -> None:
    import json

    runner = AgentRunner(Talker(), memory=memory())
    runner.run_step(runner.create_task("go"))
    path = tmp_path / "run.json"
    runner.save(path)
    doc = json.loads(path.read_text())
    doc["runner"]["memory"]["archived"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(PersistError, match=r"archived count must be an int from 0 to its 1 messages, got 99"):
        AgentRunner.load(path, Talker())
    doc["runner"]["memory"]["archived"] = 0
    doc["runner"]["memory"]["session"]["chat_history_token_ratio"] = 5
    path.write_text(json.dumps(doc))
    with pytest.raises(PersistError, match=r"Memory's settings are not valid"):
        AgentRunner.load(path, Talker())
