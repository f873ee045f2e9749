"""The asyncio helpers the library shares: waiting on events without swallowing a
cancellation, stopping owned tasks, taking a cancellation back, and running handlers
(``async def`` on the loop, plain functions in a bounded thread pool).

Every wait here uses ``asyncio.wait``, never ``wait_for``: a cancellation that arrives
together with the awaited result must never be swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

#: Whether a task can take back a cancellation (``Task.uncancel``, Python 3.11+): then a
#: handler can run in its worker's own task and still be stopped at its deadline.
CAN_UNCANCEL = sys.version_info >= (3, 11)

#: The most threads a worker's pool of plain (non-async) handlers gets.
MAX_HANDLER_THREADS = 32


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a library swallowed.

    ``asyncio.wait_for`` on Python 3.11 (used inside redis-py for socket writes) can
    drop a cancellation that arrives as its inner call completes; the task then stays
    marked as cancelling. Long-running loops call this before they wait again, so a
    cancelled worker never keeps polling.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError()


def uncancel_current() -> None:
    """Take back one cancellation of the current task (Python 3.11+; else nothing)."""
    task = asyncio.current_task()
    if CAN_UNCANCEL and task is not None:
        task.uncancel()  # type: ignore[attr-defined,unused-ignore]


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; whether it is set."""
    if seconds > 0 and not event.is_set():
        waiter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({waiter}, timeout=seconds)
        finally:
            waiter.cancel()
    return event.is_set()


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set, whichever comes first.
    Returns whether ``stop`` is set."""
    return await wait_event(stop, seconds)


async def wait_any(*events: asyncio.Event) -> None:
    """Wait until at least one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None, quiet: bool = False) -> None:
    """Cancel ``tasks`` and wait until each has ended; their cancellation is not
    raised here, any other error they ended with is (unless ``quiet``: then none)."""
    ignored = (asyncio.CancelledError, Exception) if quiet else (asyncio.CancelledError,)
    for task in tasks:
        if task is not None:
            task.cancel()
    for task in tasks:
        if task is not None:
            with contextlib.suppress(*ignored):
                await task


def is_async_handler(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (also through partials and ``__call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the bound method is what is called
    return call is not None and not inspect.isroutine(fn) and inspect.iscoroutinefunction(call)


class HandlerPool:
    """Runs handlers: ``async def`` ones on the loop, plain ones in a bounded thread pool
    (made on first use, shut down by :meth:`close` without waiting for threads)."""

    def __init__(self, concurrency: int, prefix: str) -> None:
        self._threads = max(1, min(concurrency, MAX_HANDLER_THREADS))
        self._prefix = prefix
        self._executor: ThreadPoolExecutor | None = None
        self._async: dict[int, bool] = {}

    def call(self, fn: Callable[[Any], Any], ctx: Any) -> Awaitable[Any]:
        """An awaitable of ``fn(ctx)``'s result; a plain function runs in a thread, and a
        coroutine it returns is awaited on the loop."""
        key = id(fn)
        is_async = self._async.get(key)
        if is_async is None:
            is_async = self._async[key] = is_async_handler(fn)
        if is_async:
            return fn(ctx)  # type: ignore[no-any-return]
        return self._in_thread(fn, ctx)

    async def _in_thread(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix=self._prefix)
        # In a copy of this task's context, as asyncio.to_thread does: the handler sees
        # what the worker set around it (a tracing span).
        run = contextvars.copy_context().run
        result = await asyncio.get_running_loop().run_in_executor(self._executor, run, fn, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


__all__ = [
    "CAN_UNCANCEL",
    "MAX_HANDLER_THREADS",
    "HandlerPool",
    "cancel_and_wait",
    "is_async_handler",
    "raise_if_cancelling",
    "sleep_unless_stopped",
    "uncancel_current",
    "wait_any",
    "wait_event",
]


class ClosesOnExit:
    """``async with`` for an object with an ``async close()``: leaving the block closes
    it, however the block ended (each class says what entering does)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()
