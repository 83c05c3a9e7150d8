"""Throttle: call a function at most once per interval, never losing the last request.

Views redraw through it (the live graph, the panels, the batch grid): a request made within
the interval is kept and run at its end, on the running asyncio loop when there is one
(Jupyter), else on a daemon timer thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Throttle"]

log = logging.getLogger("nbagent.viz")


class Throttle:
    """Call ``fn`` at most once per ``interval_s``; a request made meanwhile is never lost.

    ``request()`` calls ``fn`` at once when the last call is older than the interval, else
    marks a call as pending and schedules it for the end of the interval: on the running
    asyncio loop when there is one (Jupyter), else on a daemon timer thread. ``flush()`` runs
    a pending call now (loops call it when they end); calls never overlap.
    """

    def __init__(self, fn: Callable[[], None], interval_s: float = 0.1) -> None:
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0 seconds, got {interval_s!r}")
        self.fn = fn
        self.interval_s = float(interval_s)
        self._lock = threading.RLock()
        self._last = float("-inf")
        self._pending = False
        self._timer: Any = None  # asyncio.TimerHandle | threading.Timer | None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
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
            self._timer_loop = None
            if self._pending:
                self._call()

    def _schedule(self, delay: float) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and not _is_transient(loop):
            self._timer = loop.call_later(delay, self._fire)
            self._timer_loop = loop
        else:
            timer = threading.Timer(delay, self._fire)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def _cancel_timer(self) -> None:
        timer, loop = self._timer, self._timer_loop
        self._timer = None
        self._timer_loop = None
        if timer is None:
            return
        if loop is not None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop or not loop.is_running():
                timer.cancel()
            else:  # TimerHandle.cancel is not thread-safe
                loop.call_soon_threadsafe(timer.cancel)
        else:
            timer.cancel()


def _is_transient(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the per-thread loop ``run_sync`` drives only while a sync call runs
    (plain Python): a callback scheduled on it would wait for the next call, so use a timer."""
    from nbagent import _sync

    return getattr(_sync._local, "loop", None) is loop
