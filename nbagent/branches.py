"""Time travel in a task: go back to any earlier step, fork a new branch there, compare branches.

Words used here:

- The task's **step tree**: every step the task ever registered, joined by its live links and
  by the links that undo cut (``TaskState.undone_edges``), so abandoned attempts stay in it.
- A **branch**: a path of step ids from a first step to where it ends: a step with no
  children, or a live step whose children are all undone (where the task stands now).
  ``branches(task)`` lists them depth-first, children in the order they were created, so older
  branches come first. A branch is *current* when none of its steps or links is undone.
- ``goto_step(task, step_id)``: back to just **after** ``step_id`` completed: every step that
  completed later is undone (greyed in the graph). ``before=True``: back to just **before** it
  ran; it is queued again with the same id (re-running it replaces its output in place).
- ``fork(task, step_id, input=None)``: back to just before ``step_id`` ran, then a **new step**
  (new id, same state, ``input`` if given) takes its place, so the old step and all that
  followed stay in the graph as a separate, undone branch that ``compare`` can show.

Going back needs the undo history (``keep_history=True``, the default). Only steps of the
current branch can be gone back to; an undone branch is kept to look at, not to resume.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from nbagent._counts import counted
from nbagent.events import StepEdited, StepUndone
from nbagent.registry import html_view
from nbagent.engine.state import StepStatus, TaskState
from nbagent.schema import TaskStep, TaskStepOutput

if TYPE_CHECKING:
    from nbagent.runner.base import AgentRunner, TaskRef

__all__ = ["Branch", "BranchStep", "BranchComparison", "goto_step", "fork", "branches", "compare"]

MAX_BRANCHES = 1000  # a DAG with many joins has very many paths; list at most this many

BranchRef = Union["Branch", int, str]


@dataclass(frozen=True)
class Branch:
    """One path through the task's step tree (see the module docstring)."""

    index: int
    step_ids: tuple[str, ...]
    current: bool

    @property
    def leaf(self) -> str:
        """The step where the branch ends."""
        return self.step_ids[-1]

    def __len__(self) -> int:
        return len(self.step_ids)

    def __repr__(self) -> str:
        ids = " → ".join(s[:8] for s in self.step_ids)
        kind = "current" if self.current else "undone"
        return f"Branch(#{self.index} {kind}, {counted(len(self.step_ids), 'step')}: {ids})"


# ----- going back ------------------------------------------------------------------------------


def _check_idle(state: TaskState) -> None:
    from nbagent.engine.errors import TaskStateError

    if state.finalized or state.abandoned:
        raise TaskStateError(
            f"task {state.task_id!r} is {state.status.value}; time travel needs a task that is "
            "not finalized or abandoned (its answer already went to memory)"
        )
    if state.running:
        raise TaskStateError(
            f"task {state.task_id!r} is busy: step(s) {sorted(state.running)} are running; "
            "go back after it ends"
        )


def _step(state: TaskState, step_id: str) -> TaskStep:
    if isinstance(step_id, TaskStep):
        step_id = step_id.step_id
    step = state.steps.get(step_id)
    if step is None:
        known = ", ".join(repr(s[:8]) for s in state.steps) or "none"
        raise ValueError(f"task {state.task_id!r} has no step {step_id!r}; its steps: {known}")
    return step


def _next_ready(state: TaskState) -> TaskStep | None:
    for s in state.step_queue:
        if state.is_step_ready(s):
            return s
    return state.step_queue[0] if state.step_queue else None


def _plan_goto(state: TaskState, step_id: str, before: bool) -> tuple[TaskStep, int]:
    """The step to go back to and how many completed steps to undo (-1: none, it is queued)."""
    from nbagent.engine.errors import TaskStateError

    step = _step(state, step_id)
    sid = step.step_id
    if sid not in state.outputs:
        status = state.step_status(sid)
        if before and any(s is step for s in state.step_queue):
            return step, -1  # already just before it
        raise ValueError(
            f"step {sid!r} of task {state.task_id!r} is {status.value}; goto_step goes back to a "
            "done step of the current branch (an undone branch is kept to look at; fork from a "
            "step they share to try again)"
        )
    positions = [i for i, snap in enumerate(state.history) if snap.step_id == sid]
    if not positions:
        raise TaskStateError(
            f"cannot go back to step {sid!r} of task {state.task_id!r}: its undo snapshot is not "
            "kept (the runner has keep_history=False)"
        )
    return step, len(state.history) - positions[-1] - (0 if before else 1)


