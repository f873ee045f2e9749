"""Running a worker's handlers: the slots they run in and the one protocol that runs a
handler under a time limit, for both workers.

**Slots.** Up to a worker's concurrency of long-lived tasks run its queued items one
after another, so an item costs no task of its own (:class:`HandlerSlots`). Each item
runs in its slot's own task and sees the context the slots started in, as a task of its
own would: a cancellation of the slot reaches the handler as it would reach its own
task, and whatever a handler sets in a ``ContextVar`` ends with it. An item that leaves
that context changed (a variable set and not reset) ends its slot: the next item runs in
a new one, in a context as it was. Items that leave it as they found it (nearly every
handler) cost no context copy and no ``Context.run`` per step. Items put in the queue
wake one slot, which runs them one after another for as long as their handlers finish
without waiting (no wake-up, no future, no extra turn of the loop). The first handler
that waits wakes a slot for each item still queued, so it never holds up the items
behind it; a slot whose waiting item ends goes straight on to the next one.

**The time limit.** ``async def`` handlers run on the event loop, plain functions in the
worker's bounded thread pool (:class:`flo_redis._aio.HandlerPool`). Every handler has a
deadline, and one watchdog task per worker stops the handlers past theirs: no timer and,
on Python 3.11+, no task per handler (it runs in the caller's own task, which takes the
cancellation back once the handler has stopped). On 3.10, where a task cannot take a
cancellation back, each handler gets a task of its own. A handler can also be stopped
early (:meth:`Running.stop`: its run's lease was lost).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

from flo_redis._aio import CAN_UNCANCEL, HandlerPool, uncancel_current

T = TypeVar("T")


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


# A slot running items one after another, none of which waits, gives the loop a turn
# after INLINE of them or once INLINE_S seconds have passed since its last turn, whichever
# comes first: a handler busy with the CPU holds up sockets and timers (heartbeats, lease
# touches) no longer than it would alone, give or take INLINE_S.
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
    cancelled through it).

    ``track`` is told of every slot task it starts (the worker waits for them as for its
    handlers). A slot cancelled while items still wait (the worker aborts) hands each of
    them to ``abandon`` and ends, as :meth:`halt` does. ``taken``, if given, is called
    each time a slot takes an item off the queue (a reader waiting for room reads
    again). A slot gives the loop a turn after ``inline`` items in a row that did not
    wait (:data:`INLINE` unless told) or :data:`INLINE_S`, whichever comes first; after
    an item that waited (the loop had its turn) it goes straight on to the next."""

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
        start one while fewer than ``size`` run. It goes through the items one after
        another while they finish without waiting; the first that waits wakes slots
        for the rest (:meth:`_spread`)."""
        if self._looking or not self.queue or self._closing:
            return
        self._add(1)

    def _spread(self) -> None:
        """An item's handler waits (its slot no longer counts as looking): a slot is
        woken (or made) for each item still queued, so they all start in the loop's next
        turn."""
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


__all__ = [
    "INLINE",
    "INLINE_S",
    "HandlerRunner",
    "HandlerSlots",
    "HandlerStopped",
    "HandlerTimeout",
    "Running",
]
