"""The trace waterfall in a real browser (Debian's Chromium via Playwright): a traced run's
spans drawn from the SDK's in-memory exporter, on a page of their own, in light and dark.

Every text is readable (contrast >= 4.5:1 against what is behind it), the bars sit on one time
axis (a child inside its parent), nothing is fetched and no script runs, hostile span text stays
text. The page's background is the host's (a notebook front end draws the output on its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jlab import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, check_browser_tools  # type: ignore[import-not-found]

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import nbagent.tracing  # noqa: E402
from nbagent import FunctionCallingAgent, FunctionTool, ScriptedLLM  # noqa: E402

HOSTILE = '<img src=x onerror="window.__pwned = 1">'
BACKGROUNDS = {"light": "#ffffff", "dark": "#0d1117"}
MIN_CONTRAST = 4.5

CONTRAST_JS = r"""() => {
  const parse = c => { const m = c && c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const bgOf = el => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const out = [];
  document.querySelectorAll('.nbagent-trace *').forEach(el => {
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) return;
    const r = el.getBoundingClientRect(); if (r.width < 1 || r.height < 1) return;
    out.push({text: el.textContent.trim().slice(0, 40), ratio: Math.round(ratio(parse(getComputedStyle(el).color), bgOf(el)) * 100) / 100});
  });
  return out;
}"""


def traced_html() -> str:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def divide(a: int, b: int) -> float:
        """Divide a by b."""
        return a / b

    llm = ScriptedLLM([
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "divide", "arguments": {"a": 1, "b": 0}}]},
        "done",
    ])
    agent = FunctionCallingAgent.from_tools(
        [FunctionTool.from_defaults(add), FunctionTool.from_defaults(divide)], llm=llm, tracer_provider=provider
    )
    agent.chat("go " + HOSTILE)
    spans = list(exporter.get_finished_spans())
    nodes = nbagent.tracing.SpanTree(spans)
    for _, node in nodes:  # hostile text where a span's own text goes
        if node.name == "execute_tool add":
            node.name = "execute_tool " + HOSTILE
            node.attributes["gen_ai.tool.name"] = HOSTILE
    html = nodes._repr_html_()
    assert html is not None
    return html


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    check_browser_tools()
    import playwright.sync_api as api

    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_TIMEOUT_MS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_waterfall_is_readable_laid_out_and_inert(chromium: Any, scheme: str, tmp_path: Path, shots: Path) -> None:
    page_file = tmp_path / "trace.html"
    page_file.write_text(
        f"<!doctype html><html><body style='background:{BACKGROUNDS[scheme]};margin:12px'>{traced_html()}</body></html>",
        encoding="utf-8",
    )
    context = chromium.new_context(color_scheme=scheme, viewport={"width": 1000, "height": 400})
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(page_file.as_uri(), wait_until="load", timeout=STEP_TIMEOUT_MS)
        page.screenshot(path=str(shots / f"trace_waterfall_{scheme}.png"))
        assert requests == [page_file.as_uri()], f"the waterfall loaded something else: {requests}"
        assert page.evaluate("window.__pwned") is None and page.locator("img").count() == 0
        assert HOSTILE in page.inner_text(".nbagent-trace")
        rows = page.locator(".nbt-row")
        assert rows.count() == 7
        bars = page.eval_on_selector_all(".nbt-bar", "els => els.map(e => { const b = e.getBoundingClientRect(); return [b.left, b.right]; })")
        root, step1 = bars[0], bars[1]
        assert root[0] <= step1[0] and step1[1] <= root[1] + 1  # a step lies within its task
        colours = page.eval_on_selector_all(".nbt-name", "els => els.map(e => getComputedStyle(e).color)")
        assert len(set(colours)) == 2  # the failed tool's name is in its own (error) colour
        low = [t for t in page.evaluate(CONTRAST_JS) if t["ratio"] < MIN_CONTRAST]
        assert low == [], f"text below {MIN_CONTRAST}:1 in {scheme}: {low}"
    finally:
        context.close()
