"""Serve the built JupyterLite site on 127.0.0.1 (``make lite-serve``), as static files.

Any static file server works for publishing the site; this one only makes sure of the types a
browser is strict about (WebAssembly, ES modules) and listens on loopback alone.
``python lite/serve.py [--port 8000] [--dir build/lite/site]``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SITE = Path(__file__).resolve().parents[1] / "build" / "lite" / "site"
TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".whl": "application/zip",
    ".ipynb": "application/json",
    ".zip": "application/zip",
}


class SiteHandler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        if getattr(self.server, "quiet", False):
            return
        super().log_message(format, *args)


def make_server(site: Path = SITE, port: int = 0, *, quiet: bool = False) -> ThreadingHTTPServer:
    """A server for ``site`` on 127.0.0.1 (``port`` 0: a free one; see ``server_address``)."""
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no JupyterLite site in {site}: build it first with `make lite`")
    server = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(SiteHandler, directory=str(site)))
    server.quiet = quiet  # type: ignore[attr-defined]
    server.daemon_threads = True
    return server


def serve_in_thread(site: Path = SITE) -> tuple[ThreadingHTTPServer, str]:
    """Start a quiet server in a daemon thread; returns it and its base URL (stop: ``shutdown()``)."""
    server = make_server(site, 0, quiet=True)
    threading.Thread(target=server.serve_forever, name="lite-site", daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dir", type=Path, default=SITE)
    args = parser.parse_args(argv)
    server = make_server(args.dir, args.port)
    print(f"nbagent's JupyterLite site: http://127.0.0.1:{server.server_address[1]}/lab/index.html (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
