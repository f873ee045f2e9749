"""flo's ``client.stream`` on Redis Streams: one class whose calls are the functions of
the stream family.

Every state change is one Lua script (``lua/stream_*.lua``, ``lua/group_*.lua``). The
operations are plain functions over a :class:`~flo_redis.streams.partitions.StreamState`
(the session and what the client remembers of its streams), which the StreamWorker calls
as well:

- :mod:`flo_redis.streams.records`: plain streams (append, read, info, trim);
- :mod:`flo_redis.streams.groups`: consumer groups (join, read, pending, claim, their
  settings, and what gone consumers held);
- :mod:`flo_redis.streams.acks`: their acks and nacks, one entry or many;
- :mod:`flo_redis.streams.dead_letters`: a group's dead letters and their replay;
- :mod:`flo_redis.streams.inspect`: listing streams and counting each group's work;
- :mod:`flo_redis.streams.partitions`: partition fan-out, which all of them build on.

A stream may be created with several partitions (:meth:`StreamOperations.create`), each
its own hash slot, so on Redis Cluster one stream spreads over the nodes. Every call
spans all partitions unless its options name one; records say which partition they came
from, and acks and nacks name it (``lua/README.md``, section Cluster).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.reclaim import RECLAIM_BATCH, ReapTarget
from flo_redis._session.session import Session
from flo_redis._wire.checks import MAX_LIST_LIMIT, check_optional_name
from flo_redis._wire.stream_codec import DEFAULT_COUNT
from flo_redis.durability import DurabilityLike
from flo_redis.errors import ServerError
from flo_redis.streams import acks, dead_letters, groups, inspect, records
from flo_redis.streams.dead_letters import DeadLetter, StreamDeadLetterOptions
from flo_redis.streams.groups import StreamGroupSettings
from flo_redis.streams.inspect import GroupCounts
from flo_redis.streams.partitions import StreamState, create_stream, partition_count
from flo_redis.types import (
    PendingEntry,
    StreamAppendOptions,
    StreamAppendResult,
    StreamClaimResult,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamInfo,
    StreamInfoOptions,
    StreamReadOptions,
    StreamReadResult,
    StreamTrimOptions,
    StreamTrimResult,
)

IdList = builtins.list[StreamID]
"""Stream ids (``list`` is a method of :class:`StreamOperations`)."""


class StreamOperations:
    """``client.stream``: append-only streams and consumer groups on Redis Streams, their
    dead letters, the namespace's streams and each group's lag."""

    def __init__(self, session: Session) -> None:
        self._state = StreamState(session)

    # --- plain streams ---------------------------------------------------------------

    async def append(
        self,
        stream: str,
        payload: bytes,
        options: StreamAppendOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> StreamAppendResult:
        """Append one record (``payload`` bytes, optional ``headers``) and wake blocked
        readers. The id is Redis's ``<ms>-<seq>``, increasing within its partition. A missing
        stream is created. On a partitioned stream, records with the same
        ``partition_key`` go to the same partition (in order); records without one are
        spread round-robin. :class:`ValueTooLargeError` for a payload over the client's
        ``max_payload_bytes``. ``durability``: this write's level, else the client's."""
        return await records.append(self._state, stream, payload, options, durability)

    async def read(self, stream: str, options: StreamReadOptions | None = None) -> StreamReadResult:
        """Up to ``count`` (default 100, at most 1000) records between ``start`` and ``end``
        (both inclusive; default the whole stream), oldest first; with ``tail`` the newest
        ``count`` of them (still oldest first). With ``block_ms`` > 0 and nothing to read,
        waits up to that long for an append. A missing stream reads as empty. A partitioned
        stream is read in every partition (or only ``partition``), merged in id order. A
        record whose stored headers do not decode is read with ``headers`` None (and
        logged once at WARNING)."""
        return await records.read(self._state, stream, options)

    async def info(self, stream: str, options: StreamInfoOptions | None = None) -> StreamInfo:
        """Record count, bytes held (payloads and headers), first and last id (MIN when
        empty) and partition count; of all partitions together (the lowest first id and
        the highest last id). A missing stream answers as empty."""
        return await records.info(self._state, stream, options)

    async def trim(self, stream: str, options: StreamTrimOptions | None = None) -> StreamTrimResult:
        """Remove the oldest records by exactly one bound: ``before`` (ids up to and
        including it), ``max_len`` (keep the newest n) or ``max_age_seconds`` (older than
        that, by server time). With ``dry_run`` nothing is removed and ``removed`` says what
        would be. Works in bounded steps (each atomic), so trimming a huge stream never
        stalls Redis. ``first_seq`` is the ordinal (1 = first ever appended) of the first
        record left. :class:`NotFoundError` for a missing stream. A partitioned stream is
        trimmed in every partition by the same bound (``max_len`` keeps the newest n of
        each partition)."""
        return await records.trim(self._state, stream, options)

    async def create(self, stream: str, partitions: int = 1, namespace: str | None = None) -> int:
        """Create ``stream`` with ``partitions`` partitions (1..1024), each in its own hash
        slot, and return the count. The count is fixed once recorded: creating again with
        the same count changes nothing, another count is refused with
        :class:`ConflictError`, and so is a count above 1 for a stream already used
        without one. A stream never created has one partition."""
        return await create_stream(self._state, stream, partitions, namespace)

    async def partitions(self, stream: str, namespace: str | None = None) -> int:
        """How many partitions ``stream`` has (1 unless it was created with more)."""
        return await partition_count(self._state, stream, namespace)

    # --- consumer groups -------------------------------------------------------------

    async def group_join(
        self, stream: str, group: str, consumer: str, options: StreamGroupJoinOptions | None = None
    ) -> None:
        """Join ``consumer`` to ``group``, creating the group when missing (at the
        beginning of the stream, so it reads every record still held) and the stream too;
        on every partition of a partitioned stream. ``ack_timeout_ms`` / ``max_deliver``
        given in the options are applied to the group."""
        await groups.join(self._state, stream, group, consumer, options)

    async def group_leave(
        self, stream: str, group: str, consumer: str, options: StreamGroupJoinOptions | None = None
    ) -> None:
        """Remove ``consumer`` from ``group`` (on every partition). A consumer still holding
        pending entries is kept until they are settled, so none is lost. A missing group
        is not an error."""
        await groups.leave(self._state, stream, group, consumer, options)

    async def group_read(
        self, stream: str, group: str, consumer: str, options: StreamGroupReadOptions | None = None
    ) -> StreamReadResult:
        """Hand up to ``count`` (default 100, at most 1000) entries to ``consumer``: first
        entries due again (nacked, or unacked past the group's ack timeout) with their
        delivery count raised, then new ones; all in one atomic step per partition. An
        entry already delivered ``max_deliver`` times goes to the dead letters instead.
        With ``block_ms`` > 0 and nothing to hand out, waits up to that long. The group is
        created when missing. Each record's ``delivery_count`` is the delivery's fencing
        token. A retry with the same ``poll_id`` (within two minutes) gets the entries
        that poll was handed instead of new ones. A partitioned stream is read from
        every partition (or only ``partition``), one script call each, starting at a
        different partition each call so that none is starved; a retry of a poll id this
        client sent before first replays what each partition handed to it (all of them,
        before any partition reads afresh, so a fresh read filling ``count`` never keeps
        a lost reply's entries from coming back), then fills ``count`` from the
        partitions that had nothing to replay."""
        return await groups.read(self._state, stream, group, consumer, options)

    async def group_pending(
        self,
        stream: str,
        group: str,
        consumer: str = "",
        options: StreamGroupReadOptions | None = None,
    ) -> builtins.list[PendingEntry]:
        """The group's pending (delivered, not acked) entries in id order, at most
        ``count`` (default and maximum 1000): the whole group's, or with ``consumer`` only
        that consumer's; of every partition (or only ``partition``), merged in id order.
        A missing stream or group has none."""
        return await groups.pending(self._state, stream, group, consumer, options)

    async def group_claim(
        self,
        stream: str,
        group: str,
        consumer: str,
        min_idle_ms: int,
        start_id: StreamID,
        count: int,
        options: StreamGroupReadOptions | None = None,
    ) -> StreamClaimResult:
        """Take a page of the group's pending entries for ``consumer``, scanning in id
        order from ``start_id``: its own entries, and with ``min_idle_ms`` > 0 also
        entries other consumers left idle at least that long (with 0 never theirs). Each
        is delivered again (delivery count raised; one already delivered ``max_deliver``
        times is dead-lettered instead). Pass ``next_cursor`` as the next ``start_id``
        until ``done``; a page inspects at most a bounded number of entries, so a page may
        be empty without being done. A missing stream or group answers done. A
        partitioned stream is scanned one partition after the other (``start_id`` applies
        to partition 0, later ones from their start); its ``next_cursor`` then names the
        partition too, so pass it back unchanged. With ``partition`` only that one is
        scanned, with plain ids."""
        where = (stream, group, consumer)
        return await groups.claim(self._state, where, min_idle_ms, start_id, count, options)

    async def group_ack(
        self,
        stream: str,
        group: str,
        ids: IdList,
        options: StreamGroupAckOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> None:
        """Acknowledge entries: they leave the group's pending list for good. Entries not
        pending (already acked) are skipped, so a resend succeeds. With ``token`` (the
        delivery count the caller was handed) the ack is refused with
        :class:`ConflictError` (reason ``STALE_REPORT``), changing nothing, if any entry
        was delivered again since; without it any consumer may ack (flo's behaviour).
        The ids are those of partition ``options.partition`` (0 unless the stream is
        partitioned). :class:`NotFoundError` if the stream or group does not exist."""
        await acks.settle(self._state, acks.ACK, stream, group, ids, options, durability)

    async def group_ack_many(
        self,
        stream: str,
        group: str,
        items: Sequence[tuple[StreamID, int | None]],
        consumer: str = "",
        partition: int = 0,
        namespace: str | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> builtins.list[ServerError | None]:
        """Acknowledge several entries, each with its own token (``None``: any consumer),
        under exactly :meth:`group_ack`'s rules, one call per 1000: ``None`` where the
        entry is acked (or already was), else the :class:`ConflictError`
        (``STALE_REPORT``) its single ack would have raised."""
        keys = await self._state.part(stream, namespace, partition)
        consumer = check_optional_name("consumer", consumer)
        packed = acks.ack_items(items)
        return await acks.ack_many(self._state, stream, group, keys, consumer, packed, durability)

    async def group_nack(
        self, stream: str, group: str, ids: IdList, options: StreamGroupNackOptions | None = None
    ) -> None:
        """Give entries back for redelivery: a later ``group_read`` hands each out again,
        before new entries, with its delivery count raised; one already delivered
        ``max_deliver`` times goes to the dead letters now. ``token`` and ``partition``
        as for :meth:`group_ack`. :class:`NotFoundError` if the stream or group does not
        exist."""
        await acks.settle(self._state, acks.NACK, stream, group, ids, options)

    # --- beyond flo: settings, gone consumers, dead letters, inspection --------------

    async def reclaim_gone_owners(
        self,
        stream: str,
        group: str,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        batch: int = RECLAIM_BATCH,
        namespace: str | None = None,
    ) -> int:
        """Give back the deliveries of worker processes that are gone (their liveness
        subscription absent past ``grace_ms``): each such entry is delivered again by the
        next group_read, its delivery count raised. Suspects are marked for later; a
        present owner's deliveries are never touched. Returns how many entries became
        due. StreamWorkers do this periodically (:func:`reap_target`)."""
        swept = await groups.reclaim(self._state, stream, group, grace_ms, batch, namespace)
        return swept.reclaimed

    async def group_settings(
        self, stream: str, group: str, namespace: str | None = None
    ) -> StreamGroupSettings:
        """The group's settings (the defaults for a group not created yet). Change them
        with ``group_join(..., StreamGroupJoinOptions(ack_timeout_ms=..., max_deliver=...))``."""
        return await groups.settings(self._state, stream, group, namespace)

    async def dead_letters(
        self, stream: str, group: str, options: StreamDeadLetterOptions | None = None
    ) -> builtins.list[DeadLetter]:
        """The group's dead letters, oldest first, from ``start`` (inclusive), at most
        ``count``; of every partition (or only ``partition``). Dead letters are kept up to
        about 10000 per group and partition (oldest dropped)."""
        return await dead_letters.listed(self._state, stream, group, options)

    async def replay_dead_letters(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID] | None = None,
        count: int = DEFAULT_COUNT,
        namespace: str | None = None,
        partition: int | None = None,
    ) -> builtins.list[StreamID]:
        """Append dead letters back to the stream as new records (same payload and
        headers) and remove them from the dead letters, atomically: the ones named by
        ``ids`` (dead-letter ids of ``partition``, default 0; unknown ones are skipped),
        or the oldest ``count`` (of every partition in turn, or only ``partition``); each
        goes back to the partition it came from. Returns the new record ids. Every group
        of the stream reads them as new records."""
        state = self._state
        return await dead_letters.replay(state, stream, group, ids, count, namespace, partition)

    async def list(
        self, namespace: str | None = None, limit: int = MAX_LIST_LIMIT
    ) -> tuple[str, ...]:
        """The streams of the namespace in name order (at most ``limit``, 1..1024): every
        stream created, appended to or joined by a consumer group."""
        return await inspect.names(self._state, namespace, limit)

    async def groups(self, stream: str, namespace: str | None = None) -> tuple[GroupCounts, ...]:
        """Every consumer group of ``stream`` with its lag, pending deliveries, consumers
        and dead letters, summed over the partitions; in group name order. A missing
        stream has no groups."""
        return await inspect.groups(self._state, stream, namespace)


def reap_target(
    streams: StreamOperations, stream: str, group: str, namespace: str | None = None
) -> ReapTarget:
    """What a :class:`~flo_redis._session.reclaim.Reaper` sweeps for consumer group
    ``group`` of ``client.stream``: the deliveries its gone consumers hold, on every
    partition (no upkeep: ``group_read`` itself hands out entries past their ack
    timeout)."""
    return groups.reclaim_target(streams._state, stream, group, namespace)


__all__ = ["StreamOperations", "reap_target"]
