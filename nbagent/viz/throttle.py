"""Throttle: call a function at most once per interval, never losing the last request.

Views redraw through it (the live graph, the panels, the batch grid): a request made within
the interval is kept and run at its end, on the running asyncio loop when there is one
(Jupyter), else on a daemon timer thread; where no thread can start (the browser's Pyodide,
``_sync.NO_THREADS``), on the page's event loop (``call_later``: the views' one timer).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from nbagent import _sync

__all__ = ["Throttle", "call_later", "Later"]

log = logging.getLogger("nbagent.viz")


class Later:
    """A call ``call_later`` scheduled: ``cancel()`` it from any thread."""

    __slots__ = ("handle", "loop", "thread")

    def __init__(self, handle: asyncio.TimerHandle | threading.Timer, loop: asyncio.AbstractEventLoop | None) -> None:
        self.handle = handle
        self.loop = loop  # None: a timer thread
        self.thread = threading.get_ident()

    def cancel(self) -> None:
        loop = self.loop
        if loop is None or self.thread == threading.get_ident() or not loop.is_running():
            self.handle.cancel()
        else:  # TimerHandle.cancel is not thread-safe
            loop.call_soon_threadsafe(self.handle.cancel)


def call_later(delay: float, fn: Callable[[], None]) -> Later:
    """Call ``fn`` after ``delay`` seconds without blocking anyone. On the running loop when
    there is one that keeps running (Jupyter); else on a daemon timer thread; where no thread
    can start (Pyodide), on the page's loop, which the browser drives (``setTimeout``) whether
    or not a cell runs."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or _is_transient(loop):
        if not _sync.NO_THREADS:
            timer = threading.Timer(delay, fn)
            timer.daemon = True
            timer.start()
            return Later(timer, None)
        loop = _page_loop()
    return Later(loop.call_later(delay, fn), loop)


def _page_loop() -> asyncio.AbstractEventLoop:
    """The loop asyncio's policy gives this thread: in Pyodide the page's ``WebLoop``, which
    runs callbacks from the browser's timers even while no Python code is running."""
    with warnings.catch_warnings():  # the policy API is deprecated from 3.14; Pyodide sets it
        warnings.simplefilter("ignore", DeprecationWarning)
        return asyncio.get_event_loop_policy().get_event_loop()


class Throttle:
    """Call ``fn`` at most once per ``interval_s``; a request made meanwhile is never lost.

    ``request()`` calls ``fn`` at once when the last call is older than the interval, else
    marks a call as pending and schedules it for the end of the interval: on the running
    asyncio loop when there is one (Jupyter), else on a daemon timer thread (``call_later``:
    the page's loop where no thread can start). ``flush()`` runs a pending call now (loops
    call it when they end); calls never overlap.
    """

    def __init__(self, fn: Callable[[], None], interval_s: float = 0.1) -> None:
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0 seconds, got {interval_s!r}")
        self.fn = fn
        self.interval_s = float(interval_s)
        self._lock = threading.RLock()
        self._last = float("-inf")
        self._pending = False
        self._timer: Later | None = None
        self.calls = 0

    @property
    def pending(self) -> bool:
        return self._pending

    def request(self) -> None:
        with self._lock:
            wait = self._last + self.interval_s - time.monotonic()
            if wait <= 0 and self._timer is None:
                self._call()
                return
            self._pending = True
            if self._timer is None:
                self._schedule(max(wait, 0.0))

    def flush(self) -> bool:
        """Run the pending call now; returns whether there was one."""
        with self._lock:
            self._cancel_timer()
            if not self._pending:
                return False
            self._call()
            return True

    def cancel(self) -> None:
        """Drop the pending call, if any."""
        with self._lock:
            self._cancel_timer()
            self._pending = False

    def _call(self) -> None:
        self._pending = False
        self._last = time.monotonic()
        self.calls += 1
        try:
            self.fn()
        except Exception:  # a broken view must not break the agent run that triggered it
            log.exception("nbagent: throttled view update %r failed", self.fn)

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending:
                self._call()

    def _schedule(self, delay: float) -> None:
        self._timer = call_later(delay, self._fire)

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def _is_transient(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the per-thread loop ``run_sync`` drives only while a sync call runs
    (plain Python): a callback scheduled on it would wait for the next call, so use a timer."""
    return getattr(_sync._local, "loop", None) is loop