def _undo_n(runner: AgentRunner, state: TaskState, n: int) -> None:
    for _ in range(n):
        undone = runner._take_back(state)
        runner._emit(StepUndone(state.task_id, step_id=undone.step_id))


def _to_undo(state: TaskState, n: int) -> list[TaskStep]:
    return [state.steps[h.step_id] for h in state.history[len(state.history) - n :]] if n > 0 else []


def goto_step(runner: AgentRunner, task: TaskRef, step_id: str, *, before: bool = False) -> TaskStep | None:
    """Undo back to just after ``step_id`` completed (or just before it ran, ``before=True``).

    Returns the step that would run next (None if the task's last step is done). All or
    nothing: interrupted, the task is as it was.
    """
    state = runner.state_of(task)
    plan: list[Any] = []

    def check() -> None:
        _check_idle(state)
        plan[:] = _plan_goto(state, step_id, before)

    def body() -> TaskStep | None:
        step, n = plan
        if n < 0:
            return step  # type: ignore[no-any-return]
        _undo_n(runner, state, n)
        return _next_ready(state)

    return runner._transact(state, check, lambda: _to_undo(state, plan[1]), body, "go back after it ends")


def fork(runner: AgentRunner, task: TaskRef, step_id: str, input: str | None = None) -> TaskStep:
    """Go back to just before ``step_id`` and put a new step (new id) in its place.

    The new step carries the old one's state and input (or ``input``); it is queued, not run.
    The old step and the steps after it stay visible as an undone branch. All or nothing.
    """
    state = runner.state_of(task)
    plan: list[Any] = []

    def check() -> None:
        _check_idle(state)
        step = _step(state, step_id)
        sid = step.step_id
        if sid in state.outputs:
            plan[:] = _plan_goto(state, sid, True)
        elif not any(s is step for s in state.step_queue):
            raise ValueError(
                f"step {sid!r} of task {state.task_id!r} is {state.step_status(sid).value}; fork from "
                "a done or queued step of the current branch"
            )
        elif state.failed_step_id() == sid:
            raise ValueError(
                f"step {sid!r} failed and waits to be retried; retry it with run_step(task, "
                "input=...) or fork from the step before it"
            )
        else:
            plan[:] = [step, -1]

    def body() -> TaskStep:
        step, n = plan
        _undo_n(runner, state, n)
        return _fork_at(runner, state, step, input)

    return runner._transact(state, check, lambda: _to_undo(state, plan[1]), body, "go back after it ends")


def _fork_at(runner: AgentRunner, state: TaskState, step: TaskStep, input: str | None) -> TaskStep:
    sid = step.step_id
    new = TaskStep(
        task_id=step.task_id,
        input=step.input if input is None else input,
        step_state=step.step_state,  # the same dict: workers carry state forward by reference
        is_ready=step.is_ready,
    )
    for pid, prev in list(step.prev_steps.items()):
        prev._set_links(
            next_steps={(new.step_id if k == sid else k): (new if k == sid else v) for k, v in prev.next_steps.items()}
        )
        new.prev_steps[pid] = prev
        state.undone_edges.append((pid, sid))
        out = state.outputs.get(pid)
        if out is not None and any(s is step for s in out.next_steps):
            # so that undoing ``prev`` later cuts the link to the new step, not the old one
            out._set_next_steps([new if s is step else s for s in out.next_steps])
    step._set_links(prev_steps={})
    state.undone_ids.add(sid)
    state.register(new)
    state.step_queue = deque(new if s is step else s for s in state.step_queue)
    runner._emit(StepEdited(state.task_id, step_id=new.step_id, fields=("fork",)))
    return new


# ----- branches ----------------------------------------------------------------------------------


def _tree(state: TaskState) -> tuple[dict[str, list[str]], set[tuple[str, str]], list[str]]:
    """Children of each step (creation order), the live edges, and the roots."""
    pos = {sid: i for i, sid in enumerate(state.steps)}
    children: dict[str, list[str]] = {}
    live: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()

    def add(a: str, b: str) -> None:
        if (a, b) not in seen:
            seen.add((a, b))
            children.setdefault(a, []).append(b)

    for sid, step in list(state.steps.items()):
        for nid in list(step.next_steps):
            live.add((sid, nid))
            add(sid, nid)
    for a, b in list(state.undone_edges):
        add(a, b)
    big = len(pos)
    for kids in children.values():
        kids.sort(key=lambda k: pos.get(k, big))
    has_parent = {b for _, b in seen}
    roots = [sid for sid in state.steps if sid not in has_parent]
    return children, live, roots


