"""Tool calls in a task: ids that name one call for the task's whole life, and the journal of
the calls an attempt of a step ran before it failed.

**Ids.** A person approves a call by its id (``runner.approve(task, call_id)``), so an id
never names two calls of a task: not after an undo and a re-run, a fork, a goto, an edit or a
load. A worker asks ``issue_call_id(task, wanted)`` for each call it makes or is asked for:
``wanted`` (the model's own id, ``react_3``, ``plan1_2``) while the task never used it, else
``wanted#2``, ``wanted#3``... The ids a task used are kept on the task (never rolled back);
after a load the runner rebuilds them from the run (``scan_call_ids``) before the task's next
step. A model's own id stays what the model sees: an OpenAI-style transcript pairs each tool
reply with the id the model gave, so only the id a person decides on may differ from it.

**Journal.** An attempt at a step can fail after some of its calls ran: a parallel call raised
past its tool (``KeyboardInterrupt``, ``SystemExit``), Ctrl-C or Stop came while a call ran
or while the step recorded its output. The runner rolls the task back, but what a tool did
cannot be taken back, and running it again on the retry would do it twice. So the attempt
keeps a journal, the step keeps it under ``step_state["tool_journal"]`` (saved with the run),
and the retry resumes from it: the worker acts on the model reply the calls came from (the
model is not asked again), a call that finished gives its kept output and is not run again,
the others run. A sync tool still running in its thread when the step was interrupted goes
on there; the retry waits for it and takes its output. An async tool cancelled at an
``await`` is not known to have done anything: it runs again. (Undo is different: undoing a
step that ran is the person taking it back; see ``nbagent.approval``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from nbagent.events import current_step, report_tool_call, start_tool_call, tool_call_wanted
from nbagent.tools import THREAD_CALL

if TYPE_CHECKING:
    from nbagent.messages import ToolOutput
    from nbagent.schema import Task, TaskStep, TaskStepOutput

__all__ = [
    "JOURNAL_KEY",
    "Resumed",
    "issue_call_id",
    "note_call_ids",
    "release_ids",
    "scan_call_ids",
    "current_journal",
    "journal_of",
    "detach_journal",
    "keep_journal",
    "journal_outputs",
    "without_journal",
    "journaled_reply",
    "remember_reply",
    "kept_output",
    "run_call",
    "run_calls",
]

JOURNAL_KEY = "tool_journal"


# ----- ids ---------------------------------------------------------------------------------------


def _used(task: Task) -> dict[str, int]:
    """The ids the task used, each with the next ``#k`` to try for ids made from it."""
    used: dict[str, int] | None = task._call_ids
    if used is None:
        used = task._call_ids = {}
    return used


def issue_call_id(task: Task, wanted: str | None) -> str:
    """A call id no call of ``task`` ever had: ``wanted`` if it is new, else ``wanted#k``.

    Inside a runner's step the id is counted as the attempt's: if the attempt fails before
    any call with that id ran, the id is free again (nobody saw it), so a retry gets the
    same ids as a first attempt would have. O(1) however often a model reuses an id."""
    used = _used(task)
    base = wanted if isinstance(wanted, str) and wanted else "call"
    cid = base
    if base in used:
        k = used[base]
        while f"{base}#{k}" in used:
            k += 1
        cid = f"{base}#{k}"
        used[base] = k + 1
    ctx = current_step()
    if ctx is not None and ctx.task_id == task.task_id and ctx.issued is not None:
        ctx.issued.append(cid)  # first: an interrupt between the two lines frees nothing used
    used.setdefault(cid, 2)
    return cid


def release_ids(step: TaskStep, task: Task, issued: list[str] | None, journal: dict[str, Any] | None) -> None:
    """After a failed attempt of ``step``: free the ids it issued, unless a call of its reply
    ran (then the journal keeps them for the retry). Idempotent."""
    used = task._call_ids
    if not issued or used is None:
        return
    kept = journal is not None and (journal.get("outputs") or _outlived(step.task_id, step.step_id))
    keep = set(journal.get("ids") or ()) | set(journal.get("outputs") or ()) if kept and journal else set()
    for cid in issued:
        if cid in keep:
            continue
        used.pop(cid, None)
        base, sep, k = cid.rpartition("#")
        if sep and k.isdigit() and base in used:  # the next wanted#k is this one again
            used[base] = min(used[base], int(k))


def note_call_ids(task: Task, ids: Iterable[Any]) -> None:
    """Count ``ids`` as used in ``task`` (the ids a loaded run already holds)."""
    used = _used(task)
    for i in ids:
        if isinstance(i, str):
            used.setdefault(i, 2)


def _ids_in_state(step_state: Any) -> Iterable[Any]:
    if not isinstance(step_state, dict):
        return
    rec = step_state.get("approval")
    if isinstance(rec, dict):
        for c in rec.get("calls", None) or ():
            if isinstance(c, dict):
                yield c.get("call_id")
                yield c.get("tool_id")
    journal = step_state.get(JOURNAL_KEY)
    if isinstance(journal, dict):
        yield from journal.get("ids", None) or ()
        yield from journal.get("outputs", None) or ()
    yield step_state.get("call_id")


