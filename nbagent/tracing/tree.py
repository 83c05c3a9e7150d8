"""``SpanTree``: finished spans as a tree, to read, test and draw (a waterfall) in a notebook.

Built from any spans shaped like the OpenTelemetry SDK's ``ReadableSpan`` (what an
``InMemorySpanExporter`` or a ``SpanProcessor`` holds): name, ids, parent, times, status,
attributes, events. Pure data, no ``opentelemetry`` import; the waterfall is a view
(``nbagent.viz.trace_html``) found through the view registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nbagent.registry import html_view

__all__ = ["SpanNode", "SpanTree"]


@dataclass
class SpanNode:
    """One span: what it is (``name``, ``kind`` from OpenInference), when, how it ended."""

    name: str
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    #: the OpenInference span kind (``AGENT``, ``CHAIN``, ``LLM``, ``TOOL``), or ""
    kind: str = ""
    #: how the span ended: ``UNSET``, ``OK`` or ``ERROR``
    status: str = "UNSET"
    #: what went wrong, for an ``ERROR``
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    #: how many other spans it links to (a batch's tasks link to the batch's span)
    links: int = 0
    children: list[SpanNode] = field(default_factory=list)

    @property
    def duration_ns(self) -> int:
        """How long the span took, in nanoseconds (never negative)."""
        return max(0, self.end_ns - self.start_ns)

    def walk(self, depth: int = 0) -> Iterable[tuple[int, SpanNode]]:
        """This span and those under it, depth first, children by start time."""
        yield depth, self
        for c in self.children:
            yield from c.walk(depth + 1)


def _status(span: Any) -> tuple[str, str]:
    status = getattr(span, "status", None)
    code = getattr(getattr(status, "status_code", None), "name", "UNSET")
    return str(code), str(getattr(status, "description", None) or "")


def _node(span: Any) -> SpanNode:
    ctx = span.context
    parent = getattr(span, "parent", None)
    attrs: Mapping[str, Any] = getattr(span, "attributes", None) or {}
    code, message = _status(span)
    return SpanNode(
        name=str(span.name),
        span_id=int(ctx.span_id),
        parent_id=None if parent is None else int(parent.span_id),
        start_ns=int(span.start_time or 0),
        end_ns=int(span.end_time or span.start_time or 0),
        kind=str(attrs.get("openinference.span.kind", "")),
        status=code,
        status_message=message,
        attributes=dict(attrs),
        events=[(str(e.name), int(e.timestamp), dict(e.attributes or {})) for e in getattr(span, "events", ()) or ()],
        links=len(getattr(span, "links", ()) or ()),
    )


class SpanTree:
    """Spans arranged by parent: ``roots`` (spans whose parent is not among them), each with
    its ``children`` in start order. ``lines()`` is the tree as text; in a notebook it
    shows as a waterfall."""

    def __init__(self, spans: Iterable[Any]) -> None:
        nodes = [s if isinstance(s, SpanNode) else _node(s) for s in spans]
        by_id = {node.span_id: node for node in nodes}
        self.roots: list[SpanNode] = []
        for node in sorted(nodes, key=lambda s: (s.start_ns, s.end_ns)):
            node.children = []
        for node in sorted(nodes, key=lambda s: (s.start_ns, -s.end_ns)):
            parent = by_id.get(node.parent_id) if node.parent_id is not None else None
            (parent.children if parent is not None else self.roots).append(node)

    def __iter__(self) -> Iterable[tuple[int, SpanNode]]:  # type: ignore[override]
        for root in self.roots:
            yield from root.walk()

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @property
    def start_ns(self) -> int:
        """When the earliest root span started (ns since the epoch; 0 with no spans): the
        waterfall's left edge."""
        return min((r.start_ns for r in self.roots), default=0)

    @property
    def end_ns(self) -> int:
        """When the last span ended (ns since the epoch; 0 with no spans): the waterfall's
        right edge."""
        return max((n.end_ns for _, n in self), default=0)

    def lines(self, attributes: tuple[str, ...] = ()) -> list[str]:
        """The tree as indented text: name, ``[kind]``, ``!`` for an error status, then the
        values of ``attributes`` a span has (``key=value``). What the tests compare."""
        out = []
        for depth, node in self:
            extra = [f"{k}={node.attributes[k]}" for k in attributes if k in node.attributes]
            bits = [node.name] + ([f"[{node.kind}]"] if node.kind else []) + (["!"] if node.status == "ERROR" else [])
            out.append("  " * depth + " ".join(bits + extra))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return f"SpanTree({len(self)} spans, {len(self.roots)} root(s))"

    def _repr_html_(self) -> str | None:
        return html_view(self)
