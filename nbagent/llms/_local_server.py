"""The child process ``LocalLLM`` starts: llama.cpp's HTTP server (``xllamacpp``), nothing else.

Standalone on purpose (stdlib and xllamacpp only; run by file path, so it never imports
nbagent). xllamacpp runs the server inside the calling process, so it gets a process of its
own that dies with its parent, however the parent goes:

- Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills it when the parent dies
  (also on ``kill -9``). Only asked for when the parent started it from its main thread:
  the signal fires when the *thread* that forked exits, not the process.
- its stdin is a pipe from the parent: end of file means the parent closed it or died;
- a watchdog thread: the parent pid changed (re-parented to init), exit.

Protocol: one JSON line on stdout, ``{"ready": "http://127.0.0.1:PORT"}`` or
``{"error": "..."}``; the server's log goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _die_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    if pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the other two guards still hold
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)

    def watch_parent() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    def watch_stdin() -> None:
        try:
            while sys.stdin.buffer.read(1):
                pass
        except (OSError, ValueError):
            pass
        os._exit(0)

    threading.Thread(target=watch_parent, name="parent-watchdog", daemon=True).start()
    threading.Thread(target=watch_stdin, name="stdin-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--alias", default="")
    ap.add_argument("--parent-pid", type=int, required=True)
    ap.add_argument("--pdeathsig", action="store_true")
    args = ap.parse_args(argv)
    _die_with_parent(args.parent_pid, args.pdeathsig)
    try:
        import xllamacpp
    except ImportError as e:
        _say({"error": f"xllamacpp is not installed ({e}); pip install 'nbagent[local]'"})
        return 2
    p = xllamacpp.CommonParams()
    p.model.path = args.model
    p.hostnames = [args.host]
    p.port = args.port
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.n_ctx = args.ctx
    p.n_parallel = args.parallel
    p.use_jinja = True
    p.endpoint_props = True
    if args.alias:
        p.model_alias = args.alias
    try:
        server = xllamacpp.Server(p)
    except RuntimeError as e:
        _say({"error": f"llama.cpp's server did not start on {args.host}:{args.port}: {e}"})
        return 3
    _say({"ready": server.listening_address})
    while True:  # the watchdogs end the process; keep `server` alive until then
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
