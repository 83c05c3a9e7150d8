"""The live graph's DOT text, kept up to date in O(what changed) instead of rebuilt per step.

``task_to_dot`` walks every step: about 10 ms at 2,000 steps, paid at every redraw. A
``LiveDot`` keeps what cannot change any more: the text of every settled step (done, before
the last ``keep_ends`` steps, nothing undone or failed), the collapsed runs they form (the
run still growing at the end keeps running sums of its latency and tokens), and only
renders the steps still moving at the end (each cached by what its drawing depends on). A
redraw costs the same at step 20 and at step 20,000, and gives exactly ``task_to_dot``'s text.

That holds for a task whose steps form one chain (each step queues the next), the shape of
every long agent loop. Anything else (an undo, a failure, a branch, a step outside the
registry) is drawn by ``task_to_dot`` itself, and the cache starts again from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.approval import APPROVAL_KEY
from nbagent.runner.state import StepStatus
from nbagent.viz.dot import (
    _chain_metrics,
    _collapsed_node_of,
    _header_lines,
    _legend_lines,
    _node_line,
    _status,
    _step_node,
    _summary_from,
    check_options,
    task_to_dot,
)

if TYPE_CHECKING:
    from nbagent.runner.state import TaskState
    from nbagent.schema import TaskStepOutput

__all__ = ["LiveDot"]

_DEFAULTS = {"max_label": 80, "collapse_after": 40, "rankdir": "TB", "keep_ends": 4, "wrap": 44, "legend": False}


class _Run:
    """Consecutive collapsible settled steps (drawn as one node once there are two)."""

    __slots__ = ("start", "end", "latency", "tokens")

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = start
        self.latency: float | None = None
        self.tokens: int | None = None


class LiveDot:
    """``task_to_dot(state, **options)``, kept up to date (see the module docstring)."""

    def __init__(self, state: TaskState, **options: Any) -> None:
        check_options(**options)
        self.state = state
        self.opts = {**_DEFAULTS, **options}
        self.full_renders = 0  # how many redraws needed the whole walk (for tests and benchmarks)
        self._reset()

    def _reset(self) -> None:
        self.order: list[str] = []  # step ids of the chain, registry order
        self.settled = 0  # steps [0, settled) are settled
        self.collapsing = False
        self.closed_nodes: list[str] = []  # node lines of the closed units, in order
        self.closed_names: list[str] = []  # their node names
        self.chains = 0  # collapsed runs among the closed units
        self.run: _Run | None = None  # the open run at the end of the settled steps
        self.tail_cache: dict[str, tuple[Any, str]] = {}
        self.run_cache: tuple[Any, tuple[str, str]] | None = None
        self.head_cache: tuple[Any, list[str]] | None = None

    # ----- the text ---------------------------------------------------------------------
    def render(self) -> str:
        state = self.state
        if not self._follow():
            self._reset()
            self.full_renders += 1
            return task_to_dot(state, **self.opts)
        return self._text()

    def _follow(self) -> bool:
        """Take in the steps registered since the last render; False unless the task is
        still one plain chain that only grew at its end."""
        state = self.state
        if state.undone_outputs or state.undone_edges or state.failures:
            return False
        steps = state.steps
        n_old, n = len(self.order), len(steps)
        if n < n_old:
            return False
        if n > n_old:
            new = []
            for sid in reversed(steps):
                if len(new) == n - n_old:
                    break
                new.append(sid)
            new.reverse()
            prev = self.order[-1] if self.order else None
            for sid in new:
                step = steps[sid]
                if list(step.prev_steps) != ([] if prev is None else [prev]):
                    return False
                if prev is not None and list(steps[prev].next_steps) != [sid]:
                    return False
                prev = sid
            self.order.extend(new)
        if self.order:
            last = steps.get(self.order[-1])
            if last is None or last.next_steps:
                return False
        if n and steps.get(self.order[0]) is None:
            return False
        collapsing = self.opts["collapse_after"] is not None and n > self.opts["collapse_after"]
        if collapsing != self.collapsing:  # the drawing changes everywhere: start again
            self.settled = 0
            self.closed_nodes, self.closed_names, self.chains, self.run = [], [], 0, None
            self.collapsing = collapsing
        self._settle()
        return True

    def _settle(self) -> None:
        """Move the steps that can no longer change into the closed units or the open run."""
        state, order = self.state, self.order
        n = len(order)
        keep_ends = self.opts["keep_ends"]
        limit = min(n - 1, n - keep_ends) if self.collapsing else n - 1
        while self.settled < limit:
            i = self.settled
            sid = order[i]
            if _status(state, sid) != StepStatus.DONE:
                break
            out = state.outputs.get(sid)
            if self.collapsing and self._collapsible(i, out):
                run = self.run
                if run is None:
                    run = self.run = _Run(i)
                run.end = i + 1
                run.latency, run.tokens = _chain_metrics([out], run.latency, run.tokens)
            else:
                self._close_run()
                self.closed_nodes.append(self._step_line(i, sid, StepStatus.DONE))
                self.closed_names.append(f"s{i}")
            self.settled += 1

    def _collapsible(self, i: int, out: TaskStepOutput | None) -> bool:
        if i < self.opts["keep_ends"] or i == 0:
            return False
        return not (out is None or out.is_last or any(t.is_error for t in out.tool_outputs or []))

    def _close_run(self) -> None:
        run = self.run
        if run is None:
            return
        self.run = None
        line, name = self._run_line(run, self.chains)
        if run.end - run.start >= 2:
            self.chains += 1
        self.closed_nodes.append(line)
        self.closed_names.append(name)

    def _run_line(self, run: _Run, k: int) -> tuple[str, str]:
        if run.end - run.start < 2:  # one step is drawn as itself
            i = run.start
            return self._step_line(i, self.order[i], StepStatus.DONE), f"s{i}"
        first, last = self.order[run.start], self.order[run.end - 1]
        node = _collapsed_node_of(run.end - run.start, first, last, run.start + 1, run.end, run.latency, run.tokens)
        node.name = f"c{k}"
        return _node_line(node, self.opts["wrap"]), node.name

    def _step_line(self, i: int, sid: str, status: StepStatus) -> str:
        state = self.state
        step = state.steps.get(sid)
        node = _step_node(state, i + 1, sid, step, status, [], [], self.opts["max_label"])
        node.name = f"s{i}"
        return _node_line(node, self.opts["wrap"])

    def _tail_line(self, i: int, sid: str, status: StepStatus) -> str:
        """A step still moving: drawn again only when what its drawing shows changed."""
        state = self.state
        step = state.steps.get(sid)
        out = state.outputs.get(sid)
        if step is not None and APPROVAL_KEY in step.step_state:
            return self._step_line(i, sid, status)  # its decisions change while it waits
        key = (i, status, None if step is None else step.input, id(out),
               None if out is None else (id(out.output), out.is_last, len(out.tool_outputs or ()),
                                         out.latency_s, out.usage))
        found = self.tail_cache.get(sid)
        if found is not None and found[0] == key:
            return found[1]
        line = self._step_line(i, sid, status)
        self.tail_cache[sid] = (key, line)
        return line

    def _text(self) -> str:
        state, opts = self.state, self.opts
        order = self.order
        n = len(order)
        names = list(self.closed_names)
        nodes = list(self.closed_nodes)
        counts = {"done": 0}
        if self.run is not None:
            run = self.run
            key = (run.start, run.end, run.latency, run.tokens, self.chains)
            if self.run_cache is None or self.run_cache[0] != key:
                self.run_cache = (key, self._run_line(run, self.chains))
            line, name = self.run_cache[1]
            nodes.append(line)
            names.append(name)
        statuses = []
        for i in range(self.settled, n):
            sid = order[i]
            status = _status(state, sid)
            statuses.append(status)
            nodes.append(self._tail_line(i, sid, status))
            names.append(f"s{i}")
        if len(self.tail_cache) > 4 * (n - self.settled) + 16:
            live = set(order[self.settled:])
            self.tail_cache = {k: v for k, v in self.tail_cache.items() if k in live}
        counts = _summary_from({order[i]: s for i, s in zip(range(self.settled, n), statuses)})
        counts["done"] += self.settled
        try:
            task_status = state.status.value
        except Exception:  # noqa: BLE001
            task_status = "unknown"
        task = state.task
        key = (task_status, task.input, tuple(counts.values()))
        if self.head_cache is None or self.head_cache[0] != key:
            self.head_cache = (key, _header_lines(task.task_id, task.input, task_status, counts, opts["max_label"],
                                                  opts["rankdir"], opts["wrap"]))
        lines = list(self.head_cache[1])
        lines.extend(nodes)
        lines.extend(f"  {a} -> {b};" for a, b in zip(names, names[1:]))
        if opts["legend"]:
            lines.extend(_legend_lines(opts["wrap"]))
        lines.append("}")
        return "\n".join(lines) + "\n"
