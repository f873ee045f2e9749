"""Running a worker's handlers under a time limit: one mechanism for both workers.

``async def`` handlers run on the event loop, plain functions in the worker's bounded
thread pool (:class:`flo_redis._aio.HandlerPool`). Every handler has a deadline, and one
watchdog task per worker stops the handlers past theirs: no timer and, on Python 3.11+,
no task per handler (it runs in the caller's own task, which takes the cancellation back
once the handler has stopped). On 3.10, where a task cannot take a cancellation back,
each handler gets a task of its own. A handler can also be stopped early
(:meth:`Running.stop`: its run's lease was lost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from flo_redis._aio import CAN_UNCANCEL, HandlerPool, uncancel_current


class HandlerTimeout(TimeoutError):
    """The handler ran past its deadline and was cancelled."""


class HandlerStopped(Exception):
    """The handler was cancelled by :meth:`Running.stop` (its work is no longer its own)."""


class Running:
    """One handler while it runs: its deadline, and how to stop it."""

    __slots__ = ("_on_stop", "_target", "deadline", "why")

    def __init__(self, deadline: float, on_stop: Callable[[], None] | None) -> None:
        self.deadline = deadline
        self.why: str = ""  # "timeout" or "stopped" once it was told to stop
        self._on_stop = on_stop
        self._target: asyncio.Future[Any] | None = None

    def stop(self, why: str = "stopped") -> None:
        """Cancel the handler (once): ``on_stop`` is called first, so the handler can
        see why it is being cancelled."""
        if self.why:
            return
        self.why = why
        if self._on_stop is not None:
            self._on_stop()
        if self._target is not None:
            self._target.cancel()


class HandlerRunner:
    """Runs handlers of one worker, each stopped ``timeout_s`` after it started."""

    def __init__(self, concurrency: int, timeout_s: float, thread_prefix: str) -> None:
        self.timeout_s = timeout_s
        self._pool = HandlerPool(concurrency, thread_prefix)
        self._running: set[Running] = set()

    def running(
        self, on_stop: Callable[[], None] | None = None, began: float | None = None
    ) -> Running:
        """A handle for the next handler, its deadline starting at ``began`` (loop time;
        None: now); ``on_stop`` is called when it is stopped (its deadline passed, or
        :meth:`Running.stop`)."""
        if began is None:
            began = asyncio.get_running_loop().time()
        return Running(began + self.timeout_s, on_stop)

    async def run(
        self,
        handler: Callable[[Any], Any],
        ctx: Any,
        running: Running,
        task: asyncio.Task[Any],
    ) -> Any:
        """``handler(ctx)``'s result: the one way either worker runs a handler.
        :class:`HandlerTimeout` once the deadline passed, :class:`HandlerStopped` once
        :meth:`Running.stop` was called (also when the handler swallowed the
        cancellation and returned). A cancellation of the caller cancels the handler
        and is raised as it is. ``task`` is the caller's own task (a handler slot knows
        its own: no asking once a run): on Python 3.11+ the handler runs in it, and a
        stop cancels it and takes the cancellation back once the handler has stopped;
        on 3.10 the handler gets a task of its own, which a stop cancels."""
        work: Awaitable[Any] = self._pool.call(handler, ctx)
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
                raise self._stopped(running) from None
            if running.why:  # it swallowed the cancellation and returned
                raise self._stopped(running)
            return result
        finally:
            running._target = None
            self._running.discard(running)

    def _stopped(self, running: Running) -> Exception:
        """The error a stopped handler ends with, the stop's cancellation taken back
        from the caller's task (Python 3.11+)."""
        uncancel_current()
        if running.why == "timeout":
            return HandlerTimeout(f"no return within {self.timeout_s:g} s")
        return HandlerStopped()

    async def watchdog(self) -> None:
        """Stop handlers past their deadline, checking every tenth of the time limit
        (between 10 ms and 1 s); runs until cancelled."""
        loop = asyncio.get_running_loop()
        every = min(1.0, max(0.01, self.timeout_s / 10))
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for running in [r for r in self._running if now >= r.deadline]:
                running.stop("timeout")

    def close(self) -> None:
        """Shut the thread pool down (threads still running are not waited for)."""
        self._pool.close()


__all__ = ["HandlerRunner", "HandlerStopped", "HandlerTimeout", "Running"]