def scan_call_ids(steps: Iterable[TaskStep], outputs: Iterable[TaskStepOutput]) -> set[str]:
    """Every call id a run holds: the approval records and journals of its steps (undone ones
    too) and the tool outputs of its done and undone steps. O(run): once per loaded task."""
    found: set[str] = set()
    for step in steps:
        found.update(i for i in _ids_in_state(step.step_state) if isinstance(i, str))
    for out in outputs:
        for t in out.tool_outputs or ():
            if isinstance(t.tool_call_id, str):
                found.add(t.tool_call_id)
    return found


# ----- the journal of a step ---------------------------------------------------------------------
# A plain dict, so that the run file and the run store keep it with the step's state:
#   {"reply": <the model reply the calls came from>, "ids": [call ids, in call order],
#    "input": <the step input the reply answered>, "outputs": {call id: ToolOutput}}
# While an attempt runs the runner holds it (``journal_of``, ``detach_journal``) and the step's context hands it
# to the worker (``current_journal``); a failed attempt puts it back on the step (``keep_journal``).


class _ThreadCall:
    """A sync tool's call in a worker thread: whether it started, and its output once the
    thread ends. If the step gave the call up while its thread ran (an interrupt, Stop), the
    thread puts the output in the journal itself when it ends, so a save or a retry after
    that finds it.

    No lock (an interrupt landing on a ``with lock:`` exit would leave it held; see
    ``nbagent.engine.txn``): who comes first, the thread starting or the step giving the
    call up, is settled by one atomic ``dict.setdefault``."""

    __slots__ = ("first", "output", "ended", "gone", "outputs", "call_id", "tool_call_id", "where")

    def __init__(
        self, outputs: dict[str, Any], call_id: str, tool_call_id: str | None, where: tuple[str, str]
    ) -> None:
        self.where = where
        self.first: dict[str, str] = {}
        self.output: ToolOutput | None = None
        self.ended = threading.Event()
        self.gone = False  # the step gave the call up while its thread ran
        self.outputs = outputs
        self.call_id = call_id
        self.tool_call_id = tool_call_id

    def begin(self) -> bool:
        """Called by the thread before the tool runs: False if the step gave up on it first."""
        return self.first.setdefault("who", "thread") == "thread"

    def end(self, output: ToolOutput | None) -> None:
        """Called by the thread when the tool returned (``output``) or raised past it (None)."""
        self.output = output
        if self.gone:
            if output is not None:
                output.tool_call_id = self.tool_call_id
                self.outputs.setdefault(self.call_id, output)
            _forget_outlived(self.where, self.call_id)
        self.ended.set()

    def abandon(self) -> bool:
        """The step gave up on the call: True if its thread had started (it runs to its end)."""
        started = self.first.setdefault("who", "abandoned") == "thread"
        self.gone = started
        return started


# calls whose thread outlived an interrupted attempt: (task id, step id) -> {call id: call}
_OUTLIVED: dict[tuple[str, str], dict[str, _ThreadCall]] = {}


def _outlived(task_id: str, step_id: str) -> bool:
    return bool(_OUTLIVED.get((task_id, step_id)))


class Resumed(NamedTuple):
    """What an earlier attempt of the running step acted on: the model's reply, the ids its
    calls got and the step input it answered."""

    reply: Any
    ids: list[str]
    input: str | None


def current_journal() -> dict[str, Any] | None:
    """The journal of the step running now (None outside a runner's step)."""
    ctx = current_step()
    return None if ctx is None else ctx.journal


def journal_of(step: TaskStep) -> dict[str, Any]:
    """The journal an attempt of ``step`` starts from: the one on the step, or a new one."""
    state = step.step_state
    journal = state.get(JOURNAL_KEY) if isinstance(state, dict) else None
    return journal if isinstance(journal, dict) else {}


def detach_journal(step: TaskStep) -> None:
    """Take the journal off the step while an attempt holds it, so that the attempt's
    snapshot, and an undo back to it, never hold it (idempotent)."""
    if isinstance(step.step_state, dict):
        step.step_state.pop(JOURNAL_KEY, None)


def keep_journal(step: TaskStep, journal: dict[str, Any] | None) -> None:
    """After a failed attempt: leave the journal on the step if a call of it ran (idempotent).

    The step gets a state dict of its own for it: workers may share one dict among steps
    (ReAct carries it forward), and the journal belongs to this step only."""
    if journal and (journal.get("outputs") or _outlived(step.task_id, step.step_id)):
        own = {k: v for k, v in step.step_state.items() if k != JOURNAL_KEY}
        own[JOURNAL_KEY] = journal
        step._set_step_state(own)  # no validation: it is the dict it was, plus one key


