"""A runner and its tasks <-> JSON-able records: what a run holds, field by field.

The document (``runner_to_dict``; ``nbagent.store.jsonfile`` writes it as one file)::

    {"format": "nbagent-run", "version": 1, "nbagent": "0.1.0",
     "runner": {"class", "worker" (its describe()), "settings", "pricing", "ids" (the seeded
                id generator's state, or null), "memory"},
     "tasks": [{"task_id", "input", "status", "steps" (ids, inputs, links as ids), "outputs",
                "memory", "scratch_memory", "extra_state", "step_states", "queue", "completed",
                "done", "undone_outputs", "undone_edges", "undone_ids", "history" (undo
                snapshots), "failures", "finalized", "abandoned", "keep_history",
                "adds_to_memory" (written only when false: a batch's task),
                "final_response", "models" (the model of each step, for costs)}]}

Values inside are encoded by ``nbagent.store.encoder`` (tagged JSON, shared objects kept shared).

Not saved: the worker and its model (code, not state: pass them to ``load``), event
listeners, a pydantic model's private attributes, and the unread rest of a streamed answer
(what was read is kept).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
import warnings
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from nbagent import costs
from nbagent import ids as _ids
from nbagent.memory import ChatMemoryBuffer
from nbagent.session_memory import Memory
from nbagent.messages import TokenUsage
from nbagent.snapshot import plain_snapshot
from nbagent.engine.state import _NO_STATE, StepFailure, StepSnapshot, TaskState
from nbagent.registry import provided
from nbagent.schema import Task, TaskStep, TaskStepOutput
from nbagent.store.damage import DamagedRunError, DamagedRunWarning, mark_skipped, one_line
from nbagent.allowlist import NotAllowedError, PersistError, _resolve
from nbagent.store.decoder import ValueDecoder, _need
from nbagent.store.encoder import Path_, ValueEncoder, _strip_unused
from nbagent.workers.base import BaseAgentWorker

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner

__all__ = ["FORMAT", "VERSION", "SavedWorker", "runner_to_dict", "runner_from_dict", "check_header"]

#: the ``"format"`` every saved run starts with: a file without it is not a run
FORMAT = "nbagent-run"
#: the newest run format this nbagent writes and reads; a newer file asks for an upgrade
VERSION = 1

R = TypeVar("R", bound="AgentRunner")

_SETTINGS = ("keep_history", "delete_task_on_finish", "default_tool_choice", "verbose")
_OPTIONAL_SETTINGS = ("max_concurrency",)  # ParallelAgentRunner's


def _jsonable_info(info: dict[str, Any]) -> dict[str, Any]:
    """A worker's ``describe()`` reduced to JSON scalars and lists of strings."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if v is None or type(v) in (str, int, float, bool):
            out[str(k)] = v
        elif isinstance(v, (list, tuple)):
            out[str(k)] = [str(x) for x in v]
        else:
            out[str(k)] = str(v)
    return out


def _worker_info(runner: AgentRunner) -> dict[str, Any]:
    worker = runner.agent_worker
    try:
        info = dict(worker.describe())
    except Exception:  # noqa: BLE001 - the file is still useful without it
        info = {"kind": type(worker).__name__}
    if isinstance(worker, SavedWorker):
        info = dict(worker.info)
    return _jsonable_info(info)


def runner_to_dict(
    runner: AgentRunner, *, tasks: Iterable[TaskState] | None = None, with_memory: bool = True
) -> dict[str, Any]:
    """The runner's whole state as JSON-ready data (see the module docstring for the format).

    ``tasks``: only these of the runner's tasks (a batch record holds one); ``with_memory=False``:
    an empty conversation memory in place of the runner's (a task read its history, it did
    not add to it).

    Example:

    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.store import runner_from_dict, runner_to_dict
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> print(agent.chat("2 + 2?"))
    4
    >>> doc = runner_to_dict(agent)  # JSON-ready: json.dumps(doc) works
    >>> doc["format"], len(doc["tasks"])
    ('nbagent-run', 1)
    >>> [m.content for m in runner_from_dict(doc).chat_history]  # loaded without a worker: to look
    ['2 + 2?', '4']
    """
    from nbagent._version import __version__

    chosen = list(runner._tasks.values()) if tasks is None else _own_tasks(runner, tasks)
    memory = runner.memory if with_memory else ChatMemoryBuffer()

    enc = ValueEncoder()
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "nbagent": __version__,
        "runner": runner_header(enc, runner, memory),
        "tasks": [_task_to_dict(enc, runner, state) for state in chosen],
    }
    return _strip_unused(doc, enc.used)  # type: ignore[no-any-return]


