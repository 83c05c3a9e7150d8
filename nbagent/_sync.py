"""Run coroutines from sync code, also inside a running event loop (a notebook cell).

The async path is the one real implementation; every sync method is ``run_sync(coro)``.

- No loop running in this thread: the coroutine runs on a loop kept for this thread
  (``run_until_complete``, about 12 µs of overhead; no new loop per call). A caller that
  expects the coroutine never to suspend (``eager=True``: a worker that steps synchronously)
  has it stepped right here first, which costs next to nothing; if it does suspend, it goes
  on on that loop from where it stopped (``_run_eagerly``).
- A loop is running (Jupyter): the coroutine runs on a background "portal" loop in its own
  thread and this thread waits for it. No nest_asyncio, no patching of the user's loop.
- No thread can start (Pyodide, ``NO_THREADS``): the coroutine is stepped in place on the
  page's loop; if it waits after all, JSPI (``pyodide.ffi.run_sync``) waits for it where
  there is some, else it is rolled back and ``CannotWaitHere`` says to await the async method.

Async generators are bound to the loop that started them (an HTTP stream's sockets are), so
``next_on(loop, agen)`` / ``anext_on(loop, agen)`` advance one on its own loop from anywhere.

An exception comes out of ``run_sync`` / ``next_on`` without the frames of this bridge
(asyncio, concurrent.futures, threads): a learner's traceback shows their call, then the code
that raised. An error nbagent raises on purpose (a ``raise`` in nbagent's code: "task is
done", "nothing to undo"...) is shown from the caller's frame alone.
"""

from __future__ import annotations

import contextvars
import functools
import linecache
import os
import sys
import threading
import types
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

__all__ = [
    "run_sync",
    "interrupted",
    "current_loop",
    "sync_loop",
    "iterate_sync",
    "next_on",
    "anext_on",
    "trim_traceback",
    "raised_on_purpose",
]

T = TypeVar("T")

# a task can run in a given context from 3.11 on: what resuming an eager call needs
_EAGER_OK = sys.version_info >= (3, 11)
_local = threading.local()
_portal_lock = threading.Lock()
_portal: asyncio.AbstractEventLoop | None = None


# asyncio is imported by the first call that needs a loop, not by ``import nbagent`` (it is
# about a fifth of that import's time): until then no loop can run, so none is looked for.


_bound = False  # whether _bind_asyncio has run


def _bind_asyncio() -> None:
    """Import asyncio, and put its API for loop implementations (the C getter and setter of
    the running loop) in place of the stand-ins below, so the sync path calls them directly.
    Once: ``_LEAVE`` keeps its identity (``_wait_without_threads`` compares it)."""
    global _running, _set_running_loop, _LEAVE, _bound
    if _bound:
        return
    from asyncio.events import _get_running_loop, _set_running_loop as set_running_loop

    _running = _get_running_loop
    _set_running_loop = set_running_loop
    _LEAVE = functools.partial(set_running_loop, None)
    _bound = True


def _running() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or None (``get_running_loop`` would raise a
    RuntimeError on every sync call from plain code, and chain it to what the caller raises
    next). Before asyncio is imported none can run; once it is, asyncio's own getter."""
    if "asyncio" not in sys.modules:
        return None
    _bind_asyncio()
    return _running()


def _set_running_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    _bind_asyncio()
    _set_running_loop(loop)


def _new_loop() -> asyncio.AbstractEventLoop:
    import asyncio

    _bind_asyncio()
    return asyncio.new_event_loop()


def _thread_loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _new_loop()
        _local.loop = loop
    return loop


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _portal
    with _portal_lock:
        if _portal is None or _portal.is_closed():
            loop = _new_loop()
            thread = threading.Thread(target=loop.run_forever, name="nbagent-loop", daemon=True)
            thread.start()
            _portal = loop
        return _portal


def current_loop() -> asyncio.AbstractEventLoop:
    """The loop a coroutine started now from this context would run on."""
    running = _running()
    if running is not None:
        return running
    return _thread_loop()


def sync_loop() -> asyncio.AbstractEventLoop:
    """The loop ``run_sync`` would run a coroutine on from this context."""
    running = _running()
    if running is None:
        return _thread_loop()
    return running if NO_THREADS else _portal_loop()


