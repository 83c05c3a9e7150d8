"""The live graph's DOT text, kept up to date in O(what changed) instead of rebuilt per redraw.

``task_to_dot`` walks every step: about 10 ms at 2,000 steps, paid at every redraw. A
``LiveDot`` gives exactly the same text, but keeps what can no longer change:

- the *settled* steps, in registry order: done (or undone) for good, with their node line,
  name, number, status and links, and a checkpoint each, so that an undo, a failure or a
  new link that reaches back into them unsettles from that step on only (not from zero);
- among them the *decided* ones, no longer among the last ``keep_ends``: closed units
  (their node lines), or members of the collapsed run still growing at the end (running
  sums of its latency and tokens);
- the edge lines of the sources whose edges all end in decided steps;
- the node text of every other step, cached by what its drawing shows.

A redraw reads what the runner changed since the last one (new steps, failures, undone
runs, edges and ids, completed and running steps, the links of the steps after the
prefix), rolls back what that touched, settles and decides what became final, and draws
the steps after the prefix and the undo section. The common redraw (the step after the
prefix ran and queued one new step) takes a short path that skips the reading. The prefix
stops at a step that is still open (held, blocked, failed...): while a step early in the
task stays open, redraws cost more, and stay exact.

What it sees: the task's registry, links, outputs, failures and undo lists, which every
runner operation goes through (a link changed by hand on a settled step is not seen). A
link to a step missing from the registry is drawn by ``task_to_dot`` itself
(``full_renders``). Node text depends on the step and its output only: a price set later
(``nbagent.costs``) shows on settled steps after ``LiveGraph.redraw()``.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import islice
from typing import TYPE_CHECKING, Any

from nbagent.approval import APPROVAL_KEY
from nbagent.engine.state import StepStatus
from nbagent.schema import StreamingAgentChatResponse
from nbagent.viz.dot.collapse import _chain_metrics, _collapsed_node_of
from nbagent.viz.dot.labels import (
    _BR,
    _PLAIN_VALUES,
    _TITLE_CLOSE,
    _UNDONE_EDGE_COLOR,
    _VALUE,
    _attr_list,
    _ghost_node,
    _label_piece,
    _node_line,
    _plain_step_line,
    _short_esc,
    _step_node,
)
from nbagent.viz.dot.model import STATUS_ORDER, _status, is_skipped
from nbagent.viz.dot.task_dot import _header_from, _legend_lines, _title_top, check_options, task_to_dot

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import TaskStepOutput

__all__ = ["LiveDot"]

_DEFAULTS = {"max_label": 80, "collapse_after": 40, "rankdir": "TB", "keep_ends": 4, "wrap": 44, "legend": False}
_DONE, _UNDONE = StepStatus.DONE, StepStatus.UNDONE
_DONE_TEXT = f" {_VALUE[_DONE]}"  # after the number of done steps, in the title's summary
_COLLAPSED_ATTRS = _attr_list(_collapsed_node_of(2, "", "", 1, 2, None, None).attrs)


def _streaming(out: TaskStepOutput | None) -> bool:
    """Whether a step's answer is a stream still being read: its text grows after the step
    is done, so its node stays open (redrawn, never cached) until the stream ends."""
    return out is not None and type(out.output) is StreamingAgentChatResponse and not out.output.is_done


class _Odd(Exception):
    """A state only the full renderer draws (a link to a step missing from the registry)."""


class _Run:
    """Consecutive collapsible settled steps (drawn as one node once there are two)."""

    __slots__ = ("start", "end", "latency", "tokens")

    def __init__(self, start: int, end: int, latency: float | None, tokens: int | None) -> None:
        self.start, self.end, self.latency, self.tokens = start, end, latency, tokens


class _Info:
    """What the drawing keeps of a settled step."""

    __slots__ = ("status", "number", "name", "ok", "next", "line")

    def __init__(self, status: StepStatus, number: int, name: str | int, ok: bool, nxt: tuple[str, ...],
                 line: str | None) -> None:
        self.status = status
        self.number = number
        self.name = name  # its node name, or the start index of the run it belongs to
        self.ok = ok  # collapsible once it is not among the last keep_ends steps
        self.next = nxt  # its live next steps when it settled, in position order
        self.line = line  # its node line when drawn as itself (None: its undone runs stand for it)


class _Undone:
    """The undone edges as ``task_to_dot`` sees them (deduplicated, live pairs left out)."""

    __slots__ = ("edges", "ins", "outs", "cut_parent")

    def __init__(self, state: TaskState) -> None:
        steps = state.steps
        seen: set[tuple[str, str]] = set()
        self.edges: list[tuple[str, str]] = []
        self.ins: dict[str, int] = {}
        self.outs: dict[str, int] = {}
        for a, b in list(state.undone_edges):
            sa, sb = steps.get(a), steps.get(b)
            if sa is None or sb is None:
                raise _Odd
            if (a, b) in seen or b in sa.next_steps or a in sb.prev_steps:
                continue
            seen.add((a, b))
            self.edges.append((a, b))
            self.outs[a] = self.outs.get(a, 0) + 1
            self.ins[b] = self.ins.get(b, 0) + 1
        self.cut_parent = {b: a for a, b in reversed(self.edges)}  # first cutting edge wins


_NO_UNDONE = _Undone.__new__(_Undone)
_NO_UNDONE.edges, _NO_UNDONE.ins, _NO_UNDONE.outs, _NO_UNDONE.cut_parent = [], {}, {}, {}


class LiveDot:
    """``task_to_dot(state, **options)``, kept up to date (see the module docstring)."""

    def __init__(self, state: TaskState, **options: Any) -> None:
        check_options(**options)
        self.state = state
        self.opts = {**_DEFAULTS, **options}
        self.full_renders = 0  # redraws drawn by task_to_dot (odd states), for tests and benchmarks
        self.restarts = 0  # times the settled prefix was rebuilt from the first step
        self.rollbacks = 0  # times a change reached back into the settled prefix
        self.appends = 0  # redraws that only took in one more step of a chain (the common one)
        self._lines: dict[str, tuple[tuple[Any, ...], Any, str]] = {}  # sid -> (key, output, line)
        self._ghosts: dict[int, tuple[tuple[Any, ...], Any, str]] = {}
        self._top: tuple[Any, str, str, str, str] | None = None  # status, id, input; the text around the summary
        self._tpl: tuple[Any, ...] | None = None  # _header_one's summary around the done count
        self._head: tuple[tuple[Any, ...], str] | None = None  # the header text, by the status counts
        self._stopped: tuple[str | None, Any] = (None, None)  # the step the settling stopped at, its status
        self._run_line: tuple[tuple[Any, ...], str] | None = None
        self._zero = {st: 0 for st in STATUS_ORDER}
        self._forget()

    # ----- what is kept ------------------------------------------------------------------
    def _forget(self) -> None:
        """Know nothing about the task (the next render reads it from its first step)."""
        self.order: list[str] = []
        self.pos: dict[str, int] = {}
        self.n_failures = 0
        self.failures_of: dict[str, list[Any]] = {}
        self.n_undone_outs = 0
        self.undone_outs: dict[str, list[TaskStepOutput]] = {}
        self.n_undone_edges = 0
        self.undone_ids: set[str] = set()
        self.completed: list[TaskStepOutput] = []  # state.completed_steps as last seen
        self.collapsing: bool | None = None
        self._empty_prefix()

    def _empty_prefix(self) -> None:
        self.s = 0  # steps order[:s] are settled: their drawing is final, unless they join a run
        self.d = 0  # steps order[:d] are decided: closed units, or members of the open run
        self.sck: list[tuple[int, int, int]] = []  # per settled step: the counts before it
        self.dck: list[tuple[Any, ...]] = []  # per decided step: the units before it
        self.info: dict[str, _Info] = {}
        self.nodes: list[str] = []  # node lines of the closed units
        self.live = 0  # settled steps that are not undone (the last number given)
        self.done = 0
        self.undone = 0
        self.chains = 0  # collapsed runs among the closed units
        self.run: _Run | None = None
        self.run_names: dict[int, str] = {}  # closed run start -> its node name
        self.e = 0  # the edges leaving order[:e] are final
        self.eck: list[int] = []  # per such source: len(edge_lines) before its edges
        self.epairs: list[list[tuple[str, str]]] = []
        self.emax: list[int] = []  # per such source: the furthest step its edges or earlier ones reach
        self.edge_lines: list[str] = []
        self.pairs: set[tuple[str, str]] = set()

    def _restart(self) -> None:
        self.restarts += 1
        self._empty_prefix()

    def _rollback(self, i: int | None) -> None:
        """Unsettle the steps from position ``i`` on (they changed, or one they show did)."""
        if i is None or i >= self.s:
            return
        self.rollbacks += 1
        self.live, self.done, self.undone = self.sck[i]
        del self.sck[i:]
        self.s = i
        if i < self.d:
            n_nodes, self.chains, run = self.dck[i]
            del self.dck[i:]
            del self.nodes[n_nodes:]
            self.d = i
            self.run = None if run is None else _Run(*run)
        # the edges of a source stay final while every step they reach stays decided, and its
        # name too (a run of one step may still grow: then it is renamed)
        run = self.run
        bound = min(self.d, run.start) if run is not None and run.end - run.start < 2 else self.d
        e = bisect_left(self.emax, bound)
        if e < self.e:
            for a in range(e, self.e):
                self.pairs.difference_update(self.epairs[a])
            del self.edge_lines[self.eck[e]:]
            del self.eck[e:]
            del self.epairs[e:]
            del self.emax[e:]
            self.e = e

    # ----- the text ----------------------------------------------------------------------
    def render(self) -> str:
        try:
            return self._render()
        except _Odd:
            self._forget()
            self.full_renders += 1
            return task_to_dot(self.state, **self.opts)

    def _render(self) -> str:
        text = self._append()
        if text is not None:
            return text
        self._read_changes()
        undone = _Undone(self.state) if self.state.undone_edges else _NO_UNDONE
        self._edges()
        self._settle(undone)
        return self._text(undone)

    def _append(self) -> str | None:
        """The common redraw, in a few microseconds of bookkeeping: since the last one, the
        one step after the prefix ran and queued one new step, and nothing else changed (no
        failure, undo, running step, other link). None (nothing changed here) otherwise;
        the general path then reads the changes."""
        state, order, pos, info = self.state, self.order, self.pos, self.info
        steps = state.steps
        n0 = len(order)
        s = self.s
        if (s != n0 - 1 or len(steps) != n0 + 1 or state.running or len(state.failures) != self.n_failures
                or len(state.undone_outputs) != self.n_undone_outs or len(state.undone_edges) != self.n_undone_edges
                or state.undone_ids != self.undone_ids):
            return None
        done, seen = state.completed_steps, self.completed
        if len(done) != len(seen) + 1 or (seen and done[-2] is not seen[-1]):
            return None
        last = order[-1]
        new = next(reversed(steps))
        if done[-1].task_step.step_id != last or new in pos or _streaming(done[-1]):
            return None
        step, nxt = steps[last], steps[new]
        links, back = step.next_steps, nxt.prev_steps  # dicts by id
        if len(links) != 1 or new not in links or len(back) != 1 or last not in back or nxt.next_steps:
            return None
        prev = self._ins.get(s, ())
        if s in self._outs or len(step.prev_steps) != len(prev):
            return None
        for p in step.prev_steps:
            if pos.get(p, s) >= s or last not in info[p].next:
                return None
        collapse_after = self.opts["collapse_after"]
        if (collapse_after is not None and n0 + 1 > collapse_after) != self.collapsing:
            return None
        # take the new step in, as _read_changes and _edges would
        self.appends += 1
        pos[new] = n0
        order.append(new)
        seen.append(done[-1])
        e = self.e
        live, outs, ins = self._live, self._outs, self._ins
        k = 0
        while k < len(live) and live[k][0] < e:  # sorted by source: drop the frozen sources' edges
            a, b = live[k]
            outs.pop(a, None)
            into = ins.get(b)
            if into is not None:
                into.remove(a)
                if not into:
                    del ins[b]
            k += 1
        if k:
            del live[:k]
        live.append((s, n0))  # the last source: the list stays sorted
        outs[s] = [n0]
        ins[n0] = [s]
        keep_ends = self.opts["keep_ends"]
        if state.undone_edges or last not in state.outputs:
            undone = _Undone(state) if state.undone_edges else _NO_UNDONE
            self._settle(undone)
        else:  # _settle's common case: the step ran (done: nothing runs), the new one waits
            undone = _NO_UNDONE
            prev = ins.get(s)
            ok = False
            if self.collapsing and s >= keep_ends:
                out = state.outputs[last]
                ok = ((len(prev) if prev else 0) == 1 and last not in self.failures_of
                      and last not in self.undone_outs and not out.is_last and not is_skipped(out)
                      and not any(t.is_error for t in out.tool_outputs or ()))
            self.sck.append((self.live, self.done, self.undone))
            number = self.live + 1
            name = f"s{s}"
            line = None
            if last not in self.failures_of and last not in self.undone_outs:
                line = _plain_step_line(name, number, last, step, _DONE, done[-1], self.opts["max_label"],
                                        self.opts["wrap"])
            info[last] = _Info(_DONE, number, name, ok, (new,),
                               line if line is not None else self._step_line(last, _DONE, number, name, keep=False))
            self._lines.pop(last, None)
            self.s = n0
            self.live = number
            self.done += 1
            status = _status(state, new)
            self._stopped = (new, status)
            if status is _DONE or status is _UNDONE:
                self._settle_steps(undone)  # the general loop takes it from there
            self._decide()
        n, s, d = n0 + 1, self.s, self.d
        if s != n0 or (self.collapsing and max(d, keep_ends) < n - keep_ends):
            return self._text(undone)  # the rarer shapes: the general text
        status = self._stopped[1] if self._stopped[0] == new else _status(state, new)
        if status is _UNDONE:
            return self._text(undone)
        lines = [self._header_one(status)]
        lines.extend(self.nodes)
        run = self.run
        run_name = None
        if run is not None:
            i = run.start
            if run.end - i >= 2:
                run_name = f"c{self.chains}"
                first, lastid = order[i], order[run.end - 1]
                key = (i, run.end - i, lastid, run.latency, run.tokens, self.chains, info[lastid].number)
                found = self._run_line
                if found is None or found[0] != key:
                    found = self._run_line = (key, self._collapsed_line(
                        first, lastid, run.end - i, info[first].number, key[6], run.latency, run.tokens, run_name))
                lines.append(found[1])
            else:
                run_name = f"s{i}"
                lines.append(info[order[i]].line)  # type: ignore[arg-type]
        for i in range(d, s):
            line = info[order[i]].line
            if line is not None:
                lines.append(line)
        line = None
        if new not in self.failures_of and new not in self.undone_outs:  # a new step: never drawn before
            line = _plain_step_line(f"s{n0}", self.live + 1, new, nxt, status, None, self.opts["max_label"],
                                    self.opts["wrap"])
        lines.append(line if line is not None else self._step_line(new, status, self.live + 1, f"s{n0}"))
        dashed: list[tuple[str, str]] = []
        if undone.edges or state.undone_outputs:  # the undo section (O(undone runs))
            def name_of(sid: str) -> str:
                i = pos[sid]
                return self._name(sid) if i < d else f"s{i}"

            ghost_edges, cut_edges = self._undone_section(undone, {new: status}, {new: self.live + 1}, name_of, lines)
            dashed = [*ghost_edges, *cut_edges]
        lines.extend(self.edge_lines)
        e = self.e
        names = []
        for i in range(e, n):
            if i >= d:
                names.append(f"s{i}")
            elif run is not None and run.start <= i < run.end:
                names.append(run_name)  # type: ignore[arg-type]
            else:
                name = info[order[i]].name
                names.append(name if isinstance(name, str) else self.run_names[name])
        drawn = self.pairs
        fresh: set[tuple[str, str]] = set()
        for a, b in live:
            if a < e:
                continue
            na = names[a - e]
            nb = names[b - e] if b >= e else self._name(order[b])
            if na == nb or (na, nb) in drawn or (na, nb) in fresh:
                continue
            fresh.add((na, nb))
            lines.append(f"  {na} -> {nb};")
        for na, nb in dashed:
            if na == nb or (na, nb) in drawn or (na, nb) in fresh:
                continue
            fresh.add((na, nb))
            lines.append(f'  {na} -> {nb} [style="dashed", color="{_UNDONE_EDGE_COLOR}"];')
        if self.opts["legend"]:
            lines.extend(_legend_lines(self.opts["wrap"]))
        lines.append("}\n")
        return "\n".join(lines)

    def _read_changes(self) -> None:
        """Take in what the runner changed since the last render; roll back what it touched."""
        state = self.state
        steps, order, pos = state.steps, self.order, self.pos
        n_old, n = len(order), len(steps)
        if n < n_old:
            self._forget()
            n_old = 0
        if n > n_old:
            new = list(islice(reversed(steps), n - n_old + (1 if n_old else 0)))
            new.reverse()
            if n_old:
                if new[0] != order[-1]:
                    self._forget()
                    return self._read_changes()
                new = new[1:]
            for sid in new:
                pos[sid] = len(order)
                order.append(sid)
        elif n and next(reversed(steps)) != order[-1]:
            self._forget()
            return self._read_changes()
        collapsing = self.opts["collapse_after"] is not None and n > self.opts["collapse_after"]
        if collapsing != self.collapsing:  # the drawing changes everywhere
            if self.collapsing is not None:
                self._restart()
            self.collapsing = collapsing
        failures = state.failures
        if len(failures) != self.n_failures:
            if len(failures) < self.n_failures:
                self._forget()
                return self._read_changes()
            for f in list(failures[self.n_failures:]):
                self.failures_of.setdefault(f.step_id, []).append(f)
                self._rollback(pos.get(f.step_id))
            self.n_failures = len(failures)
        outs = state.undone_outputs
        if len(outs) != self.n_undone_outs:
            if len(outs) < self.n_undone_outs:
                self._forget()
                return self._read_changes()
            for out in list(outs[self.n_undone_outs:]):
                sid = out.task_step.step_id
                self.undone_outs.setdefault(sid, []).append(out)
                self._rollback(pos.get(sid))
            self.n_undone_outs = len(outs)
        edges = state.undone_edges
        if len(edges) != self.n_undone_edges:
            if len(edges) < self.n_undone_edges:
                self._forget()
                return self._read_changes()
            for a, b in list(edges[self.n_undone_edges:]):
                self._rollback(min(pos.get(a, 0), pos.get(b, 0)))
            self.n_undone_edges = len(edges)
        done = state.completed_steps  # a step that ran since (an undone one may run again)
        seen = self.completed
        k = len(seen)
        if len(done) != k or (k and done[k - 1] is not seen[k - 1]):
            k = min(len(done), k)
            while k and done[k - 1] is not seen[k - 1]:
                k -= 1
            self._rollback(min((pos.get(o.task_step.step_id, 0) for o in [*done[k:], *seen[k:]]), default=None))
            del seen[k:]
            seen.extend(done[k:])
        if state.running:
            for sid in list(state.running):
                self._rollback(pos.get(sid))
        if state.undone_ids != self.undone_ids:
            changed = state.undone_ids ^ self.undone_ids
            self._rollback(min((pos.get(sid, 0) for sid in changed), default=None))
            self.undone_ids = set(state.undone_ids)

    def _edges(self) -> None:
        """The live edges that leave the sources from ``e`` on (every edge that touches a step
        after the prefix is one of them), from the links of both ends, as ``task_to_dot``
        reads them. A link from a step after the prefix to a settled step that the settled
        step did not have when it settled unsettles it."""
        steps, order, pos, info = self.state.steps, self.order, self.pos, self.info
        while True:
            s, n = self.s, len(order)
            found: set[tuple[int, int]] = set()
            add = found.add
            back = n
            for a in range(self.e, s):
                for b in info[order[a]].next:
                    add((a, pos[b]))
            for w in range(s, n):
                sid = order[w]
                step = steps[sid]
                for p in step.prev_steps:
                    pi = pos.get(p)
                    if pi is None:
                        raise _Odd  # drawn by task_to_dot: a step only reachable by a link
                    if pi < s and pi < back and sid not in info[p].next:
                        back = pi
                    add((pi, w))
                for x in step.next_steps:
                    xi = pos.get(x)
                    if xi is None:
                        raise _Odd
                    if xi < back and xi < s:
                        back = xi
                    add((w, xi))
            if back < n:
                self._rollback(back)
                continue
            break
        live = sorted(found)
        outs: dict[int, list[int]] = {}
        ins: dict[int, list[int]] = {}
        for a, b in live:
            outs.setdefault(a, []).append(b)
            ins.setdefault(b, []).append(a)
        self._live, self._outs, self._ins = live, outs, ins

    # ----- settling ----------------------------------------------------------------------
    def _settle(self, undone: _Undone) -> None:
        """Settle the steps that can no longer change, then decide how the settled steps
        before the last ``keep_ends`` are drawn (closed units, or the open run)."""
        self._stopped = (None, None)
        self._settle_steps(undone)
        self._decide()

    def _settle_steps(self, undone: _Undone) -> None:
        """Settle the steps after the prefix that can no longer change (from ``s`` on)."""
        state, order, pos, info = self.state, self.order, self.pos, self.info
        n = len(order)
        keep_ends = self.opts["keep_ends"]
        collapsing = self.collapsing
        ins, outs = self._ins, self._outs
        while self.s < n:
            i = self.s
            sid = order[i]
            status = _status(state, sid)
            self._stopped = (sid, status)  # the step after the prefix: _text needs its status too
            prev = ins.get(i)
            if prev and prev[-1] >= i:
                break
            nxt = tuple([order[b] for b in outs[i]]) if i in outs else ()
            ok = False
            if status is _DONE:
                if _streaming(state.outputs.get(sid)):
                    break  # its answer still streams in: the text is not final
                number = self.live + 1
                if collapsing and i >= keep_ends:
                    out = state.outputs.get(sid)
                    ok = ((len(prev) if prev else 0) + undone.ins.get(sid, 0) == 1
                          and len(nxt) + undone.outs.get(sid, 0) == 1
                          and sid not in self.failures_of and sid not in self.undone_outs
                          and out is not None and not out.is_last and not is_skipped(out)
                          and not any(t.is_error for t in out.tool_outputs or ()))
            elif status is _UNDONE:
                parent = undone.cut_parent.get(sid)
                pi = pos.get(parent) if parent is not None else None
                if pi is None or pi >= i:
                    break  # numbered after every live step: the number still moves
                number = info[parent].number + 1  # type: ignore[index]
            else:
                break
            self.sck.append((self.live, self.done, self.undone))
            name = f"s{i}"
            line = None if status is _UNDONE and sid in self.undone_outs else self._step_line(
                sid, status, number, name, keep=False)
            self._lines.pop(sid, None)
            info[sid] = _Info(status, number, name, ok, nxt, line)
            self.s += 1
            if status is _UNDONE:
                self.undone += 1
            else:
                self.live += 1
                self.done += 1

    def _decide(self) -> None:
        """Decide how the settled steps before the last ``keep_ends`` are drawn (closed
        units, or the open run), then freeze the edges that became final."""
        state, order, pos, info = self.state, self.order, self.pos, self.info
        n = len(order)
        keep_ends = self.opts["keep_ends"]
        ins = self._ins
        limit = min(self.s, n - keep_ends) if self.collapsing else self.s
        while self.d < limit:
            i = self.d
            sid = order[i]
            inf = info[sid]
            run = self.run
            if run is not None:
                lnext = info[order[run.end - 1]].next
                into = ins.get(i)
                if (inf.ok and len(lnext) == 1 and lnext[0] == sid and into is not None and len(into) == 1
                        and into[0] == run.end - 1):  # the run goes on
                    self.dck.append((len(self.nodes), self.chains, (run.start, run.end, run.latency, run.tokens)))
                    run.end = i + 1
                    out = state.outputs.get(sid)
                    if out is not None:  # _chain_metrics, for one more step
                        if isinstance(out.latency_s, (int, float)):
                            run.latency = (run.latency or 0.0) + out.latency_s
                        if out.usage is not None:
                            run.tokens = (run.tokens or 0) + out.usage.total_tokens
                    inf.name = run.start
                    self.d += 1
                    continue
                if lnext and lnext[0] != sid and pos[lnext[0]] > i:
                    break  # the run's next step comes later: it may still go on
            self.dck.append((len(self.nodes), self.chains,
                             None if run is None else (run.start, run.end, run.latency, run.tokens)))
            self._close_run()
            if inf.ok:
                self.run = _Run(i, i + 1, *_chain_metrics([state.outputs.get(sid)]))
                inf.name = i
            elif inf.line is not None:
                self.nodes.append(inf.line)
            self.d += 1
        self._settle_edges()

    def _close_run(self) -> None:
        run = self.run
        if run is None:
            return
        self.run = None
        if run.end - run.start < 2:  # one step is drawn as itself
            i = run.start
            self.run_names[i] = f"s{i}"
            self.nodes.append(self.info[self.order[i]].line)  # type: ignore[arg-type]
            return
        name = f"c{self.chains}"
        self.run_names[run.start] = name
        first, last = self.order[run.start], self.order[run.end - 1]
        self.nodes.append(self._collapsed_line(first, last, run.end - run.start, self._number(first),
                                               self._number(last), run.latency, run.tokens, name))
        self.chains += 1

    def _collapsed_line(self, first: str, last: str, count: int, n_first: int, n_last: int,
                        latency: float | None, tokens: int | None, name: str) -> str:
        """``_node_line(_collapsed_node_of(...))``, without the detour (it changes at every step)."""
        wrap = self.opts["wrap"]
        head = f"… {count} steps …"
        (short_first, esc_first), (short_last, esc_last) = _short_esc(first), _short_esc(last)
        ids = f"#{n_first}–#{n_last} · {short_first} … {short_last}"
        if latency is None and tokens is None:
            metrics = ""
        elif tokens is None:
            metrics = f"{latency:.2f} s"
        elif latency is None:
            metrics = f"{tokens} tok"
        else:
            metrics = f"{latency:.2f} s · {tokens} tok"
        if len(head) <= wrap and len(ids) <= wrap and len(metrics) <= wrap:  # no wrapping: in one go
            # html.escape(ids): only the ids can hold characters to escape
            label = (f"<B>{head}</B>{_BR}#{n_first}–#{n_last} · {esc_first} … {esc_last}{_BR}"
                     + (f"<I>{metrics}</I>{_BR}" if metrics else ""))
        else:
            label = (_label_piece(head, "head", wrap) + _label_piece(ids, "text", wrap)
                     + (_label_piece(metrics, "muted", wrap) if metrics else ""))
        return f"  {name} [label=<{label}>, {_COLLAPSED_ATTRS}];"

    def _number(self, sid: str) -> int:
        return self.info[sid].number

    def _name(self, sid: str) -> str:
        """The node name of a settled step."""
        name = self.info[sid].name
        if isinstance(name, str):
            return name
        run = self.run
        if run is not None and run.start == name:
            return f"c{self.chains}" if run.end - run.start >= 2 else f"s{name}"
        return self.run_names[name]

    def _settle_edges(self) -> None:
        """Freeze the edge lines of the sources whose edges all end in settled steps (with
        their final names: not in an open run of one step, which may still grow)."""
        order, info, pos, s = self.order, self.info, self.pos, self.d
        run = self.run
        lo, hi = (run.start, run.end) if run is not None and run.end - run.start < 2 else (s, s)
        emax, pairs, edge_lines = self.emax, self.pairs, self.edge_lines
        while self.e < s:
            i = self.e
            if lo <= i < hi:
                break
            a = order[i]
            nxt = info[a].next  # in position order
            reach = i
            for b in nxt:
                j = pos[b]
                if j >= s or lo <= j < hi:
                    reach = -1
                    break
                reach = max(reach, j)
            if reach < 0:
                break
            self.eck.append(len(edge_lines))
            added: list[tuple[str, str]] = []
            if nxt:
                ia, na = info[a].name, None
                for b in nxt:
                    if type(ia) is int and info[b].name == ia:
                        continue  # both in one collapsed run: one node, no edge
                    if na is None:
                        na = self._name(a)
                    nb = self._name(b)
                    if na == nb or (na, nb) in pairs:
                        continue
                    pairs.add((na, nb))
                    added.append((na, nb))
                    edge_lines.append(f"  {na} -> {nb};")
            self.epairs.append(added)
            emax.append(max(reach, emax[-1]) if emax else reach)
            self.e += 1

    # ----- node text ---------------------------------------------------------------------
    def _step_line(self, sid: str, status: StepStatus, number: int, name: str, keep: bool = True) -> str:
        """A step's node line, drawn again only when what it shows changed (``keep``: a
        step after the prefix, whose line may serve the next redraw too)."""
        state = self.state
        step = state.steps.get(sid)
        out = state.outputs.get(sid) if status is _DONE else None
        fails = self.failures_of.get(sid, ())
        undone_outs = self.undone_outs.get(sid, ())
        if not keep:
            line = None if fails or undone_outs else _plain_step_line(
                name, number, sid, step, status, out, self.opts["max_label"], self.opts["wrap"])
            if line is not None:
                return line
        key = (name, number, status, None if step is None else step.input, len(fails), len(undone_outs))
        # approval decisions change while a step waits; a streamed answer grows after the step
        cache = (step is None or APPROVAL_KEY not in step.step_state) and not _streaming(out)
        found = self._lines.get(sid) if cache else None
        if found is not None and found[1] is out and found[0] == key:
            return found[2]
        line = None
        if not fails and not undone_outs:
            line = _plain_step_line(name, number, sid, step, status, out, self.opts["max_label"], self.opts["wrap"])
        if line is None:
            node = _step_node(state, number, sid, step, status, list(fails), list(undone_outs), self.opts["max_label"])
            node.name = name
            line = _node_line(node, self.opts["wrap"])
        if cache:
            self._lines[sid] = (key, out, line)
        return line

    # ----- the whole text ----------------------------------------------------------------
    def _text(self, undone: _Undone) -> str:
        state, opts, order, pos, info = self.state, self.opts, self.order, self.pos, self.info
        n, s, d = len(order), self.s, self.d
        keep_ends = opts["keep_ends"]
        window = order[s:]
        statuses: dict[str, StepStatus] = {}
        numbers: dict[str, int] = {}
        c = self.live
        stopped = self._stopped
        for sid in window:
            st = statuses[sid] = stopped[1] if sid == stopped[0] else _status(state, sid)
            if st is not _UNDONE:
                c += 1
                numbers[sid] = c
        if c - self.live < len(window):  # undone steps: numbered after the step that cut them
            for sid in window:
                if statuses[sid] is _UNDONE:
                    parent = undone.cut_parent.get(sid)
                    if parent is not None and parent in numbers:
                        numbers[sid] = numbers[parent] + 1
                    elif parent is not None and parent in info and pos[parent] < s:
                        numbers[sid] = info[parent].number + 1
                    else:
                        numbers[sid] = c + 1

        # collapsible steps after the prefix (only while an open step holds the prefix back)
        chain_of: dict[str, int] = {}  # step after the prefix -> its chain (-1: the open run)
        chains: list[list[str]] = []
        run, ext = self.run, []
        if self.collapsing and max(d, keep_ends) < n - keep_ends:
            chain_of, chains, ext = self._window_chains(undone, statuses)
        run_len = 0 if run is None else run.end - run.start + len(ext)
        k0 = self.chains + (1 if run_len >= 2 else 0)
        run_name = None if run is None else (f"c{self.chains}" if run_len >= 2 else f"s{run.start}")

        def name_of(sid: str) -> str:
            i = pos[sid]
            if i < d:
                if run is not None and run.start <= i < run.end:
                    return run_name  # type: ignore[return-value]
                name = info[sid].name
                return name if isinstance(name, str) else self.run_names[name]
            k = chain_of.get(sid) if chain_of else None
            if k is None:
                return f"s{i}"
            return f"c{self.chains}" if k == -1 else f"c{k0 + k}"

        lines = [self._header(statuses)]
        lines.extend(self.nodes)
        if run is not None:
            if run_len >= 2:
                lat, tok = run.latency, run.tokens
                if ext:
                    lat, tok = _chain_metrics([state.outputs.get(x) for x in ext], lat, tok)
                first = order[run.start]
                lastid = ext[-1] if ext else order[run.end - 1]
                n_last = numbers[lastid] if lastid in numbers else info[lastid].number
                key = (run.start, run_len, lastid, lat, tok, self.chains, n_last)
                found = self._run_line
                if found is None or found[0] != key:
                    found = self._run_line = (key, self._collapsed_line(first, lastid, run_len, info[first].number,
                                                                        n_last, lat, tok, run_name))  # type: ignore[arg-type]
                lines.append(found[1])
            else:
                sid = order[run.start]
                lines.append(self._step_line(sid, _DONE, info[sid].number, run_name))  # type: ignore[arg-type]
        for i in range(d, s):  # settled, not yet decided: drawn as themselves, unless in a run
            sid = order[i]
            if chain_of and sid in chain_of:
                ck = chain_of[sid]
                if ck >= 0 and chains[ck][0] == sid:
                    lines.append(self._chain_line(chains[ck], k0 + ck, numbers))
                continue
            line = info[sid].line
            if line is not None:
                lines.append(line)
        undone_outs = self.undone_outs
        for k, sid in enumerate(window, s):
            status = statuses[sid]
            if status is _UNDONE and sid in undone_outs:
                continue
            if chain_of:
                ck = chain_of.get(sid)
                if ck is not None:
                    if ck >= 0 and chains[ck][0] == sid:
                        lines.append(self._chain_line(chains[ck], k0 + ck, numbers))
                    continue
            lines.append(self._step_line(sid, status, numbers[sid], f"s{k}"))
        if state.undone_outputs or undone.edges:
            ghost_edges, cut_edges = self._undone_section(undone, statuses, numbers, name_of, lines)
        else:
            ghost_edges = cut_edges = []

        # edges: the frozen ones, then those of the sources after them, in source order
        lines.extend(self.edge_lines)
        e = self.e
        drawn = self.pairs
        fresh: set[tuple[str, str]] = set()
        names = [name_of(order[i]) if i < d or chain_of else f"s{i}" for i in range(e, n)]
        for a, b in self._live:
            if a < e:
                continue
            na = names[a - e]
            nb = names[b - e] if b >= e else name_of(order[b])
            if na == nb or (na, nb) in drawn or (na, nb) in fresh:
                continue
            fresh.add((na, nb))
            lines.append(f"  {na} -> {nb};")
        for na, nb in [*ghost_edges, *cut_edges]:
            if na == nb or (na, nb) in drawn or (na, nb) in fresh:
                continue
            fresh.add((na, nb))
            lines.append(f'  {na} -> {nb} [style="dashed", color="{_UNDONE_EDGE_COLOR}"];')
        if opts["legend"]:
            lines.extend(_legend_lines(opts["wrap"]))
        lines.append("}\n")
        return "\n".join(lines)

    def _chain_line(self, chain: list[str], k: int, numbers: dict[str, int] | None = None) -> str:
        """A collapsed run that starts after the decided steps."""
        def number(sid: str) -> int:
            return numbers[sid] if numbers is not None and sid in numbers else self.info[sid].number

        lat, tok = _chain_metrics([self.state.outputs.get(x) for x in chain])
        return self._collapsed_line(chain[0], chain[-1], len(chain), number(chain[0]), number(chain[-1]), lat, tok,
                                    f"c{k}")

    def _window_chains(self, undone: _Undone, statuses: dict[str, StepStatus]
                       ) -> tuple[dict[str, int], list[list[str]], list[str]]:
        """The collapsed runs among the steps after the prefix, and how far the open run
        goes on into them: ``task_to_dot``'s chains, for the part it did not settle."""
        state, order, pos, info, s, d = self.state, self.order, self.pos, self.info, self.s, self.d
        n, keep_ends = len(order), self.opts["keep_ends"]
        ok: set[str] = set()
        for k in range(max(d, keep_ends), n - keep_ends):
            sid = order[k]
            if k < s:
                if info[sid].ok:
                    ok.add(sid)
                continue
            if statuses[sid] is not _DONE or sid in self.failures_of or sid in self.undone_outs:
                continue
            if (len(self._ins.get(k, ())) + undone.ins.get(sid, 0) != 1
                    or len(self._outs.get(k, ())) + undone.outs.get(sid, 0) != 1):
                continue
            out = state.outputs.get(sid)
            if out is None or out.is_last or is_skipped(out) or any(t.is_error for t in out.tool_outputs or []):
                continue
            ok.add(sid)
        outs, ins = self._outs, self._ins

        def succ(sid: str) -> str | None:
            nxt = outs.get(pos[sid])
            return order[nxt[-1]] if nxt else None

        def pred(sid: str) -> str | None:
            prev = ins.get(pos[sid])
            return order[prev[-1]] if prev else None

        chain_of: dict[str, int] = {}
        chains: list[list[str]] = []
        ext: list[str] = []
        run = self.run
        if run is not None:
            last = order[run.end - 1]
            nxt = succ(last)
            while nxt is not None and nxt in ok and pred(nxt) == last and nxt not in chain_of:
                ext.append(nxt)
                chain_of[nxt] = -1
                last = nxt
                nxt = succ(nxt)
        for sid in order[d:]:
            if sid not in ok or sid in chain_of:
                continue
            p = pred(sid)
            if p is not None and (p in ok or (pos[p] < d and info[p].ok)) and succ(p) == sid:
                continue  # not the start of a chain
            chain = [sid]
            nxt = succ(sid)
            while nxt is not None and nxt in ok and pred(nxt) == chain[-1] and nxt not in chain:
                chain.append(nxt)
                nxt = succ(nxt)
            if len(chain) >= 2:
                for m in chain:
                    chain_of[m] = len(chains)
                chains.append(chain)
        return chain_of, chains, ext

    def _title(self) -> tuple[Any, str, str, str, str]:
        """The text before and after the title's summary line (cached by the task's id,
        input and status): the summary changes at every step, the rest seldom."""
        state, opts = self.state, self.opts
        try:
            task_status: Any = state.status
        except Exception:  # noqa: BLE001
            task_status = None
        task = state.task
        top = self._top
        if top is None or top[0] is not task_status or top[1] != task.task_id or top[2] != task.input:
            value = "unknown" if task_status is None else task_status.value
            title = _title_top(task.task_id, task.input, value, opts["max_label"], opts["wrap"])
            head = _header_from(title + "\0", {}, opts["rankdir"], opts["wrap"])
            pre, post = head[1].split("\0", 1)
            post = post[post.index(_TITLE_CLOSE):]  # what follows the summary line
            top = self._top = (task_status, task.task_id, task.input, head[0] + "\n" + pre,
                               "\n".join([post, *head[2:]]))
            self._head = None
        return top

    def _header(self, statuses: dict[str, StepStatus]) -> str:
        """The text up to the first node line, as one string (the settled steps counted,
        and ``statuses``: those of the steps after the prefix)."""
        top = self._title()
        counts = self._zero.copy()
        for st in statuses.values():
            counts[st] += 1
        counts[_DONE] += self.done
        counts[_UNDONE] += self.undone
        key = tuple(counts.values())
        found = self._head
        if found is not None and found[0] == key:
            return found[1]
        summary = ", ".join([f"{k} {_VALUE[st]}" for st, k in counts.items() if k]) or "no steps"
        width = max(self.opts["wrap"], 60)
        # the summary is numbers and status names (nothing to escape): _label_piece's short case
        if len(summary) <= width and _PLAIN_VALUES:
            piece = f"<I>{summary}</I>{_BR}"
        else:
            piece = _label_piece(summary, "muted", width)
        text = top[3] + piece + top[4]
        self._head = (key, text)
        return text

    def _header_one(self, one: StepStatus) -> str:
        """``_header`` of the common redraw (one step after the prefix, of status ``one``):
        the summary's text around the count of done steps is kept while ``one`` and the
        number of undone steps stay, and the count is put in."""
        top = self._title()
        undone = self.undone
        tpl = self._tpl
        if tpl is None or tpl[0] is not top or tpl[1] is not one or tpl[2] != undone:
            counts = self._zero.copy()
            counts[one] += 1
            counts[_UNDONE] += undone
            parts = ["\0" if st is _DONE else f"{k} {_VALUE[st]}" for st, k in counts.items() if k or st is _DONE]
            before, after = ", ".join(parts).split("\0")
            tpl = self._tpl = (top, one, undone, before, after)
        done = self.done + (1 if one is _DONE else 0)
        before, after = tpl[3], tpl[4]
        if (not done or not _PLAIN_VALUES
                or len(before) + len(after) + len(str(done)) + len(_DONE_TEXT) > max(self.opts["wrap"], 60)):
            return self._header({"": one})
        return f"{top[3]}<I>{before}{done}{_DONE_TEXT}{after}</I>{_BR}{top[4]}"

    def _undone_section(self, undone: _Undone, statuses: dict[str, StepStatus], numbers: dict[str, int],
                        name_of: Any, lines: list[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The undone runs' nodes (appended to ``lines``) and the dashed edges, as
        ``task_to_dot`` draws them (O(undone runs + cut edges))."""
        state = self.state
        outs = state.undone_outputs
        s, pos, info = self.s, self.pos, self.info

        def number_of(sid: str) -> int | None:
            got = numbers.get(sid)
            if got is None and sid in pos and pos[sid] < s:
                return info[sid].number
            return got

        def status_of(sid: str) -> StepStatus | None:
            i = pos.get(sid)
            if i is None:
                return None
            return info[sid].status if i < s else statuses[sid]

        ghosts = [f"u{k}" for k in range(len(outs))]
        made_by: dict[str, list[str]] = {}
        runs: dict[str, list[str]] = {}
        for k, out in enumerate(outs):
            runs.setdefault(out.task_step.step_id, []).append(ghosts[k])
            for nxt in out.next_steps:
                made_by.setdefault(nxt.step_id, []).append(ghosts[k])
        cut_from: dict[str, list[str]] = {}
        for a, b in undone.edges:
            cut_from.setdefault(b, []).append(a)

        def sources(sid: str) -> list[str]:
            made = made_by.get(sid)
            if made:
                return made
            return [name_of(a) for a in cut_from.get(sid, []) if a in pos]

        ghost_edges: list[tuple[str, str]] = []
        for k, out in enumerate(outs):
            sid = out.task_step.step_id
            if status_of(sid) is _UNDONE:
                parents = sources(sid)
            else:
                step = state.steps.get(sid)
                prev = list(step.prev_steps) if step is not None else []
                parents = [name_of(p) for p in prev if p in pos]
            ghost_edges.extend((p, ghosts[k]) for p in parents)
        cut_edges: list[tuple[str, str]] = []
        for a, b in undone.edges:
            if b in runs and status_of(b) is _UNDONE:
                continue
            made = [g for g in made_by.get(b, []) if g in runs.get(a, [])]
            for src in made or [name_of(a)]:
                cut_edges.append((src, name_of(b)))

        seen: dict[str, int] = {}
        for k, out in enumerate(outs):
            sid = out.task_step.step_id
            seen[sid] = seen.get(sid, 0) + 1
            number = number_of(sid) or 0
            key = (number, seen[sid], len(self.undone_outs[sid]))
            found = self._ghosts.get(k)
            if found is None or found[1] is not out or found[0] != key:
                node = _ghost_node(out, number, seen[sid], key[2], self.opts["max_label"])
                node.name = ghosts[k]
                found = self._ghosts[k] = (key, out, _node_line(node, self.opts["wrap"]))
            lines.append(found[2])
        return ghost_edges, cut_edges
