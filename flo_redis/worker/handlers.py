"""Running a worker's handlers, for both workers: the slots they run in, and the one
protocol that runs a handler under a time limit.

**Slots** (:class:`HandlerSlots`): up to a worker's concurrency of long-lived tasks run
its queued items one after another, so an item costs no task of its own. Each item runs
in its slot's own task, in the context the slots started in, as a task of its own
would: a cancellation of the slot reaches the handler, and a ``ContextVar`` a handler
sets ends with it (an item that leaves the context changed ends its slot; the next item
runs in a new one). Items that leave it as they found it (nearly every handler) cost no
context copy and no ``Context.run`` per step. Items put in the queue wake one slot,
which runs them one after another while their handlers finish without waiting; the
first handler that waits wakes a slot for each item still queued, so it never holds up
the items behind it.

**The time limit** (:class:`HandlerRunner`): ``async def`` handlers run on the event
loop, plain functions in the worker's bounded thread pool. One watchdog task per worker
stops the handlers past their deadline: no timer and, on Python 3.11+, no task per
handler (it runs in the caller's own task, which takes the cancellation back once the
handler has stopped; on 3.10 each handler gets a task of its own). A handler can also be
stopped early (:meth:`Running.stop`: its run's lease was lost).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from flo_redis._aio import CAN_UNCANCEL, uncancel_current

T = TypeVar("T")

#: The most threads a worker's pool of plain (non-async) handlers gets.
MAX_HANDLER_THREADS = 32


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
        """Cancel the handler (once), calling ``on_stop`` first (so it can see why)."""
        if self.why:
            return
        self.why = why
        if self._on_stop is not None:
            self._on_stop()
        if self._target is not None:
            self._target.cancel()


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
        :meth:`Running.stop` was called (also if the handler swallowed it and returned);
        a cancellation of the caller cancels the handler and is raised as it is.
        ``task`` is the caller's own task: on Python 3.11+ the handler runs in it (a stop
        cancels it, then takes the cancellation back); on 3.10 in a task of its own."""
        is_async = self._async.get(id(handler))
        if is_async is None:
            is_async = self._async[id(handler)] = is_async_handler(handler)
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
                raise self._stopped(running) from None
            if running.why:  # it swallowed the cancellation and returned
                raise self._stopped(running)
            return result
        finally:
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
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


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


__all__ = [
    "INLINE",
    "INLINE_S",
    "MAX_HANDLER_THREADS",
    "HandlerRunner",
    "HandlerSlots",
    "HandlerStopped",
    "HandlerTimeout",
    "Running",
    "is_async_handler",
]
