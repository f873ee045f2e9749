"""The slots a worker's handlers run in (:class:`HandlerSlots`), for both workers.

Up to a worker's concurrency of long-lived tasks run its queued items one after another,
each in its slot's task and the slots' context: a cancellation of the slot reaches the
handler, and a ``ContextVar`` a handler sets ends with it (an item that leaves the
context changed ends its slot; the next runs in a new one). Items that leave it as they
found it cost no context copy. Items put in the queue wake one slot, which runs them one
after another while their handlers finish without waiting; the first handler that waits
wakes a slot for each item still queued. The time limit each handler runs under is
:mod:`flo_redis.worker.handlers`'s."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# A slot running items that do not wait gives the loop a turn after INLINE of them or
# INLINE_S seconds since its last turn, whichever comes first: a handler busy with the CPU
# holds up sockets and timers (heartbeats, touches) no longer than alone, give or take.
INLINE = 32
INLINE_S = 0.002


class _Rest:
    """``await _Rest(coro, step)``: the rest of ``coro``, whose first step was taken by
    a plain call and waits for ``step`` (what it yielded); its result is ``coro``'s."""

    __slots__ = ("_coro", "_step")

    def __init__(self, coro: Coroutine[Any, Any, Any], step: Any) -> None:
        self._coro = coro
        self._step = step

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, step = self._coro, self._step
        while True:
            try:
                value = yield step
            except BaseException as exc:  # a cancellation (or any error) thrown in
                try:
                    step = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            if value is None:  # what a task sends: the rest is awaited as it is
                return (yield from coro.__await__())
            try:
                step = coro.send(value)
            except StopIteration as stop:
                return stop.value


class HandlerSlots(Generic[T]):
    """Runs ``run(item, task)`` for each item put in :attr:`queue`, at most ``size`` at
    once; ``task`` is the slot's own task, the one the item runs in (a handler is
    cancelled through it). ``track`` is told of every slot task it starts; a slot
    cancelled while items wait hands each to ``abandon`` and ends (as :meth:`halt`);
    ``taken``, if given, is called as a slot takes an item off the queue. A slot gives
    the loop a turn after ``inline`` items in a row that did not wait, or INLINE_S."""

    def __init__(
        self,
        size: int,
        run: Callable[[T, asyncio.Task[Any]], Coroutine[Any, Any, None]],
        *,
        name: str,
        track: Callable[[asyncio.Task[None]], None],
        abandon: Callable[[T], None],
        log: logging.Logger,
        taken: Callable[[], None] | None = None,
        inline: int = INLINE,
    ) -> None:
        self.size = size
        self.inline = inline
        self.queue: deque[T] = deque()
        self.tasks: set[asyncio.Task[None]] = set()
        self._run = run
        self._name = name
        self._track = track
        self._abandon = abandon
        self._log = log
        self._taken = taken
        self._idle: deque[asyncio.Future[bool]] = deque()
        # Slots that will look at the queue again without being woken: woken or made and
        # not yet running, or in an item that has not waited, or back from one that did.
        self._looking = 0
        self._closing = False
        # The context every item starts in: the one the slots were (re)started in.
        self._base = contextvars.copy_context()

    def wake(self) -> None:
        """See that a slot will look at the queue: if none will, wake an idle one, or
        start one while fewer than ``size`` run (the first item that waits wakes slots
        for the rest: :meth:`_spread`)."""
        if self._looking or not self.queue or self._closing:
            return
        self._add(1)

    def _spread(self) -> None:
        """An item's handler waits (its slot no longer counts as looking): a slot is
        woken (or made) for each item still queued, to start in the loop's next turn."""
        if not self._closing:
            self._add(len(self.queue) - self._looking)

    def _add(self, want: int) -> None:
        while want > 0 and self._idle:
            idle = self._idle.popleft()
            if not idle.done():
                idle.set_result(True)
                self._looking += 1
                want -= 1
        while want > 0 and len(self.tasks) < self.size:
            self._looking += 1
            want -= 1
            # In the base context, whichever context this is called in.
            task = self._base.run(asyncio.create_task, self._slot(), name=self._name)
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

    def halt(self) -> None:
        """Take no more items: each one queued goes to ``abandon``, and slots end once
        the item they are in ends (or is cancelled)."""
        self.close()
        self._abandon_queued()

    def _abandon_queued(self) -> None:
        while self.queue:
            self._abandon(self.queue.popleft())

    def reset(self) -> None:
        """Ready for a new start (after :meth:`close`, or an aborted one)."""
        self.queue.clear()
        self._idle.clear()
        self._looking = 0
        self._closing = False
        self._base = contextvars.copy_context()

    async def _slot(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None  # a slot is a task of its own
        queue = self.queue
        taken = self._taken
        base = self._base
        most_inline = self.inline
        looking = True  # counted in self._looking
        inline = 0  # items run one after another in this turn of the loop
        turn = loop.time()  # when this turn of the loop began for this slot

        try:
            while True:
                if not queue:
                    self._looking -= 1
                    looking = False
                    if self._closing:
                        return
                    idle: asyncio.Future[bool] = loop.create_future()
                    self._idle.append(idle)
                    looking = await idle  # the waker counted it looking again
                    inline, turn = 0, loop.time()
                    continue
                item = queue.popleft()
                if taken is not None:
                    taken()
                waited = False
                try:
                    # The first step by a plain call: an item that never waits costs no
                    # awaitable.
                    coro = self._run(item, me)
                    try:
                        step = coro.send(None)
                    except StopIteration:
                        pass
                    else:
                        # It waits, so its slot no longer counts as looking: the items
                        # behind it get slots of their own.
                        waited = True
                        looking = False
                        self._looking -= 1
                        if queue:
                            self._spread()
                        await _Rest(coro, step)
                except Exception:
                    self._log.exception("%s: an item failed", self._name)
                if waited:
                    self._looking += 1
                    looking = True
                if contextvars.copy_context() != base:
                    # It left the context changed: the items after it run in a new
                    # slot, which starts in the base context.
                    return
                if waited:
                    # The loop had its turns while the item waited: straight on to the
                    # next (a turn of the loop first cost round-trip handlers about a
                    # tenth of their throughput). This turn's start is read once an item
                    # ends without waiting.
                    inline, turn = 0, -1.0
                else:
                    # It never gave the loop a turn: go straight on to the next, giving
                    # the loop one now and then (`inline` items, INLINE_S) so sockets and
                    # timers are served.
                    inline += 1
                    now = loop.time()
                    if turn < 0.0:
                        turn = now
                    if inline >= most_inline or now - turn >= INLINE_S:
                        await asyncio.sleep(0)
                        inline, turn = 0, loop.time()
        except asyncio.CancelledError:
            self._abandon_queued()
            raise
        finally:
            if looking:
                # It ends with items maybe queued (it left its context changed): another
                # slot looks at them, in its place.
                self._looking -= 1
                self.tasks.discard(me)
                self.wake()


__all__ = ["INLINE", "INLINE_S", "HandlerSlots"]
