"""Reading and driving the panel (``AgentPanel``, one anywidget) in a page, in any front end.

Every function takes the panel's root locator (``.nbagent-aw``). Playwright's CSS locators
pierce open shadow roots (marimo draws its widgets in one), and the JavaScript here starts
from that root, so the same code reads the panel in JupyterLab, Notebook 7 and marimo.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jlab import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]

from nbagent.engine.state import StepStatus
from nbagent.viz.dot import STATUS_COLORS

FILL = {s.value: STATUS_COLORS[s][0].lower() for s in StepStatus}
FILL["undone run"] = STATUS_COLORS[StepStatus.UNDONE][0].lower()
MIN_CONTRAST = 4.5
LABEL_RE = re.compile(r"^Step (\d+), ([a-z ]+?)(?::|$)")

NODES_JS = """root => [...root.querySelectorAll('.nbagent-livegraph svg g.node')].map(g => {
  const shape = g.querySelector('path, polygon, ellipse');
  return {label: g.getAttribute('aria-label') || '', role: g.getAttribute('role'),
          tabindex: g.getAttribute('tabindex'), current: g.getAttribute('aria-current') === 'true',
          step: g.getAttribute('data-nba-step'), head: (g.querySelector('text') || {}).textContent || '',
          fill: shape ? (shape.getAttribute('fill') || '').toLowerCase() : null};
})"""

WAIT_STATUSES_JS = """([root, expected]) => {
  const got = [...root.querySelectorAll('.nbagent-livegraph svg g.node')].map(g => {
    const m = /^Step (\\d+), ([a-z ]+?)(?::|$)/.exec(g.getAttribute('aria-label') || '');
    return m ? m[2] : '?';
  });
  return JSON.stringify(got) === JSON.stringify(expected);
}"""

FOCUSED_JS = """root => {
  const a = root.getRootNode().activeElement;
  if (!a || !root.contains(a)) return null;
  return {tag: a.tagName.toLowerCase(), cls: a.getAttribute('class') || '', text: a.textContent.trim().slice(0, 60),
          label: a.getAttribute('aria-label') || '', step: a.getAttribute('data-nba-step') || ''};
}"""

CONTRAST_JS = r"""root => {
  // any CSS colour (rgb(), color(srgb ...), oklch()...): painted on a 1x1 canvas and read back
  const cv = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
  const parse = c => { if (!c || c === 'none' || c === 'transparent') return null;
    cv.clearRect(0, 0, 1, 1); cv.fillStyle = 'rgba(0, 0, 0, 0)'; cv.fillStyle = c; cv.fillRect(0, 0, 1, 1);
    const d = cv.getImageData(0, 0, 1, 1).data; return {r: d[0], g: d[1], b: d[2], a: d[3] / 255}; };
  const rgb = parse;
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const up = e => e.parentElement || (e.getRootNode().host || null);
  const htmlBg = el => { for (let e = el; e; e = up(e)) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const svgBg = t => {
    const tb = t.getBoundingClientRect(); const cx = tb.x + tb.width / 2, cy = tb.y + tb.height / 2;
    const svg = t.ownerSVGElement; let best = null, area = Infinity;
    svg.querySelectorAll('path, polygon, ellipse, rect').forEach(s => {
      const f = rgb(s.getAttribute('fill') || getComputedStyle(s).fill); if (!f || f.a < 0.5) return;
      const b = s.getBoundingClientRect(); if (cx < b.x || cx > b.x + b.width || cy < b.y || cy > b.y + b.height) return;
      if (b.width * b.height < area && b.width * b.height > tb.width * tb.height * 0.9) { best = f; area = b.width * b.height; } });
    return best || htmlBg(svg.parentElement); };
  const out = [];
  root.querySelectorAll('*').forEach(el => {
    const isSvgText = el.tagName.toLowerCase() === 'text';
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) return;
    const r = el.getBoundingClientRect(); if (r.width < 1 || r.height < 1) return;
    const st = getComputedStyle(el); if (st.visibility === 'hidden' || st.display === 'none') return;
    const fg = isSvgText ? rgb(el.getAttribute('fill') || st.fill) : parse(st.color);
    if (!fg) return;
    const bg = isSvgText ? svgBg(el) : htmlBg(el);
    out.push({text: el.textContent.trim().slice(0, 50), where: isSvgText ? 'svg' : el.tagName.toLowerCase(),
              ratio: Math.round(ratio(fg, bg) * 100) / 100});
  });
  return out;
}"""


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium with no JupyterLab behind it (import this fixture into a test module)."""
    check_browser_tools()
    import playwright.sync_api as api

    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_TIMEOUT_MS)
        try:
            yield browser
        finally:
            browser.close()


