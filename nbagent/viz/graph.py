"""Graphs that display themselves in Jupyter, with or without Graphviz: ``StepGraph`` (a task's
step DAG) and ``DotDisplay`` (any DOT text with a list to show instead: workflows, agents, runs).

``source`` is DOT text (a step graph computes it from the live state on each access);
``pipe``/``svg``/``save`` run a Graphviz ``dot`` program (``viz.render``: graphviz-pure by
default, ``NBAGENT_DOT`` chooses another). The notebook repr never raises: it always has
``text/plain``, plus an inline SVG when a ``dot`` program is there, or else static HTML (the
steps or items as a list, with the DOT source in a collapsible block). ``viz.render``'s names
are re-exported here, their old home.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from nbagent.viz.dot import check_options, status_summary, task_to_dot
from nbagent.viz.escape import html_text
from nbagent.viz.html import error_html, graph_html
from nbagent.viz.html.base import _card, _details, _graph_or_list, _pre, _safely
from nbagent.viz.render import (
    DOT_ENV,
    GraphvizError,
    GraphvizNotFoundError,
    _missing_dot_message,  # demo.py reads it from here
    find_dot,
    pipe_dot,
    pure_dot,
    render_svg,
    strip_svg_prolog,
    svg_or_none,
)

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState

__all__ = [
    "StepGraph", "DotDisplay", "GraphvizNotFoundError", "GraphvizError", "find_dot", "render_svg", "DOT_ENV",
    "pure_dot", "pipe_dot", "strip_svg_prolog",
]

Renderer = Literal["auto", "svg", "html"]
_RENDERERS = ("auto", "svg", "html")
_SAVE_TEXT = (".dot", ".gv")
_SAVE_BINARY = (".svg", ".png", ".pdf")


class _DotGraph:
    """What a displayable graph does with its DOT text: render it, save it, display it.

    A subclass gives ``source``, ``renderer``, ``_noun`` (for messages) and ``_html(source, svg)``,
    its card with the SVG or, when ``svg`` is None, the static view.
    """

    renderer: Renderer
    _noun = "graph"

    @property
    def source(self) -> str:
        raise NotImplementedError

    def _html(self, source: str, svg: str | None) -> str:
        raise NotImplementedError

    def pipe(self, format: str = "svg") -> bytes:
        """Render with the ``dot`` program (``GraphvizNotFoundError`` when it is missing).

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> from nbagent.viz import GraphvizNotFoundError
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
        >>> task = agent.create_task("2 + 2?")
        >>> _ = agent.run_step(task)
        >>> try:
        ...     png = agent.graph(task).pipe("png")  # bytes, to save or send
        ... except GraphvizNotFoundError:  # no dot program here
        ...     png = None
        >>> png is None or png[1:4] == b"PNG"
        True
        """
        return pipe_dot(self.source, format)

    def svg(self) -> str | None:
        """The SVG text, or None when ``dot`` is missing.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
        >>> task = agent.create_task("2 + 2?")
        >>> _ = agent.run_step(task)
        >>> svg = agent.graph(task).svg()  # None where Graphviz's dot is not installed
        >>> svg is None or svg.lstrip().startswith(("<?xml", "<svg"))
        True
        """
        return render_svg(self.source)

    def _svg_for_display(self, source: str) -> str | None:
        return None if self.renderer == "html" else svg_or_none(source)

    def html(self) -> str:
        """A self-contained HTML card: the inline SVG, or the static view and the DOT source.

        Example:

        >>> from nbagent import ReActAgent, ScriptedLLM
        >>> agent = ReActAgent.from_tools([], llm=ScriptedLLM(["Answer: 4"]))
        >>> task = agent.create_task("2 + 2?")
        >>> _ = agent.run_step(task)
        >>> graph = agent.graph(task)
        >>> graph.source.splitlines()[0], graph.html().startswith('<div class="nbagent nb-graph">')
        ('digraph task {', True)
        """
        source = self.source
        return self._html(source, self._svg_for_display(source))

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write ``.dot``/``.gv`` (DOT text) or ``.svg``/``.png``/``.pdf`` (needs ``dot``)."""
        target = os.fspath(path)
        suffix = os.path.splitext(target)[1].lower()
        if suffix in _SAVE_TEXT:
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(self.source)
        elif suffix in _SAVE_BINARY:
            data = self.pipe(suffix[1:])
            with open(target, "wb") as fh:
                fh.write(data)
        else:
            *others, last = _SAVE_TEXT + _SAVE_BINARY
            raise ValueError(
                f"cannot save a {self._noun} as {suffix or 'a file without suffix'!r} ({target!r}); "
                f"use {', '.join(others)} or {last}"
            )
        return target

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """``text/plain`` always; ``image/svg+xml`` when ``dot`` renders, else ``text/html``
        and (``renderer="auto"``) a widget that draws the DOT in the browser (``_wasm_view``)."""
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        try:
            source = self.source
            svg = self._svg_for_display(source)
            if svg is not None:
                bundle["image/svg+xml"] = svg
            else:
                bundle["text/html"] = self._html(source, None)
                if self.renderer == "auto":
                    bundle.update(_wasm_view(source))
        except Exception as err:  # noqa: BLE001 - show the problem instead of raising
            bundle["text/html"] = error_html(f"this {self._noun} could not be drawn", err)
        keep = set(include) if include else None
        drop = set(exclude or ())
        return {k: v for k, v in bundle.items() if k == "text/plain" or ((keep is None or k in keep) and k not in drop)}


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _wasm_view(source: str) -> dict[str, Any]:
    """Where no ``dot`` program runs (a browser's Pyodide has no subprocess), the picture is
    drawn by the frontend: graphviz-anywidget's view, Graphviz compiled to WASM and bundled in
    its ES module (nothing fetched). A frontend without widgets shows the ``text/html`` beside
    it. Empty when graphviz-anywidget is missing or the widget cannot be made."""
    try:
        from graphviz_anywidget import GraphvizAnyWidget

        data = GraphvizAnyWidget(dot_source=source, enable_zoom=False)._repr_mimebundle_()
    except Exception:  # noqa: BLE001 - the HTML view is there already
        return {}
    if isinstance(data, tuple):  # anywidget returns (data, metadata)
        data = data[0]
    view = (data or {}).get(WIDGET_VIEW)
    return {} if view is None else {WIDGET_VIEW: view}


