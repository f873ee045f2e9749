"""``StreamWorker``: flo's consumer-group worker, on Redis Streams.

Joins the group (retrying refusals that did not run), then reads batches with
``group_read`` and runs the handler for each record under ``message_timeout``, at most
``concurrency`` at once, each in a context of its own: a return acks the record, a raise
or a timeout nacks it (the group delivers it again, up to its ``max_deliver``). The next
read is under way while the handlers run, with at most one batch waiting for a free
handler slot. Acks go in batches, one script call per partition; acks and nacks carry the
delivery's token, never wait behind a read, are resent after a lost connection and never
converted (:mod:`flo_redis.worker.stream_reports`). On ``abort()`` records
not started yet stay pending, for a later delivery. At start (with
``redeliver_pending_on_reconnect``) the worker first re-processes the entries its consumer
was given and did not ack (``group_claim`` over its own pending list), then reads. A read
whose reply was lost is sent again under its poll id, which hands back the very records
it read (same delivery, same count; within two minutes), on every partition: a blip never takes
back, redelivers or dead-letters a record the worker holds. On stop it finishes its
handlers and leaves. On a partitioned stream it reads every partition and acks each
record in its own partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flo_redis._aio import sleep_unless_stopped
from flo_redis._session import outage
from flo_redis._wire.checks import check_count, check_seconds
from flo_redis._wire.keys import check_name
from flo_redis._wire.stream_codec import MAX_COUNT
from flo_redis.actions.results import check_handler, error_text
from flo_redis.durability import Durability, DurabilityLike, worker_durability
from flo_redis.errors import PermissionDeniedError, is_connection_error
from flo_redis.retry import is_refused_unrun, worker_backoff
from flo_redis.streams import groups
from flo_redis.streams.partitions import StreamState
from flo_redis.types import DEFAULT_WORKER_BLOCK_MS, StreamGroupReadOptions, StreamID, StreamRecord
from flo_redis.types.base import U32
from flo_redis.worker.action_options import ProcessExecutor, check_executor
from flo_redis.worker.executors import WorkerPools, check_stream_handler
from flo_redis.worker.handlers import HandlerRunner, HandlerTimeout
from flo_redis.worker.lifecycle import (
    CheckedConfig,
    ClientLike,
    WorkerLifecycle,
    generate_worker_id,
)
from flo_redis.worker.observe import overrides, settle
from flo_redis.worker.reaper import Reaper
from flo_redis.worker.slots import INLINE, HandlerSlots
from flo_redis.worker.stream_context import StreamContext, StreamHandler
from flo_redis.worker.stream_reports import RecordReports

log = logging.getLogger("flo_redis.stream_worker")

_MAX_DRAIN_PAGES = 1000


@dataclass
class StreamWorkerOptions(CheckedConfig):
    """A StreamWorker's settings; ``block_ms`` 0/None means 30000, above 300000 is
    refused with :class:`BlockTooLongError`. The other numbers are checked here too, with
    a :class:`ValidationError` naming the setting: ``concurrency`` 1 .. 2**32 - 1 (as a
    registered worker's), ``batch_size`` 1 .. 1000 (the most one group read or claim
    takes), ``message_timeout`` (0, a year] in seconds, ``claim_min_idle_ms``
    0 .. 2**32 - 1 (as a group's ``ack_timeout_ms``); ``durability``: its acks' level
    (:mod:`flo_redis.durability`), None: its client's."""

    stream: str
    group: str = ""
    consumer: str = ""
    worker_id: str = ""
    concurrency: int = 10
    batch_size: int = 10
    block_ms: int = DEFAULT_WORKER_BLOCK_MS
    message_timeout: float = 300.0
    redeliver_pending_on_reconnect: bool = True
    claim_min_idle_ms: int = 0
    durability: Durability | None = None
    executor: ProcessExecutor | None = None

    def check(self) -> None:
        """Refuse a bad setting (:class:`ValidationError` naming it): when made, and again
        when the worker starts, so a setting changed in between is checked where used."""
        super().check()
        check_count("concurrency", self.concurrency, 1, U32 - 1)
        fix = f"a group read takes at most {MAX_COUNT} records"
        check_count("batch_size", self.batch_size, 1, MAX_COUNT, fix=fix)
        check_seconds("message_timeout", self.message_timeout)
        check_count("claim_min_idle_ms", self.claim_min_idle_ms, 0, U32 - 1)
        check_executor(self.executor)


class StreamWorker(WorkerLifecycle):
    """Processes a stream's records as one consumer of a group; flo 0.1.2's API."""

    _log = log
    config: StreamWorkerOptions

    def __init__(
        self,
        parent_client: ClientLike,
        handler: StreamHandler,
        *,
        stream: str,
        group: str,
        consumer: str | None = None,
        worker_id: str | None = None,
        concurrency: int = 10,
        batch_size: int = 10,
        block_ms: int = 30000,
        message_timeout: float = 300.0,
        redeliver_pending_on_reconnect: bool = True,
        claim_min_idle_ms: int = 0,
        durability: DurabilityLike | None = None,
        executor: ProcessExecutor | None = None,
    ) -> None:
        super().__init__(parent_client)
        check_handler(f"stream {stream!r}", handler)
        check_stream_handler(stream, handler, executor)
        self._handler = self._calls = handler  # _calls: as the runner calls it
        self._pools = WorkerPools()
        # In StreamWorkerOptions' field order.
        self.config = StreamWorkerOptions(
            stream,
            group,
            consumer or generate_worker_id(),
            worker_id or generate_worker_id(),
            concurrency,
            batch_size,
            block_ms,
            message_timeout,
            redeliver_pending_on_reconnect,
            claim_min_idle_ms,
            worker_durability(durability),
            executor,
        )
        check_name("stream name", stream)
        check_name("group name", group)
        check_name("consumer name", self.config.consumer)
        self._streams: StreamState  # made by start(), on the worker's own session
        # Records read and not yet started, in the queue of the handler slots that run
        # them (flo_redis/worker/handler_tasks.py); every slot is also in _tasks. Records a
        # slot never took stay pending in Redis, for a later delivery: nothing to give back.
        self._slots: HandlerSlots[StreamRecord] = HandlerSlots(
            concurrency,
            self._process,
            name="flo-stream-slot",
            track=self._track,
            abandon=_stays_pending,
            log=log,
            taken=self._taken,
            # `inline` is set by each start (_new_runner).
        )
        self._room_waiter: asyncio.Future[None] | None = None
        # The record hooks the observer has (set before start): only those are called.
        self._hooks_before = self._hooks_after = self._counts = True  # start()
        self._reports: RecordReports  # acks and nacks; made by start()

    async def start(self) -> None:
        """Join the group and process records until :meth:`stop`; returns once running
        handlers finished, their acks were sent and the consumer left the group."""
        self.config.check()
        await self._serve()

    # --- the lifecycle's steps --------------------------------------------------------

    def _new_runner(self) -> HandlerRunner:
        # Made here, so settings changed on the config before start take effect.
        cfg = self.config
        self._slots.reset()  # what an aborted run left unstarted is pending in Redis
        self._slots.size = cfg.concurrency
        # No turn of the loop between records (but every INLINE_S) while the two batches
        # the queue holds at most last: measured faster here.
        self._slots.inline = max(INLINE, 2 * cfg.batch_size)
        return HandlerRunner(cfg.concurrency, cfg.message_timeout, "flo-stream-handler")

    async def _setup(self) -> None:
        self._streams = StreamState(self.session)
        self._hooks_before = overrides(self.observer, "before_run")
        self._hooks_after = overrides(self.observer, "after_run")
        self._counts = overrides(self.observer, "record_delivered") or overrides(
            self.observer, "record_handled"
        )
        cfg = self.config
        self._reports = RecordReports(
            self._streams,
            (cfg.stream, cfg.group, cfg.consumer, cfg.worker_id),
            self.observer,
            self._stop.is_set,
            self._track,
        )
        self._replay = self._reports.replay
        self._calls = await self._pools.start_stream(
            self._handler, cfg.executor, cfg.concurrency, self.observer.handler_process_replaced
        )
        await self._join()
        if self.config.redeliver_pending_on_reconnect:
            await self._drain_pending()

    def _background(self) -> Iterable[tuple[str, Coroutine[Any, Any, None]]]:
        return (("flo-reaper", self._reap()),)

    async def _end_handlers(self) -> None:
        await self._pools.close()

    def check_handlers(self) -> None:
        """As :meth:`ActionWorker.check_handlers`."""
        check_stream_handler(self.config.stream, self._handler, self.config.executor)

    async def reload(self) -> int:
        """As :meth:`ActionWorker.reload`: new handler processes for the code on disk now
        (1), the old retired as their records end; 0 without a ProcessExecutor."""
        return await self._pools.reload()

    async def _finish(self) -> None:
        try:
            cfg = self.config
            await groups.leave(self._streams, cfg.stream, cfg.group, cfg.consumer)
        except Exception as exc:
            log.debug("leaving group %s failed (%s)", self.config.group, exc)

    # --- internals -----------------------------------------------------------------

    async def _join(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                cfg = self.config
                await groups.join(self._streams, cfg.stream, cfg.group, cfg.consumer)
                return
            except Exception as exc:
                if isinstance(exc, PermissionDeniedError):
                    raise  # retrying cannot help until the ACL changes
                if not (is_refused_unrun(exc) or is_connection_error(exc)):
                    raise
                failures += 1
                outage.failed(log, self.session.redis, f"joining group {self.config.group}", exc)
                await sleep_unless_stopped(self._stop, worker_backoff(failures))

    async def _room(self) -> int:
        """A full batch once at most one batch of records waits for a free slot: the
        next read is then under way while the handlers run. 0 once stopped."""
        limit = self.config.batch_size
        queue = self._slots.queue
        while len(queue) > limit and not self._stop.is_set():
            self._room_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._room_waiter
            finally:
                self._room_waiter = None
        return 0 if self._stop.is_set() else limit

    async def _poll(self, poll_id: str, room: int) -> Sequence[StreamRecord]:
        cfg = self.config
        options = StreamGroupReadOptions(count=room, block_ms=cfg.block_ms, poll_id=poll_id)
        result = await groups.read(self._streams, cfg.stream, cfg.group, cfg.consumer, options)
        return result.records

    async def _poll_failed(self, exc: Exception) -> bool:
        outage.failed(log, self.session.redis, "group read", exc)
        return True

    async def _take(self, items: Sequence[StreamRecord]) -> None:
        if self._abort.is_set():
            return  # read as the worker aborted: they stay pending, for a later delivery
        self._slots.queue.extend(items)
        self._slots.wake()

    async def _poll_loop(self) -> None:
        try:
            await super()._poll_loop()
        finally:
            self._slots.close()  # slots end once the queue is empty

    def stop(self) -> None:
        super().stop()
        self._free_room()

    def abort(self) -> None:
        super().abort()
        self._slots.halt()  # records not started stay pending, for a later delivery

    def _in_handler(self) -> Iterable[asyncio.Task[None]]:
        return list(self._slots.tasks)  # a slot is in a handler or idle; both may be cancelled

    def _taken(self) -> None:
        """A slot took a record: a reader waiting for room reads again once at most a
        batch of records waits (:meth:`_room`)."""
        if self._room_waiter is not None and len(self._slots.queue) <= self.config.batch_size:
            self._free_room()

    def _free_room(self) -> None:
        if self._room_waiter is not None and not self._room_waiter.done():
            self._room_waiter.set_result(None)

    async def _drain_pending(self) -> None:
        """Re-process the entries this consumer was given but did not ack: at start
        only, while the worker holds none of them. Never after a failed read: each
        entry it claims is delivered again (its count raised, dead-lettered at
        ``max_deliver``), and the consumer's pending list then also holds the records
        in the slots, in handlers and being acked. What a read whose reply was lost had
        taken comes back from its retry, under the same poll id (:meth:`_poll_loop`)."""
        cfg = self.config
        where, cursor = (cfg.stream, cfg.group, cfg.consumer), StreamID()
        for _ in range(_MAX_DRAIN_PAGES):
            if self._stop.is_set():
                return
            try:
                result = await groups.claim(
                    self._streams, where, cfg.claim_min_idle_ms, cursor, cfg.batch_size
                )
            except Exception as exc:
                log.warning("pending drain failed (%s); normal reads resume", exc)
                return
            await self._take(result.records)
            if result.done or not await self._room():
                return
            # A page can be empty without being the end (a claim inspects a bounded
            # part of the pending list); the cursor moves on either way.
            cursor = result.next_cursor

    # --- one record ----------------------------------------------------------------

    async def _process(self, record: StreamRecord, slot: asyncio.Task[Any]) -> None:
        """Run one record's handler with its hooks, in the handler slot ``slot``, then
        ack or nack it (:mod:`flo_redis.worker.stream_reports`)."""
        cfg = self.config
        observer = self.observer
        counts = self._counts
        if counts:
            observer.record_delivered(cfg.stream, cfg.group)
        # Positional (StreamContext's field order): keywords cost more, once a record.
        ctx = StreamContext(record, self.session.namespace, cfg.stream, cfg.group, cfg.consumer)
        began = asyncio.get_running_loop().time() if counts else 0.0
        error = await self._handle(ctx, slot)
        if error is not None or self._hooks_after:
            try:
                if error is None:
                    hook = observer.after_run(ctx, b"")
                else:
                    hook = observer.on_failure(ctx, error)
                if hook is not None:
                    await settle(hook)
            except Exception:
                which = "after_run" if error is None else "on_failure"
                log.exception("%s hook of worker %s failed", which, cfg.worker_id)
        if counts:
            took = asyncio.get_running_loop().time() - began
            observer.record_handled(cfg.stream, cfg.group, error is None, took)
        token = record.delivery_count or None
        if error is None:
            self._reports.ack(record, token)
        else:
            self._reports.nack(record, token, error, _why(error, cfg.message_timeout))

    async def _handle(self, ctx: StreamContext, slot: asyncio.Task[Any]) -> BaseException | None:
        """Run ``before_run`` and the handler under ``message_timeout``; what failed
        (logged with its nack's answer), or None if it returned."""
        try:
            if self._hooks_before:
                hook = self.observer.before_run(ctx)
                if hook is not None:
                    await settle(hook)
            runner = self._handler_runner
            await runner.run(self._calls, ctx, runner.running(), slot)
        except Exception as exc:
            return exc
        return None

    async def _reap(self) -> None:
        """Give back, every so often, what gone consumers of the group were holding."""
        cfg = self.config
        reaper = Reaper(
            self.session,
            targets=[groups.reclaim_target(self._streams, cfg.stream, cfg.group)],
            grace_ms=self.session.liveness_grace_ms,
            on_reclaimed=lambda _, n: self.observer.records_reclaimed(cfg.stream, cfg.group, n),
        )
        with contextlib.suppress(PermissionDeniedError):
            await reaper.run(self._stop)  # an ACL refusal was logged; reads go on


def _why(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, HandlerTimeout):
        return f"no return within message_timeout {timeout:g} s"
    return error_text(exc)


def _stays_pending(record: StreamRecord) -> None:
    """A record read and never started (the worker aborted or was cancelled) stays
    pending in Redis, for a later delivery: nothing to send."""
