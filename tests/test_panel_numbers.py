"""One step numbering everywhere (issue 29, item 4): the panel's step picker, its inspector and
token note, the graph's DOT (live and static) and the HTML views (timeline, report) give every
step the same number and status after undo, goto, fork and skip.

The picker used to number steps by registry order (``#5 done``) where the graph said
``#4 done · answer``, and a skipped step read ``done`` everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from nbagent import AgentRunner
from nbagent.report import report_html
from nbagent.viz.dot import task_to_dot
from nbagent.viz.escape import short_id
from nbagent.viz.html import timeline_html
from nbagent.viz.panel import AgentPanel
from tests.test_panel import counting_runner

Seen = dict[str, tuple[int, str]]  # short step id -> (number, status word)

_HTML_ITEM = re.compile(r'nb-s-[\w-]+">([\w ]+)</span> <span class="nb-muted">#(\d+)</span> <code class="nb-id"[^>]*>([0-9a-f]{8})')
_PICKER = re.compile(r"^#(\d+) (\w+)")


def dot_nodes(dot: str) -> dict[str, set[tuple[int, str]]]:
    """Every step node of the DOT text: short id -> {(number, first status word)}."""
    found: dict[str, set[tuple[int, str]]] = {}
    for line in dot.splitlines():
        text = re.sub(r"<[^>]+>", " ", line.partition("[label=<")[2].partition(">, ")[0])
        m = re.match(r"\s*#(\d+) (\w+)[^#]*?· ?([0-9a-f]{8})", text)
        if m:
            found.setdefault(m.group(3), set()).add((int(m.group(1)), m.group(2)))
    return found


def html_items(html: str) -> Seen:
    """The steps of an HTML timeline or report: short id -> (number, badge word)."""
    return {sid: (int(n), word.split()[0]) for word, n, sid in _HTML_ITEM.findall(html)}


def picker(panel: AgentPanel) -> Seen:
    """The step nodes the browser is told about (its step picker lists them, the graph's
    nodes read them out): short id -> (number, status word)."""
    seen: Seen = {}
    for node in panel.nodes:
        if not node["name"].startswith("s"):
            continue  # an undone run: the step's own node says what the step is now
        m = _PICKER.match(node["head"])
        assert m is not None, node
        assert m.group(1) == str(node["number"]) and node["status"].startswith(m.group(2)), node
        seen[short_id(node["step"])] = (int(m.group(1)), m.group(2))
    return seen


def inspector(panel: AgentPanel) -> Seen:
    seen: Seen = {}
    for node in list(panel.nodes):
        if not node["name"].startswith("s"):
            continue
        panel.inspect(node["step"])
        m = re.match(r"#(\d+) (\w+)", panel.inspector["head"])
        assert m is not None, panel.inspector
        seen[short_id(node["step"])] = (int(m.group(1)), m.group(2))
    panel.inspect(None)
    return seen


def check_one_numbering(runner: AgentRunner, panel: AgentPanel) -> Seen:
    """Every view agrees with the picker; returns the picker's view."""
    state = runner.state_of(panel.task_id)
    shown = picker(panel)
    assert inspector(panel) == shown
    assert html_items(timeline_html(state)) == shown
    assert html_items(report_html(runner)) == shown
    for dot in (panel.dot, task_to_dot(state)):
        nodes = dot_nodes(dot)
        for sid, (n, word) in shown.items():
            # its own node (or, for an undone step that had run, its undone run)
            assert (n, word) in nodes[sid], (sid, (n, word), nodes[sid])
            assert {num for num, _ in nodes[sid]} == {n}, (sid, nodes[sid])  # one number per step
    return shown


def _statuses(seen: Seen) -> list[tuple[int, str]]:
    return sorted(seen.values())


def _undo(runner: AgentRunner, panel: AgentPanel) -> None:
    for _ in range(4):
        panel.step()
    panel.undo()  # step #4 is queued again; the step it had queued (#5) never ran
    panel.step()
    panel.step()


