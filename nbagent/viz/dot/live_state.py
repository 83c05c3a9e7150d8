"""The live graph's state machine: what it keeps of a task between redraws, and how it follows
the task's changes. No text here: ``live_text`` draws from it exactly what ``task_to_dot`` draws.

``task_to_dot`` walks every step: about 10 ms at 2,000 steps, paid at every redraw. A
``LiveDotState`` keeps what can no longer change:

- the *settled* steps, in registry order: done (or undone) for good, with their name, number,
  status and links, and a checkpoint each, so that an undo, a failure or a new link that
  reaches back into them unsettles from that step on only (not from zero);
- among them the *decided* ones, no longer among the last ``keep_ends``: closed units (a step
  drawn as itself, or a collapsed run), or members of the collapsed run still growing at the
  end (with running sums of its latency and tokens);
- the edges of the sources whose edges all end in decided steps.

``update()`` reads what the runner changed since the last one (new steps, failures, undone
runs, edges and ids, completed and running steps, the links of the steps after the prefix),
rolls back what that touched, then settles and decides what became final; ``live_frame``
then describes the steps after the prefix. The prefix stops at a step that is still open (held,
blocked, failed...): while a step early in the task stays open, redraws cost more, and stay
exact.

What it sees: the task's registry, links, outputs, failures and undo lists, which every runner
operation goes through (a link changed by hand on a settled step is not seen). A link to a step
missing from the registry raises ``OddState``: ``task_to_dot`` draws such states itself.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import islice
from typing import TYPE_CHECKING, Any

from nbagent.engine.state import StepStatus
from nbagent.schema import StreamingAgentChatResponse
from nbagent.viz.dot.collapse import _chain_metrics
from nbagent.viz.dot.model import _status, is_skipped

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState
    from nbagent.schema import TaskStepOutput

__all__ = ["LiveDotState", "OddState", "Run", "StepInfo", "UndoneEdges", "streaming", "collapsible_output"]

_DONE, _UNDONE = StepStatus.DONE, StepStatus.UNDONE


def streaming(out: TaskStepOutput | None) -> bool:
    """Whether a step's answer is a stream still being read: its text grows after the step
    is done, so its node stays open (redrawn, never cached) until the stream ends."""
    return out is not None and type(out.output) is StreamingAgentChatResponse and not out.output.is_done


def collapsible_output(out: TaskStepOutput | None) -> bool:
    """Whether a done step's output lets it join a collapsed run (``collapse._collapsible``)."""
    if out is None or out.is_last or is_skipped(out):
        return False
    tool_outputs = out.tool_outputs
    return not tool_outputs or not any(t.is_error for t in tool_outputs)


class OddState(Exception):
    """A state only the full renderer draws (a link to a step missing from the registry)."""


class Run:
    """Consecutive collapsible settled steps ``order[start:end]`` (one node once there are
    two), with the sums of their latency and tokens; ``k`` numbers a closed run (``c{k}``)."""

    __slots__ = ("start", "end", "latency", "tokens", "k")

    def __init__(self, start: int, end: int, latency: float | None, tokens: int | None, k: int = -1) -> None:
        self.start, self.end, self.latency, self.tokens, self.k = start, end, latency, tokens, k


class StepInfo:
    """What the drawing keeps of a settled step."""

    __slots__ = ("status", "number", "name", "ok", "next", "drawn")

    def __init__(self, status: StepStatus, number: int, name: str | int, ok: bool, nxt: tuple[str, ...],
                 drawn: bool) -> None:
        self.status = status
        self.number = number
        self.name = name  # its node name, or the start index of the run it belongs to
        self.ok = ok  # collapsible once it is not among the last keep_ends steps
        self.next = nxt  # its live next steps when it settled, in position order
        self.drawn = drawn  # drawn as itself (False: its undone runs stand for it)


