"""StepGraph: a task's step DAG that displays itself in Jupyter, with or without Graphviz.

``source`` is DOT text (always available, computed from the live state on each access);
``pipe``/``svg`` run a Graphviz ``dot`` program, looked up at each call (``find_dot``). By
default that is graphviz-pure, a port of Graphviz's ``dot`` installed from PyPI with nbagent
(bundled fonts, the same bytes on every platform), so a machine with no system Graphviz draws
pictures and stored notebook outputs are identical everywhere; ``NBAGENT_DOT`` chooses another
(the system ``dot``, or a path). The notebook repr never raises: it always has ``text/plain``,
plus an inline SVG when a ``dot`` program is there, or else a static HTML timeline of the steps
with the DOT source in a collapsible block.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from nbagent.viz.dot import check_options, task_to_dot

if TYPE_CHECKING:
    from nbagent.engine.state import TaskState

__all__ = [
    "StepGraph", "GraphvizNotFoundError", "GraphvizError", "find_dot", "render_svg", "DOT_ENV",
]

Renderer = Literal["auto", "svg", "html"]
_RENDERERS = ("auto", "svg", "html")
_FORMAT_RE = re.compile(r"^[a-z][a-z0-9_:]{0,31}$")
_DOT_TIMEOUT_S = 60.0
_SAVE_TEXT = (".dot", ".gv")
_SAVE_BINARY = (".svg", ".png", ".pdf")


class GraphvizNotFoundError(RuntimeError):
    """The Graphviz ``dot`` program is not on PATH."""


class GraphvizError(RuntimeError):
    """``dot`` ran but failed (its stderr is in the message)."""


#: Which ``dot`` draws static graphs: unset or "auto" (graphviz-pure, else the system ``dot``),
#: "pure" (graphviz-pure only), "system" (the ``dot`` on PATH only), or a program's path.
DOT_ENV = "NBAGENT_DOT"
_PURE_NAMES = ("graphviz-pure", "graphviz-pure.exe")


@functools.lru_cache(maxsize=1)
def _installed_pure_dot() -> str | None:
    """The graphviz-pure program installed with this Python (it is a console binary, not a
    module, and the environment's ``bin`` is not always on a kernel's PATH)."""
    try:
        dist = importlib.metadata.distribution("graphviz-pure")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name in _PURE_NAMES:
            path = os.path.normpath(str(dist.locate_file(f)))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def pure_dot() -> str | None:
    """The graphviz-pure program: installed with this Python, or else on PATH; None if neither."""
    return _installed_pure_dot() or shutil.which("graphviz-pure")


def find_dot() -> str | None:
    """The ``dot`` program that draws static graphs, or None (looked up at every call).

    By default graphviz-pure (a core dependency: identical output everywhere), falling back
    to the system ``dot`` on PATH; ``NBAGENT_DOT`` picks one (see ``DOT_ENV``).
    """
    choice = os.environ.get(DOT_ENV, "").strip()
    if choice in ("", "auto"):
        return pure_dot() or shutil.which("dot")
    if choice == "pure":
        return pure_dot()
    if choice == "system":
        return shutil.which("dot")
    return shutil.which(choice)


def _missing_dot_message() -> str:
    choice = os.environ.get(DOT_ENV, "").strip()
    if choice not in ("", "auto", "pure", "system"):
        return (
            f"{DOT_ENV}={choice!r} names no program that can be run, so the graph cannot be "
            f"rendered; unset {DOT_ENV} to use graphviz-pure (installed with nbagent), or set it "
            "to 'system' for Graphviz's own dot, or use .source for the DOT text"
        )
    return (
        "no Graphviz 'dot' program was found (graphviz-pure is not installed"
        + (f" and {DOT_ENV}={choice!r}" if choice else "")
        + "), so the graph cannot be rendered; pip install graphviz-pure (a dependency of "
        "nbagent) or install Graphviz (apt-get install graphviz, brew install graphviz), or use "
        ".source for the DOT text, or StepGraph(state, renderer='html') for a static HTML view"
    )


def _is_pure(exe: str) -> bool:
    return os.path.basename(exe).lower() in _PURE_NAMES


def pipe_dot(source: str, format: str = "svg") -> bytes:
    """Run ``dot -T<format>`` on ``source`` and return its output."""
    if not isinstance(format, str) or not _FORMAT_RE.match(format):
        raise ValueError(f"format must be a Graphviz output format such as 'svg' or 'png', got {format!r}")
    exe = find_dot()
    if exe is None:
        raise GraphvizNotFoundError(_missing_dot_message())
    if format in ("pdf", "ps", "eps") and _is_pure(exe):  # graphviz-pure does not write these yet
        system = shutil.which("dot")
        if system is None:
            raise GraphvizError(
                f"graphviz-pure cannot write {format.upper()} yet and there is no system Graphviz "
                "'dot' on PATH; save as .svg or .png, or install Graphviz for PDF"
            )
        exe = system
    try:
        proc = subprocess.run(
            [exe, f"-T{format}"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=_DOT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as err:  # removed between which() and run()
        raise GraphvizNotFoundError(_missing_dot_message()) from err
    except subprocess.TimeoutExpired as err:
        raise GraphvizError(f"dot -T{format} took longer than {_DOT_TIMEOUT_S:.0f} s") from err
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        name = os.path.basename(exe)
        raise GraphvizError(f"{name} -T{format} failed with exit code {proc.returncode}: {stderr}")
    return proc.stdout


def render_svg(source: str) -> str | None:
    """The SVG for DOT ``source`` as text ready to inline in HTML, or None if no ``dot`` is found."""
    if find_dot() is None:
        return None
    return strip_svg_prolog(pipe_dot(source, "svg").decode("utf-8", "replace"))


def strip_svg_prolog(svg: str) -> str:
    """Drop the XML declaration, DOCTYPE and leading comments so the SVG can sit inside HTML."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


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
        from nbagent.viz.html import graph_html

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
            from nbagent.viz.html import error_html

            bundle["text/html"] = error_html("this step graph could not be drawn", err)
            return _filter(bundle, include, exclude)
        svg = None if self.renderer == "html" else self._try_svg(source)
        if svg is not None:
            bundle["image/svg+xml"] = svg
        else:
            try:
                from nbagent.viz.html import graph_html

                bundle["text/html"] = graph_html(self.state, svg=None, dot_source=source)
            except Exception as err:  # noqa: BLE001
                from nbagent.viz.html import error_html

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
