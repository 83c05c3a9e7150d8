"""Models: linked steps serialise as ids, ids can be seeded, outputs print as their output."""

from __future__ import annotations

import asyncio
import json

import pytest

from nbagent import (
    AgentChatResponse,
    StreamingAgentChatResponse,
    TaskStep,
    TaskStepOutput,
    seed_ids,
    seeded_ids,
)
from nbagent.ids import new_id


def chain(n: int) -> list[TaskStep]:
    steps = [TaskStep(task_id="t")]
    for _ in range(n - 1):
        nxt = steps[-1].get_next_step()
        steps[-1].link_step(nxt)
        steps.append(nxt)
    return steps


def test_linked_steps_serialise_to_json_with_ids_and_round_trip() -> None:
    a, b, c = chain(3)
    c.link_step(a)  # even a cycle does not recurse
    data = json.loads(b.model_dump_json())
    assert data["next_steps"] == [c.step_id] and data["prev_steps"] == [a.step_id]
    loaded = [TaskStep.model_validate_json(s.model_dump_json()) for s in (a, b, c)]
    registry = {s.step_id: s for s in loaded}
    for s in loaded:
        s.resolve_links(registry)
    la, lb, lc = loaded
    assert lb.next_steps[c.step_id] is lc and lb.prev_steps[a.step_id] is la
    assert la.prev_steps[c.step_id] is lc
    assert la == a and la is not a
    assert "next_steps=[" in repr(b)


def test_resolve_links_with_missing_ids_is_clear() -> None:
    step = TaskStep.model_validate({"task_id": "t", "step_id": "x", "next_steps": ["gone"]})
    with pytest.raises(ValueError, match="gone"):
        step.resolve_links({})


def test_link_across_tasks_is_refused() -> None:
    with pytest.raises(ValueError, match="within one task"):
        TaskStep(task_id="a").link_step(TaskStep(task_id="b"))


def test_get_next_step_shares_state_and_keeps_task() -> None:
    step = TaskStep(task_id="t", step_state={"k": 1})
    nxt = step.get_next_step(input="hi")
    # the state is carried forward: same values, its own dict (so undo can restore each step)
    assert nxt.task_id == "t" and nxt.step_state == step.step_state and nxt.input == "hi"
    assert nxt.step_id != step.step_id
    assert step.get_next_step(step_state={"x": 2}).step_state == {"x": 2}


def test_seeded_ids_repeat_and_unseeded_are_random() -> None:
    seed_ids(7)
    first = [new_id() for _ in range(3)]
    seed_ids(7)
    assert [new_id() for _ in range(3)] == first
    seed_ids(None)
    assert new_id() != new_id()
    with seeded_ids(7):
        assert new_id() == first[0]
    assert len(new_id()) == 36
    with pytest.raises(TypeError):
        seed_ids("7")  # type: ignore[arg-type]


def test_ids_are_rfc_4122_version_4_and_seeded_ones_are_the_generators_bits() -> None:
    # checked with the standard library's uuid: a seeded id is the uuid4 made of the
    # generator's next 128 bits (so stored runs and notebooks keep their ids), a random one
    # is a valid version 4 uuid too
    import random
    import uuid

    with seeded_ids(11):
        ids = [new_id() for _ in range(200)]
    rng = random.Random(11)
    assert ids == [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(200)]
    for text in (*ids, *(new_id() for _ in range(200))):
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_step_output_str_is_output_and_json_has_ids() -> None:
    a, b = chain(2)
    out = TaskStepOutput(output=AgentChatResponse(response="42"), task_step=a, next_steps=[b], is_last=False)
    assert str(out) == "42"
    data = json.loads(out.model_dump_json())
    assert data["next_steps"] == [b.step_id]
    assert data["output"]["response"] == "42"


def test_streaming_response_sync_and_async_and_done_callbacks() -> None:
    done: list[str] = []

    async def tokens():  # type: ignore[no-untyped-def]
        for t in ["a", "b", "c"]:
            yield t

    stream = StreamingAgentChatResponse(tokens(), prefix=">")
    stream.add_done_callback(done.append)
    assert list(stream.response_gen) == [">", "a", "b", "c"]
    assert stream.is_done and done == [">abc"]
    assert list(stream.response_gen) == [">", "a", "b", "c"]  # replayable
    late: list[str] = []
    stream.add_done_callback(late.append)
    assert late == [">abc"]

    async def consume() -> str:
        s = StreamingAgentChatResponse(iter(["x", "y"]))
        return "".join([t async for t in s.async_response_gen()])

    assert asyncio.run(consume()) == "xy"
    assert str(StreamingAgentChatResponse(iter(["p", "q"]))) == "pq"


def test_stream_started_on_a_running_loop_read_synchronously_is_a_clear_error() -> None:
    async def tokens():  # type: ignore[no-untyped-def]
        yield "a"

    async def main() -> None:
        s = StreamingAgentChatResponse(tokens())
        with pytest.raises(RuntimeError, match="async_response_gen"):
            list(s.response_gen)

    asyncio.run(main())


def test_random_ids_are_uuid4s_unique_across_threads_and_a_fork() -> None:
    """Random ids come from os.urandom a batch at a time: every one a uuid4, none handed out
    twice (threads take them at once), and a forked child draws its own, not its parent's next."""
    import os
    import threading
    import uuid

    seen: list[list[str]] = []

    def draw() -> None:
        seen.append([new_id() for _ in range(500)])

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for batch in seen for i in batch]
    assert len(ids) == 4000 and len(set(ids)) == 4000
    for i in ids[:200]:
        u = uuid.UUID(i)
        assert u.version == 4 and u.variant == uuid.RFC_4122 and str(u) == i
    if not hasattr(os, "fork"):
        return
    new_id()  # the batch now has ids left
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "\n".join(new_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        child = fh.read().split("\n")
    os.waitpid(pid, 0)
    parent = [new_id() for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent)
