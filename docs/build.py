"""Build the documentation site offline and check it (``make docs``).

``python docs/build.py [--out docs/_build/html]`` runs Sphinx from scratch (``-E``) with
warnings as errors (``-W --keep-going``), offline: the variables that would switch the
tutorials to a real model are removed and real network requests are blocked
(``NBAGENT_BLOCK_NETWORK=1``); a build in which a cell's output came too late for the notebook
runner (a busy machine) fails rather than show the cell with nothing under it. Then it reads
every built page and fails if

- a link or an image inside the site points at a file or an anchor that is not there;
- a page would load anything from outside the site: a script, a stylesheet, an image, a font,
  a frame (links a reader may follow to other sites are fine: they load nothing by themselves).

With ``--lite`` (``make docs-lite``) the JupyterLite site of ``make lite`` is built into the
output's ``lite/`` folder (npm and PyPI packages; nothing fetched when it runs) and each
tutorial the browser can run links to it.

Publishing is copying the output folder to any static file host (GitHub Pages included).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
OUT = DOCS / "_build" / "html"
REAL_MODEL_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "NBAGENT_MODEL", "NBAGENT_LOCAL_MODEL")
#: tags and attributes whose URL the browser fetches as the page loads
LOADED = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
          ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("image", "href"),
          ("use", "href"), ("image", "xlink:href"), ("use", "xlink:href"), ("input", "src")}
#: <link rel=...> that only name a page, never load it
LINK_NAMES_ONLY = {"canonical", "author", "license", "next", "prev", "index", "search", "help", "alternate"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)|@import\s+['"]([^'"]+)""")


