"""A StreamWorker's reports: the ack or nack of each record its handler ran.

Acks go through the worker runtime's :class:`~flo_redis.worker.coalescer.Coalescer`,
keyed by partition: acks queued while a batch is on its way go out together in the next
(one ``group_ack_many`` per partition), so under load few large batches and when idle
each ack at once; no timer, no added latency. A nack is a task of its own, so the
handler slot goes on. Both carry the delivery's token, never wait behind a read, are
resent after a lost connection and never converted (:mod:`flo_redis.worker.delivery`).
A failed record is logged once its nack is answered, with what comes next as Redis
decided it: "redelivered now (delivery 2 of 5)", or "final: moved to the dead letters".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from flo_redis.errors import FloError, ServerError
from flo_redis.streams import acks, groups
from flo_redis.streams.partitions import StreamState
from flo_redis.streams.placement import MAX_PARTITIONS
from flo_redis.types import StreamGroupNackOptions, StreamRecord
from flo_redis.worker.coalescer import Coalescer
from flo_redis.worker.delivery import drop_refused, send_report
from flo_redis.worker.observe import WorkerObserver, overrides
from flo_redis.worker.replay import Replay

log = logging.getLogger("flo_redis.stream_worker")

# The coalescer's key of each partition's acks, made once (an ack is queued per record).
_PARTITION_KEYS = tuple(str(partition) for partition in range(MAX_PARTITIONS))
# How long the group's max_deliver, read for failure logs, is used before it is read again.
SETTINGS_TTL_S = 10.0


class AcksNotSent(Exception):
    """A batch of acks given up (logged): the worker stopped while Redis was away. The
    records come back to the group through liveness or their ack timeout."""


class RecordReports:
    """The acks and nacks of one StreamWorker's records, as ``consumer`` of ``group`` of
    ``stream`` (``where``: those and the worker's id); ``track`` is told of every task it
    starts (the worker waits for them), ``stopping()`` says whether the worker is
    stopping (resends then end soon)."""

    def __init__(
        self,
        streams: StreamState,
        where: tuple[str, str, str, str],
        observer: WorkerObserver,
        stopping: Callable[[], bool],
        track: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self._streams = streams
        self._stream, self._group, self._consumer, self._worker_id = where
        self._max_deliver: tuple[float, int] | None = None  # (read at, value)
        self._observer = observer
        self._stopping = stopping
        self._track = track
        # [entry id, token or ""] each, by partition; an accepted ack is answered only
        # when the observer listens.
        self._acks: Coalescer[list[str]] = Coalescer(
            self._ack_batch,
            "flo-acks",
            track,
            self._ack_answered,
            tell_accepted=overrides(observer, "record_settled"),
        )
        self._post = self._acks.post
        # Acks answered lately, sent again after an outage (flo_redis.worker.replay).
        self.replay: Replay[list[str]] = Replay(
            "acks", self._ack_again, asyncio.get_running_loop().time
        )

    def ack(self, record: StreamRecord, token: int | None) -> None:
        """Ack ``record`` in the next batch of its partition's acks."""
        item = [record.id.to_redis(), "" if token is None else str(token)]
        self._post(_PARTITION_KEYS[record.partition], item)

    def nack(self, record: StreamRecord, token: int | None, error: BaseException, why: str) -> None:
        """Nack ``record``, whose handler failed with ``error`` (``why``, for people), in a
        task of its own; the failure is logged once the nack is answered."""
        task = self._send_nack(record, token, error, why)
        self._track(asyncio.create_task(task, name="flo-nack"))

    async def _ack_batch(
        self, partition: str, items: Sequence[list[str]]
    ) -> Sequence[ServerError | None]:
        """Send a batch of acks, again after a lost connection (each is fenced by its
        token, so a resend is safe); each item is answered on its own.
        :class:`AcksNotSent` when the batch was given up (logged)."""
        streams, stream = self._streams, self._stream
        answers: Sequence[ServerError | None] = ()

        async def send() -> None:
            nonlocal answers
            try:
                keys = await streams.part(stream, None, int(partition))
                answers = await acks.ack_many(
                    streams, stream, self._group, keys, self._consumer, items
                )
            except ServerError as exc:  # the whole batch refused: each item is
                answers = [exc] * len(items)

        what = f"ack of {len(items)} records of {stream}"
        await send_report(what, send, self._stopping, log, report="ack", observer=self._observer)
        if len(answers) != len(items):
            raise AcksNotSent(what)
        self.replay.answered(partition, items, answers)
        return answers

    async def _ack_again(self, partition: str, items: Sequence[list[str]]) -> None:
        """Send acks the store answered before an outage again (each is fenced by its
        token; one that took effect is answered as acked): :mod:`flo_redis.worker.replay`.
        Whether one had been lost is not told."""
        keys = await self._streams.part(self._stream, None, int(partition))
        await acks.ack_many(self._streams, self._stream, self._group, keys, self._consumer, items)

    def _ack_answered(
        self, item: list[str], refusal: ServerError | None, error: BaseException | None
    ) -> None:
        """An ack's answer: accepted (told only when the observer listens), refused
        (logged and dropped), or its batch failed (given up, or an unexpected error)."""
        if error is None and refusal is None:
            self._observer.record_settled(self._stream, self._group, True)
            return
        what = f"ack of {self._stream}/{item[0]}"
        if refusal is not None:
            drop_refused(what, refusal, log, report="ack", observer=self._observer)
        elif not isinstance(error, AcksNotSent | asyncio.CancelledError):
            log.error("%s failed: %r", what, error, exc_info=error)

    async def _send_nack(
        self, record: StreamRecord, token: int | None, error: BaseException, why: str
    ) -> None:
        answer: list[acks.Nacked] = []

        async def send() -> None:
            answer.append(await self._nack(record, token))

        # Read before the nack, so the failure is logged as soon as the nack is answered:
        # before the record's next delivery can fail and log in turn.
        max_deliver = await self._max_deliver_now()
        entry = record.id.to_redis()
        sent = await send_report(
            f"nack of {self._stream}/{entry}",
            send,
            self._stopping,
            log,
            report="nack",
            observer=self._observer,
        )
        nacked = answer[-1] if sent and answer else None
        delivery = record.delivery_count
        log.error(
            "handler for %s/%s (delivery %d, consumer %s) failed: %s; %s",
            self._stream,
            entry,
            delivery,
            self._consumer,
            why,
            next_delivery(nacked, delivery, max_deliver),
            exc_info=error,
            extra={
                "stream": self._stream,
                "group": self._group,
                "entry_id": entry,
                "attempt": delivery,
                "worker_id": self._worker_id,
            },
        )

    async def _nack(self, record: StreamRecord, token: int | None) -> acks.Nacked:
        options = StreamGroupNackOptions(
            consumer=self._consumer, token=token, partition=record.partition
        )
        nacked = await acks.settle(
            self._streams, acks.NACK, self._stream, self._group, [record.id], options
        )
        self._observer.record_settled(self._stream, self._group, False)
        return nacked

    async def _max_deliver_now(self) -> int | None:
        """The group's ``max_deliver`` for a failure's log, read again at most every
        :data:`SETTINGS_TTL_S` (None: Redis did not answer)."""
        now = asyncio.get_running_loop().time()
        if self._max_deliver is None or now - self._max_deliver[0] > SETTINGS_TTL_S:
            try:
                settings = await groups.settings(self._streams, self._stream, self._group, None)
            except (FloError, OSError) as exc:
                log.debug("group settings not read for a failure's log (%s)", exc)
                return None
            self._max_deliver = (now, settings.max_deliver)
        return self._max_deliver[1]


def next_delivery(nacked: acks.Nacked | None, delivery: int, max_deliver: int | None) -> str:
    """What comes after a failed delivery, as its nack was answered (None: no answer,
    the nack refused or given up): "redelivered now (delivery 2 of 5)", or why not."""
    if nacked is None:
        return (
            "its nack was not accepted: the record is delivered again when its ack "
            "timeout runs out or its consumer is gone"
        )
    if nacked.dead:
        return f"final: moved to the dead letters (delivery {delivery} of {delivery})"
    if not nacked.redelivered:
        return "no longer pending (acked, nacked or taken back before): nothing to redeliver"
    of = f" of {max_deliver}" if max_deliver else ""
    return f"redelivered now, before new records (delivery {delivery + 1}{of})"