def nodes(panel: Any) -> list[dict[str, Any]]:
    """The drawn step nodes: aria-label, role, tabindex, aria-current, step id, first line, fill."""
    found = list(panel.evaluate(NODES_JS))
    for n in found:
        m = LABEL_RE.match(n["label"])
        n["number"], n["status"] = (int(m.group(1)), m.group(2)) if m else (None, None)
    return found


def wait_for_statuses(page: Any, panel: Any, expected: list[str], what: str,
                      numbers: list[int] | None = None) -> list[dict[str, Any]]:
    """Wait until the graph has exactly these node statuses (read from the aria-labels, in
    order); check numbers, fills and that each node is a button with a label."""
    try:
        page.wait_for_function(WAIT_STATUSES_JS, arg=[panel.element_handle(), expected], timeout=STEP_TIMEOUT_MS)
    except Exception as err:
        raise AssertionError(f"{what}: expected node statuses {expected}, page has {nodes(panel)}") from err
    found = nodes(panel)
    assert [n["number"] for n in found] == (numbers or list(range(1, len(expected) + 1))), (what, found)
    for n in found:
        assert n["role"] == "button" and n["tabindex"] in ("0", "-1"), (what, n)
        assert n["fill"] == FILL[n["status"]], (what, n)
        assert n["head"].startswith(f"#{n['number']} "), (what, n)  # the label says what the node shows
    assert [n["tabindex"] for n in found].count("0") == 1, (what, found)  # roving tabindex
    return found


def wait_text(page: Any, locator: Any, text: str) -> None:
    page.wait_for_function("([el, t]) => el.textContent.includes(t)", arg=[locator.element_handle(), text],
                           timeout=STEP_TIMEOUT_MS)


def focused(panel: Any) -> dict[str, Any] | None:
    return panel.evaluate(FOCUSED_JS)  # type: ignore[no-any-return]


def press_enabled(page: Any, panel: Any, cls: str) -> None:
    """Click a button once the kernel says it may be pressed."""
    button = panel.locator(f"button.{cls}")
    page.wait_for_function("b => b.getAttribute('aria-disabled') === 'false'", arg=button.element_handle(),
                           timeout=STEP_TIMEOUT_MS)
    button.click()


def low_contrast(panel: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every text of the panel with its contrast ratio, and those below 4.5:1."""
    found = list(panel.evaluate(CONTRAST_JS))
    return found, [f for f in found if f["ratio"] < MIN_CONTRAST]


def run_three_steps_and_undo(page: Any, panel: Any) -> None:
    """Run step three times and Undo once, checking the graph after each (the scenario every
    front end's test plays)."""
    status = panel.locator(".nbagent-status")
    wait_for_statuses(page, panel, ["queued"], "at start")
    for n in (1, 2, 3):
        # mark the drawn nodes: a redraw must update them in place (focus stays, CSS fades the
        # change of status), not throw them away and draw new ones
        panel.evaluate("root => root.querySelectorAll('g.node').forEach(g => { g.__seen = true; })")
        press_enabled(page, panel, "nbagent-btn-step")
        wait_for_statuses(page, panel, ["done"] * n + ["queued"], f"after Run step #{n}")
        kept = panel.evaluate("root => [...root.querySelectorAll('g.node')].map(g => g.__seen === true)")
        assert kept == [True] * n + [False], f"after Run step #{n}: nodes kept in place {kept}"
        wait_text(page, status, f"{n} done")
    press_enabled(page, panel, "nbagent-btn-undo")
    # #3 is queued again; its run is the dashed "#3 undone run", the step it queued never ran
    found = wait_for_statuses(page, panel, ["done", "done", "queued", "undone run", "undone"], "after Undo",
                              numbers=[1, 2, 3, 3, 4])
    assert "never ran" in found[4]["head"], found
    wait_text(page, status, "1 undone")