def iterate_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from sync code (one step at a time on ``sync_loop()``)."""
    loop = sync_loop()
    while True:
        try:
            yield next_on(loop, agen)
        except StopIteration:
            return


def _wait(fut: concurrent.futures.Future[T]) -> T:
    try:
        return fut.result()
    except BaseException:
        fut.cancel()  # KeyboardInterrupt in a notebook: stop the work too
        raise


SETTLE_S = 2.0  # after an interrupt, how long run_sync waits for the work to roll back
_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("nbagent_sync_call", default=None)


class _Call:
    """One ``run_sync`` call running on another thread's loop; ``abandoned`` once its caller
    was interrupted. Set from the caller's thread, read by the work: a step checks it before
    it commits (``interrupted()``), so a step whose loop was blocked when the interrupt came
    (a model or tool that does not await) never records what it computes afterwards."""

    __slots__ = ("abandoned",)

    def __init__(self) -> None:
        self.abandoned = False


def interrupted() -> bool:
    """Whether the ``run_sync`` call this code runs for has been given up by its caller."""
    call = _call.get()
    return call is not None and call.abandoned


def _drain(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
    """After an interrupt in ``run_until_complete``: cancel the call's task and every task it
    left on this thread's loop, and run the loop until they have rolled back, so nothing of
    the interrupted call runs (or raises) later, inside the next call."""
    import asyncio

    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if task not in pending and not task.done():
        pending.append(task)
    for t in pending:
        t.cancel()
    while pending:
        try:
            loop.run_until_complete(asyncio.wait(pending))
            break
        except BaseException:  # another Ctrl-C: keep rolling back, it is quick
            pending = [t for t in pending if not t.done()]
    for t in [task, *pending]:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: no "exception was never retrieved" later


def _run_here(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], context: contextvars.Context | None = None
) -> T:
    task: asyncio.Task[T] | None = None
    try:
        task = loop.create_task(coro) if context is None else loop.create_task(coro, context=context)
        return loop.run_until_complete(task)
    except BaseException:
        if task is None:
            coro.close()
        else:
            _drain(loop, task)
        raise


class _Eager:
    """One call stepped in place: the coroutine's result, and what ``_boxed`` does once the
    coroutine has returned (stop pretending that the loop runs; nothing if it went on as a
    task of the loop, whose run sets and clears the running loop itself)."""

    __slots__ = ("value", "leave")

    def __init__(self) -> None:
        self.value: Any = None
        self.leave: Any = _LEAVE


_LEAVE = functools.partial(_set_running_loop, None)  # ``_bind_asyncio`` makes it asyncio's, in C
_STAY = type(None)  # a call that does nothing, in C (so no line of this module runs)


async def _boxed(coro: Coroutine[Any, Any, T], eager: _Eager) -> T:
    # One line on purpose, and only calls into C after the await: from the moment ``coro``
    # returns (a step has committed) until the caller has its result, no new line of nbagent
    # starts, as inside ``run_until_complete``, so no interrupt can land in between.
    eager.value = await coro; eager.leave(); return eager.value  # type: ignore[no-any-return]  # noqa: E702


def _run_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], go_on: Callable[..., Any] | None = None
) -> T:
    """Step ``coro`` in place, in a copy of the caller's context, with ``loop`` as the running
    loop (so ``get_running_loop()`` and futures work as on the loop): a coroutine that never
    suspends finishes here with no event loop round trip. One that suspends after all goes on
    where it stopped, in the same context, by ``go_on`` (default ``_go_on``: as a task of
    ``loop``): nothing is dropped or run twice. An exception (an interrupt included) comes out
    as from ``run_until_complete``, after the coroutine rolled back what it did."""
    eager = _Eager()
    boxed = _boxed(coro, eager)
    ctx = contextvars.copy_context()
    pretend = _running() is None  # else ``loop`` runs already (a page's loop, in Pyodide)
    try:
        if pretend:
            _set_running_loop(loop)
        else:
            eager.leave = _STAY
        return eager.value if (first := ctx.run(next, boxed.__await__(), eager)) is eager else (go_on or _go_on)(loop, boxed, first, ctx, eager)  # type: ignore[no-any-return]  # noqa: E501
    except BaseException as error:
        if pretend:
            _set_running_loop(None)
        _unwind(loop, coro, boxed, error, ctx)
        raise


def _go_on(
    loop: asyncio.AbstractEventLoop, boxed: Coroutine[Any, Any, Any], first: Any, ctx: contextvars.Context, eager: _Eager
) -> Any:
    """``_run_eagerly``'s coroutine suspended on ``first`` (a future, or None for a bare
    yield): it goes on as a task of ``loop``, in its own context ``ctx``, where it stopped."""
    eager.leave = _STAY
    _set_running_loop(None)
    return _run_here(loop, _resumed(boxed, first), ctx)


def _unwind(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    boxed: Coroutine[Any, Any, Any],
    error: BaseException,
    ctx: contextvars.Context,
) -> None:
    """``_run_eagerly`` is raising ``error``. If its coroutine never started, close it (no
    "never awaited" warning). If it suspended and an interrupt came before it could go on
    as a task (or the task was cancelled before it started), throw the interrupt in where it
    waits, so it rolls back as it would had the interrupt come inside it; should its
    rollback wait, on the loop. A coroutine that ended (the usual case) is left alone."""
    if not boxed.cr_suspended:
        boxed.close()  # never started, or already ended: nothing to do but a warning avoided
        coro.close()
        return
    try:
        pending = ctx.run(boxed.throw, error)
    except BaseException:
        return  # rolled back and raised: the caller raises ``error``
    rest = _resumed(boxed, pending)  # its rollback waits: let it end
    if _running() is loop:  # the loop runs (Pyodide's page): it ends it once this call returns
        loop.create_task(rest, context=ctx)
        return
    try:
        _run_here(loop, rest, ctx)
    except BaseException:
        pass  # the caller raises ``error``


async def _resumed(boxed: Coroutine[Any, Any, T], first: Any) -> T:
    return await _relay(boxed, first)  # type: ignore[no-any-return]


@types.coroutine
def _relay(boxed: Coroutine[Any, Any, Any], first: Any) -> Any:
    """Give the running task what a suspended coroutine waits for (``first``), then let the
    coroutine go on under the task: what the task sends or throws (its cancellation) reaches
    the coroutine, and its result is the task's."""
    pending = first
    while True:
        try:
            yield pending
        except BaseException as error:  # cancelled while waiting: the coroutine decides
            try:
                pending = boxed.throw(error)
            except StopIteration as stop:  # it ended (it took the error in and returned)
                return stop.value
            continue
        return (yield from boxed)  # type: ignore[misc]