def branches(runner: AgentRunner, task: TaskRef) -> list[Branch]:
    """Every branch of the task's step tree, older first (see the module docstring)."""
    state = runner.state_of(task)
    children, live, roots = _tree(state)
    undone = state.undone_ids
    found: list[Branch] = []
    for root in roots:
        path = [root]
        on_path = {root}
        stack = [iter(children.get(root, ()))]
        _maybe_emit(found, path, children, live, undone)
        while stack and len(found) < MAX_BRANCHES:
            kid = next(stack[-1], None)
            if kid is None:
                stack.pop()
                on_path.discard(path.pop())
                continue
            if kid in on_path:
                continue  # a cycle in an odd state: do not loop
            path.append(kid)
            on_path.add(kid)
            stack.append(iter(children.get(kid, ())))
            _maybe_emit(found, path, children, live, undone)
    return found


def _maybe_emit(
    found: list[Branch], path: list[str], children: dict[str, list[str]], live: set[tuple[str, str]], undone: set[str]
) -> None:
    sid = path[-1]
    kids = children.get(sid, [])
    live_kids = [k for k in kids if (sid, k) in live and k not in undone]
    if kids and (sid in undone or live_kids):
        return
    current = all(s not in undone for s in path) and all((a, b) in live for a, b in zip(path, path[1:], strict=False))
    found.append(Branch(len(found), tuple(path), current))


def _pick(state: TaskState, all_branches: list[Branch], ref: BranchRef) -> Branch:
    if isinstance(ref, Branch):
        for b in all_branches:
            if b.step_ids == ref.step_ids:
                return b
        raise ValueError(f"{ref!r} is not a branch of task {state.task_id!r} (any more)")
    if isinstance(ref, bool) or not isinstance(ref, (int, str)):
        raise TypeError(f"a branch is a Branch, an index into branches(task), 'current' or a step id; got {ref!r}")
    if isinstance(ref, int):
        if not -len(all_branches) <= ref < len(all_branches):
            raise ValueError(f"task {state.task_id!r} has {len(all_branches)} branches; no branch {ref}")
        return all_branches[ref]
    if ref == "current":
        for b in all_branches:
            if b.current:
                return b
        raise ValueError(f"task {state.task_id!r} has no current branch")
    for b in all_branches:
        if b.leaf == ref or b.leaf.startswith(ref) and len(ref) >= 4:
            return b
    for b in all_branches:
        if ref in b.step_ids:
            return b
    raise ValueError(
        f"no branch of task {state.task_id!r} ends at or contains step {ref!r}; "
        f"branches end at: {[b.leaf[:8] for b in all_branches]}"
    )


# ----- comparing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BranchStep:
    """A step as one branch saw it: its input and the output it had on that branch."""

    step_id: str
    status: str
    input: str | None
    thought: str | None
    calls: tuple[tuple[str, str, bool], ...]  # (call, observation, is_error)
    output: str
    is_last: bool
    tokens: int | None
    cost: str | None
    output_ref: TaskStepOutput | None = field(default=None, repr=False, compare=False)


def _outputs_of(state: TaskState, sid: str) -> list[TaskStepOutput]:
    found = [state.outputs[sid]] if sid in state.outputs else []
    found += [o for o in reversed(state.undone_outputs) if o.task_step.step_id == sid]
    return found


def _output_on(state: TaskState, path: tuple[str, ...], i: int) -> TaskStepOutput | None:
    candidates = _outputs_of(state, path[i])
    if not candidates:
        return None
    if i + 1 < len(path):
        nxt = path[i + 1]
        for o in candidates:
            if any(s.step_id == nxt for s in o.next_steps):
                return o
    return candidates[0]


