"""``StreamWorker``: flo's consumer-group worker, on Redis Streams.

Joins the group (retrying refusals that did not run), then reads batches with
``group_read`` and runs the handler for each record under ``message_timeout``: a return
acks the record, a raise or a timeout nacks it (the group delivers it again, up to its
``max_deliver``). Acks and nacks carry the delivery's token, never wait behind a read,
are resent after a lost connection and never converted. After a connection failure the
worker first re-processes the entries it had been given (``group_claim`` over its own
pending list), then resumes reading; on stop it finishes its handlers and leaves. On a
partitioned stream it reads every partition and acks each record in its own partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _outage
from ._aio import sleep_unless_stopped
from ._batch import Coalescer
from ._checks import check_count, check_int, check_seconds
from ._handlers import HandlerRunner, HandlerTimeout
from ._lifecycle import ClientLike, WorkerLifecycle, generate_worker_id, worker_block_ms
from ._reports import send_report
from .errors import (
    PermissionDeniedError,
    ServerError,
    is_connection_error,
)
from .keys import check_name
from .observe import settle
from .reclaim import Reaper
from .results import check_handler, error_text
from .retry import is_refused_unrun, worker_backoff
from .streams import StreamOperations, reap_target
from .types import (
    DEFAULT_WORKER_BLOCK_MS,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
)

log = logging.getLogger("flo_redis.stream_worker")

_MAX_DRAIN_PAGES = 1000


@dataclass
class StreamWorkerOptions:
    """A StreamWorker's settings; ``block_ms`` 0/None means 30000, above 300000 is
    refused with :class:`BlockTooLongError`."""

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

    def __post_init__(self) -> None:
        self.block_ms = worker_block_ms(self.block_ms)
        check_count("concurrency", self.concurrency, 1)
        check_count("batch_size", self.batch_size, 1)
        check_seconds("message_timeout", self.message_timeout)
        check_int("claim_min_idle_ms", self.claim_min_idle_ms)


@dataclass
class StreamContext:
    """What a stream handler gets: the record and where it came from."""

    record: StreamRecord
    namespace: str
    stream: str
    group: str
    consumer: str

    @property
    def stream_id(self) -> StreamID:
        return self.record.id

    @property
    def payload(self) -> bytes:
        return self.record.payload

    def json(self) -> Any:
        if not self.record.payload:
            raise ValueError("No payload data")
        return json.loads(self.record.payload)

    def into(self, cls: type[Any]) -> Any:
        data = self.json()
        return cls(**data) if isinstance(data, dict) else cls(data)

    @property
    def headers(self) -> dict[str, str]:
        return self.record.headers or {}

    @property
    def delivery_count(self) -> int:
        """How many times the group delivered this record, this delivery included."""
        return self.record.delivery_count


# An ``async def`` handler, or a plain function (run in the worker's thread pool).
StreamHandler = Callable[[StreamContext], Awaitable[None]] | Callable[[StreamContext], None]
StreamRecordHandler = StreamHandler


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
    ) -> None:
        super().__init__(parent_client)
        check_handler(f"stream {stream!r}", handler)
        self._handler = handler
        self.config = StreamWorkerOptions(
            stream=stream,
            group=group,
            consumer=consumer or generate_worker_id(),
            worker_id=worker_id or generate_worker_id(),
            concurrency=concurrency,
            batch_size=batch_size,
            block_ms=block_ms,
            message_timeout=message_timeout,
            redeliver_pending_on_reconnect=redeliver_pending_on_reconnect,
            claim_min_idle_ms=claim_min_idle_ms,
        )
        check_name("stream name", stream)
        check_name("group name", group)
        check_name("consumer name", self.config.consumer)
        self._semaphore = asyncio.Semaphore(self.config.concurrency)
        self._ops: StreamOperations  # made by start(), on the worker's own session
        self._acks: Coalescer[tuple[StreamID, int | None]] = Coalescer(
            self._ack_batch, "flo-ack-batches"
        )

    async def start(self) -> None:
        """Join the group and process records until :meth:`stop`; returns once running
        handlers finished, their acks were sent and the consumer left the group."""
        await self._serve()

    # --- the lifecycle's steps --------------------------------------------------------

    def _new_runner(self) -> HandlerRunner:
        # Made here, so settings changed on the config before start take effect.
        self._semaphore = asyncio.Semaphore(self.config.concurrency)
        cfg = self.config
        return HandlerRunner(cfg.concurrency, cfg.message_timeout, "flo-stream-handler")

    async def _setup(self) -> None:
        self._ops = StreamOperations(self.session)
        await self._join()
        if self.config.redeliver_pending_on_reconnect:
            await self._drain_pending()

    def _background(self) -> Iterable[tuple[str, Coroutine[Any, Any, None]]]:
        return (("flo-reaper", self._reap()),)

    async def _finish(self) -> None:
        await self._acks.close()
        try:
            await self._ops.group_leave(self.config.stream, self.config.group, self.config.consumer)
        except Exception as exc:
            log.debug("leaving group %s failed (%s)", self.config.group, exc)

    # --- internals -----------------------------------------------------------------

    async def _join(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                await self._ops.group_join(
                    self.config.stream, self.config.group, self.config.consumer
                )
                return
            except Exception as exc:
                if isinstance(exc, PermissionDeniedError):
                    raise  # retrying cannot help until the ACL changes
                if not (is_refused_unrun(exc) or is_connection_error(exc)):
                    raise
                failures += 1
                _outage.failed(log, self.session.redis, f"joining group {self.config.group}", exc)
                await sleep_unless_stopped(self._stop, worker_backoff(failures))

    async def _room(self) -> int:
        return self.config.batch_size  # a record waits for a free slot in _dispatch

    async def _poll(self, poll_id: str, room: int) -> Sequence[StreamRecord]:
        cfg = self.config
        options = StreamGroupReadOptions(count=room, block_ms=cfg.block_ms, poll_id=poll_id)
        result = await self._ops.group_read(cfg.stream, cfg.group, cfg.consumer, options)
        return result.records

    async def _poll_failed(self, exc: Exception) -> bool:
        _outage.failed(log, self.session.redis, "group read", exc)
        return True

    async def _after_failed_poll(self, exc: Exception) -> None:
        if is_connection_error(exc) and self.config.redeliver_pending_on_reconnect:
            await self._drain_pending()

    async def _take(self, items: Sequence[StreamRecord]) -> None:
        for record in items:
            await self._dispatch(record)

    async def _dispatch(self, record: StreamRecord) -> None:
        await self._semaphore.acquire()
        self.observer.record_delivered(self.config.stream, self.config.group)
        released = False

        def release() -> None:
            # The slot is free once the handler returns; the ack may still be on its way.
            nonlocal released
            if not released:
                released = True
                self._semaphore.release()

        task = asyncio.create_task(self._process(record, release), name=f"flo-record-{record.id}")
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            release()

        task.add_done_callback(done)

    async def _drain_pending(self) -> None:
        """Re-process the entries this consumer was given but did not ack."""
        cursor = StreamID()
        for _ in range(_MAX_DRAIN_PAGES):
            if self._stop.is_set():
                return
            try:
                result = await self._ops.group_claim(
                    self.config.stream,
                    self.config.group,
                    self.config.consumer,
                    self.config.claim_min_idle_ms,
                    cursor,
                    self.config.batch_size,
                )
            except Exception as exc:
                log.warning("pending drain failed (%s); normal reads resume", exc)
                return
            for record in result.records:
                await self._dispatch(record)
            if result.done:
                return
            # A page can be empty without being the end (a claim inspects a bounded
            # part of the pending list); the cursor moves on either way.
            cursor = result.next_cursor

    # --- one record ----------------------------------------------------------------

    async def _process(self, record: StreamRecord, release: Callable[[], None]) -> None:
        cfg = self.config
        ctx = StreamContext(
            record=record,
            namespace=self.session.namespace,
            stream=cfg.stream,
            group=cfg.group,
            consumer=cfg.consumer,
        )
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            error = await self._handle(ctx)
            if error is None:
                await self._hook("after_run", self.observer.after_run, ctx, b"")
            else:
                await self._hook("on_failure", self.observer.on_failure, ctx, error)
        finally:
            release()
        ok = error is None
        self.observer.record_handled(cfg.stream, cfg.group, ok, loop.time() - began)
        token = record.delivery_count or None
        kind = "ack" if ok else "nack"
        await send_report(
            f"{kind} of {cfg.stream}/{record.id.to_redis()}",
            lambda: self._ack(record, token) if ok else self._nack(record, token),
            self._stop.is_set,
            log,
            report=kind,
            observer=self.observer,
        )

    async def _handle(self, ctx: StreamContext) -> BaseException | None:
        """Run ``before_run`` and the handler under ``message_timeout``; what failed
        (logged), or None if it returned."""
        try:
            await settle(self.observer.before_run(ctx))
            await self._handler_runner.run(self._handler, ctx, self._handler_runner.running())
        except Exception as exc:
            record = ctx.record
            log.error(
                "handler for %s/%s (delivery %d, consumer %s) failed: %s; nacking",
                self.config.stream,
                record.id.to_redis(),
                record.delivery_count,
                self.config.consumer,
                _why(exc, self.config.message_timeout),
                exc_info=exc,
                extra={
                    "stream": self.config.stream,
                    "group": self.config.group,
                    "entry_id": record.id.to_redis(),
                    "attempt": record.delivery_count,
                    "worker_id": self.config.worker_id,
                },
            )
            return exc
        return None

    async def _ack(self, record: StreamRecord, token: int | None) -> None:
        refusal = await self._acks.submit(str(record.partition), (record.id, token))
        if refusal is not None:
            raise refusal
        self.observer.record_settled(self.config.stream, self.config.group, True)

    async def _nack(self, record: StreamRecord, token: int | None) -> None:
        cfg = self.config
        await self._ops.group_nack(
            cfg.stream,
            cfg.group,
            [record.id],
            StreamGroupNackOptions(consumer=cfg.consumer, token=token, partition=record.partition),
        )
        self.observer.record_settled(cfg.stream, cfg.group, False)

    async def _ack_batch(
        self, partition: str, items: Sequence[tuple[StreamID, int | None]]
    ) -> Sequence[ServerError | None]:
        cfg = self.config
        return await self._ops.group_ack_many(
            cfg.stream, cfg.group, items, consumer=cfg.consumer, partition=int(partition)
        )

    async def _reap(self) -> None:
        """Give back, every so often, what gone consumers of the group were holding."""
        cfg = self.config
        reaper = Reaper(
            self.session,
            targets=[reap_target(self._ops, cfg.stream, cfg.group)],
            grace_ms=self.session.liveness_grace_ms,
            on_reclaimed=lambda _, n: self.observer.records_reclaimed(cfg.stream, cfg.group, n),
        )
        with contextlib.suppress(PermissionDeniedError):
            await reaper.run(self._stop)  # an ACL refusal was logged; reads go on


def _why(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, HandlerTimeout):
        return f"no return within message_timeout {timeout:g} s"
    return error_text(exc)