def _run_on_portal(portal: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the portal loop and wait; interrupted, cancel it and give it
    ``SETTLE_S`` to roll back before raising (so the task is usable at once)."""
    import concurrent.futures

    result: concurrent.futures.Future[T] = concurrent.futures.Future()
    settled = threading.Event()
    call = _Call()
    ctx = contextvars.copy_context()
    ctx.run(_call.set, call)
    box: list[asyncio.Task[T]] = []

    def done(task: asyncio.Task[T]) -> None:
        try:
            if result.cancelled():
                if not task.cancelled():
                    task.exception()  # retrieved: the caller is gone
            elif task.cancelled():
                result.cancel()
            elif task.exception() is not None:
                result.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                result.set_result(task.result())
        finally:
            settled.set()

    def start() -> None:
        if result.cancelled():
            coro.close()
            settled.set()
            return
        task = portal.create_task(coro, context=ctx)
        box.append(task)
        task.add_done_callback(done)

    def cancel() -> None:
        if box:
            box[0].cancel()

    portal.call_soon_threadsafe(start)
    try:
        return result.result()
    except BaseException:
        call.abandoned = True
        result.cancel()
        portal.call_soon_threadsafe(cancel)
        settled.wait(SETTLE_S)
        raise


def run_sync(coro: Coroutine[Any, Any, T], *, eager: bool = False) -> T:
    """Run ``coro`` to completion and return its result, whatever loop is running here.

    Interrupted (Ctrl-C, "Interrupt kernel"), the work is cancelled and rolled back before
    this raises: nothing of it runs on, or commits, afterwards. An exception is raised with
    this bridge's frames trimmed (``trim_traceback``). ``eager=True`` says the coroutine is
    not expected to suspend: with no loop running here it is first stepped in place (the
    same result, without an event loop's round trip; see ``_run_eagerly``).
    """
    __tracebackhide__ = True  # IPython and pytest leave this frame out of tracebacks
    try:
        return _run_sync(coro, eager)
    except Exception as error:
        raise trim_traceback(error)  # the call's own error, without this bridge's frames


def _run_sync(coro: Coroutine[Any, Any, T], eager: bool = False) -> T:
    running = _running()
    if NO_THREADS:
        return _run_eagerly(running or _thread_loop(), coro, _wait_without_threads)
    if running is None:
        loop = _thread_loop()
        if loop.is_running():  # re-entered from a callback of this very loop
            return _in_new_thread(coro)
        if eager and _EAGER_OK:
            return _run_eagerly(loop, coro)
        return _run_here(loop, coro)
    portal = _portal_loop()
    if running is portal:
        return _in_new_thread(coro)
    return _run_on_portal(portal, coro)


def _in_new_thread(coro: Coroutine[Any, Any, T]) -> T:
    # in the caller's context, as on the other paths (a ``seeded_ids`` block's ids, the call)
    import asyncio
    import concurrent.futures

    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nbagent-sync") as ex:
        return _wait(ex.submit(ctx.run, asyncio.run, coro))


# ----- a runtime with no threads (Pyodide: a browser page, or Node) -------------------------

#: no thread can start here, so no portal loop: a sync call is stepped in place on the page's
#: loop, and if it waits after all, only WebAssembly stack switching (JSPI) can wait for it
NO_THREADS = sys.platform == "emscripten"


def _jspi_wait() -> Callable[[Any], Any] | None:
    """``pyodide.ffi.run_sync`` where this Pyodide can suspend a sync call while the loop runs
    (JSPI: Chromium; Node with --experimental-wasm-stack-switching), else None."""
    try:
        from pyodide.ffi import can_run_sync, run_sync as jspi_run_sync  # type: ignore[import-not-found]
    except ImportError:
        return None
    return jspi_run_sync if can_run_sync() else None  # type: ignore[no-any-return]


class CannotWaitHere(RuntimeError):
    """A sync call needed to wait (for a model over the network, a timer, a tool that
    awaits) where no thread can wait for it and JSPI is not available (Pyodide)."""


_CANNOT_WAIT = (
    "this call had to wait (for {what}), and nothing can wait for it here: in Pyodide without "
    "WebAssembly stack switching (JSPI) a sync call can only run what never waits. Await the "
    "async method in the cell instead: `await agent.arun_step(task)` for `agent.run_step(task)`, "
    "`await agent.achat(...)` for `agent.chat(...)`. What the call began was rolled back."
)


def _wait_without_threads(
    loop: asyncio.AbstractEventLoop, boxed: Coroutine[Any, Any, Any], first: Any, ctx: contextvars.Context, eager: _Eager
) -> Any:
    """``_run_eagerly``'s ``go_on`` where no thread can start: the coroutine suspended on
    ``first``. With JSPI it goes on as a task of the loop and this call waits for it there;
    without, it is rolled back (by ``_run_eagerly``) and the error says what to do instead."""
    wait = _jspi_wait()
    if wait is None:
        raise CannotWaitHere(_CANNOT_WAIT.format(what="a future" if first is not None else "the event loop"))
    if eager.leave is _LEAVE:  # the loop only pretended to run: it runs the rest itself
        _set_running_loop(None)
    eager.leave = _STAY
    # the result comes back in a list: JSPI hands it over as a JavaScript promise's value, and a
    # promise resolved with an awaitable (a BatchRun, a ChatStream, a workflow handler) would
    # wait for that awaitable too, instead of returning it
    return wait(loop.create_task(_listed(_resumed(boxed, first)), context=ctx))[0]


async def _listed(coro: Coroutine[Any, Any, T]) -> list[T]:
    return [await coro]


def next_on(loop: asyncio.AbstractEventLoop, agen: AsyncIterator[T]) -> T:
    """``next()`` for an async iterator bound to ``loop``, from sync code.

    Raises StopIteration at the end, like ``next``; other exceptions trimmed as ``run_sync``'s.
    """
    __tracebackhide__ = True
    try:
        return _next_on(loop, agen)
    except StopIteration:
        raise
    except Exception as error:
        raise trim_traceback(error)


def _next_on(loop: asyncio.AbstractEventLoop, agen: AsyncIterator[T]) -> T:
    import asyncio

    running = _running()
    try:
        if NO_THREADS:  # one loop, no thread to wait on another: read it here
            return _run_eagerly(loop, _anext(agen), _wait_without_threads)
        if running is None:
            if loop.is_running():
                return _wait(asyncio.run_coroutine_threadsafe(_anext(agen), loop))
            # interrupted, the pending read is cancelled (not left running on the loop, where
            # the next read would find the generator busy)
            return _run_here(loop, _anext(agen))
        if running is loop:
            raise RuntimeError(
                "this stream was started by an async call on the running event loop; "
                "read it with `async for token in response.async_response_gen()`"
            )
        if loop.is_running():
            return _wait(asyncio.run_coroutine_threadsafe(_anext(agen), loop))
        return _in_new_thread_on(loop, agen)
    except StopAsyncIteration:
        raise StopIteration from None


def _in_new_thread_on(loop: asyncio.AbstractEventLoop, agen: AsyncIterator[T]) -> T:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nbagent-sync") as ex:
        return _wait(ex.submit(loop.run_until_complete, _anext(agen)))


async def anext_on(loop: asyncio.AbstractEventLoop, agen: AsyncIterator[T]) -> T:
    """``await anext()`` for an async iterator bound to ``loop``, from any loop."""
    import asyncio

    running = asyncio.get_running_loop()
    if running is loop:
        return await _anext(agen)
    if loop.is_running():
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_anext(agen), loop))
    return await asyncio.to_thread(loop.run_until_complete, _anext(agen))


async def _anext(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()


# ----- short tracebacks -------------------------------------------------------------------

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB = os.path.dirname(os.path.abspath(threading.__file__)) + os.sep  # where asyncio lives too (not imported)
_BRIDGE = (
    os.path.abspath(__file__),
    _STDLIB + "asyncio" + os.sep,
    os.path.join(_STDLIB, "concurrent", "futures") + os.sep,
    os.path.abspath(threading.__file__),
)


def _is_bridge(filename: str) -> bool:
    return filename.startswith(_BRIDGE)


def raised_on_purpose(error: BaseException) -> bool:
    """nbagent raised it itself to say what was wrong (a ``raise`` statement in its code), as
    opposed to a bug or a failure of a model or tool. (An error it raised for another one keeps
    that one, with its frames, as its cause or context.)"""
    innermost = error.__traceback__
    while innermost is not None and innermost.tb_next is not None:
        innermost = innermost.tb_next
    if innermost is None:
        return False
    code = innermost.tb_frame.f_code
    if not code.co_filename.startswith(_PACKAGE):
        return False
    return linecache.getline(code.co_filename, innermost.tb_lineno).lstrip().startswith("raise ")


def trim_traceback(error: BaseException) -> BaseException:
    """``error`` with a shorter ``__traceback__``: the frames of the sync bridge (this module,
    asyncio, concurrent.futures, threading) left out, and, for an error nbagent raised on
    purpose, nbagent's own frames too, so the message follows the caller's line. Anything
    else (a bug, a tool's or a model's error) keeps the frames of the code that raised it,
    and its cause chain. Returns ``error`` itself."""
    entries: list[types.TracebackType] = []
    tb = error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries:
        return error
    kept = [t for t in entries if not _is_bridge(t.tb_frame.f_code.co_filename)]
    if raised_on_purpose(error):
        kept = [t for t in kept if not t.tb_frame.f_code.co_filename.startswith(_PACKAGE)]
    if len(kept) == len(entries):
        return error
    trimmed: types.TracebackType | None = None
    for t in reversed(kept):
        trimmed = types.TracebackType(trimmed, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return error.with_traceback(trimmed)