def without_journal(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` itself, or a copy without its journal (what another step may carry on)."""
    return state if JOURNAL_KEY not in state else {k: v for k, v in state.items() if k != JOURNAL_KEY}


def journal_outputs(step: TaskStep) -> dict[str, ToolOutput]:
    """The outputs of the calls failed attempts of ``step`` ran, by call id."""
    journal = step.step_state.get(JOURNAL_KEY) if isinstance(step.step_state, dict) else None
    outs = journal.get("outputs") if isinstance(journal, dict) else None
    return dict(outs) if isinstance(outs, dict) else {}


def journaled_reply(journal: dict[str, Any] | None) -> Resumed | None:
    """The reply an earlier attempt of the running step ran calls for (to act on again), or
    None when no call of it ran (a new attempt may ask the model again)."""
    if not journal or "reply" not in journal:
        return None
    ctx = current_step()
    if not journal.get("outputs") and not (ctx is not None and _outlived(ctx.task_id, ctx.step_id)):
        return None
    return Resumed(journal["reply"], list(journal.get("ids") or ()), journal.get("input"))


def remember_reply(journal: dict[str, Any] | None, reply: Any, ids: list[str], input: str | None) -> None:
    """Record the reply whose calls are about to run (before the first one starts)."""
    if journal is not None and "reply" not in journal:
        journal["reply"] = reply
        journal["ids"] = list(ids)
        journal["input"] = input


def kept_output(call_id: str) -> ToolOutput | None:
    """The output of ``call_id`` if an earlier attempt of the running step finished it."""
    journal = current_journal()
    outs = journal.get("outputs") if journal else None
    return outs.get(call_id) if isinstance(outs, dict) else None


async def run_call(
    call_id: str,
    tool_call_id: str | None,
    run: Callable[[], Awaitable[ToolOutput]],
    *,
    journal: dict[str, Any] | None = None,
    where: tuple[str, str] | None = None,
) -> ToolOutput:
    """Run one call of the running step at most once: the kept output if an earlier attempt
    finished it, else ``run()``, whose output is kept as soon as it is there, also when the
    step is interrupted right after.

    ``tool_call_id`` is what the output carries (the model's id, for the transcript).
    ``journal`` and ``where`` (what the journal belongs to) default to the runner's step
    running now; a workflow passes its step execution's."""
    if journal is None or where is None:
        ctx = current_step()
        journal = None if ctx is None else ctx.journal
        if journal is None or ctx is None:
            return await run()
        where = (ctx.task_id, ctx.step_id)
    outputs = journal.setdefault("outputs", {})
    kept = outputs.get(call_id)
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    outlived = _OUTLIVED.get(where, {}).get(call_id)
    if outlived is not None:  # its thread went on after an interrupted attempt: wait for it
        import asyncio

        await asyncio.to_thread(outlived.ended.wait)
        _forget_outlived(where, call_id)
        if outlived.output is not None:
            outlived.output.tool_call_id = tool_call_id
            outputs[call_id] = outlived.output
            return outlived.output
        # it raised past the tool: run it again, as a call that never finished
    kept = outputs.get(call_id)  # a thread that ended meanwhile put its output there
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    entry = _ThreadCall(outputs, call_id, tool_call_id, where)
    out: ToolOutput | None = None
    heard = tool_call_wanted()  # someone listens to tool calls (tracing): tell them when it begins and ends
    began = time.time() if heard is not None else 0.0
    if heard is not None:
        start_tool_call(heard, call_id, tool_call_id)
    token = THREAD_CALL.set(entry)
    try:
        out = await run()
        outputs[call_id] = out
        if heard is not None:
            report_tool_call(heard, call_id, tool_call_id, began, out, None)
        return out
    except BaseException as error:
        started = entry.abandon()  # from here its thread (if any) no longer starts the tool
        done = out if out is not None else entry.output
        if done is not None:  # it ran, whatever stopped the step: keep what it gave
            done.tool_call_id = tool_call_id
            outputs[call_id] = done
        elif started and not entry.ended.is_set():  # its thread runs on: a retry waits for it
            _OUTLIVED.setdefault(where, {})[call_id] = entry
        elif started and entry.output is not None:  # it ended just now
            entry.output.tool_call_id = tool_call_id
            outputs[call_id] = entry.output
        if heard is not None:  # last: what the journal keeps is settled first
            report_tool_call(heard, call_id, tool_call_id, began, out, error)
        raise
    finally:
        THREAD_CALL.reset(token)


def _forget_outlived(where: tuple[str, str], call_id: str) -> None:
    calls = _OUTLIVED.get(where)
    if calls is not None:
        calls.pop(call_id, None)
        if not calls:
            _OUTLIVED.pop(where, None)


async def run_calls(
    calls: list[tuple[str, str | None, Callable[[], Awaitable[ToolOutput]]]], together: bool
) -> list[ToolOutput]:
    """Run several calls of one step (``together``: concurrently), each at most once.

    A call that raises past its tool (``KeyboardInterrupt``...) does not cut the others off:
    they end, and their outputs are kept, before the first such error is raised."""
    if not together or len(calls) < 2:
        return [await run_call(*c) for c in calls]
    import asyncio  # not at import: ``import nbagent`` does not load asyncio

    async def settled(c: tuple[str, str | None, Callable[[], Awaitable[ToolOutput]]]) -> Any:
        try:
            return await run_call(*c)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # noqa: BLE001  (raised below, once the others end)
            return error

    results = await asyncio.gather(*(settled(c) for c in calls))
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)