class UndoneEdges:
    """The undone edges as ``task_to_dot`` sees them (deduplicated, live pairs left out)."""

    __slots__ = ("edges", "ins", "outs", "cut_parent")

    def __init__(self, state: TaskState | None = None) -> None:
        self.edges: list[tuple[str, str]] = []
        self.ins: dict[str, int] = {}
        self.outs: dict[str, int] = {}
        self.cut_parent: dict[str, str] = {}
        if state is None or not state.undone_edges:
            return
        steps = state.steps
        seen: set[tuple[str, str]] = set()
        for a, b in list(state.undone_edges):
            sa, sb = steps.get(a), steps.get(b)
            if sa is None or sb is None:
                raise OddState
            if (a, b) in seen or b in sa.next_steps or a in sb.prev_steps:
                continue
            seen.add((a, b))
            self.edges.append((a, b))
            self.outs[a] = self.outs.get(a, 0) + 1
            self.ins[b] = self.ins.get(b, 0) + 1
        self.cut_parent = {b: a for a, b in reversed(self.edges)}  # first cutting edge wins


_NO_UNDONE = UndoneEdges()


class LiveDotState:
    """What a ``LiveDot`` keeps of ``state`` (see the module docstring)."""

    def __init__(self, state: TaskState, *, collapse_after: int | None = 40, keep_ends: int = 4) -> None:
        self.state = state
        self.collapse_after = collapse_after
        self.keep_ends = keep_ends
        self.restarts = 0  # times the settled prefix was rebuilt from the first step
        self.rollbacks = 0  # times a change reached back into the settled prefix
        self.stopped: tuple[str | None, Any] = (None, None)  # the step the settling stopped at, its status
        self.forget()

    # ----- what is kept ------------------------------------------------------------------
    def forget(self) -> None:
        """Know nothing about the task (the next update reads it from its first step)."""
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
        self.live_edges: list[tuple[int, int]] = []  # the live edges from the sources e on, by position
        self.outs_of: dict[int, list[int]] = {}
        self.ins_of: dict[int, list[int]] = {}
        self._empty_prefix()

    def _empty_prefix(self) -> None:
        self.s = 0  # steps order[:s] are settled: their drawing is final, unless they join a run
        self.d = 0  # steps order[:d] are decided: closed units, or members of the open run
        self.sck: list[tuple[int, int, int]] = []  # per settled step: the counts before it
        self.dck: list[tuple[Any, ...]] = []  # per decided step: the units before it
        self.info: dict[str, StepInfo] = {}
        self.units: list[int | Run] = []  # the closed units, in order: a step's position, or a run
        self.units_low = 0  # units[:units_low] have not changed since ``changes`` last said
        self.settled_low = 0  # as units_low, for the settled steps
        self.last_number = 0  # settled steps that are not undone (the last number given)
        self.done = 0
        self.undone = 0
        self.chains = 0  # collapsed runs among the closed units
        self.run: Run | None = None
        self.run_names: dict[int, str] = {}  # closed run start -> its node name
        self.e = 0  # the edges leaving order[:e] are final
        self.eck: list[int] = []  # per such source: len(edges) before its edges
        self.epairs: list[list[tuple[str, str]]] = []
        self.emax: list[int] = []  # per such source: the furthest step its edges or earlier ones reach
        self.edges: list[tuple[str, str]] = []  # the final edges, by node names, in source order
        self.edges_low = 0  # as units_low, for edges
        self.pairs: set[tuple[str, str]] = set()
        # the live edges of the settled sources whose edges are not final yet (order[e:s]), by
        # position, in source order: extended as a step settles, cut as a source's edges freeze
        self.slive: list[tuple[int, int]] = []

    def changes(self) -> tuple[int, int, int]:
        """How many settled steps stayed settled, and how many closed units and final edges
        are unchanged, since the last call (the reader's text of the others may be stale)."""
        low = (self.settled_low, self.units_low, self.edges_low)
        self.settled_low, self.units_low, self.edges_low = self.s, len(self.units), len(self.edges)
        return low

    def _restart(self) -> None:
        self.restarts += 1
        self._empty_prefix()

    def _rollback(self, i: int | None) -> None:
        """Unsettle the steps from position ``i`` on (they changed, or one they show did)."""
        if i is None or i >= self.s:
            return
        self.rollbacks += 1
        self.last_number, self.done, self.undone = self.sck[i]
        del self.sck[i:]
        self.s = i
        self.settled_low = min(self.settled_low, i)
        if i < self.d:
            n_units, self.chains, run = self.dck[i]
            del self.dck[i:]
            del self.units[n_units:]
            self.units_low = min(self.units_low, n_units)
            self.d = i
            self.run = None if run is None else Run(*run)
        # the edges of a source stay final while every step they reach stays decided, and its
        # name too (a run of one step may still grow: then it is renamed)
        run = self.run
        bound = min(self.d, run.start) if run is not None and run.end - run.start < 2 else self.d
        e = bisect_left(self.emax, bound)
        if e < self.e:
            for a in range(e, self.e):
                self.pairs.difference_update(self.epairs[a])
            del self.edges[self.eck[e]:]
            self.edges_low = min(self.edges_low, self.eck[e])
            del self.eck[e:]
            del self.epairs[e:]
            del self.emax[e:]
            self.e = e
        pos, info, order = self.pos, self.info, self.order
        self.slive = [(a, pos[b]) for a in range(self.e, self.s) for b in info[order[a]].next]

    # ----- following the task ------------------------------------------------------------
    def update(self) -> UndoneEdges:
        """Take in what changed since the last update; the undone edges as they are now."""
        self._read_changes()
        undone = UndoneEdges(self.state) if self.state.undone_edges else _NO_UNDONE
        self._edges()
        self.stopped = (None, None)
        self._settle_steps(undone)
        self._decide()
        return undone

    def _read_changes(self) -> None:
        """Take in what the runner changed since the last update; roll back what it touched.
        Each check is a length or an identity first: when nothing changed, nothing is read."""
        state = self.state
        steps, order, pos = state.steps, self.order, self.pos
        n_old, n = len(order), len(steps)
        if n < n_old:
            self.forget()
            n_old = 0
        if n == n_old + 1 and n_old:  # one new step (the common case): the one before it was last
            newest = reversed(steps)
            sid = next(newest)
            if next(newest) != order[-1]:
                self.forget()
                return self._read_changes()
            pos[sid] = n_old
            order.append(sid)
        elif n > n_old:
            new = list(islice(reversed(steps), n - n_old + (1 if n_old else 0)))
            new.reverse()
            if n_old:
                if new[0] != order[-1]:
                    self.forget()
                    return self._read_changes()
                new = new[1:]
            for sid in new:
                pos[sid] = len(order)
                order.append(sid)
        elif n and next(reversed(steps)) != order[-1]:
            self.forget()
            return self._read_changes()
        collapsing = self.collapse_after is not None and n > self.collapse_after
        if collapsing != self.collapsing:  # the drawing changes everywhere
            if self.collapsing is not None:
                self._restart()
            self.collapsing = collapsing
        failures = state.failures
        if len(failures) != self.n_failures:
            if len(failures) < self.n_failures:
                self.forget()
                return self._read_changes()
            for f in list(failures[self.n_failures:]):
                self.failures_of.setdefault(f.step_id, []).append(f)
                self._rollback(pos.get(f.step_id))
            self.n_failures = len(failures)
        outs = state.undone_outputs
        if len(outs) != self.n_undone_outs:
            if len(outs) < self.n_undone_outs:
                self.forget()
                return self._read_changes()
            for out in list(outs[self.n_undone_outs:]):
                sid = out.task_step.step_id
                self.undone_outs.setdefault(sid, []).append(out)
                self._rollback(pos.get(sid))
            self.n_undone_outs = len(outs)
        edges = state.undone_edges
        if len(edges) != self.n_undone_edges:
            if len(edges) < self.n_undone_edges:
                self.forget()
                return self._read_changes()
            for a, b in list(edges[self.n_undone_edges:]):
                self._rollback(min(pos.get(a, 0), pos.get(b, 0)))
            self.n_undone_edges = len(edges)
        done = state.completed_steps  # a step that ran since (an undone one may run again)
        seen = self.completed
        k = len(seen)
        if len(done) != k or (k and done[k - 1] is not seen[k - 1]):
            if len(done) > k and (not k or done[k - 1] is seen[k - 1]):  # outputs added only
                new_outs = done[k:]
                if len(new_outs) == 1:  # one step ran (the common case)
                    low = pos.get(new_outs[0].task_step.step_id, 0)
                else:
                    low = min([pos.get(o.task_step.step_id, 0) for o in new_outs])
            else:
                k = min(len(done), k)
                while k and done[k - 1] is not seen[k - 1]:
                    k -= 1
                new_outs = done[k:]
                low = min([pos.get(o.task_step.step_id, 0) for o in [*new_outs, *seen[k:]]])
                del seen[k:]
            if low < self.s:
                self._rollback(low)
            seen.extend(new_outs)
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
            # the settled sources' edges, in order (kept: ``slive``); a step after the prefix that
            # a settled step links to is among them already
            live = self.slive.copy()
            found: set[tuple[int, int]] = set()  # the edges of the steps after the prefix
            add = found.add
            back = n
            for w in range(s, n):
                sid = order[w]
                step = steps[sid]
                for p in step.prev_steps:
                    pi = pos.get(p)
                    if pi is None:
                        raise OddState  # drawn by task_to_dot: a step only reachable by a link
                    if pi < s:
                        if pi < back and sid not in info[p].next:
                            back = pi
                        continue
                    add((pi, w))
                for x in step.next_steps:
                    xi = pos.get(x)
                    if xi is None:
                        raise OddState
                    if xi < back and xi < s:
                        back = xi
                    add((w, xi))
            if back < n:
                self._rollback(back)
                continue
            break
        if found:
            live.extend(found if len(found) == 1 else sorted(found))
        outs: dict[int, list[int]] = {}
        ins: dict[int, list[int]] = {}
        for a, b in live:  # (a step has one edge each way, mostly: no empty list to throw away)
            if a in outs:
                outs[a].append(b)
            else:
                outs[a] = [b]
            if b in ins:
                ins[b].append(a)
            else:
                ins[b] = [a]
        self.live_edges, self.outs_of, self.ins_of = live, outs, ins

    # ----- settling ----------------------------------------------------------------------
    def _settle_steps(self, undone: UndoneEdges) -> None:
        """Settle the steps after the prefix that can no longer change (from ``s`` on)."""
        state, order, pos, info = self.state, self.order, self.pos, self.info
        n = len(order)
        keep_ends = self.keep_ends
        collapsing = self.collapsing
        ins, outs = self.ins_of, self.outs_of
        while self.s < n:
            i = self.s
            sid = order[i]
            status = _status(state, sid)
            self.stopped = (sid, status)  # the step after the prefix: frame_of needs its status too
            prev = ins.get(i)
            if prev and prev[-1] >= i:
                break
            ok = False
            if status is _DONE:
                out = state.outputs.get(sid)
                if streaming(out):
                    break  # its answer still streams in: the text is not final
                after = outs.get(i, ())
                nxt = (order[after[0]],) if len(after) == 1 else tuple([order[b] for b in after])
                number = self.last_number + 1
                if collapsing and i >= keep_ends:
                    ok = ((len(prev) if prev else 0) + undone.ins.get(sid, 0) == 1
                          and len(nxt) + undone.outs.get(sid, 0) == 1
                          and sid not in self.failures_of and sid not in self.undone_outs
                          and collapsible_output(out))
            elif status is _UNDONE:
                parent = undone.cut_parent.get(sid)
                pi = pos.get(parent) if parent is not None else None
                if pi is None or pi >= i:
                    break  # numbered after every live step: the number still moves
                number = info[parent].number + 1  # type: ignore[index]
                after = outs.get(i, ())
                nxt = (order[after[0]],) if len(after) == 1 else tuple([order[b] for b in after])
            else:
                break
            self.sck.append((self.last_number, self.done, self.undone))
            slive = self.slive
            for b in after:
                slive.append((i, b))
            drawn = status is not _UNDONE or sid not in self.undone_outs
            info[sid] = StepInfo(status, number, f"s{i}", ok, nxt, drawn)
            self.s += 1
            if status is _UNDONE:
                self.undone += 1
            else:
                self.last_number += 1
                self.done += 1

    def _decide(self) -> None:
        """Decide how the settled steps before the last ``keep_ends`` are drawn (closed
        units, or the open run), then freeze the edges that became final."""
        state, order, pos, info = self.state, self.order, self.pos, self.info
        n = len(order)
        ins = self.ins_of
        limit = min(self.s, n - self.keep_ends) if self.collapsing else self.s
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
                    self.dck.append((len(self.units), self.chains, (run.start, run.end, run.latency, run.tokens)))
                    run.end = i + 1
                    run.latency, run.tokens = _chain_metrics([state.outputs.get(sid)], run.latency, run.tokens)
                    inf.name = run.start
                    self.d += 1
                    continue
                if lnext and lnext[0] != sid and pos[lnext[0]] > i:
                    break  # the run's next step comes later: it may still go on
            self.dck.append((len(self.units), self.chains,
                             None if run is None else (run.start, run.end, run.latency, run.tokens)))
            self._close_run()
            if inf.ok:
                self.run = Run(i, i + 1, *_chain_metrics([state.outputs.get(sid)]))
                inf.name = i
            elif inf.drawn:
                self.units.append(i)
            self.d += 1
        self._settle_edges()

    def _close_run(self) -> None:
        run = self.run
        if run is None:
            return
        self.run = None
        if run.end - run.start < 2:  # one step is drawn as itself
            self.run_names[run.start] = f"s{run.start}"
            self.units.append(run.start)
            return
        run.k = self.chains
        self.run_names[run.start] = f"c{self.chains}"
        self.units.append(run)
        self.chains += 1

    def name(self, sid: str) -> str:
        """The node name of a settled step."""
        name = self.info[sid].name
        if isinstance(name, str):
            return name
        run = self.run
        if run is not None and run.start == name:
            return f"c{self.chains}" if run.end - run.start >= 2 else f"s{name}"
        return self.run_names[name]

    def _settle_edges(self) -> None:
        """Freeze the edges of the sources whose edges all end in decided steps (with their
        final names: not in an open run of one step, which may still grow)."""
        order, info, pos, d = self.order, self.info, self.pos, self.d
        run = self.run
        lo, hi = (run.start, run.end) if run is not None and run.end - run.start < 2 else (d, d)
        emax, pairs, edges = self.emax, self.pairs, self.edges
        while self.e < d:
            i = self.e
            if lo <= i < hi:
                break
            a = order[i]
            nxt = info[a].next  # in position order
            reach = i
            for b in nxt:
                j = pos[b]
                if j >= d or lo <= j < hi:
                    reach = -1
                    break
                if j > reach:
                    reach = j
            if reach < 0:
                break
            self.eck.append(len(edges))
            added: list[tuple[str, str]] = []
            if nxt:
                ia, na = info[a].name, None
                for b in nxt:
                    if type(ia) is int and info[b].name == ia:
                        continue  # both in one collapsed run: one node, no edge
                    if na is None:
                        na = self.name(a)
                    nb = self.name(b)
                    if na == nb or (na, nb) in pairs:
                        continue
                    pairs.add((na, nb))
                    added.append((na, nb))
                    edges.append((na, nb))
            self.epairs.append(added)
            emax.append(reach if not emax or reach > emax[-1] else emax[-1])
            if nxt:  # its edges are final: no longer among the settled live ones
                del self.slive[:len(nxt)]
            self.e += 1
