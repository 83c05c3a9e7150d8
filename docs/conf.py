"""Sphinx configuration of nbagent's documentation site (``make docs``).

Built offline: no intersphinx, no CDN (furo ships its CSS and JS; myst-nb's widget scripts
are switched off, so widgets show their static HTML/SVG fallback), warnings are errors
(``-W --keep-going``) and every reference into nbagent must resolve (nitpicky, for nbagent's
own names). The tutorials are the tested notebooks, executed at build time: a cell that
raises fails the build. The API reference is written from ``docs/api.toml``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext"), str(REPO)]
# the notebooks' kernels import nbagent from this checkout too, as autodoc does
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

import nbagent  # noqa: E402

project = "nbagent"
author = "the nbagent authors"
copyright = "the nbagent authors, MIT licence"  # noqa: A001 - Sphinx's name
release = version = nbagent.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.githubpages",  # writes .nojekyll: GitHub Pages then serves _static/ and _images/
    "api_pages",
    "example_links",
    "tutorial_pages",
    "repo_links",
]

exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "tutorials/cassettes"]

# -- warnings: every reference into nbagent must resolve; the rest (stdlib, pydantic...) is not
#    documented here, and with no inventory from the internet it cannot be linked
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!nbagent\b).*")]
suppress_warnings = ["myst.header"]  # notebooks' headings may skip a level (## after #)

# -- MyST and myst-nb
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "force"
nb_execution_raise_on_error = True  # a cell that raises fails the build
nb_execution_show_tb = True
nb_execution_timeout = 300
nb_execution_in_temp = False  # the tutorials read cassettes/ beside themselves
# while writing a page: NBAGENT_DOCS_NO_EXEC="tutorials/*" leaves those pages unexecuted
nb_execution_excludepatterns = os.environ.get("NBAGENT_DOCS_NO_EXEC", "").split()
nb_merge_streams = True
# widgets: no require.js or html-manager from a CDN; a widget output shows its fallback
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("*", "application/vnd.jupyter.widget-view+json", None),
    ("*", "application/vnd.jupyter.widget-state+json", None),
]

# -- autodoc
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = True
python_use_unqualified_type_names = True
add_module_names = False

# -- HTML: furo ships its own assets; nothing from a CDN
html_theme = "furo"
html_title = f"nbagent {release}"
html_static_path: list[str] = []
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None

# Types that public signatures name but nbagent does not export, so no page documents them
# (reported to the redesign, issue 22); matched by class name wherever the module moves.
# Type variables (one capital letter) are not documented either.
UNDOCUMENTED_TYPES = (
    "Event", "StepSnapshot", "ModelPrice", "ReActOutputParser", "ReActChatFormatter",
    "PrefixView", "Runner",
)
nitpick_ignore_regex += [
    (r"py:.*", r"nbagent\.(?!workflow\.Event$)[\w.]*\.(%s)" % "|".join(UNDOCUMENTED_TYPES)),
    (r"py:.*", r"nbagent\.[\w.]*\.[A-Z]"),
]
