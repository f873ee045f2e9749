"""Running a worker's handlers, for both workers: the one protocol that runs a handler
under a time limit (the slots they run in: :mod:`flo_redis.worker.slots`).

``async def`` handlers run on the event loop, plain functions in the worker's bounded
thread pool (or its handler processes: :mod:`flo_redis.worker.processes`). One watchdog
task per worker stops the handlers past their deadline: no timer and, on Python 3.11+, no
task per handler (it runs in the caller's own task, which takes the cancellation back
once the handler has stopped; on 3.10 each handler gets a task of its own), or sooner by
:meth:`Running.stop` (its run's lease was lost). A handler in a process is stopped for
sure, so its timeout is retried (``HandlerTimeout.retry``); one in a thread is not."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flo_redis._aio import CAN_UNCANCEL, uncancel_current

#: The most threads a worker's pool of plain (non-async) handlers gets.
MAX_HANDLER_THREADS = 32


class HandlerTimeout(TimeoutError):
    """The handler ran past its deadline and was cancelled (``retry``: surely stopped)."""

    retry = False


class HandlerStopped(Exception):
    """The handler was cancelled by :meth:`Running.stop` (its work is no longer its own)."""


class Running:
    """One handler while it runs: its deadline (``limit`` seconds after it began), and
    how to stop it."""

    __slots__ = ("_on_stop", "_target", "deadline", "limit", "why")

    def __init__(
        self, deadline: float, on_stop: Callable[[], None] | None, limit: float = 0.0
    ) -> None:
        self.deadline = deadline
        self.limit = limit
        self.why: str = ""  # "timeout" or "stopped" once it was told to stop
        self._on_stop = on_stop
        self._target: asyncio.Future[Any] | None = None

    def stop(self, why: str = "stopped") -> None:
        """Cancel the handler (once), calling ``on_stop`` first (so it can see why)."""
        if self.why:
            return
        self.why = why
        if self._on_stop is not None:
            self._on_stop()
        if self._target is not None:
            self._target.cancel(why)  # the handler sees why: CancelledError(why)


#: The handler the current task runs (:meth:`HandlerRunner.run`), for :func:`handler_begins`.
_current: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "flo_redis_running", default=None
)


def handler_waits() -> None:
    """Stop the running handler's clock until :func:`handler_begins`: a process pool
    calls it while the handler waits for a free (or newly started) process, which is
    not the handler's time, as a hook's before it is not. A stop still stops it."""
    running = _current.get()
    if running is not None and not running.why:
        running.deadline = math.inf


def handler_begins() -> None:
    """Count the running handler's time limit from now (it was handed to its process)."""
    running = _current.get()
    if running is not None and not running.why:
        running.deadline = asyncio.get_running_loop().time() + running.limit


def is_async_handler(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (also through partials and ``__call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the bound method is what is called
    return call is not None and not inspect.isroutine(fn) and inspect.iscoroutinefunction(call)


class HandlerRunner:
    """Runs handlers of one worker, each stopped ``timeout_s`` after it started:
    ``async def`` ones on the loop, plain ones in a pool of at most ``concurrency``
    threads (made on first use, shut down by :meth:`close`)."""

    def __init__(self, concurrency: int, timeout_s: float, thread_prefix: str) -> None:
        self.timeout_s = timeout_s
        self._running: set[Running] = set()
        self._threads = max(1, min(concurrency, MAX_HANDLER_THREADS))
        self._prefix = thread_prefix
        self._executor: ThreadPoolExecutor | None = None
        self._async: dict[int, bool] = {}  # id(handler) -> whether it is async

    def running(
        self, on_stop: Callable[[], None] | None = None, began: float | None = None
    ) -> Running:
        """A handle for the next handler, its deadline counted from ``began`` (loop time;
        None: now); ``on_stop`` is called when it is stopped."""
        if began is None:
            began = asyncio.get_running_loop().time()
        return Running(began + self.timeout_s, on_stop, self.timeout_s)

    async def run(
        self,
        handler: Callable[[Any], Any],
        ctx: Any,
        running: Running,
        task: asyncio.Task[Any],
    ) -> Any:
        """``handler(ctx)``'s result: the one way either worker runs a handler.
        :class:`HandlerTimeout` once the deadline passed, :class:`HandlerStopped` once
        :meth:`Running.stop` was called (also if the handler swallowed it and returned);
        a cancellation of the caller cancels the handler and is raised as it is.
        ``task`` is the caller's own task: on Python 3.11+ the handler runs in it (a stop
        cancels it, then takes the cancellation back); on 3.10 in a task of its own."""
        is_async = self._async.get(id(handler))
        if is_async is None:
            is_async = self._async[id(handler)] = is_async_handler(handler)
        current = _current.set(running)
        work: Awaitable[Any] = handler(ctx) if is_async else self._in_thread(handler, ctx)
        target: asyncio.Future[Any] = task
        if not CAN_UNCANCEL:
            work = target = asyncio.ensure_future(work)
        self._running.add(running)
        running._target = target
        try:
            try:
                # Cancelling the caller's task cancels the handler's too.
                result = await work
            except asyncio.CancelledError:
                if not running.why or (target is not task and not target.cancelled()):
                    raise  # the caller's own cancellation
                raise self._stopped(running, handler) from None
            if running.why:  # it swallowed the cancellation and returned
                raise self._stopped(running, handler)
            return result
        finally:
            _current.reset(current)
            running._target = None
            self._running.discard(running)

    async def _in_thread(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        """A plain handler's result, from a pool thread, in a copy of this task's context
        (as ``asyncio.to_thread``: a span set around it); a coroutine it returns awaited."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix=self._prefix)
        run = contextvars.copy_context().run
        result = await asyncio.get_running_loop().run_in_executor(self._executor, run, fn, ctx)
        return await result if inspect.isawaitable(result) else result

    def _stopped(self, running: Running, handler: object) -> Exception:
        """The error a stopped handler ends with, the stop's cancellation taken back
        from the caller's task (Python 3.11+)."""
        uncancel_current()
        if running.why != "timeout":
            return HandlerStopped()
        timeout = HandlerTimeout(f"no return within {self.timeout_s:g} s")
        timeout.retry = getattr(handler, "stops_surely", False)
        return timeout

    async def watchdog(self) -> None:
        """Stop handlers past their deadline, checking every tenth of the time limit
        (between 10 and 50 ms); runs until cancelled."""
        loop = asyncio.get_running_loop()
        every = min(0.05, max(0.01, self.timeout_s / 10))
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for running in [r for r in self._running if now >= r.deadline]:
                running.stop("timeout")

    def close(self) -> None:
        """Shut the thread pool down (threads still running are not waited for)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


__all__ = ["MAX_HANDLER_THREADS", "HandlerRunner", "HandlerStopped", "HandlerTimeout"]
__all__ += ["Running", "handler_begins", "handler_waits", "is_async_handler"]
