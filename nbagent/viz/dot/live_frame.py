"""The steps after the settled prefix as the live graph draws them now: their statuses and
numbers, the collapsed runs among them, the node names of every step, the edges not yet final
and the undone runs. Made afresh at each redraw from a ``LiveDotState`` (O(the steps after the
prefix + the undone runs)); no text here either.
"""

from __future__ import annotations

from nbagent.engine.state import StepStatus
from nbagent.viz.dot.live_state import LiveDotState, UndoneEdges, collapsible_output
from nbagent.viz.dot.model import STATUS_ORDER, _status

__all__ = ["Frame", "frame_of"]

_DONE, _UNDONE = StepStatus.DONE, StepStatus.UNDONE
_VALUE = {st: st.value for st in StepStatus}
_NO_COUNTS = {st.value: 0 for st in STATUS_ORDER}
_DONE_VALUE, _UNDONE_VALUE = _DONE.value, _UNDONE.value


class Frame:
    """The steps after the prefix as the drawing shows them now: statuses, numbers, the
    collapsed runs among them (``chains``, numbered from ``k0``) and how far the open run goes
    on into them (``ext``); ``name_of`` gives any step's node name."""

    __slots__ = ("track", "undone", "statuses", "numbers", "chain_of", "chains", "ext", "run_len", "run_name", "k0")

    def __init__(self, live: LiveDotState, undone: UndoneEdges, statuses: dict[str, StepStatus],
                 numbers: dict[str, int], chain_of: dict[str, int], chains: list[list[str]], ext: list[str]) -> None:
        self.track, self.undone, self.statuses, self.numbers = live, undone, statuses, numbers
        self.chain_of, self.chains, self.ext = chain_of, chains, ext
        run = live.run
        self.run_len = 0 if run is None else run.end - run.start + len(ext)
        self.k0 = live.chains + (1 if self.run_len >= 2 else 0)  # the first window chain's number
        self.run_name = None if run is None else (f"c{live.chains}" if self.run_len >= 2 else f"s{run.start}")

    def name_of(self, sid: str) -> str:
        live = self.track
        i = live.pos[sid]
        if i < live.d:
            run = live.run
            if run is not None and run.start <= i < run.end:
                return self.run_name  # type: ignore[return-value]
            name = live.info[sid].name
            return name if isinstance(name, str) else live.run_names[name]
        k = self.chain_of.get(sid) if self.chain_of else None
        if k is None:
            return f"s{i}"
        return f"c{live.chains}" if k == -1 else f"c{self.k0 + k}"

    def number_of(self, sid: str) -> int:
        """The number of a step after the prefix, or of a settled one."""
        found = self.numbers.get(sid)
        return self.track.info[sid].number if found is None else found

    def status_counts(self) -> dict[str, int]:
        """How many steps are in each status, by status value (every status, in ``STATUS_ORDER``)."""
        counts = _NO_COUNTS.copy()
        for st in self.statuses.values():
            counts[_VALUE[st]] += 1
        counts[_DONE_VALUE] += self.track.done
        counts[_UNDONE_VALUE] += self.track.undone
        return counts

    def new_edges(self, dashed: list[tuple[str, str]]
                  ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The edges not yet final, by node names: the live ones of the sources from ``e`` on
        (in source order), then ``dashed`` (``undone_runs``'), each drawn once, none inside
        one collapsed run."""
        track = self.track
        order, d, e = track.order, track.d, track.e
        name_of = self.name_of
        # after the decided steps, with no collapsed run among them, each step is drawn as
        # itself, named by its position: an edge between two such steps is drawn once (the
        # live edges are distinct pairs of positions) and was not drawn before (the final
        # edges leave decided steps, named otherwise)
        low = len(order) if self.chain_of else d
        drawn = track.pairs
        seen: set[tuple[str, str]] = set()
        live: list[tuple[str, str]] = []
        for a, b in track.live_edges:
            if a < e:
                continue
            if a >= low and b >= low:
                if a != b:
                    live.append((f"s{a}", f"s{b}"))
                continue
            pair = (name_of(order[a]), name_of(order[b]))
            if pair[0] == pair[1] or pair in drawn or pair in seen:
                continue
            seen.add(pair)
            live.append(pair)
        fresh: list[tuple[str, str]] = []
        if dashed:
            seen.update(live)
            for pair in dashed:
                if pair[0] == pair[1] or pair in drawn or pair in seen:
                    continue
                seen.add(pair)
                fresh.append(pair)
        return live, fresh

    def undone_runs(self) -> tuple[list[tuple[int, int, int]], list[tuple[str, str]]]:
        """The undone runs as ``task_to_dot`` draws them (``u0``... in undo order): per run
        its step's number, which run of the step it is and of how many; and the dashed edges
        (to the runs, then those an undo cut; ``new_edges`` leaves out those drawn already)."""
        live, undone = self.track, self.undone
        state = live.state
        outs = state.undone_outputs
        pos, info, s = live.pos, live.info, live.s
        name_of = self.name_of

        def status_of(sid: str) -> StepStatus | None:
            i = pos.get(sid)
            if i is None:
                return None
            return info[sid].status if i < s else self.statuses[sid]

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

        dashed: list[tuple[str, str]] = []
        for k, out in enumerate(outs):
            sid = out.task_step.step_id
            if status_of(sid) is _UNDONE:
                parents = sources(sid)
            else:
                step = state.steps.get(sid)
                prev = list(step.prev_steps) if step is not None else []
                parents = [name_of(p) for p in prev if p in pos]
            dashed.extend((p, ghosts[k]) for p in parents)
        for a, b in undone.edges:
            if b in runs and status_of(b) is _UNDONE:
                continue
            made = [g for g in made_by.get(b, []) if g in runs.get(a, [])]
            for src in made or [name_of(a)]:
                dashed.append((src, name_of(b)))

        numbered: list[tuple[int, int, int]] = []
        seen: dict[str, int] = {}
        for out in outs:
            sid = out.task_step.step_id
            seen[sid] = seen.get(sid, 0) + 1
            number = self.numbers.get(sid)
            if number is None and sid in pos and pos[sid] < s:
                number = info[sid].number
            numbered.append((number or 0, seen[sid], len(live.undone_outs[sid])))
        return numbered, dashed


def frame_of(live: LiveDotState, undone: UndoneEdges) -> Frame:
    """The steps after the prefix, with their statuses and numbers, and the collapsed
    runs among them (only while an open step holds the prefix back)."""
    state, order, pos, info = live.state, live.order, live.pos, live.info
    n, s, d = len(order), live.s, live.d
    statuses: dict[str, StepStatus] = {}
    numbers: dict[str, int] = {}
    c = live.last_number
    stopped = live.stopped
    window = order[s:]
    for sid in window:
        st = statuses[sid] = stopped[1] if sid == stopped[0] else _status(state, sid)
        if st is not _UNDONE:
            c += 1
            numbers[sid] = c
    if c - live.last_number < len(window):  # undone steps: numbered after the step that cut them
        for sid in window:
            if statuses[sid] is _UNDONE:
                parent = undone.cut_parent.get(sid)
                if parent is not None and parent in numbers:
                    numbers[sid] = numbers[parent] + 1
                elif parent is not None and parent in info and pos[parent] < s:
                    numbers[sid] = info[parent].number + 1
                else:
                    numbers[sid] = c + 1
    if live.collapsing and max(d, live.keep_ends) < n - live.keep_ends:
        return Frame(live, undone, statuses, numbers, *_window_chains(live, undone, statuses))
    return Frame(live, undone, statuses, numbers, {}, [], [])


def _window_chains(live: LiveDotState, undone: UndoneEdges, statuses: dict[str, StepStatus]
                   ) -> tuple[dict[str, int], list[list[str]], list[str]]:
    """The collapsed runs among the steps after the prefix, and how far the open run
    goes on into them: ``task_to_dot``'s chains, for the part it did not settle."""
    state, order, pos, info, s, d = live.state, live.order, live.pos, live.info, live.s, live.d
    n, keep_ends = len(order), live.keep_ends
    ok: set[str] = set()
    for k in range(max(d, keep_ends), n - keep_ends):
        sid = order[k]
        if k < s:
            if info[sid].ok:
                ok.add(sid)
            continue
        if statuses[sid] is not _DONE or sid in live.failures_of or sid in live.undone_outs:
            continue
        if (len(live.ins_of.get(k, ())) + undone.ins.get(sid, 0) != 1
                or len(live.outs_of.get(k, ())) + undone.outs.get(sid, 0) != 1):
            continue
        if collapsible_output(state.outputs.get(sid)):
            ok.add(sid)
    outs, ins = live.outs_of, live.ins_of

    def succ(sid: str) -> str | None:
        nxt = outs.get(pos[sid])
        return order[nxt[-1]] if nxt else None

    def pred(sid: str) -> str | None:
        prev = ins.get(pos[sid])
        return order[prev[-1]] if prev else None

    chain_of: dict[str, int] = {}
    chains: list[list[str]] = []
    ext: list[str] = []
    run = live.run
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