def _goto(runner: AgentRunner, panel: AgentPanel) -> None:
    for _ in range(5):
        panel.step()
    second = runner.state_of(panel.task_id).completed_steps[1].task_step.step_id
    runner.goto_step(panel.task_id, second)  # back to just after #2
    panel.step()


def _fork(runner: AgentRunner, panel: AgentPanel) -> None:
    for _ in range(4):
        panel.step()
    third = runner.state_of(panel.task_id).completed_steps[2].task_step.step_id
    runner.fork(panel.task_id, third, input="another way")
    panel.step()
    panel.step()


def _skip(runner: AgentRunner, panel: AgentPanel) -> None:
    panel.step()
    panel.step()
    assert isinstance(panel.step(), ValueError)  # step #3 fails
    panel.skip()
    panel.step()


SCENARIOS: dict[str, tuple[Callable[[AgentRunner, AgentPanel], None], dict[str, Any], list[tuple[int, str]]]] = {
    "undo": (_undo, {}, [(1, "done"), (2, "done"), (3, "done"), (4, "done"), (5, "done"), (5, "undone"), (6, "queued")]),
    # back to just after #2: #3 runs again (its first run is an undone run), #4 and #5 were undone runs
    "goto": (_goto, {}, [(1, "done"), (2, "done"), (3, "done"), (4, "queued"), (4, "undone"), (5, "undone"),
                         (6, "undone")]),
    # a new #3 in place of the old one, whose branch (#3, #4 undone runs, #5 never ran) stays drawn
    "fork": (_fork, {}, [(1, "done"), (2, "done"), (3, "done"), (3, "undone"), (4, "done"), (4, "undone"),
                         (5, "queued"), (5, "undone")]),
    "skip": (_skip, {"fail_once_at": 3}, [(1, "done"), (2, "done"), (3, "skipped"), (4, "done"), (5, "queued")]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_view_numbers_the_steps_as_the_graph_does(name: str) -> None:
    play, options, expected = SCENARIOS[name]
    runner = counting_runner(9, **options)
    panel = AgentPanel(runner, runner.create_task("count"))
    play(runner, panel)
    shown = check_one_numbering(runner, panel)
    assert _statuses(shown) == expected
    # the latest step, as the picker follows it, has the graph's number in the token note too
    latest = panel.selected
    n, word = shown[short_id(latest)]
    assert f"step #{n} · {word}" in panel.tokens_note


def test_after_an_undo_the_picker_says_what_the_graph_says_for_the_answer() -> None:
    """The issue's case: the graph says ``#4 done · answer`` and so must the picker."""
    runner = counting_runner(4)
    panel = AgentPanel(runner, runner.create_task("count"))
    for _ in range(3):
        panel.step()
    panel.undo()
    panel.run()
    labels = [node["head"] for node in panel.nodes if node["name"].startswith("s")]
    answer = next(label for label in labels if "answer" in label)
    assert answer.startswith("#4 done · answer"), labels
    assert "#4 done · answer" in panel.dot
    assert any(label.startswith("#4 undone · never ran") for label in labels), labels
    check_one_numbering(runner, panel)


def test_a_skipped_step_is_drawn_as_skipped_in_every_view() -> None:
    runner = counting_runner(4, fail_once_at=2)
    panel = AgentPanel(runner, runner.create_task("count"))
    panel.step()
    panel.step()
    skipped = panel.skip().task_step.step_id
    state = runner.state_of(panel.task_id)
    assert state.step_status(skipped).value == "done"  # the engine's status is unchanged
    for dot in (panel.dot, task_to_dot(state)):
        line = next(line for line in dot.splitlines() if short_id(skipped) in line and "[label=" in line)
        assert "#2 skipped" in line and "not run" in line
        assert 'fillcolor="#dcfce7"' not in line  # not the green of a done step
    assert picker(panel)[short_id(skipped)] == (2, "skipped")
    panel.inspect(skipped)
    assert panel.inspector["head"].startswith("#2 skipped")
    assert 'nb-s-skipped">skipped</span>' in timeline_html(state)
    assert 'nb-s-skipped">skipped</span>' in report_html(runner)