def runner_header(enc: ValueEncoder, runner: AgentRunner, memory: ChatMemoryBuffer) -> dict[str, Any]:
    """The runner's own record: its class, worker, settings, prices, the seeded id generator's
    state and its conversation ``memory`` (the store writes it as a run's header row)."""
    settings = {name: getattr(runner, name) for name in _SETTINGS}
    for name in _OPTIONAL_SETTINGS:
        if hasattr(runner, name):
            settings[name] = getattr(runner, name)
    settings["init_task_state_kwargs"] = runner.init_task_state_kwargs
    pricing = costs.own_pricing(runner)
    rng = _ids.current_rng()
    return {
        "class": type(runner).__name__,
        "worker": _worker_info(runner),
        "settings": enc.value(settings, (None, "runner.settings")),
        "pricing": pricing.to_dict() if pricing is not None else None,
        "ids": _rng_state(rng) if rng is not None else None,
        "memory": enc.value(memory, (None, "runner.memory")),
    }


def _own_tasks(runner: AgentRunner, tasks: Iterable[TaskState]) -> list[TaskState]:
    chosen = list(tasks)
    for state in chosen:
        if not isinstance(state, TaskState) or runner._tasks.get(state.task_id) is not state:
            what = state.task_id if isinstance(state, TaskState) else type(state).__name__
            raise ValueError(
                f"runner_to_dict(tasks=...) takes task states of this runner; {what!r} is not one "
                f"(its tasks: {list(runner._tasks)})"
            )
    return chosen


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _task_to_dict(enc: ValueEncoder, runner: AgentRunner, state: TaskState) -> dict[str, Any]:
    task = state.task
    root: Path_ = (None, f"task {task.task_id}")
    enc.steps = dict(state.steps)
    for step in state.step_queue:  # normally registered already; be tolerant of odd states
        enc.steps.setdefault(step.step_id, step)
    outputs: list[TaskStepOutput] = []
    enc.output_index = {}
    for out in [*state.completed_steps, *state.outputs.values(), *state.undone_outputs]:
        if id(out) not in enc.output_index:
            enc.output_index[id(out)] = len(outputs)
            outputs.append(out)
    for out in outputs:
        enc.steps.setdefault(out.task_step.step_id, out.task_step)
        for nxt in out.next_steps:
            enc.steps.setdefault(nxt.step_id, nxt)
    for snap in state.history:
        for s in snap.queue or ():
            enc.steps.setdefault(s.step_id, s)
    pending = list(enc.steps.values())
    while pending:  # steps reachable only through links (odd states) are saved too
        s = pending.pop()
        for linked in [*s.next_steps.values(), *s.prev_steps.values()]:
            if linked.step_id not in enc.steps:
                enc.steps[linked.step_id] = linked
                pending.append(linked)
    models = costs.step_models(runner)
    running = [enc.steps[sid] for sid in enc.steps if sid in state.running]
    steps = [_step_record(s, s.step_id in state.steps) for s in enc.steps.values()]
    out_records = [
        _output_record(enc, out, (root, f".outputs[{i}] (step {out.task_step.step_id})"))
        for i, out in enumerate(outputs)
    ]
    record: dict[str, Any] = {
        "task_id": task.task_id,
        "input": task.input,
        "status": state.status.value,
        "steps": steps,
        "outputs": out_records,
        "memory": enc.value(task.memory, (root, ".memory")),
        "scratch_memory": enc.value(task.scratch_memory, (root, ".scratch_memory")),
        "extra_state": enc.value(task.extra_state, (root, ".extra_state")),
        "step_states": {
            sid: enc.value(s.step_state, (root, f".steps[{sid!r}].step_state"))
            for sid, s in enc.steps.items()
        },
        "queue": [s.step_id for s in running] + [s.step_id for s in state.step_queue],
        "completed": [enc.output_index[id(o)] for o in state.completed_steps],
        "done": {sid: enc.output_index[id(o)] for sid, o in state.outputs.items()},
        "undone_outputs": [enc.output_index[id(o)] for o in state.undone_outputs],
        "undone_edges": [[a, b] for a, b in state.undone_edges],
        "undone_ids": sorted(state.undone_ids),
        "history": [_snapshot_to_dict(enc, snap, (root, f".history[{i}]")) for i, snap in enumerate(state.history)],
        "failures": [_failure_record(f) for f in state.failures],
        "finalized": state.finalized,
        "abandoned": state.abandoned,
        "keep_history": state.keep_history,
        **({} if state.adds_to_memory else {"adds_to_memory": False}),
        "final_response": enc.value(state.final_response, (root, ".final_response")),
        "models": {sid: models[sid] for sid in enc.steps if sid in models},
    }
    return record


