"""The panel's SVG handling (js/src/svg.js) in Chromium, on its own: what Graphviz returns is
cleaned before it reaches the page (no script, handler, link, outside URL or foreign element
survives), and a redraw updates the drawing in place: a node that stays keeps its element (so
keyboard focus and the panel's ARIA attributes stay, and CSS can fade its colour), a node that
goes is removed, a new one is added, in the new drawing's order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jlab import check_browser_tools  # type: ignore[import-not-found]
from panel_page import chromium  # type: ignore[import-not-found]  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(120)

SVG_JS = Path(__file__).resolve().parents[2] / "js" / "src" / "svg.js"
NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'

HOSTILE_SVG = f"""<?xml version="1.0"?>
<svg {NS} width="100pt" height="50pt" onload="window.__pwned = 1" id="top">
<script>window.__pwned = 2</script>
<g id="graph0" class="graph"><title>task</title>
<g id="node1" class="node" onclick="window.__pwned = 3"><title>s0</title>
<a xlink:href="javascript:window.__pwned = 4" href="https://example.org/"><text x="1" y="2">#1 done</text></a>
<foreignObject><div xmlns="http://www.w3.org/1999/xhtml">html</div></foreignObject>
<image href="https://example.org/x.png" width="5" height="5"/>
<path fill="url(https://example.org/p.svg#x)" stroke="#15803d" style="fill: red" d="M0,0L1,1"/>
<polygon fill="url(#grad)" points="0,0 1,1"/>
</g></g></svg>"""


def drawing(nodes: list[tuple[str, str, str]]) -> str:
    """A Graphviz-like SVG: one node per (name, fill, text), in order."""
    parts = [f'<svg {NS} width="10pt" height="10pt" viewBox="0 0 10 10"><g id="graph0" class="graph"><title>t</title>']
    for i, (name, fill, text) in enumerate(nodes):
        parts.append(f'<g id="node{i}" class="node"><title>{name}</title><polygon fill="{fill}" points="0,0 1,1"/>'
                     f'<text x="1" y="1">{text}</text></g>')
    parts.append("</g></svg>")
    return "".join(parts)


@pytest.fixture
def page(chromium: Any) -> Any:  # noqa: F811
    ctx = chromium.new_context()
    ctx.route("**/*", lambda route: route.abort())  # nothing may be fetched
    page = ctx.new_page()
    page.set_content("<html><body><div id='box'></div></body></html>")
    page.add_script_tag(type="module", content=SVG_JS.read_text() + "\nwindow.__svg = { parseSvg, morph };")
    page.wait_for_function("() => window.__svg !== undefined")
    yield page
    ctx.close()


def test_what_graphviz_returns_is_cleaned_before_it_reaches_the_page(page: Any) -> None:
    check_browser_tools()
    found = page.evaluate("""text => {
      const svg = window.__svg.parseSvg(text);
      document.getElementById('box').append(svg);
      const g = svg.querySelector('g.node');
      return {tags: [...svg.querySelectorAll('*')].map(e => e.localName),
              attrs: [...svg.querySelectorAll('*'), svg].flatMap(e => [...e.attributes].map(a => a.name + '=' + a.value)),
              name: g.getAttribute('data-name'), text: g.textContent.trim(), pwned: window.__pwned || 0};
    }""", HOSTILE_SVG)
    assert found["pwned"] == 0
    assert set(found["tags"]) == {"g", "text", "path", "polygon"}, found["tags"]  # a unwrapped, rest dropped
    joined = " ".join(found["attrs"])
    for bad in ("onload", "onclick", "href", "style", "example.org", "javascript", "id="):
        assert bad not in joined, (bad, found["attrs"])
    assert "fill=url(#grad)" in found["attrs"] and "stroke=#15803d" in found["attrs"]  # what is safe stays
    assert found["name"] == "s0" and found["text"] == "#1 done"  # the DOT name, and no <title> tooltip


def test_a_redraw_keeps_the_elements_of_the_nodes_that_stay(page: Any) -> None:
    check_browser_tools()
    result = page.evaluate("""([a, b]) => {
      const box = document.getElementById('box');
      const svg = window.__svg.parseSvg(a);
      box.append(svg);
      const byName = () => Object.fromEntries([...svg.querySelectorAll('g.node')].map(g => [g.getAttribute('data-name'), g]));
      const before = byName();
      before.s0.setAttribute('tabindex', '0'); before.s0.setAttribute('aria-label', 'Step 1');
      before.s0.setAttribute('data-lm-suppress-shortcuts', 'true'); before.s0.classList.add('nba-selected');
      const shape = before.s0.querySelector('polygon');
      before.s0.focus();
      window.__svg.morph(svg, window.__svg.parseSvg(b));
      const after = byName();
      const g = after.s0;
      return {order: [...svg.querySelectorAll('g.node')].map(g => g.getAttribute('data-name')),
              sameNode: g === before.s0, sameShape: g.querySelector('polygon') === shape,
              fill: shape.getAttribute('fill'), text: g.textContent, cls: g.getAttribute('class'),
              ours: [g.getAttribute('tabindex'), g.getAttribute('aria-label'), g.getAttribute('data-lm-suppress-shortcuts')],
              focused: document.activeElement === g, gone: before.s1.isConnected, sameS2: after.s2 === before.s2,
              svgs: box.querySelectorAll('svg').length};
    }""", [drawing([("s0", "#f1f5f9", "#1 queued"), ("s1", "#f1f5f9", "#2 queued"), ("s2", "#f1f5f9", "#3")]),
           drawing([("s0", "#dcfce7", "#1 done"), ("s2", "#dcfce7", "#3"), ("u0", "#f3f4f6", "#2 undone run")])])
    assert result["order"] == ["s0", "s2", "u0"]
    assert result["sameNode"] and result["sameShape"] and result["sameS2"] and result["svgs"] == 1
    assert result["fill"] == "#dcfce7" and result["text"] == "#1 done"
    assert result["cls"] == "node nba-selected"  # Graphviz's class, and the panel's own kept
    assert result["ours"] == ["0", "Step 1", "true"] and result["focused"]
    assert result["gone"] is False