def offline_env(*, lite: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*REAL_MODEL_VARS, "NBAGENT_DOCS_LITE")}
    if lite:
        env["NBAGENT_DOCS_LITE"] = "1"
    env["NBAGENT_BLOCK_NETWORK"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def sphinx_command(out: Path, doctrees: Path | None = None, src: Path = DOCS) -> list[str]:
    doctrees = doctrees or out.parent / "doctrees"
    return [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
            "-d", str(doctrees), str(src), str(out)]


def build(
    out: Path = OUT, *, doctrees: Path | None = None, src: Path = DOCS, lite: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run Sphinx; the result holds its output (warnings are on stderr). When a notebook's
    cell raised, Sphinx stops naming the notebook only and saves the traceback to a file: the
    cell and its error are then added to the result's stderr."""
    done = subprocess.run(sphinx_command(out, doctrees, src), cwd=REPO, env=offline_env(lite=lite), capture_output=True, text=True)
    refuse_lost_outputs(done)
    saved = re.search(r"The full traceback has been saved in:\s*(\S+)", done.stderr)
    if done.returncode != 0 and saved and Path(saved.group(1)).is_file():
        log = ANSI.sub("", Path(saved.group(1)).read_text(encoding="utf-8", errors="replace"))
        cell = log.find("An error occurred while executing the following cell")
        if cell >= 0:
            done.stderr += "\n" + log[cell:cell + 6000]
    return done


#: what nbclient logs when a cell's output did not reach it in time (its iopub_timeout, 4 s):
#: it then goes on without that output, so the page would silently miss what the cell printed
LOST_OUTPUT = "Timeout waiting for IOPub output"


def refuse_lost_outputs(done: subprocess.CompletedProcess[str]) -> None:
    """Fail a build in which a cell's output was lost (a busy machine delays it past
    nbclient's wait): a page would show the cell with nothing under it."""
    if done.returncode == 0 and LOST_OUTPUT in done.stderr:
        done.returncode = 1
        done.stderr += (f"\nmake docs: a cell's output was lost ({LOST_OUTPUT!r}: the machine was too busy "
                        "for the notebook runner's wait); build again\n")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []  # followed by a reader: <a href>
        self.loads: list[str] = []  # fetched as the page loads
        self.styles: list[str] = []  # <style> text, for url() and @import

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if key in found and (key == "id" or tag == "a"):
                self.ids.add(found[key])
        if tag == "a" and "href" in found:
            self.links.append(found["href"])
        rel = set(found.get("rel", "").split())
        for t, attr in LOADED:
            if tag == t and attr in found and not (tag == "link" and rel and rel <= LINK_NAMES_ONLY):
                self.loads.append(found[attr])
        if "srcset" in found:
            self.loads += [part.split()[0] for part in found["srcset"].split(",") if part.strip()]
        if "style" in found:
            self.styles.append(found["style"])
        self._in_style = tag == "style"

    def handle_data(self, data: str) -> None:
        if getattr(self, "_in_style", False):
            self.styles.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False


def _external(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.netloc) or parts.scheme not in ("", "data", "blob")


def _target(page: Path, url: str) -> tuple[Path, str] | None:
    """The file and anchor a same-site URL names (None: not a same-site file URL)."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return None
    path = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
    if path.is_dir():
        path = path / "index.html"
    return path, unquote(parts.fragment)


def check_site(site: Path) -> list[str]:
    """Problems with the built site at ``site``: broken same-site links and anchors, and
    anything a page would load from outside the site. An empty list means none."""
    site = site.resolve()
    problems: list[str] = []
    parsed: dict[Path, _Page] = {}

    def page_of(path: Path) -> _Page:
        if path not in parsed:
            parser = _Page()
            parser.feed(path.read_text(encoding="utf-8", errors="replace"))
            parsed[path] = parser
        return parsed[path]

    pages = sorted(site.rglob("*.html"))
    for page in pages:
        name = page.relative_to(site)
        parser = page_of(page)
        css_urls = [m.group(1) or m.group(2) for text in parser.styles for m in CSS_URL.finditer(text)]
        for url in parser.loads + css_urls:
            if _external(url):
                problems.append(f"{name} loads {url} from outside the site")
            elif (target := _target(page, url)) and not target[0].exists():
                problems.append(f"{name} loads {url}, which is not in the site")
        for url in parser.links:
            target = _target(page, url)
            if target is None:
                continue
            path, anchor = target
            if not path.is_relative_to(site) or not path.exists():
                problems.append(f"{name} links to {url}, which is not in the site")
            elif anchor and path.suffix == ".html" and anchor not in page_of(path).ids:
                problems.append(f"{name} links to {url}: {path.relative_to(site)} has no id {anchor!r}")
    for sheet in sorted(site.rglob("*.css")):
        for m in CSS_URL.finditer(sheet.read_text(encoding="utf-8", errors="replace")):
            url = m.group(1) or m.group(2)
            if _external(url) and not url.startswith("data:"):
                problems.append(f"{sheet.relative_to(site)} loads {url} from outside the site")
    if not pages:
        problems.append(f"{site}: no page was built")
    return problems


def add_lite(out: Path) -> Path:
    """Build the JupyterLite site (``make lite``) into ``out/lite``: built beside ``out`` and
    moved in, so its staging folder (a second copy of Pyodide and the wheels) is not published."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from lite.build_site import build as build_lite

    site = build_lite(out.parent / f"{out.name}-lite", quiet=True)
    for old in (out / "lite", out / "lite-stage"):  # lite-stage: where earlier builds staged it
        shutil.rmtree(old, ignore_errors=True)
    return Path(shutil.move(site, out / "lite"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the site folder (default docs/_build/html)")
    parser.add_argument("--lite", action="store_true", help="also build the JupyterLite site into OUT/lite and link the tutorials to it")
    args = parser.parse_args(argv)
    start = time.monotonic()
    done = build(args.out, lite=args.lite)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        print(f"make docs: Sphinx failed (exit {done.returncode}); warnings are errors", file=sys.stderr)
        return 1
    if args.lite:
        add_lite(args.out)
    problems = check_site(args.out)
    for problem in problems:
        print(f"make docs: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"documentation site: {args.out} (built and checked in {time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
