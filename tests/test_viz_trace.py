"""The waterfall view of a SpanTree: pure, escaped, one row per span on one time axis."""

from __future__ import annotations

import re

from nbagent.tracing import SpanNode, SpanTree
from nbagent.viz.trace_html import KIND_COLOURS, span_tree_html


def _tree() -> SpanTree:
    ms = 1_000_000
    return SpanTree([
        SpanNode("invoke_agent Bot", 1, None, 0, 100 * ms, kind="AGENT",
                 attributes={"gen_ai.agent.name": "Bot", "gen_ai.conversation.id": "t1"},
                 events=[("nbagent.step.undone", 60 * ms, {"nbagent.step.id": "s1"})]),
        SpanNode("step 1", 2, 1, 0, 50 * ms, kind="CHAIN"),
        SpanNode("chat m", 3, 2, 0, 25 * ms, kind="LLM", attributes={"gen_ai.usage.input_tokens": 12}),
        SpanNode('execute_tool <img src=x onerror="alert(1)">', 4, 2, 25 * ms, 50 * ms, kind="TOOL",
                 status="ERROR", status_message='ToolError: <b>"boom"</b>',
                 attributes={"gen_ai.tool.name": "<script>alert(1)</script>"}),
        SpanNode("step 2", 5, 1, 75 * ms, 100 * ms, kind="CHAIN"),
    ])


def test_the_tree_is_depth_first_in_start_order() -> None:
    assert _tree().lines() == [
        "invoke_agent Bot [AGENT]",
        "  step 1 [CHAIN]",
        "    chat m [LLM]",
        '    execute_tool <img src=x onerror="alert(1)"> [TOOL] !',
        "  step 2 [CHAIN]",
    ]


def test_rows_bars_and_durations_follow_the_spans() -> None:
    html = span_tree_html(_tree())
    assert html.count('class="nbt-row"') == 5
    assert "5 spans · 100.0 ms · " in html and "1 error" in html
    bars = re.findall(r'class="nbt-bar" style="left:([\d.]+)%;width:([\d.]+)%;background:(#[0-9a-f]+)"', html)
    assert bars == [
        ("0.00", "100.00", KIND_COLOURS["AGENT"]),
        ("0.00", "50.00", KIND_COLOURS["CHAIN"]),
        ("0.00", "25.00", KIND_COLOURS["LLM"]),
        ("25.00", "25.00", "#cf222e"),  # an error is red whatever its kind
        ("75.00", "25.00", KIND_COLOURS["CHAIN"]),
    ]
    assert re.findall(r'class="nbt-dur">([^<]+)<', html) == ["100.0 ms", "50.0 ms", "25.0 ms", "25.0 ms", "25.0 ms"]
    assert 'class="nbt-ev" style="left:60.00%" title="nbagent.step.undone"' in html
    assert "padding-left:2.2em" in html  # depth 2


def test_hostile_text_is_escaped_everywhere() -> None:
    html = span_tree_html(_tree())
    assert "<img" not in html and "<script" not in html and "<b>" not in html
    assert "execute_tool &lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert "status: ToolError: &lt;b&gt;&quot;boom&quot;&lt;/b&gt;" in html
    assert "gen_ai.tool.name = &lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_same_tree_same_html_and_the_repr_uses_the_view() -> None:
    assert span_tree_html(_tree()) == span_tree_html(_tree())
    assert _tree()._repr_html_() == span_tree_html(_tree())
    assert repr(_tree()) == "SpanTree(5 spans, 1 root(s))"


def test_theme_aware_css_and_no_script() -> None:
    html = span_tree_html(_tree())
    assert "var(--jp-ui-font-color1" in html and "prefers-color-scheme: dark" in html
    assert "<script" not in html and "http" not in html
