"""The live graph's DOT text: exactly ``task_to_dot``'s, assembled from what a ``LiveDotState``
keeps, so that a redraw costs O(what changed) instead of a walk over every step.

The text is the same pieces in the same order as ``task_to_dot``'s: the header, the node lines
of the closed units (kept as lines, in step with the state's list), the open collapsed run,
the settled steps not yet decided, the steps after the prefix, the undone runs, the final
edges (kept as lines too), the other edges, the legend. Node text depends on the step and its
output only, so a node line is cached until what it shows changes: a price set later
(``nbagent.costs``) shows on settled steps after ``LiveGraph.redraw()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nbagent.approval import APPROVAL_KEY
from nbagent.engine.state import StepStatus
from nbagent.viz.dot.collapse import _chain_metrics, _collapsed_node_of
from nbagent.viz.dot.labels import _UNDONE_EDGE_COLOR, _ghost_node, _node_line, _step_node
from nbagent.viz.dot.live_frame import Frame, frame_of
from nbagent.viz.dot.live_state import LiveDotState, OddState, Run, UndoneEdges, streaming
from nbagent.viz.dot.task_dot import (
    _header_around,
    _legend_lines,
    _summary_piece,
    _title_top,
    check_options,
    task_to_dot,
)

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState

__all__ = ["LiveDot"]

_DEFAULTS = {"max_label": 80, "collapse_after": 40, "rankdir": "TB", "keep_ends": 4, "wrap": 44, "legend": False}
_DONE, _UNDONE = StepStatus.DONE, StepStatus.UNDONE


class LiveDot:
    """``task_to_dot(state, **options)``, kept up to date (see the module docstring)."""

    def __init__(self, state: TaskState, **options: Any) -> None:
        check_options(**options)
        self.state = state
        self.opts = {**_DEFAULTS, **options}
        self._max_label, self._wrap = self.opts["max_label"], self.opts["wrap"]
        self.track = LiveDotState(state, collapse_after=self.opts["collapse_after"], keep_ends=self.opts["keep_ends"])
        self.full_renders = 0  # redraws drawn by task_to_dot (odd states), for tests and benchmarks
        self._lines: dict[str, tuple[tuple[Any, ...], Any, str]] = {}  # sid -> (key, output, line)
        self._final: dict[int, str] = {}  # position -> node line of a settled step not yet decided
        self._settled = 0  # the settled steps at the last redraw
        self._ghosts: dict[int, tuple[tuple[Any, ...], Any, str]] = {}
        self._unit_lines: list[str] = []  # the node lines of the state's closed units
        self._edge_lines: list[str] = []  # the lines of the state's final edges
        self._decided = 0  # the decided steps whose cached lines were let go
        self._run_line: tuple[tuple[Any, ...], str] | None = None
        self._top: tuple[Any, str, str, tuple[str, str]] | None = None  # task status, id, input; text around the counts
        self._head: tuple[tuple[int, ...], str] | None = None  # the header text, by the status counts

    # ----- what tests and benchmarks read ------------------------------------------------
    @property
    def s(self) -> int:
        """How many steps are settled."""
        return self.track.s

    @property
    def rollbacks(self) -> int:
        return self.track.rollbacks

    @property
    def restarts(self) -> int:
        return self.track.restarts

    # ----- the text ----------------------------------------------------------------------
    def render(self) -> str:
        try:
            undone = self.track.update()
        except OddState:
            self.track.forget()
            self.full_renders += 1
            return task_to_dot(self.state, **self.opts)
        return self._text(undone)

    def _text(self, undone: UndoneEdges) -> str:
        track, opts = self.track, self.opts
        order, info, s, d = track.order, track.info, track.s, track.d
        frame = frame_of(track, undone)
        lines = [self._header(frame.status_counts())]
        self._sync()
        lines.extend(self._unit_lines)
        run = track.run
        if run is not None:
            lines.append(self._open_run_line(run, frame))
        chain_of, chains, final = frame.chain_of, frame.chains, self._final
        for i in range(d, s):  # settled, not yet decided: drawn as themselves, unless in a run
            sid = order[i]
            if chain_of and sid in chain_of:
                ck = chain_of[sid]
                if ck >= 0 and chains[ck][0] == sid:
                    lines.append(self._chain_line(chains[ck], frame.k0 + ck, frame))
                continue
            inf = info[sid]
            if inf.drawn:
                line = final.get(i)
                if line is None:  # final while it stays settled (the state says when it did not)
                    line = final[i] = self._step_line(sid, inf.status, inf.number, f"s{i}", keep=False)
                lines.append(line)
        undone_outs = track.undone_outs
        statuses, numbers = frame.statuses, frame.numbers
        for k in range(s, len(order)):
            sid = order[k]
            status = statuses[sid]
            if status is _UNDONE and sid in undone_outs:
                continue
            if chain_of:
                ck = chain_of.get(sid)
                if ck is not None:
                    if ck >= 0 and chains[ck][0] == sid:
                        lines.append(self._chain_line(chains[ck], frame.k0 + ck, frame))
                    continue
            lines.append(self._step_line(sid, status, numbers[sid], f"s{k}"))
        dashed: list[tuple[str, str]] = []
        if self.state.undone_outputs or undone.edges:
            dashed = self._undone_runs(frame, lines)
        lines.extend(self._edge_lines)
        live, dashed = frame.new_edges(dashed)
        for na, nb in live:
            lines.append(f"  {na} -> {nb};")
        if dashed:
            lines.extend([f'  {na} -> {nb} [style="dashed", color="{_UNDONE_EDGE_COLOR}"];' for na, nb in dashed])
        if opts["legend"]:
            lines.extend(_legend_lines(opts["wrap"]))
        lines.append("}\n")
        return "\n".join(lines)

    def _sync(self) -> None:
        """Bring the kept lines in step with the state (each part only when it changed)."""
        track = self.track
        settled_low, units_low, edges_low = track.changes()
        if settled_low < self._settled:  # let go of the lines of the steps unsettled since
            final = self._final
            for i in range(settled_low, self._settled):
                final.pop(i, None)
        self._settled = track.s
        if units_low < len(track.units) or units_low < len(self._unit_lines):
            self._sync_units(units_low)
        if self._decided != track.d:
            self._let_go_of_decided()
        if edges_low < len(track.edges) or edges_low < len(self._edge_lines):
            self._sync_edges(edges_low)

    def _sync_units(self, low: int) -> None:
        """Bring the closed units' lines in step with the state's units (``low``: unchanged)."""
        track, unit_lines = self.track, self._unit_lines
        low = min(low, len(unit_lines))
        del unit_lines[low:]
        order, info = track.order, track.info
        for unit in track.units[low:]:
            if isinstance(unit, Run):
                first, last = order[unit.start], order[unit.end - 1]
                unit_lines.append(self._collapsed_line(first, last, unit.end - unit.start, info[first].number,
                                                       info[last].number, unit.latency, unit.tokens, f"c{unit.k}"))
            else:
                sid = order[unit]
                line = self._final.pop(unit, None)
                unit_lines.append(line or self._step_line(sid, info[sid].status, info[sid].number, f"s{unit}",
                                                          keep=False))

    def _sync_edges(self, low: int) -> None:
        """Bring the final edges' lines in step with the state's final edges (``low``: unchanged)."""
        edge_lines = self._edge_lines
        low = min(low, len(edge_lines))
        del edge_lines[low:]
        edge_lines.extend([f"  {na} -> {nb};" for na, nb in self.track.edges[low:]])

    def _let_go_of_decided(self) -> None:
        """Drop the cached lines of the steps decided since the last redraw: a unit's line is
        kept with the units (``_sync_units`` took it first), a step in a collapsed run is not
        drawn."""
        track = self.track
        order, lines, final = track.order, self._lines, self._final
        for i in range(min(self._decided, track.d), track.d):
            lines.pop(order[i], None)
            final.pop(i, None)
        self._decided = track.d

    # ----- node lines --------------------------------------------------------------------
    def _step_line(self, sid: str, status: StepStatus, number: int, name: str, keep: bool = True) -> str:
        """A step's node line, drawn again only when what it shows changed (``keep=False``: a
        closed unit's, kept with the units from now on, not here)."""
        state, track = self.state, self.track
        step = state.steps.get(sid)
        out = state.outputs.get(sid) if status is _DONE else None
        fails = track.failures_of.get(sid, ()) if track.failures_of else ()
        undone_outs = track.undone_outs.get(sid, ()) if track.undone_outs else ()
        key = None
        # approval decisions change while a step waits; a streamed answer grows after the step
        if (step is None or APPROVAL_KEY not in step.step_state) and (out is None or not streaming(out)):
            found = self._lines.get(sid) if keep else self._lines.pop(sid, None)
            if found is not None and found[1] is not out:
                found = None  # drawn for another output (or none): no need for its key
            if found is not None or keep:
                key = (name, number, status, None if step is None else step.input, len(fails), len(undone_outs))
                if found is not None and found[0] == key:
                    return found[2]
        node = _step_node(state, number, sid, step, status, fails, undone_outs, self._max_label)
        node.name = name
        line = _node_line(node, self._wrap)
        if key is not None and keep:
            self._lines[sid] = (key, out, line)
        return line

    def _collapsed_line(self, first: str, last: str, count: int, n_first: int, n_last: int,
                        latency: float | None, tokens: int | None, name: str) -> str:
        node = _collapsed_node_of(count, first, last, n_first, n_last, latency, tokens)
        node.name = name
        return _node_line(node, self._wrap)

    def _open_run_line(self, run: Run, frame: Frame) -> str:
        """The node of the run still growing at the end (and into the steps after the prefix)."""
        track, order, info = self.track, self.track.order, self.track.info
        if frame.run_len < 2:
            sid = order[run.start]
            return self._step_line(sid, _DONE, info[sid].number, frame.run_name)  # type: ignore[arg-type]
        latency, tokens = run.latency, run.tokens
        if frame.ext:
            latency, tokens = _chain_metrics([self.state.outputs.get(x) for x in frame.ext], latency, tokens)
        first = order[run.start]
        if frame.ext:
            last = frame.ext[-1]
            n_last = frame.number_of(last)
        else:  # the run ends among the settled steps
            last = order[run.end - 1]
            n_last = info[last].number
        key = (run.start, frame.run_len, last, latency, tokens, track.chains, n_last)
        found = self._run_line
        if found is None or found[0] != key:
            found = self._run_line = (key, self._collapsed_line(first, last, frame.run_len, info[first].number, n_last,
                                                                latency, tokens, frame.run_name))  # type: ignore[arg-type]
        return found[1]

    def _chain_line(self, chain: list[str], k: int, frame: Frame) -> str:
        """A collapsed run that starts after the decided steps."""
        latency, tokens = _chain_metrics([self.state.outputs.get(x) for x in chain])
        return self._collapsed_line(chain[0], chain[-1], len(chain), frame.number_of(chain[0]),
                                    frame.number_of(chain[-1]), latency, tokens, f"c{k}")

    def _undone_runs(self, frame: Frame, lines: list[str]) -> list[tuple[str, str]]:
        """The undone runs' node lines (appended to ``lines``, each cached while its number
        and place stay); returns the dashed edges."""
        numbered, dashed = frame.undone_runs()
        max_label, wrap = self.opts["max_label"], self.opts["wrap"]
        for k, out in enumerate(self.state.undone_outputs):
            key = numbered[k]
            found = self._ghosts.get(k)
            if found is None or found[1] is not out or found[0] != key:
                node = _ghost_node(out, *key, max_label)
                node.name = f"u{k}"
                found = self._ghosts[k] = (key, out, _node_line(node, wrap))
            lines.append(found[2])
        return dashed

    # ----- the header --------------------------------------------------------------------
    def _header(self, counts: dict[str, int]) -> str:
        """The text up to the first node line (kept while the task's title and the status
        counts stay; the part around the counts while the title stays)."""
        state, opts = self.state, self.opts
        try:
            task_status: Any = state.status
        except Exception:  # noqa: BLE001
            task_status = None
        task = state.task
        top = self._top
        if top is None or top[0] is not task_status or top[1] != task.task_id or top[2] != task.input:
            value = "unknown" if task_status is None else task_status.value
            text = _title_top(task.task_id, task.input, value, opts["max_label"], opts["wrap"])
            top = self._top = (task_status, task.task_id, task.input, _header_around(text, opts["rankdir"]))
            self._head = None
        key = tuple(counts.values())
        found = self._head
        if found is not None and found[0] == key:
            return found[1]
        before, after = top[3]
        text = f"{before}{_summary_piece(counts, opts['wrap'])}{after}"
        self._head = (key, text)
        return text
