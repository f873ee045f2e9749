"""A StreamWorker's reports: the ack or nack of each record its handler ran.

Acks go through the worker runtime's :class:`~flo_redis.worker.coalescer.Coalescer`,
keyed by partition: acks queued while a batch is on its way go out together in the next
(one ``group_ack_many`` per partition), so under load few large batches and when idle
each ack at once; no timer, no added latency. A nack is a task of its own, so the
handler slot goes on. Both carry the delivery's token, never wait behind a read, are
resent after a lost connection and never converted (:mod:`flo_redis.worker.delivery`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from flo_redis.errors import ServerError
from flo_redis.streams import acks
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


class AcksNotSent(Exception):
    """A batch of acks given up (logged): the worker stopped while Redis was away. The
    records come back to the group through liveness or their ack timeout."""


class RecordReports:
    """The acks and nacks of one StreamWorker's records, as ``consumer`` of ``group`` of
    ``stream``; ``track`` is told of every task it starts (the worker waits for them),
    ``stopping()`` says whether the worker is stopping (resends then end soon)."""

    def __init__(
        self,
        streams: StreamState,
        where: tuple[str, str, str],
        observer: WorkerObserver,
        stopping: Callable[[], bool],
        track: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self._streams = streams
        self._stream, self._group, self._consumer = where
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

    def nack(self, record: StreamRecord, token: int | None) -> None:
        """Nack ``record``, in a task of its own."""
        self._track(asyncio.create_task(self._send_nack(record, token), name="flo-nack"))

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

    async def _send_nack(self, record: StreamRecord, token: int | None) -> None:
        await send_report(
            f"nack of {self._stream}/{record.id.to_redis()}",
            lambda: self._nack(record, token),
            self._stopping,
            log,
            report="nack",
            observer=self._observer,
        )

    async def _nack(self, record: StreamRecord, token: int | None) -> None:
        options = StreamGroupNackOptions(
            consumer=self._consumer, token=token, partition=record.partition
        )
        await acks.settle(self._streams, acks.NACK, self._stream, self._group, [record.id], options)
        self._observer.record_settled(self._stream, self._group, False)