def _branch_step(state: TaskState, path: tuple[str, ...], i: int) -> BranchStep:
    from nbagent.costs import cost_label
    from nbagent.text import args_preview, output_text, safe_str

    sid = path[i]
    step = state.steps.get(sid)
    out = _output_on(state, path, i)
    if sid in state.undone_ids or (out is not None and state.outputs.get(sid) is not out):
        status = StepStatus.UNDONE.value
    else:
        status = state.step_status(sid).value
    calls: tuple[tuple[str, str, bool], ...] = ()
    if out is not None:
        calls = tuple(
            (f"{safe_str(t.tool_name)}({args_preview(t.raw_input)})", safe_str(t.content), bool(t.is_error))
            for t in out.tool_outputs or []
        )
    return BranchStep(
        step_id=sid,
        status=status,
        input=(out.task_step.input if out is not None else None) if step is None else step.input,
        thought=out.reasoning if out is not None else None,
        calls=calls,
        output=output_text(out.output) if out is not None else "",
        is_last=bool(out is not None and out.is_last),
        tokens=out.usage.total_tokens if out is not None and out.usage is not None else None,
        cost=cost_label(out) if out is not None else None,
        output_ref=out,
    )


@dataclass
class BranchComparison:
    """Two branches side by side, row by row from their first step; ``shared`` leading rows
    are the same step with the same output on both."""

    task_id: str
    left: Branch
    right: Branch
    rows: list[tuple[BranchStep | None, BranchStep | None]]
    shared: int

    def __repr__(self) -> str:
        return (
            f"BranchComparison(task={self.task_id[:8]}, left=#{self.left.index}, right=#{self.right.index}, "
            f"{self.shared} shared, {len(self.rows) - self.shared} different)"
        )

    def to_text(self, width: int = 60) -> str:
        """A plain-text side-by-side view."""
        from nbagent.text import preview

        def cell(s: BranchStep | None) -> list[str]:
            if s is None:
                return [""]
            lines = [f"{s.step_id[:8]} {s.status}"]
            if s.input is not None:
                lines.append(f"in: {s.input}")
            if s.thought:
                lines.append(f"thought: {s.thought}")
            for call, obs, err in s.calls:
                lines.append(f"call: {call} -> {'error: ' if err else ''}{obs}")
            if s.output:
                lines.append(f"{'answer' if s.is_last else 'out'}: {s.output}")
            return [preview(x, width) for x in lines]

        out = [
            f"{'left: ' + describe_branch(self.left):<{width}} | right: {describe_branch(self.right)}",
            "-" * (2 * width + 3),
        ]
        if self.shared:
            out.append(f"({self.shared} shared step{'s' if self.shared != 1 else ''})")
        for k, (a, b) in enumerate(self.rows[self.shared :], start=self.shared + 1):
            ca, cb = cell(a), cell(b)
            for j in range(max(len(ca), len(cb))):
                left = ca[j] if j < len(ca) else ""
                right = cb[j] if j < len(cb) else ""
                prefix = f"#{k} " if j == 0 else "   "
                out.append(f"{prefix}{left:<{width - 3}} | {right}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str | None:
        return html_view(self)


def describe_branch(b: Branch) -> str:
    """``branch #2 (undone, 3 steps, ends at 1a2b3c4d)``: a branch in one line."""
    kind = "current" if b.current else "undone"
    return f"branch #{b.index} ({kind}, {counted(len(b.step_ids), 'step')}, ends at {b.leaf[:8]})"


def compare(runner: AgentRunner, task: TaskRef, a: BranchRef, b: BranchRef) -> BranchComparison:
    """Two branches side by side: each row is the step at that depth on either branch.

    A branch is a ``Branch``, an index into ``branches(task)``, ``"current"``, or a step id (the
    branch ending there, else the first branch through it).
    """
    state = runner.state_of(task)
    all_branches = branches(runner, task)
    left, right = _pick(state, all_branches, a), _pick(state, all_branches, b)
    n = max(len(left.step_ids), len(right.step_ids))
    rows: list[tuple[BranchStep | None, BranchStep | None]] = []
    shared = 0
    still_shared = True
    for i in range(n):
        sa = _branch_step(state, left.step_ids, i) if i < len(left.step_ids) else None
        sb = _branch_step(state, right.step_ids, i) if i < len(right.step_ids) else None
        same = (
            sa is not None
            and sb is not None
            and sa.step_id == sb.step_id
            and sa.output_ref is sb.output_ref
        )
        if still_shared and same:
            shared += 1
        else:
            still_shared = False
        rows.append((sa, sb))
    return BranchComparison(state.task_id, left, right, rows, shared)
