"""The process executor: plain ``def`` handlers run in a pool of pre-started child
processes (:mod:`flo_redis.worker.child`, started by :mod:`flo_redis.worker.child_link`),
so a time limit, a cancel or a memory limit really stops them, a crash takes only its
own run, and the worker's event loop (its leases, heartbeats and reports) never waits
behind a handler's CPU.

One :class:`ProcessPool` per :class:`~flo_redis.worker.ProcessExecutor` of a worker; each
child runs one run at a time. The runner's time limit and stops cancel a run here as
any ``async`` handler (``executors.InProcess``), and :meth:`ProcessPool.run` passes the
stop on: a signal that raises :class:`~flo_redis.worker.HandlerInterrupted` in the
handler, then, after ``grace_s``, SIGKILL and a new child in its place. The runner
reports once the child answered or died: a retry never runs beside its earlier attempt.

A child is also replaced after ``max_runs_per_child`` runs, when it passes
``memory_limit_mb`` (read every :data:`MEMORY_EVERY_S` while it runs, and after each
run), and when it dies. :meth:`ProcessPool.reload` starts a new set of children, which
import the handlers' code afresh, and retires the old ones as their runs end.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from flo_redis.worker.action_options import ProcessExecutor
from flo_redis.worker.child import (
    SIG_CANCEL,
    SIG_TIMEOUT,
    error_blob,
    importing_handlers,
    rebuild,
    resident_bytes,
)
from flo_redis.worker.child_link import (
    Child,
    HandlerProcessError,
    HandlerProcessLost,
    RemoteTraceback,
    exit_text,
    handed,
    log_record,
    named,
    pickled_handlers,
)
from flo_redis.worker.context import ActionContext
from flo_redis.worker.handlers import handler_begins, handler_waits
from flo_redis.worker.stream_context import StreamContext

log = logging.getLogger("flo_redis.worker")

#: How often the memory of a child running a handler is read, under a memory limit.
MEMORY_EVERY_S = 0.02
_MB = 1024 * 1024
# The most a child's start is retried after, when a replacement cannot start.
_RESTART_MAX_S = 30.0


class ProcessPool:
    """``size`` children running ``handlers`` (action name -> function) for a worker,
    as ``settings`` (its :class:`~flo_redis.worker.ProcessExecutor`) says."""

    def __init__(
        self,
        settings: ProcessExecutor,
        handlers: dict[str, Callable[..., Any]],
        size: int,
        replaced: Callable[[str], None] = lambda reason: None,
    ) -> None:
        """``replaced(reason)``: told of each child replaced (``handler_process_replaced``)."""
        self.settings = settings
        self._replaced = replaced
        self.size = size
        self.actions = ", ".join(sorted(handlers))
        self._handlers = pickled_handlers(handlers)
        self._children: set[Child] = set()
        self._idle: deque[Child] = deque()
        # Runs waiting for a child: each handed its child (and sent) by _give.
        self._waiting: deque[tuple[asyncio.Future[Child], Any, tuple[Any, ...]]] = deque()
        self._seq = itertools.count(1)
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._generation = 0  # reloads done: a child started for an earlier one is spare

    # --- children -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start every child; :class:`HandlerProcessError` (none left) if one cannot."""
        if importing_handlers():
            raise HandlerProcessError(
                "a handler process was told to start handler processes while it imports "
                "its handlers: the module it imports starts a worker as it is imported; "
                'start it under if __name__ == "__main__": instead'
            )
        self._closing = False
        for child in await self._start(self.size):
            self._children.add(child)
            self._give(child)
        if self.settings.memory_limit_mb:
            self._background(self._watch_memory())

    async def _start(self, count: int) -> list[Child]:
        """``count`` new children, each reading what it is sent; all or none."""
        timeout = self.settings.start_timeout_s
        made = await asyncio.gather(
            *(Child.start(self._handlers, timeout, self.actions) for _ in range(count)),
            return_exceptions=True,
        )
        children = [m for m in made if isinstance(m, Child)]
        failed = [m for m in made if not isinstance(m, Child)]
        if failed:
            await asyncio.gather(*(c.end() for c in children), return_exceptions=True)
            raise failed[0]
        for child in children:
            self._background(self._read(child))
        return children

    async def _read(self, child: Child) -> None:
        """Take what ``child`` sends until it ends; then answer its run (if any) with
        how it ended, and start another in its place (unless retiring)."""
        try:
            while True:
                body = await child.read_bytes()
                try:
                    message = pickle.loads(body)
                except Exception as exc:
                    self._unreadable(child, exc)
                    continue
                if message[0] == "log":
                    log_record(message[1])
                elif message[0] == "ask":
                    self._background(self._answer(child, message[1], message[2]))
                elif child.reply is not None and not child.reply.done():
                    child.reply.set_result(message)
                    child.rss = message[2]
                    self._release(child)  # its next run sent now, not once this one's wakes
        except (asyncio.IncompleteReadError, OSError):
            pass
        child.lost = True
        code = await child.reaped()
        if child.reply is not None and not child.reply.done():
            why = child.why_killed or f"its handler process {exit_text(code)}"
            child.reply.set_result(("lost", why))
        self._children.discard(child)
        if child in self._idle:
            self._idle.remove(child)
        child.writer.close()
        if not (self._closing or child.retiring):
            self._replaced(child.reason or "crashed")
            if child.ctx is None and not child.why_killed:
                log.warning(
                    "a handler process of %s (pid %d) %s between runs; starting another",
                    self.actions,
                    child.pid,
                    exit_text(code),
                )
            self._background(self._replace())

    def _unreadable(self, child: Child, exc: Exception) -> None:
        """``child`` sent what does not load here (a value of a class this process
        cannot import, such as one of a script's ``__main__``, which is ``__mp_main__``
        there): its run fails saying so, and it is replaced (what it waits for now is
        unknown)."""
        if child.reply is not None and not child.reply.done():
            unread = TypeError(
                f"the handler's result (or a progress it sent) could not be read by the "
                f"worker ({type(exc).__name__}: {exc}); return bytes, or values of "
                "classes the worker imports by the same module name"
            )
            child.reply.set_result(("error", 0, 0, error_blob(unread), ""))
        child.kill("what it sent could not be read")

    async def _replace(self) -> None:
        """Start a child in place of one that ended, trying again while it cannot; none
        once the pool closes or is reloaded (the reload's set is whole)."""
        pause = 0.5
        generation = self._generation
        while not self._closing and generation == self._generation:
            try:
                (child,) = await self._start(1)
            except Exception as exc:
                log.error("%s; trying again in %g s", exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, _RESTART_MAX_S)
                continue
            if self._closing or generation != self._generation:
                # A reload meanwhile started a full set without the one it replaces.
                child.retiring = True
                await child.end()
                return
            self._children.add(child)
            self._give(child)
            return

    def _background(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- runs ---------------------------------------------------------------------------

    async def _acquire(self, ctx: Any, message: tuple[Any, ...]) -> Child:
        """A live child that was sent ``message``, ``ctx``'s run: an idle one, else the
        first to come free, sent it as it comes free (:meth:`_give`)."""
        while self._idle:
            child = self._idle.popleft()
            if not child.lost:
                child.take(ctx, message)
                return child
        waiter: asyncio.Future[Child] = asyncio.get_running_loop().create_future()
        self._waiting.append((waiter, ctx, message))
        try:
            return await waiter
        except asyncio.CancelledError as stop:
            if waiter.done() and not waiter.cancelled():  # sent as it was cancelled
                child = waiter.result()
                assert child.reply is not None
                await self._stop(child, child.reply, timed_out="timeout" in stop.args)
            raise

    def _give(self, child: Child) -> None:
        """``child`` is free: sent the first run waiting, else idle (a lost one to none)."""
        if child.lost:
            return
        while self._waiting:
            waiter, ctx, message = self._waiting.popleft()
            if not waiter.done():
                child.take(ctx, message)
                waiter.set_result(child)
                return
        self._idle.append(child)

    def _release(self, child: Child) -> None:
        """``child`` answered its run: free it, or retire it (reloaded, or its runs or its
        memory spent: one starts in its place)."""
        child.ctx = child.reply = None
        if child.lost:
            return  # _read sees it replaced
        settings = self.settings
        spent = settings.max_runs_per_child and child.runs >= settings.max_runs_per_child
        heavy = settings.memory_limit_mb and child.rss > settings.memory_limit_mb * _MB
        if child.retiring or spent or heavy:
            if not child.retiring:
                child.retiring = True
                self._replaced("memory" if heavy else "worn")
                self._background(self._replace())
            self._children.discard(child)
            self._background(child.end())
            return
        self._give(child)

    async def run(self, ctx: ActionContext | StreamContext) -> Any:
        """``ctx``'s handler's result, from a child: its value, an ``Outcome`` made a result,
        or its exception raised (its traceback in the child as the cause). A cancellation
        (time limit or stop) stops the handler first (:meth:`_stop`), then goes on."""
        handler_waits()  # its time limit counts from its start in a child, not the wait
        measure = bool(self.settings.memory_limit_mb)
        child = await self._acquire(ctx, ("run", next(self._seq), *handed(ctx), measure))
        handler_begins()
        reply = child.reply
        assert reply is not None
        try:
            # Shielded: a cancellation of this task cancels the wait, not the reply.
            message = await asyncio.shield(reply)
        except asyncio.CancelledError as stop:
            await self._stop(child, reply, timed_out="timeout" in stop.args)
            raise
        return self._result(ctx, message)

    async def _stop(self, child: Child, reply: asyncio.Future[Any], timed_out: bool) -> None:
        """Stop ``child``'s handler: the signal that raises ``HandlerInterrupted`` in it,
        then SIGKILL if it has not answered within ``grace_s``. Returns once it answered
        or ended; cancelled again meanwhile (a worker's abort cancels its handlers again
        and again), it still gives the handler its grace, then raises."""
        if not reply.done():  # answered: the child may be running its next run
            child.signal(SIG_TIMEOUT if timed_out else SIG_CANCEL)
        grace = self.settings.grace_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        again = False
        while not reply.done():
            left = deadline - loop.time()
            if left <= 0:
                log.warning(
                    "%s: its handler went on %g s after it was told to stop; killing its "
                    "process (pid %d) and starting another",
                    named(child.ctx),
                    grace,
                    child.pid,
                )
                child.kill("its handler went on after it was told to stop, and was killed")
                break
            try:
                await asyncio.wait_for(asyncio.shield(reply), left)
            except asyncio.TimeoutError:
                pass
            except asyncio.CancelledError:
                again = True
        while not reply.done():
            try:
                await asyncio.shield(reply)
            except asyncio.CancelledError:
                again = True
        if again:
            raise asyncio.CancelledError

    def _result(self, ctx: Any, message: tuple[Any, ...]) -> Any:
        kind = message[0]
        if kind == "lost":
            raise HandlerProcessLost(message[1])
        if kind == "done":
            return message[3]
        if kind == "outcome":
            return ctx.result(message[3], message[4])
        if kind == "error":
            exc = rebuild(message[3])
            if message[4]:
                exc.__cause__ = RemoteTraceback(message[4])
            raise exc
        # "stopped" with no stop sent: the handler raised HandlerInterrupted itself.
        raise RuntimeError(f"the handler raised HandlerInterrupted({message[3]!r}) itself")

    async def _answer(self, child: Child, what: str, value: Any) -> None:
        """Do what ``child``'s handler asks (a touch, a progress, its parents); answer."""
        ctx = child.ctx
        try:
            if not isinstance(ctx, ActionContext):
                raise RuntimeError(f"a {what} after its run ended")
            result: Any = None
            if what == "parents":
                result = await ctx.parents(*value)
            else:
                await (ctx.touch if what == "touch" else ctx.progress)(value)
        except Exception as exc:
            child.send(("refused", error_blob(exc)))
        else:
            child.send(("answer", result))

    async def _watch_memory(self) -> None:
        """Kill a child running a handler past the memory limit (its run fails saying
        so); one past it between runs is retired as its run ends (:meth:`_release`)."""
        limit_mb = self.settings.memory_limit_mb
        while not self._closing:
            await asyncio.sleep(MEMORY_EVERY_S)
            for child in [c for c in self._children if c.ctx is not None and not c.lost]:
                rss = resident_bytes(child.pid)
                if rss is not None and rss > limit_mb * _MB:
                    child.kill(
                        f"its handler process used {rss // _MB} MB, past the memory limit "
                        f"of {limit_mb} MB, and was stopped",
                        "memory",
                    )

    # --- the pool's life ----------------------------------------------------------------

    async def reload(self) -> None:
        """Start a new set of children (the handlers' code imported afresh), then retire
        the old ones, each once its run ends. :class:`HandlerProcessError` (the old
        ones kept) when the new ones cannot start; the new ones ended if the pool
        closed meanwhile."""
        fresh = await self._start(self.size)
        if self._closing:  # the worker stopped meanwhile: the new ones are not needed
            await asyncio.gather(*(c.end() for c in fresh), return_exceptions=True)
            return
        self._generation += 1
        old = list(self._children)
        for child in old:
            child.retiring = True
            self._replaced("reloaded")
        idle, self._idle = list(self._idle), deque()  # every idle child is an old one
        for child in idle:
            self._children.discard(child)
            self._background(child.end())
        for child in fresh:
            self._children.add(child)
            self._give(child)
        log.info(
            "handler processes of %s reloaded: %d started, %d retiring as their runs end",
            self.actions,
            len(fresh),
            len(old),
        )

    async def close(self) -> None:
        """End every child (once the worker's handlers have ended)."""
        self._closing = True
        await asyncio.gather(*(c.end() for c in self._children), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._children.clear()
        self._idle.clear()


__all__ = ["MEMORY_EVERY_S", "HandlerProcessError", "HandlerProcessLost", "ProcessPool"]
