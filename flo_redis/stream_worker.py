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
import itertools
import json
import logging
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _outage
from ._batch import Coalescer
from ._checks import check_seconds
from ._lifecycle import WorkerLifecycle
from ._reports import send_report
from ._wake import raise_if_cancelling
from .errors import (
    PermissionDeniedError,
    ServerError,
    ValidationError,
    is_connection_error,
    validate_block_ms,
)
from .keys import check_name
from .reclaim import Reaper
from .results import HandlerPool, check_handler, error_text
from .retry import EmptyPollBackoff, is_refused_unrun, sleep_unless_stopped, worker_backoff
from .streams import reap_target
from .types import (
    DEFAULT_WORKER_BLOCK_MS,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
)

if TYPE_CHECKING:
    from .client import FloClient

log = logging.getLogger("flo_redis.stream_worker")

_MAX_DRAIN_PAGES = 1000
# asyncio.timeout (3.11+) runs a handler without a timer task of its own.
_INLINE_TIMEOUT = sys.version_info >= (3, 11)


def _generate_id() -> str:
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


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
        if self.block_ms is None or self.block_ms == 0:
            self.block_ms = DEFAULT_WORKER_BLOCK_MS
        validate_block_ms(self.block_ms)
        for name in ("concurrency", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name} must be an int of at least 1, got {value!r}")
        check_seconds("message_timeout", self.message_timeout)
        if isinstance(self.claim_min_idle_ms, bool) or not isinstance(self.claim_min_idle_ms, int):
            raise ValidationError(
                f"claim_min_idle_ms must be an int, got {self.claim_min_idle_ms!r}"
            )


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

    def __init__(
        self,
        parent_client: FloClient,
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
            consumer=consumer or _generate_id(),
            worker_id=worker_id or _generate_id(),
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
        self._pool = HandlerPool(self.config.concurrency, "flo-stream-handler")
        self._refused: PermissionDeniedError | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._acks: Coalescer[tuple[StreamID, int | None]] = Coalescer(
            self._ack_batch, "flo-ack-batches"
        )

    async def start(self) -> None:
        """Join the group and process records until :meth:`stop`; returns once running
        handlers finished, their acks were sent and the consumer left the group."""
        # Made here, so a concurrency set on the config before start takes effect.
        self._semaphore = asyncio.Semaphore(self.config.concurrency)
        self._pool = HandlerPool(self.config.concurrency, "flo-stream-handler")
        client = self._open_client()
        try:
            await client.connect()
            await self._join()
            if self.config.redeliver_pending_on_reconnect:
                await self._drain_pending()
            reaper = asyncio.create_task(self._reaper(client).run(self._stop), name="flo-reaper")
            try:
                await self._poll_loop()
            finally:
                reaper.cancel()
                with contextlib.suppress(asyncio.CancelledError, PermissionDeniedError):
                    await reaper  # an ACL refusal was logged; reads go on without reclaims
            await self._wait_handlers()
            await self._acks.close()
            with contextlib.suppress(Exception):
                await client.stream.group_leave(
                    self.config.stream, self.config.group, self.config.consumer
                )
        finally:
            self._pool.close()
            await client.close()
            self._finished.set()
        if self._refused is not None:
            raise self._refused

    # --- internals -----------------------------------------------------------------

    async def _join(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                await self.client.stream.group_join(
                    self.config.stream, self.config.group, self.config.consumer
                )
                return
            except Exception as exc:
                if isinstance(exc, PermissionDeniedError):
                    raise  # retrying cannot help until the ACL changes
                if not (is_refused_unrun(exc) or is_connection_error(exc)):
                    raise
                failures += 1
                _outage.failed(log, self.client.redis, f"joining group {self.config.group}", exc)
                await sleep_unless_stopped(self._stop, worker_backoff(failures))

    async def _poll_loop(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        empty = EmptyPollBackoff(cfg.block_ms, self._stop)
        failures = 0
        poll_id: str | None = None
        # "<poller>#<n>": a new n tells the claim script the reply to poll n - 1 arrived,
        # so it keeps one replay memo per poller rather than one per claim.
        poller, polls = secrets.token_hex(6), itertools.count()
        while not self._stop.is_set():
            raise_if_cancelling()
            poll_id = poll_id or f"{poller}#{next(polls)}"
            began = loop.time()
            try:
                result = await self.client.stream.group_read(
                    cfg.stream,
                    cfg.group,
                    cfg.consumer,
                    StreamGroupReadOptions(
                        count=cfg.batch_size, block_ms=cfg.block_ms, poll_id=poll_id
                    ),
                )
            except Exception as exc:
                if not (is_connection_error(exc) or isinstance(exc, ServerError)):
                    raise
                if isinstance(exc, PermissionDeniedError):
                    # Retrying cannot help until the ACL changes: finish, raise it.
                    log.error("stream worker %s stops: %s", cfg.worker_id, exc)
                    self._refused = exc
                    return
                failures += 1
                _outage.failed(log, self.client.redis, "group read", exc)
                await sleep_unless_stopped(self._stop, worker_backoff(failures))
                if is_connection_error(exc) and cfg.redeliver_pending_on_reconnect:
                    await self._drain_pending()
                continue  # same poll id: a read whose reply was lost is replayed
            if failures:
                _outage.reached(log, self.client.redis)
                failures = 0
            poll_id = None
            if not result.records:
                await empty.empty(loop.time() - began)
                continue
            empty.reset()
            for record in result.records:
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
                result = await self.client.stream.group_claim(
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

    async def _process(self, record: StreamRecord, release: Callable[[], None]) -> None:
        cfg = self.config
        ctx = StreamContext(
            record=record,
            namespace=self.client.namespace,
            stream=cfg.stream,
            group=cfg.group,
            consumer=cfg.consumer,
        )
        observer = self.observer
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            ok = await self._handle(ctx)
        finally:
            release()
        observer.record_handled(cfg.stream, cfg.group, ok, loop.time() - began)
        token = record.delivery_count or None
        send: Callable[[], Awaitable[object]]
        if ok:

            async def send() -> None:
                refusal = await self._acks.submit(str(record.partition), (record.id, token))
                if refusal is not None:
                    raise refusal
                observer.record_settled(cfg.stream, cfg.group, True)

        else:
            stream = self.client.stream

            async def send() -> None:
                await stream.group_nack(
                    cfg.stream,
                    cfg.group,
                    [record.id],
                    StreamGroupNackOptions(
                        consumer=cfg.consumer, token=token, partition=record.partition
                    ),
                )
                observer.record_settled(cfg.stream, cfg.group, False)

        kind = "ack" if ok else "nack"
        what = f"{kind} of {cfg.stream}/{record.id.to_redis()}"
        await send_report(what, send, self._stop.is_set, log, report=kind, observer=observer)

    async def _handle(self, ctx: StreamContext) -> bool:
        """Run the handler under ``message_timeout``; True if it returned."""
        timeout = self.config.message_timeout
        try:
            if _INLINE_TIMEOUT:
                async with asyncio.timeout(timeout):  # type: ignore[attr-defined,unused-ignore]
                    await self._pool.call(self._handler, ctx)
            else:
                await asyncio.wait_for(self._pool.call(self._handler, ctx), timeout)
        except Exception as exc:
            record = ctx.record
            log.error(
                "handler for %s/%s (delivery %d, consumer %s) failed: %s; nacking",
                self.config.stream,
                record.id.to_redis(),
                record.delivery_count,
                self.config.consumer,
                _why(exc, timeout),
                exc_info=exc,
                extra={
                    "stream": self.config.stream,
                    "group": self.config.group,
                    "entry_id": record.id.to_redis(),
                    "attempt": record.delivery_count,
                    "worker_id": self.config.worker_id,
                },
            )
            return False
        return True

    async def _ack_batch(
        self, partition: str, items: Sequence[tuple[StreamID, int | None]]
    ) -> Sequence[ServerError | None]:
        cfg = self.config
        return await self.client.stream.group_ack_many(
            cfg.stream, cfg.group, items, consumer=cfg.consumer, partition=int(partition)
        )

    def _reaper(self, client: FloClient) -> Reaper:
        """Gives back, every so often, what gone consumers of the group were holding."""
        cfg = self.config
        return Reaper(
            client.session,
            targets=[reap_target(client.stream, cfg.stream, cfg.group)],
            grace_ms=client.liveness_grace_ms,
            on_reclaimed=lambda _, n: self.observer.records_reclaimed(cfg.stream, cfg.group, n),
        )

    async def _wait_handlers(self) -> None:
        """Wait for every record's handler and ack. After :meth:`abort`, they are
        cancelled: their entries stay pending and are given back to the group once this
        process is gone (a delivery counts, as for any redelivery)."""
        await self._wait_tasks(self._tasks, lambda: list(self._tasks))


def _why(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, asyncio.TimeoutError) and not str(exc):
        return f"no return within message_timeout {timeout:g} s (or it raised TimeoutError)"
    return error_text(exc)