# One record per step, output and failure: the run file lists them, the SQLite store
# (nbagent.store.runstore) keeps each in its own row.
def _step_record(s: TaskStep, registered: bool = True) -> dict[str, Any]:
    record: dict[str, Any] = {
        "step_id": s.step_id,
        "input": s.input,
        "is_ready": s.is_ready,
        "next_steps": list(s.next_steps),
        "prev_steps": list(s.prev_steps),
    }
    if not registered:
        record["registered"] = False  # reachable, but not in the task's registry
    return record


def _output_record(enc: ValueEncoder, out: TaskStepOutput, p: Path_) -> dict[str, Any]:
    return output_fields(out, enc.value(out.output, (p, ".output")), enc.value(out.tool_outputs, (p, ".tool_outputs")))


def output_fields(out: TaskStepOutput, output: Any, tool_outputs: Any) -> dict[str, Any]:
    """An output's record, its answer and tool outputs encoded already (the store's early exit
    builds it too: ``nbagent.store.row_encoder``)."""
    usage = out.usage
    return {
        "step_id": out.task_step.step_id,
        "is_last": out.is_last,
        "next_steps": [s.step_id for s in out.next_steps],
        "reasoning": out.reasoning,
        "latency_s": out.latency_s,
        "usage": None if usage is None else {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
        },
        "output": output,
        "tool_outputs": tool_outputs,
        "input": out.input,
    }


def _failure_record(f: StepFailure) -> dict[str, Any]:
    return {
        "step_id": f.step_id,
        "error_type": f.error_type,
        "message": f.message,
        "traceback": f.traceback,
        "at": f.at,
        "attempt": f.attempt,
    }


_SNAPSHOT_FIELDS = frozenset(f.name for f in dataclasses.fields(StepSnapshot))


def _snapshot_to_dict(enc: ValueEncoder, snap: StepSnapshot, path: Path_) -> dict[str, Any]:
    # a snapshot that differs from an earlier one in one value is kept as that value and a
    # reference (nbagent.snapshot.OneChange): written out as the plain dict it stands for
    extra = plain_snapshot(snap.extra_state)
    own = extra if snap.step_state is snap.extra_state else plain_snapshot(snap.step_state)
    record = snapshot_fields(
        snap,
        enc.value(extra, (path, ".extra_state")),
        enc.value(own, (path, ".step_state")),
        enc.value(snap.scratch, (path, ".scratch")),
    )
    if type(snap) is not StepSnapshot:  # a runner's own kind (ParallelAgentRunner's BranchSnapshot)
        record["class"] = enc._class_ref(type(snap), path)
        record["more"] = {
            f.name: enc.value(getattr(snap, f.name), (path, f".{f.name}"))
            for f in dataclasses.fields(snap)
            if f.name not in _SNAPSHOT_FIELDS
        }
    return record


def snapshot_fields(snap: StepSnapshot, extra_state: Any, step_state: Any, scratch: Any) -> dict[str, Any]:
    """An undo snapshot's record, its state and scratch memory encoded already (the store's
    early exit builds it too)."""
    return {
        "step_id": snap.step_id,
        "step_input": snap.step_input,
        "queue": None if snap.queue is None else [s.step_id for s in snap.queue],
        "extra_state": extra_state,
        "step_state": step_state,
        "scratch": scratch,
    }


