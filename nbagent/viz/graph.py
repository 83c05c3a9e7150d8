"""StepGraph: a task's step DAG that displays itself in Jupyter, with or without Graphviz.

``source`` is DOT text (always available, computed from the live state on each access);
``pipe``/``svg`` run a Graphviz ``dot`` program (``viz.render``: graphviz-pure by default,
``NBAGENT_DOT`` chooses another). The notebook repr never raises: it always has ``text/plain``,
plus an inline SVG when a ``dot`` program is there, or else a static HTML timeline of the steps
with the DOT source in a collapsible block. ``viz.render``'s names are re-exported here, their
old home.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from nbagent.viz.dot import check_options, task_to_dot
from nbagent.viz.html import error_html, graph_html
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
)

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState

__all__ = [
    "StepGraph", "GraphvizNotFoundError", "GraphvizError", "find_dot", "render_svg", "DOT_ENV",
    "pure_dot", "pipe_dot", "strip_svg_prolog",
]

Renderer = Literal["auto", "svg", "html"]
_RENDERERS = ("auto", "svg", "html")
_SAVE_TEXT = (".dot", ".gv")
_SAVE_BINARY = (".svg", ".png", ".pdf")


class StepGraph:
    """A task's step graph; display it in a notebook, or use ``source`` / ``svg()`` / ``save()``.

    ``renderer``: "auto" (SVG when ``dot`` is found, else HTML), "svg" or "html" (always the
    static HTML view; useful where Graphviz is missing or for tests). Other keyword arguments
    go to ``task_to_dot`` (``max_label``, ``collapse_after``, ``rankdir``...).
    """

    def __init__(self, state: TaskState, *, renderer: Renderer = "auto", **dot_kwargs: Any) -> None:
        if renderer not in _RENDERERS:
            raise ValueError(f"renderer must be one of {_RENDERERS}, got {renderer!r}")
        self.state = state
        self.renderer: Renderer = renderer
        self.dot_kwargs = dict(dot_kwargs)
        check_options(**self.dot_kwargs)  # bad options fail here, not at display time

    # ----- text and rendering --------------------------------------------------------------
    @property
    def source(self) -> str:
        """The DOT text of the task's current state."""
        return task_to_dot(self.state, **self.dot_kwargs)

    def pipe(self, format: str = "svg") -> bytes:
        """Render with the ``dot`` program (``GraphvizNotFoundError`` when it is missing)."""
        return pipe_dot(self.source, format)

    def svg(self) -> str | None:
        """The SVG text, or None when ``dot`` is missing."""
        return render_svg(self.source)

    def html(self) -> str:
        """A self-contained HTML card: the inline SVG, or the static timeline + DOT source."""
        source = self.source
        svg = None if self.renderer == "html" else self._try_svg(source)
        return graph_html(self.state, svg=svg, dot_source=source)

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
            allowed = ", ".join(_SAVE_TEXT + _SAVE_BINARY)
            raise ValueError(f"cannot save a step graph as {suffix or 'a file without suffix'!r} ({target!r}); use one of {allowed}")
        return target

    # ----- notebook display ----------------------------------------------------------------
    def _try_svg(self, source: str) -> str | None:
        try:
            return render_svg(source)
        except Exception:  # noqa: BLE001 - a failing dot falls back to HTML
            return None

    def __repr__(self) -> str:
        try:
            state = self.state
            counts = ", ".join(
                f"{n} {s}" for s, n in _summary(state).items() if n
            ) or "no steps"
            return f"StepGraph(task={state.task.task_id!r}, status={state.status.value}, {counts})"
        except Exception as err:  # noqa: BLE001 - a repr must not raise
            return f"StepGraph(<unreadable state: {type(err).__name__}>)"

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """``text/plain`` always; ``image/svg+xml`` when ``dot`` renders, else ``text/html``."""
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        try:
            source = self.source
        except Exception as err:  # noqa: BLE001 - show the problem instead of raising
            bundle["text/html"] = error_html("this step graph could not be drawn", err)
            return _filter(bundle, include, exclude)
        svg = None if self.renderer == "html" else self._try_svg(source)
        if svg is not None:
            bundle["image/svg+xml"] = svg
        else:
            try:
                bundle["text/html"] = graph_html(self.state, svg=None, dot_source=source)
            except Exception as err:  # noqa: BLE001
                bundle["text/html"] = error_html("this step graph could not be drawn", err)
        return _filter(bundle, include, exclude)


def _summary(state: TaskState) -> dict[str, int]:
    from nbagent.viz.dot import status_summary

    return status_summary(state)


def _filter(
    bundle: dict[str, Any], include: Iterable[str] | None, exclude: Iterable[str] | None
) -> dict[str, Any]:
    keep = set(include) if include else None
    drop = set(exclude or ())
    return {
        k: v
        for k, v in bundle.items()
        if k == "text/plain" or ((keep is None or k in keep) and k not in drop)
    }
