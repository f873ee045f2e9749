"""The base both workers share: a client and session of their own, one shape of
``start()`` (connect, set up, work, finish, stop the background tasks), handlers run
under one time limit mechanism (:mod:`flo_redis.worker.handlers`), the middleware hooks, stop,
abort, close and ``async with``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import socket
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from flo_redis._aio import (
    ClosesOnExit,
    cancel_and_wait,
    raise_if_cancelling,
    sleep_unless_stopped,
)
from flo_redis._session import outage
from flo_redis._session.session import Session
from flo_redis._wire.checks import validate_block_ms
from flo_redis.durability import Durability, worker_durability
from flo_redis.errors import (
    PermissionDeniedError,
    ServerError,
    is_connection_error,
)
from flo_redis.retry import EmptyPollBackoff, worker_backoff
from flo_redis.types import DEFAULT_WORKER_BLOCK_MS
from flo_redis.worker.handlers import HandlerRunner
from flo_redis.worker.observe import NO_OBSERVER, Hook, WorkerObserver, settle
from flo_redis.worker.replay import Replay

W = TypeVar("W", bound="WorkerLifecycle")

log = logging.getLogger("flo_redis.worker")

# After abort(), how often handlers that are still running are cancelled again.
_RECANCEL_S = 0.2


def generate_worker_id() -> str:
    """flo's default worker (and consumer) id: the host name and 32 random bits."""
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


def worker_block_ms(block_ms: object) -> int:
    """flo's rule for workers: 0 or None waits the default, so poll loops never spin;
    above 300000 is refused (:class:`BlockTooLongError`)."""
    if block_ms is None or block_ms == 0:
        return DEFAULT_WORKER_BLOCK_MS
    validate_block_ms(block_ms)
    assert isinstance(block_ms, int)
    return block_ms


class WorkerConfig(Protocol):
    """The settings both workers have."""

    worker_id: str
    concurrency: int
    block_ms: int
    durability: Durability | None  # its reports' level; None: its client's


