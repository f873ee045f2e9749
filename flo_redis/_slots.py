"""Handler slots: up to a worker's concurrency of long-lived tasks that run its queued
items one after another, so an item costs no task of its own.

Each item runs in a context of its own (:class:`flo_redis._in_context.InContext`), as a
task of its own would: whatever a handler sets in a ``ContextVar`` ends with it, and a
cancellation of the slot reaches the handler as it would reach its own task. Items put in the
queue wake as many slots as they need, so a handler that waits never holds up the items
behind it; a slot whose item ends takes the next one in the loop's next turn, waking
nobody.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ._in_context import InContext

T = TypeVar("T")


class HandlerSlots(Generic[T]):
    """Runs ``run(item)`` for each item put in :attr:`queue`, at most ``size`` at once.

    ``track`` is told of every slot task it starts (the worker waits for them as for its
    handlers). A slot cancelled while items still wait (the worker aborts) hands each of
    them to ``abandon`` and ends."""

    def __init__(
        self,
        size: int,
        run: Callable[[T], Coroutine[Any, Any, None]],
        *,
        name: str,
        track: Callable[[asyncio.Task[None]], None],
        abandon: Callable[[T], None],
        log: logging.Logger,
    ) -> None:
        self.size = size
        self.queue: deque[T] = deque()
        self.tasks: set[asyncio.Task[None]] = set()
        self._run = run
        self._name = name
        self._track = track
        self._abandon = abandon
        self._log = log
        self._idle: deque[asyncio.Future[bool]] = deque()
        self._waking = 0  # slots woken (or made) that have not looked at the queue yet
        self._closing = False

    def wake(self) -> None:
        """See that a slot will look at the queue for each item in it: wake idle slots,
        or start new ones while fewer than ``size`` run (counting those already on
        their way), so a batch of items starts in one turn of the event loop."""
        want = len(self.queue) - self._waking
        if want <= 0 or self._closing:
            return
        while want and self._idle:
            idle = self._idle.popleft()
            if not idle.done():
                idle.set_result(True)
                self._waking += 1
                want -= 1
        while want and len(self.tasks) < self.size:
            self._waking += 1
            want -= 1
            task = asyncio.create_task(self._slot(), name=self._name)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            self._track(task)

    def close(self) -> None:
        """No more items come: slots end once the queue is empty."""
        self._closing = True
        while self._idle:
            idle = self._idle.popleft()
            if not idle.done():
                idle.set_result(False)

    def reset(self) -> None:
        """Ready for a new start (after :meth:`close`, or an aborted one)."""
        self.queue.clear()
        self._idle.clear()
        self._waking = 0
        self._closing = False

    async def _slot(self) -> None:
        self._waking -= 1
        loop = asyncio.get_running_loop()
        queue = self.queue
        try:
            while True:
                if not queue:
                    if self._closing:
                        return
                    idle: asyncio.Future[bool] = loop.create_future()
                    self._idle.append(idle)
                    if await idle:
                        self._waking -= 1
                    continue
                item = queue.popleft()
                if queue:
                    self.wake()
                try:
                    # In a context of its own, as a task of its own would be.
                    await InContext(self._run(item), contextvars.copy_context())
                except Exception:
                    self._log.exception("%s: an item failed", self._name)
                # The next item starts in the loop's next turn, as a task made for it
                # would: slots whose handlers ended together start their next ones
                # together (measured: going straight on made round-trip handlers slower).
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            while queue:
                self._abandon(queue.popleft())
            raise


__all__ = ["HandlerSlots"]
