"""The asyncio helpers the library shares: waiting on events without swallowing a
cancellation, stopping owned tasks, and taking a cancellation back.

Every wait here uses ``asyncio.wait``, never ``wait_for``: a cancellation that arrives
together with the awaited result must never be swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from types import TracebackType
from typing import Any

#: Whether a task can take back a cancellation (``Task.uncancel``, Python 3.11+): then a
#: handler can run in its worker's own task and still be stopped at its deadline.
CAN_UNCANCEL = sys.version_info >= (3, 11)


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


__all__ = [
    "CAN_UNCANCEL",
    "cancel_and_wait",
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