class SavedWorker(BaseAgentWorker):
    """Stands in for the worker of a run loaded without one: the views and reports work, and
    running a step says how to continue the run."""

    def __init__(self, info: dict[str, Any], source: str = "a run file") -> None:
        self.info = dict(info)
        self.source = source

    @property
    def saved_model(self) -> str | None:
        """The model the run was saved with (its name, as the worker described it), if any:
        say which model to load it with."""
        model = self.info.get("model")
        return model if isinstance(model, str) else None

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    def _refuse(self) -> Exception:
        from nbagent.engine.errors import TaskStateError

        kind = self.info.get("kind", "its worker")
        return TaskStateError(
            f"this runner was loaded from {self.source} without a worker, so it can show the run "
            f"but not run steps; load it with AgentRunner.load(path, agent_worker=...) passing a "
            f"{kind} to continue"
        )

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        raise self._refuse()

    async def arun_step(self, step: TaskStep, task: Task, **kwargs: Any) -> TaskStepOutput:
        raise self._refuse()

    def __repr__(self) -> str:
        return f"SavedWorker({self.info.get('kind', '?')!r}, from {self.source})"


def check_header(doc: Any, source: str) -> dict[str, Any]:
    """The run document's format, version and its two parts, checked (``source``: its file).

    Example:

    >>> from nbagent import ReActAgent, ScriptedLLM
    >>> from nbagent.store import check_header, runner_to_dict
    >>> doc = runner_to_dict(ReActAgent.from_tools([], llm=ScriptedLLM([])))
    >>> check_header(doc, "run.json")["version"] == doc["version"]
    True
    >>> check_header({"format": "something else"}, "notes.json")
    Traceback (most recent call last):
    ...
    nbagent...DamagedRunError: notes.json: ...not an nbagent run file...
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DamagedRunError(source, f"not an nbagent run file (no \"format\": {FORMAT!r}); damaged, or another file")
    version = doc.get("version")
    if type(version) is not int or version < 1:
        raise DamagedRunError(source, f"bad format version {one_line(repr(version), 40)}")
    if version > VERSION:
        raise PersistError(
            f"{source}: written by a newer nbagent ({doc.get('nbagent', '?')}, run format version "
            f"{version}); this nbagent reads versions up to {VERSION}: upgrade nbagent to load it"
        )
    for name, kind in (("runner", dict), ("tasks", list)):
        if type(doc.get(name)) is not kind:
            raise DamagedRunError(source, f"the file's {name!r} is missing or not a JSON {'object' if kind is dict else 'list'}")
    return doc


# what a damaged record can raise while it is rebuilt (anything else is a bug, not damage)
_DAMAGE = (PersistError, LookupError, TypeError, ValueError, AttributeError, RecursionError)


def runner_from_dict(
    doc: dict[str, Any],
    agent_worker: BaseAgentWorker | None = None,
    *,
    runner_cls: type[R] | None = None,
    restore_ids: bool = True,
    source: str = "run data",
    decoder: ValueDecoder | None = None,
    path: Any = None,
    run: str | None = None,
    skipped: dict[str, str] | None = None,
    skip_damaged: bool = True,
    **runner_kwargs: Any,
) -> R:
    """Rebuild a runner from ``runner_to_dict`` data (``decoder``: the store's own).

    A task whose record is damaged is skipped (``skip_damaged``) and the others are loaded: a
    ``DamagedRunWarning`` names it and the runner knows (``nbagent.store.damage``); ``skipped``
    lists tasks already found damaged (task id -> what). When no task is left, or the runner's
    own part is damaged, a ``DamagedRunError`` naming ``path``, ``run`` and the task is raised.

    Example:

    >>> from nbagent import ReActAgent, ReActAgentWorker, ScriptedLLM
    >>> from nbagent.store import runner_from_dict, runner_to_dict
    >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
    >>> print(agent.chat("2 + 2?"))
    4
    >>> worker = ReActAgentWorker.from_tools([], llm=ScriptedLLM(["Answer: 6"]))
    >>> again = runner_from_dict(runner_to_dict(agent), worker)  # a worker: it can run on
    >>> print(again.chat("3 + 3?"))
    6
    >>> [m.content for m in again.chat_history]
    ['2 + 2?', '4', '3 + 3?', '6']
    """
    from nbagent.costs import Pricing, register_runner

    doc = check_header(doc, source)
    cls: type[Any] = runner_cls or provided("agent_runner")
    rdoc = doc["runner"]
    dec = decoder if decoder is not None else ValueDecoder(source)
    where = path if path is not None else source
    try:
        info = _need(rdoc, "worker", dict, "runner", source)
        settings = dec.value(_need(rdoc, "settings", dict, "runner", source), "runner.settings")
        pricing_doc = rdoc.get("pricing")
        ids_state = rdoc.get("ids")
        memory = dec.value(_need(rdoc, "memory", dict, "runner", source), "runner.memory")
        if not isinstance(memory, ChatMemoryBuffer):
            raise PersistError(f"{source}: runner.memory is not a ChatMemoryBuffer")
        if not isinstance(settings, dict):
            raise PersistError(f"{source}: runner.settings is not a dict")
    except NotAllowedError:
        raise
    except _DAMAGE as err:
        raise DamagedRunError(where, f"the runner's record is damaged: {_cause(err, source)}", run=run) from err
    if agent_worker is None:
        worker: BaseAgentWorker = SavedWorker(info, source)
    else:
        worker = agent_worker
        saved_kind = info.get("kind")
        if saved_kind and saved_kind != type(agent_worker).__name__:
            warnings.warn(
                f"{source} was saved with a {saved_kind}; continuing it with a "
                f"{type(agent_worker).__name__} may fail at its next step",
                stacklevel=3,
            )
    accepted = _init_params(cls)
    kwargs = {k: v for k, v in settings.items() if accepted is None or k in accepted}
    kwargs.update(runner_kwargs)
    try:
        runner = cls(worker, memory=memory, **kwargs)
    except (TypeError, ValueError) as err:
        if runner_kwargs:
            raise  # (perhaps the caller's own arguments)
        raise DamagedRunError(where, f"the runner's saved settings do not fit: {_cause(err, source)}", run=run) from err
    if pricing_doc is not None:
        try:
            runner.pricing = Pricing.from_dict(pricing_doc)
        except _DAMAGE as err:
            raise DamagedRunError(where, f"the runner's prices are damaged: {_cause(err, source)}", run=run) from err
    models: dict[str, str] = {}
    damaged = dict(skipped or {})
    errors: list[DamagedRunError] = []
    for i, tdoc in enumerate(doc["tasks"]):
        mark = dec.mark()
        try:
            state = _task_from_dict(dec, tdoc, f"tasks[{i}]", runner, models)
        except NotAllowedError:
            raise  # (register the class and load again: nothing is damaged)
        except _DAMAGE as err:
            tid = tdoc.get("task_id") if isinstance(tdoc, dict) else None
            name = tid if isinstance(tid, str) else f"tasks[{i}]"
            dec.forget(mark, name)  # nothing loaded later may use half of it
            dec.adopt_orphan(tdoc)
            what = _cause(err, source, (f"tasks[{i}] (task {name})", f"tasks[{i}]"))
            errors.append(DamagedRunError(where, what, run=run, task=name))
            errors[-1].__cause__ = err
            if not skip_damaged:
                raise errors[-1] from err
            damaged[name] = errors[-1].what
            continue
        runner._tasks[state.task_id] = state
        register_runner(state.task_id, runner)
    if damaged:
        if not runner._tasks:  # nothing intact to show: an error, not an empty runner
            if len(damaged) == 1:
                [(name, what)] = damaged.items()
                raise DamagedRunError(where, what, run=run, task=name) from (errors[0].__cause__ if errors else None)
            raise DamagedRunError(where, f"every task is damaged: {_listing(damaged)}", run=run)
        mark_skipped(runner, where, run, damaged)
        warnings.warn(
            f"{where}{'' if run is None else f' (run {run})'}: skipped {len(damaged)} damaged task(s), loaded the "
            f"other {len(runner._tasks)}: {_listing(damaged)}",
            DamagedRunWarning,
            stacklevel=4,
        )
    costs.adopt_step_models(runner, models)
    if restore_ids and ids_state is not None:
        try:
            _restore_rng(ids_state, source)
        except PersistError as err:
            raise DamagedRunError(where, _cause(err, source), run=run) from err
    return runner  # type: ignore[no-any-return]


def _cause(err: BaseException, source: str, prefixes: tuple[str, ...] = ()) -> str:
    """What a damaged record's error says, without the source and the task it already names."""
    if isinstance(err, RecursionError):
        return "a value is nested too deeply to rebuild"
    text = str(err) if isinstance(err, PersistError) else f"{type(err).__name__}: {err}"
    if text.startswith(source + ": "):
        text = text[len(source) + 2 :]
    for prefix in prefixes:
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :].lstrip(".: ") or text
            break
    return one_line(text, 300)