class StepGraph(_DotGraph):
    """A task's step graph; display it in a notebook, or use ``source`` / ``svg()`` / ``save()``.

    ``renderer``: "auto" (SVG when ``dot`` is found, else HTML and the picture drawn in the
    browser), "svg" or "html" (always the static HTML view; useful for tests). Other keyword arguments
    go to ``task_to_dot`` (``max_label``, ``collapse_after``, ``rankdir``...).
    """

    _noun = "step graph"

    def __init__(self, state: TaskState, *, renderer: Renderer = "auto", **dot_kwargs: Any) -> None:
        if renderer not in _RENDERERS:
            raise ValueError(f"renderer must be one of {_RENDERERS}, got {renderer!r}")
        self.state = state
        self.renderer: Renderer = renderer
        self.dot_kwargs = dict(dot_kwargs)
        check_options(**self.dot_kwargs)  # bad options fail here, not at display time

    @property
    def source(self) -> str:
        """The DOT text of the task's current state."""
        return task_to_dot(self.state, **self.dot_kwargs)

    def _html(self, source: str, svg: str | None) -> str:
        return graph_html(self.state, svg=svg, dot_source=source)

    def __repr__(self) -> str:
        try:
            state = self.state
            counts = ", ".join(f"{n} {s}" for s, n in status_summary(state).items() if n) or "no steps"
            return f"StepGraph(task={state.task.task_id!r}, status={state.status.value}, {counts})"
        except Exception as err:  # noqa: BLE001 - a repr must not raise
            return f"StepGraph(<unreadable state: {type(err).__name__}>)"


class DotDisplay(_DotGraph):
    """DOT text that displays itself: SVG with Graphviz, else ``fallback()``'s list as HTML.

    ``renderer``: "auto" (SVG when ``dot`` renders, else the list with a note saying so),
    "svg", or "html" (always the list and the DOT source).
    """

    def __init__(
        self,
        source: str,
        *,
        title: str = "graph",
        fallback: Callable[[], str] | None = None,
        renderer: Renderer = "auto",
    ) -> None:
        if renderer not in _RENDERERS:
            raise ValueError(f"renderer must be 'auto', 'svg' or 'html', got {renderer!r}")
        self._source = source
        self.title = title
        self.renderer: Renderer = renderer
        self._fallback = fallback

    @property
    def source(self) -> str:
        """The DOT text."""
        return self._source

    def _html(self, source: str, svg: str | None) -> str:
        head = f'<div class="nb-head">{html_text(self.title)}</div>'
        if self.renderer == "html":
            body = self._list_html() + _details("DOT source", _pre(source, None))
        else:
            body = _graph_or_list(svg, self._list_html, source, shown="shown as a list")
        return _card("graph", head + body)

    def _list_html(self) -> str:
        return _safely("the list could not be drawn", lambda: "" if self._fallback is None else self._fallback())

    def __repr__(self) -> str:
        return f"DotDisplay({self.title!r}, {self.source.count(chr(10))} lines of DOT)"