class CheckedConfig:
    """What both workers' options do with the settings they share: each is checked when
    the options are made and again when the worker starts (:meth:`check`), so a setting
    changed in between is refused where it is used; ``block_ms`` and ``durability`` by
    flo's rules. A worker's options extend :meth:`check` with their own settings."""

    block_ms: int
    durability: Durability | None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse a bad setting (:class:`ValidationError` naming it)."""
        self.block_ms = worker_block_ms(self.block_ms)
        self.durability = worker_durability(self.durability)


class ClientLike(Protocol):
    """What a worker needs of the client it is made with: a new client with the same
    settings (and its own owner id; its writes at ``durability`` when given), whose
    session the worker works on."""

    def sibling(self, durability: Durability | None = None) -> ClientLike: ...

    @property
    def session(self) -> Session: ...


class WorkerLifecycle(ClosesOnExit):
    """A worker opens its own client (same endpoint, namespace and settings as its
    client's, its own owner id) when it starts, works on that client's session, and
    closes it when ``start()`` returns. ``observer`` is told how the work goes
    (:mod:`flo_redis.worker.observe`); set it before ``start()``.

    Subclasses give :meth:`_new_runner`, :meth:`_setup` (before work is taken),
    :meth:`_background` (tasks that run beside the poll loop), :meth:`_poll_loop`,
    :meth:`_finish` (after the handlers ended) and keep every handler's task in
    ``_tasks`` and those still in their handler in :meth:`_in_handler`."""

    _log = log  # where the worker logs (each kind names its own)
    config: WorkerConfig
    # The reports sent again after a break in the session's hold on Redis (a lost
    # liveness connection: a failover, a restart), made with the reports.
    _replay: Replay[Any]

    def __init__(self, parent_client: ClientLike) -> None:
        self.observer: WorkerObserver = NO_OBSERVER
        self._parent = parent_client
        self._client: ClientLike | None = None
        self._session: Session | None = None
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._finished = asyncio.Event()
        self._started = False
        self._refused: PermissionDeniedError | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # handlers, and reports on their way
        self._runner: HandlerRunner | None = None

    @property
    def client(self) -> ClientLike:
        """The worker's own client (a :class:`~flo_redis.FloClient`); only while it
        runs."""
        if self._client is None:
            raise RuntimeError("the worker is not started")
        return self._client

    @property
    def session(self) -> Session:
        """The worker's own session; only while it runs."""
        if self._session is None:
            raise RuntimeError("the worker is not started")
        return self._session

    @property
    def _handler_runner(self) -> HandlerRunner:
        if self._runner is None:
            raise RuntimeError("the worker is not started")
        return self._runner

    def use_client(self, client: ClientLike) -> None:
        """Work on ``client``'s endpoint, namespace and settings instead of those of the
        client it was made with; before :meth:`start`."""
        if self._started:
            raise RuntimeError("the worker is already started")
        self._parent = client

    # --- the shape of start() --------------------------------------------------------

    async def _serve(self) -> None:
        """Connect, set up, tell ``on_start``, work until stopped, wait for handlers and
        their reports, finish, tell ``on_stop``; close the session in every case and
        raise a refusal by Redis's ACL last. A cancelled worker cancels its handlers
        (each gives its work back) and waits for them before it re-raises."""
        self._runner = self._new_runner()
        self._client = self._parent.sibling(self.config.durability)
        self._session = session = self._client.session
        self._started = True
        self._finished.clear()
        try:
            await session.connect()
            await self._setup()
            session.breaks.watch(self._replay.outage_began, self._replay_after_break)
            await settle(self.observer.on_start(self))
            background = [
                asyncio.create_task(coro, name=name)
                for name, coro in (
                    ("flo-handler-timeouts", self._handler_runner.watchdog()),
                    *self._background(),
                )
            ]
            for task in background:
                task.add_done_callback(self._watch_refusal)
            try:
                await self._poll_loop()
                await self._wait_handlers()
                await self._finish()
            finally:
                await cancel_and_wait(*background)
                await self._hook("on_stop", self.observer.on_stop, self)
        except asyncio.CancelledError:
            for task in list(self._in_handler()):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            raise
        finally:
            self._handler_runner.close()
            await self._end_handlers()
            await session.close()
            # This start is over: a later start() works again. (A stop() before the
            # first start() still keeps that start from taking work.)
            self._stop.clear()
            self._abort.clear()
            self._finished.set()
        if self._refused is not None:
            raise self._refused

    def _new_runner(self) -> HandlerRunner:
        raise NotImplementedError

    async def _setup(self) -> None:
        """Before any work is taken (register, join)."""

    async def _end_handlers(self) -> None:
        """Once every handler ended, in every case: end what runs them."""

    def _background(self) -> Iterable[tuple[str, Coroutine[Any, Any, None]]]:
        """(name, coroutine) of the tasks that run beside the poll loop."""
        return ()

    async def _room(self) -> int:
        """How much the next poll may take; 0 after waiting for room (poll later)."""
        raise NotImplementedError

    async def _poll(self, poll_id: str, room: int) -> Sequence[Any]:
        """One poll for at most ``room`` items, waiting up to ``block_ms``."""
        raise NotImplementedError

    async def _take(self, items: Sequence[Any]) -> None:
        """Start the handlers of what a poll took."""
        raise NotImplementedError

    async def _poll_failed(self, exc: Exception) -> bool:
        """A poll failed (a lost connection, or a refusal other than the ACL's), before
        the backoff; False stops the worker."""
        if is_connection_error(exc):
            outage.failed(self._log, self.session.redis, "poll", exc)
        return True

    async def _after_failed_poll(self, exc: Exception) -> None:
        """After the backoff that follows a failed poll."""

    async def _finish(self) -> None:
        """After the last handler ended: flush what is batched, leave."""

    def _in_handler(self) -> Iterable[asyncio.Task[None]]:
        """The tasks of ``_tasks`` still in their handler."""
        return list(self._tasks)

    # --- shared pieces -----------------------------------------------------------------

    def _replay_after_break(self) -> None:
        """The session's hold on Redis stands again after a break: send again what was
        reported just before it (:mod:`flo_redis.worker.replay`), in a task of its own."""
        self._track(asyncio.create_task(self._replay.outage_ended(), name="flo-replay"))

    def _track(self, task: asyncio.Task[None]) -> None:
        """Count ``task`` (a handler slot, or a report on its way) among those start()
        waits for."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hook(self, name: str, hook: Callable[..., Hook], *args: Any) -> None:
        """Await an observer's middleware hook whose errors must not stop the worker."""
        try:
            await settle(hook(*args))
        except Exception:
            self._log.exception("%s hook of worker %s failed", name, self.config.worker_id)

    def _refuse(self, refusal: PermissionDeniedError) -> None:
        """Redis's ACL refuses what a worker needs: retrying cannot help until the ACL
        changes. Finish what runs, stop, and raise it from start()."""
        if self._refused is None:
            self._log.error("worker %s stops: %s", self.config.worker_id, refusal)
            self._refused = refusal
        self.stop()

    def _watch_refusal(self, task: asyncio.Task[None]) -> None:
        """A done callback: a background task refused by the ACL stops the worker."""
        if not task.cancelled() and isinstance(task.exception(), PermissionDeniedError):
            self._refuse(task.exception())  # type: ignore[arg-type]

    async def _poll_loop(self) -> None:
        """Take work until stopped. A poll carries a poll id, ``<poller>#<n>``: a new n
        tells the script the reply to poll n - 1 arrived (so it keeps one replay memo
        per poller), and a failed poll is sent again under the same id, so one whose
        reply was lost is replayed. Empty polls are paced (:class:`EmptyPollBackoff`),
        failed ones backed off; a refusal by Redis's ACL stops the worker."""
        loop = asyncio.get_running_loop()
        empty = EmptyPollBackoff(self.config.block_ms, self._stop)
        failures = 0
        poll_id: str | None = None
        poller, polls = secrets.token_hex(6), itertools.count()
        while not self._stop.is_set():
            raise_if_cancelling()
            room = await self._room()
            if not room:
                continue
            poll_id = poll_id or f"{poller}#{next(polls)}"
            began = loop.time()
            try:
                taken = await self._poll(poll_id, room)
            except Exception as exc:
                if not (is_connection_error(exc) or isinstance(exc, ServerError)):
                    raise
                if isinstance(exc, PermissionDeniedError):
                    self._refuse(exc)  # retrying cannot help until the ACL changes
                    return
                if not await self._poll_failed(exc):
                    return
                failures += 1
                await sleep_unless_stopped(self._stop, worker_backoff(failures))
                await self._after_failed_poll(exc)
                continue  # same poll id
            if failures:
                outage.reached(self._log, self.session.redis)
                failures = 0
            poll_id = None
            if not taken:
                await empty.empty(loop.time() - began)
                continue
            empty.reset()
            await self._take(taken)

    async def _wait_handlers(self) -> None:
        """Wait until ``_tasks`` (handlers, and reports on their way) is empty; once
        :meth:`abort` is called, cancel those still in their handler (each gives its
        work back) and wait for the rest."""
        tasks = self._tasks
        while tasks:
            if self._abort.is_set():
                # Again and again: a handler can swallow a cancellation and run on (some
                # client libraries do, in a command that was under way).
                for task in self._in_handler():
                    task.cancel()
                await asyncio.wait(set(tasks), timeout=_RECANCEL_S)
                continue
            abort = asyncio.ensure_future(self._abort.wait())
            try:
                await asyncio.wait({*tasks, abort}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                abort.cancel()

    # --- the public surface --------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking work; running handlers finish and their reports are sent."""
        self._stop.set()
        if self._session is not None:
            self._session.interrupt()

    def abort(self) -> None:
        """Stop now: running handlers are cancelled and their work is given back without
        spending an attempt; ``start()`` returns once that is sent. For the end of a
        bounded shutdown: call :meth:`stop` first and this when the time is up."""
        self._abort.set()
        self.stop()

    async def close(self) -> None:
        """Stop, wait for running handlers and their reports, close the connections."""
        self.stop()
        if self._started:
            await self._finished.wait()

    async def __aenter__(self: W) -> W:
        return self