def _listing(damaged: dict[str, str]) -> str:
    return "; ".join(f"{tid} ({what})" for tid, what in damaged.items())


def _init_params(cls: type) -> set[str] | None:
    """The keyword names ``cls(...)`` accepts (None: any), so that a setting saved by another
    runner class (``max_concurrency``) is not forced on one that has no such option."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _restore_rng(ids_state: Any, source: str) -> None:
    try:
        version, internal, gauss = ids_state
        rng = random.Random()
        rng.setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError) as err:
        raise PersistError(f"{source}: runner.ids is not a saved id generator state ({err})") from err
    _ids.set_current_rng(rng)  # continue the seeded id sequence where the saved run left it


def _task_from_dict(
    dec: ValueDecoder, tdoc: Any, where: str, runner: AgentRunner, models: dict[str, str]
) -> TaskState:
    src = dec.source
    task_id = _need(tdoc, "task_id", str, where, src)
    where = f"{where} (task {task_id})"
    task_input = _need(tdoc, "input", str, where, src)
    # 1. steps, without state, then their links
    dec.steps = {}
    raw_steps = _need(tdoc, "steps", list, where, src)
    for j, sd in enumerate(raw_steps):
        w = f"{where}.steps[{j}]"
        sid = _need(sd, "step_id", str, w, src)
        if sid in dec.steps:
            raise PersistError(f"{src}: {w}: step id {sid!r} appears twice")
        step_input = sd.get("input")
        if step_input is not None and not isinstance(step_input, str):
            raise PersistError(f"{src}: {w}.input should be a string or null")
        dec.steps[sid] = TaskStep(
            task_id=task_id, step_id=sid, input=step_input, is_ready=bool(sd.get("is_ready", True))
        )
    for j, sd in enumerate(raw_steps):
        w = f"{where}.steps[{j}]"
        step = dec.steps[sd["step_id"]]
        step._set_links(
            next_steps={i: _step_of(dec, i, w) for i in _need(sd, "next_steps", list, w, src)},
            prev_steps={i: _step_of(dec, i, w) for i in _need(sd, "prev_steps", list, w, src)},
        )
    # 2. outputs
    dec.outputs = []
    for j, od in enumerate(_need(tdoc, "outputs", list, where, src)):
        w = f"{where}.outputs[{j}]"
        step = _step_of(dec, _need(od, "step_id", str, w, src), w)
        output = dec.value(od.get("output"), f"{w}.output")
        tool_outputs = dec.value(od.get("tool_outputs", []), f"{w}.tool_outputs")
        try:
            out = TaskStepOutput(
                output=output,
                task_step=step,
                next_steps=[_step_of(dec, i, w) for i in _need(od, "next_steps", list, w, src)],
                is_last=bool(od.get("is_last", False)),
                reasoning=od.get("reasoning"),
                tool_outputs=tool_outputs if isinstance(tool_outputs, (list, tuple)) else [],
            )
        except (ValidationError, TypeError) as err:
            raise PersistError(f"{src}: {w}: not a valid step output ({err})") from err
        ran = od["input"] if "input" in od else step.input  # a file from before "input" was kept
        if ran is not None and not isinstance(ran, str):
            raise PersistError(f"{src}: {w}.input: expected text or null, got {type(ran).__name__}")
        out._set_measured(input=ran)
        latency = od.get("latency_s")
        if latency is not None:
            out._set_measured(latency_s=_number_field(latency, f"{w}.latency_s", src, "a number of seconds"))
        usage = od.get("usage")
        if usage is not None:
            out._set_measured(usage=_usage_field(usage, f"{w}.usage", src))
        dec.outputs.append(out)
    # 3. memory and state
    memory = dec.value(_need(tdoc, "memory", dict, where, src), f"{where}.memory")
    scratch = dec.value(_need(tdoc, "scratch_memory", dict, where, src), f"{where}.scratch_memory")
    extra = dec.value(_need(tdoc, "extra_state", dict, where, src), f"{where}.extra_state")
    for name, value in (("memory", memory), ("scratch_memory", scratch)):
        if not isinstance(value, ChatMemoryBuffer):
            raise PersistError(f"{src}: {where}.{name} is not a ChatMemoryBuffer")
    if not isinstance(extra, dict):
        raise PersistError(f"{src}: {where}.extra_state is not a dict")
    task = Task(task_id=task_id, input=task_input, memory=memory, scratch_memory=scratch)
    task._set_extra_state(extra)  # the very dict: step_state may share it
    task._runner = runner
    step_states = _need(tdoc, "step_states", dict, where, src)
    for sid, raw in step_states.items():
        step = _step_of(dec, sid, f"{where}.step_states")
        value = dec.value(raw, f"{where}.step_states[{sid!r}]")
        if not isinstance(value, dict):
            raise PersistError(f"{src}: {where}.step_states[{sid!r}] is not a dict")
        step._set_step_state(value)
    # 4. the task state
    state = TaskState(
        task=task,
        keep_history=bool(tdoc.get("keep_history", True)),
        adds_to_memory=tdoc.get("adds_to_memory", True) is not False,
    )
    state.steps = {sid: dec.steps[sid] for sid, sd in zip(dec.steps, raw_steps) if sd.get("registered", True)}
    state.step_queue = deque(_step_of(dec, i, f"{where}.queue") for i in _need(tdoc, "queue", list, where, src))
    state.completed_steps = [_output_of(dec, n, f"{where}.completed") for n in _need(tdoc, "completed", list, where, src)]
    state.outputs = {
        sid: _output_of(dec, n, f"{where}.done") for sid, n in _need(tdoc, "done", dict, where, src).items()
    }
    state.undone_outputs = [
        _output_of(dec, n, f"{where}.undone_outputs") for n in _need(tdoc, "undone_outputs", list, where, src)
    ]
    edges = _need(tdoc, "undone_edges", list, where, src)
    if not all(isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in edges):
        raise PersistError(f"{src}: {where}.undone_edges must be [from, to] pairs of step ids")
    state.undone_edges = [(a, b) for a, b in edges]
    undone_ids = _need(tdoc, "undone_ids", list, where, src)
    bad = [x for x in undone_ids if not isinstance(x, str)]
    if bad:
        raise PersistError(f"{src}: {where}.undone_ids must be a list of step ids (strings), got {_short(bad[0])}")
    state.undone_ids = set(undone_ids)
    history = []
    snap_len = 4 if type(state.task.scratch_memory) is Memory else 3  # a session Memory's says how many are archived
    for j, hd in enumerate(_need(tdoc, "history", list, where, src)):
        w = f"{where}.history[{j}]"
        queue = hd.get("queue")
        extra_snap = dec.value(hd.get("extra_state", {}), f"{w}.extra_state")
        step_snap = dec.value(hd.get("step_state", {}), f"{w}.step_state")
        scratch_snap = dec.value(_need(hd, "scratch", dict, w, src), f"{w}.scratch")
        if not (isinstance(scratch_snap, tuple) and len(scratch_snap) == snap_len):
            raise PersistError(f"{src}: {w}.scratch is not a memory snapshot")
        snap_cls: Any = StepSnapshot
        more: dict[str, Any] = {}
        if "class" in hd:
            snap_cls = _resolve(hd["class"], f"{src}: {w}")
            if not (isinstance(snap_cls, type) and issubclass(snap_cls, StepSnapshot)):
                raise PersistError(f"{src}: {w}: {hd['class']!r} is not a step snapshot class")
            more = {k: dec.value(v, f"{w}.{k}") for k, v in _need(hd, "more", dict, w, src).items()}
        try:
            snap = snap_cls(
                step_id=_step_of(dec, _need(hd, "step_id", str, w, src), w).step_id,
                step_input=hd.get("step_input"),
                queue=None if queue is None else tuple(_step_of(dec, i, w) for i in queue),
                extra_state=extra_snap if extra_snap else _NO_STATE,
                step_state=step_snap if step_snap else _NO_STATE,
                scratch=scratch_snap,
                **more,
            )
        except TypeError as err:
            raise PersistError(f"{src}: {w}: not a valid step snapshot ({err})") from err
        history.append(snap)
    _rebase_clock(history)
    state.history = history
    failures = []
    for j, fd in enumerate(_need(tdoc, "failures", list, where, src)):
        w = f"{where}.failures[{j}]"
        failures.append(
            StepFailure(
                step_id=_need(fd, "step_id", str, w, src),
                error_type=_need(fd, "error_type", str, w, src),
                message=_need(fd, "message", str, w, src),
                traceback=str(fd.get("traceback", "")),
                at=_number_field(fd.get("at", 0.0), f"{w}.at", src, "a time in seconds since the epoch"),
                attempt=_int_field(fd.get("attempt", 1), f"{w}.attempt", src, minimum=1),
            )
        )
    state.failures = failures
    state.finalized = bool(tdoc.get("finalized", False))
    state.abandoned = bool(tdoc.get("abandoned", False))
    state.final_response = dec.value(tdoc.get("final_response"), f"{where}.final_response")
    saved_models = tdoc.get("models", {})
    if isinstance(saved_models, dict):
        models.update({k: v for k, v in saved_models.items() if isinstance(v, str)})
    return state


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _number_field(value: Any, where: str, src: str, what: str) -> float:
    """A finite number (int or float, not bool), or a PersistError naming the field."""
    if type(value) not in (int, float) or not math.isfinite(value):
        raise PersistError(f"{src}: {where} must be {what} (a finite number), got {_short(value)}")
    return float(value)


def _int_field(value: Any, where: str, src: str, minimum: int = 0) -> int:
    if type(value) is not int or value < minimum:
        raise PersistError(f"{src}: {where} must be a whole number >= {minimum}, got {_short(value)}")
    return value


def _usage_field(usage: Any, where: str, src: str) -> TokenUsage:
    if not isinstance(usage, dict):
        raise PersistError(
            f"{src}: {where} must be null or an object with prompt_tokens and completion_tokens, "
            f"got {_short(usage)}"
        )
    for key in ("prompt_tokens", "completion_tokens"):
        if key not in usage:
            raise PersistError(f"{src}: {where} lacks {key!r} (a whole number >= 0)")
    return TokenUsage(
        prompt_tokens=_int_field(usage["prompt_tokens"], f"{where}.prompt_tokens", src),
        completion_tokens=_int_field(usage["completion_tokens"], f"{where}.completion_tokens", src),
    )


def _rebase_clock(history: list[StepSnapshot]) -> None:
    """Snapshots that carry a process-wide start/end order (``started``/``ended``, as
    ParallelAgentRunner's do) get numbers <= 0, order kept, so that any step run after
    loading, numbered from 1 by this process's clock, comes after them."""
    marks = [
        v for snap in history for name in ("started", "ended")
        if isinstance(v := getattr(snap, name, None), int) and not isinstance(v, bool)
    ]
    if not marks:
        return
    shift = max(marks)
    for snap in history:
        for name in ("started", "ended"):
            v = getattr(snap, name, None)
            if isinstance(v, int) and not isinstance(v, bool):
                setattr(snap, name, v - shift)


def _step_of(dec: ValueDecoder, sid: Any, where: str) -> TaskStep:
    step = dec.steps.get(sid) if isinstance(sid, str) else None
    if step is None:
        raise PersistError(f"{dec.source}: {where}: unknown step id {sid!r}")
    return step


def _output_of(dec: ValueDecoder, n: Any, where: str) -> TaskStepOutput:
    if type(n) is not int or not 0 <= n < len(dec.outputs):
        raise PersistError(f"{dec.source}: {where}: unknown output number {n!r}")
    return dec.outputs[n]
