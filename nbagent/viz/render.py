"""Running a Graphviz ``dot`` program: which one (``find_dot``), DOT text to SVG or another
format (``pipe_dot``, ``render_svg``), and the errors when there is none or it fails.

By default the program is graphviz-pure, a port of Graphviz's ``dot`` installed from PyPI with
nbagent (bundled fonts, the same bytes on every platform), so a machine with no system Graphviz
draws pictures and stored notebook outputs are identical everywhere; ``NBAGENT_DOT`` chooses
another (the system ``dot``, or a path). The program is looked up at every call.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import subprocess

__all__ = [
    "GraphvizNotFoundError",
    "GraphvizError",
    "DOT_ENV",
    "find_dot",
    "pure_dot",
    "pipe_dot",
    "render_svg",
    "svg_or_none",
    "strip_svg_prolog",
]

_FORMAT_RE = re.compile(r"^[a-z][a-z0-9_:]{0,31}$")
_DOT_TIMEOUT_S = 60.0


class GraphvizNotFoundError(RuntimeError):
    """No Graphviz ``dot`` program was found (see ``find_dot``)."""


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


def svg_or_none(source: str) -> str | None:
    """``render_svg`` for a view: None when no ``dot`` is found or it fails, so the view falls
    back to static HTML instead of raising."""
    try:
        return render_svg(source)
    except Exception:  # noqa: BLE001 - a failing dot falls back to HTML
        return None


def strip_svg_prolog(svg: str) -> str:
    """Drop the XML declaration, DOCTYPE and leading comments so the SVG can sit inside HTML."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
