"""flo's ``client.stream`` on Redis Streams: plain streams and consumer groups.

Every state change is one Lua script (``lua/stream_*.lua``, ``lua/group_*.lua``); this
module validates arguments before anything is sent, calls the scripts, waits for wake-ups
between attempts of a blocking read, and turns replies into flo's result classes.

What flo leaves open is settled here (``lua/README.md`` has the details): a group starts
at the beginning of its stream; a nacked entry, or one left unacked past the group's ack
timeout, is handed out again by a later ``group_read`` before new entries, with its
delivery count raised; an entry delivered ``max_deliver`` times without an ack moves to
the group's dead letters; an ack or nack that names its delivery's count (``token``) is
refused with ``STALE_REPORT`` once the entry was delivered again.

A stream may be created with several partitions (:meth:`StreamOperations.create`), each
its own hash slot, so on Redis Cluster one stream spreads over the nodes. Every call
spans all partitions unless its options name one; records say which partition they came
from, and acks and nacks name it (``lua/README.md``, section Cluster).
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from . import _scripts
from ._checks import check_count, check_list, check_optional_name, check_options, token_arg
from ._gateway import (
    GROUP_ACK,
    GROUP_ACK_MANY,
    GROUP_CLAIM,
    GROUP_JOIN,
    GROUP_LEAVE,
    GROUP_NACK,
    GROUP_PENDING,
    GROUP_READ,
    GROUP_RECLAIM,
    GROUP_REPLAY,
    STREAM_APPEND,
    STREAM_CREATE,
    STREAM_INFO,
    STREAM_READ,
    STREAM_TRIM,
    Script,
)
from ._partitions import (
    PartitionCounts,
    decode_cursor,
    encode_cursor,
    partition_arg,
    partition_of_key,
    partitions_arg,
)
from ._status import Status, refusal
from ._stream_codec import (
    MAX_COUNT,
    block_ms_arg,
    count_arg,
    decode_headers,
    headers_arg,
    ids_arg,
    merge,
    positive_arg,
    sid,
    stream_id_arg,
)
from ._stream_replies import Settled
from ._wake import Attempt, long_poll
from .codec import pack, text
from .errors import ServerError, ValidationError, ValueTooLargeError
from .keys import (
    GroupKeys,
    StreamKeys,
    check_name,
    stream_keys,
)
from .liveness import DEFAULT_GRACE_MS
from .reclaim import (
    NOTHING,
    RECLAIM_BATCH,
    RECLAIM_BATCH_MAX,
    ReapTarget,
    ReclaimResult,
    sweep,
)
from .session import Session
from .stream_ops import StreamInspection
from .types import (
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
    StreamRecord,
    StreamTrimOptions,
    StreamTrimResult,
)

DEFAULT_COUNT = 100
CLAIM_SCAN = 1000  # pending entries one group_claim call inspects at most
TRIM_BATCH = 1000  # records one trim script call removes (or counts) at most
DEFAULT_ACK_TIMEOUT_MS = 30_000
DEFAULT_MAX_DELIVER = 10


# -----------------------------------------------------------------------------
# Results beyond flo's
# -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamGroupSettings:
    """A group's settings: ``ack_timeout_ms`` (0: never redeliver on timeout) and
    ``max_deliver`` (deliveries before an entry is dead-lettered)."""

    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    max_deliver: int = DEFAULT_MAX_DELIVER


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An entry a group gave up on: ``id`` is its place among the group's dead letters,
    ``original_id`` its id in the stream, ``delivery_count`` how often it was delivered,
    ``reason`` why it was given up (``nacked``, ``ack_timeout`` or ``max_deliver``),
    ``consumer``/``owner`` who held its last delivery, ``dead_at_ms`` when (server time)."""

    id: StreamID
    original_id: StreamID
    payload: bytes
    headers: dict[str, str] | None
    delivery_count: int
    reason: str
    consumer: str
    owner: str
    dead_at_ms: int
    partition: int = 0


@dataclass
class StreamDeadLetterOptions:
    """Options for ``dead_letters``: from ``start`` (inclusive, None: the oldest), at
    most ``count`` (1..1000); ``partition`` limits it to one partition (None: all)."""

    namespace: str | None = None
    start: StreamID | None = None
    count: int = DEFAULT_COUNT
    partition: int | None = None


def _reclaim_refused(status: int) -> Exception | None:
    if status == Status.NO_GROUP:
        return None  # no group on this partition: nothing to give back
    return refusal(status, "reclaim: grace_ms or batch out of range")


def reap_target(
    streams: StreamOperations, stream: str, group: str, namespace: str | None = None
) -> ReapTarget:
    """What a :class:`~flo_redis.reclaim.Reaper` sweeps for consumer group ``group``: the
    deliveries its gone consumers hold, on every partition (no upkeep: ``group_read``
    itself hands out entries past their ack timeout)."""
    check_name("group name", group)

    async def swept(grace_ms: int) -> ReclaimResult:
        return await streams._reclaim(stream, group, grace_ms, RECLAIM_BATCH, namespace)

    return ReapTarget(f"{stream}/{group}", swept)


class _PerPartition(Protocol):
    @property
    def id(self) -> StreamID: ...

    @property
    def partition(self) -> int: ...


P = TypeVar("P", bound=_PerPartition)


def _merged(batches: Sequence[Sequence[P]], count: int) -> builtins.list[P]:
    """The first ``count`` items of per-partition batches, in id order (then partition)."""
    items = [item for batch in batches for item in batch]
    items.sort(key=lambda item: (item.id.as_tuple(), item.partition))
    return items[:count]


def _dead_letter(entry_id: bytes, fields: dict[bytes, bytes], partition: int) -> DeadLetter:
    return DeadLetter(
        id=sid(entry_id),
        original_id=sid(fields[b"id"]),
        payload=bytes(fields.get(b"p", b"")),
        headers=decode_headers(fields.get(b"h", b"")),
        delivery_count=int(fields.get(b"n", 0)),
        reason=text(fields.get(b"r")) or "",
        consumer=text(fields.get(b"c")) or "",
        owner=text(fields.get(b"o")) or "",
        dead_at_ms=int(fields.get(b"t", 0)),
        partition=partition,
    )


# -----------------------------------------------------------------------------
# client.stream
# -----------------------------------------------------------------------------


class StreamOperations(StreamInspection):
    """``client.stream``: append-only streams and consumer groups on Redis Streams; the
    namespace's streams and each group's lag and dead letters come from
    :class:`StreamInspection`."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._counts = PartitionCounts(session)
        self._turn: dict[tuple[str, ...], itertools.count[int]] = {}
        self._listed: set[tuple[str, str]] = set()

    def _keys(self, stream: str, namespace: str | None) -> StreamKeys:
        return stream_keys(self._session.get_namespace(namespace), stream)

    def _group_keys(
        self, stream: str, group: str, namespace: str | None
    ) -> tuple[StreamKeys, GroupKeys]:
        keys = self._keys(stream, namespace)
        return keys, keys.group(group)

    async def _partitions(
        self, stream: str, namespace: str | None, only: int | None = None
    ) -> builtins.list[StreamKeys]:
        """Keys of every partition of ``stream`` (or only of partition ``only``)."""
        first = self._keys(stream, namespace)
        count = await self._counts.get(first.namespace, stream, first.meta)
        if only is not None:
            return [stream_keys(first.namespace, stream, partition_arg(stream, only, count))]
        return [first] + [stream_keys(first.namespace, stream, p) for p in range(1, count)]

    def _next_turn(self, *key: str) -> int:
        """A per-client counter (round-robin appends, fair group reads)."""
        counter = self._turn.get(key)
        if counter is None:
            counter = self._turn[key] = itertools.count()
        return next(counter)

    async def _long_poll(
        self,
        parts: Sequence[StreamKeys],
        block_ms: int,
        attempt: Callable[[], Awaitable[Attempt[StreamRecord]]],
    ) -> builtins.list[StreamRecord]:
        """Records of ``attempt``, waiting on the partitions' wake channels (see
        :func:`flo_redis._wake.long_poll`); ``due_ms`` is ms from now."""
        return await long_poll(self._session.waker, [k.wake for k in parts], block_ms, attempt)

    # --- partitions ------------------------------------------------------------------

    async def create(self, stream: str, partitions: int = 1, namespace: str | None = None) -> int:
        """Create ``stream`` with ``partitions`` partitions (1..1024), each in its own hash
        slot, and return the count. The count is fixed once recorded: creating again with
        the same count changes nothing, another count is refused with
        :class:`ConflictError`, and so is a count above 1 for a stream already used
        without one. A stream never created has one partition."""
        count = partitions_arg(partitions)
        keys = self._keys(stream, namespace)
        reply = await STREAM_CREATE(self._session, keys, [count])
        recorded = reply.value
        if reply.status == Status.CONFLICT:
            raise refusal(
                Status.CONFLICT,
                f"stream {stream!r} in namespace {keys.namespace!r} already has {recorded} "
                f"partition(s); the count is fixed when a stream is first created or used",
            )
        self._counts.remember(keys.namespace, stream, recorded)
        await self._remember_stream(keys.namespace, stream)
        return recorded

    async def partitions(self, stream: str, namespace: str | None = None) -> int:
        """How many partitions ``stream`` has (1 unless it was created with more)."""
        keys = self._keys(stream, namespace)
        return await self._counts.get(keys.namespace, stream, keys.meta)

    # --- plain streams -------------------------------------------------------------

    async def append(
        self,
        stream: str,
        payload: bytes,
        options: StreamAppendOptions | None = None,
    ) -> StreamAppendResult:
        """Append one record (``payload`` bytes, optional ``headers``) and wake blocked
        readers. The id is Redis's ``<ms>-<seq>``, increasing within its partition. A missing
        stream is created. On a partitioned stream, records with the same
        ``partition_key`` go to the same partition (in order); records without one are
        spread round-robin. :class:`ValueTooLargeError` for a payload over the client's
        ``max_payload_bytes``."""
        opts = check_options(options, StreamAppendOptions)
        first = self._keys(stream, opts.namespace)
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValidationError(f"payload must be bytes, got {type(payload).__name__}")
        data = bytes(payload)
        if len(data) > self._session.max_payload_bytes:
            raise ValueTooLargeError(
                f"payload is {len(data)} bytes; the limit is {self._session.max_payload_bytes} "
                "(raise the client's max_payload_bytes or store large data elsewhere)"
            )
        if opts.partition_key is not None and not isinstance(opts.partition_key, str):
            raise ValidationError(
                f"partition_key must be a str, got {type(opts.partition_key).__name__}"
            )
        headers = headers_arg(opts.headers)
        count = await self._counts.get(first.namespace, stream, first.meta)
        partition = 0
        if count > 1:
            if opts.partition_key is not None:
                partition = partition_of_key(opts.partition_key, count)
            else:
                partition = self._next_turn(first.namespace, stream) % count
        keys = first if partition == 0 else stream_keys(first.namespace, stream, partition)
        reply = await STREAM_APPEND(self._session, keys, [data, headers])
        await self._remember_stream(first.namespace, stream)
        return StreamAppendResult(id=reply.id, partition=partition)

    async def read(
        self,
        stream: str,
        options: StreamReadOptions | None = None,
    ) -> StreamReadResult:
        """Up to ``count`` (default 100, at most 1000) records between ``start`` and ``end``
        (both inclusive; default the whole stream), oldest first; with ``tail`` the newest
        ``count`` of them (still oldest first). With ``block_ms`` > 0 and nothing to read,
        waits up to that long for an append. A missing stream reads as empty. A partitioned
        stream is read in every partition (or only ``partition``), merged in id order."""
        opts = check_options(options, StreamReadOptions)
        parts = await self._partitions(stream, opts.namespace, opts.partition)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        block_ms = block_ms_arg(opts.block_ms)
        if opts.tail and opts.start is not None:
            raise ValidationError("tail and start exclude each other; set one of them")
        start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
        end = "+" if opts.end is None else stream_id_arg("end", opts.end).to_redis()
        if opts.start is not None and opts.end is not None and opts.start > opts.end:
            raise ValidationError(f"start {opts.start} is after end {opts.end}")
        args: builtins.list[_scripts.Arg] = [start, end, count, "1" if opts.tail else "0"]

        async def read_one(keys: StreamKeys) -> builtins.list[StreamRecord]:
            return (await STREAM_READ(self._session, keys, args)).records

        async def attempt() -> Attempt[StreamRecord]:
            if len(parts) == 1:
                return Attempt(await read_one(parts[0]))
            batches = await asyncio.gather(*(read_one(k) for k in parts))
            return Attempt(merge(batches, count, opts.tail))

        return StreamReadResult(records=await self._long_poll(parts, block_ms, attempt))

    async def info(
        self,
        stream: str,
        options: StreamInfoOptions | None = None,
    ) -> StreamInfo:
        """Record count, bytes held (payloads and headers), first and last id (MIN when
        empty) and partition count; of all partitions together (the lowest first id and
        the highest last id). A missing stream answers as empty."""
        opts = check_options(options, StreamInfoOptions)
        parts = await self._partitions(stream, opts.namespace)
        replies = await asyncio.gather(*(STREAM_INFO(self._session, k) for k in parts))
        held = [r for r in replies if r.count > 0]
        return StreamInfo(
            count=sum(r.count for r in replies),
            bytes_size=sum(r.bytes_size for r in replies),
            first_id=min((r.first_id for r in held), default=StreamID()),
            last_id=max((r.last_id for r in held), default=StreamID()),
            partition_count=len(parts),
        )

    async def trim(
        self,
        stream: str,
        options: StreamTrimOptions | None = None,
    ) -> StreamTrimResult:
        """Remove the oldest records by exactly one bound: ``before`` (ids up to and
        including it), ``max_len`` (keep the newest n) or ``max_age_seconds`` (older than
        that, by server time). With ``dry_run`` nothing is removed and ``removed`` says what
        would be. Works in bounded steps (each atomic), so trimming a huge stream never
        stalls Redis. ``first_seq`` is the ordinal (1 = first ever appended) of the first
        record left. :class:`NotFoundError` for a missing stream. A partitioned stream is
        trimmed in every partition by the same bound (``max_len`` keeps the newest n of
        each partition)."""
        opts = check_options(options, StreamTrimOptions)
        parts = await self._partitions(stream, opts.namespace)
        set_bounds = [
            name
            for name, value in (
                ("before", opts.before),
                ("max_len", opts.max_len),
                ("max_age_seconds", opts.max_age_seconds),
            )
            if value is not None
        ]
        if len(set_bounds) != 1:
            got = ", ".join(set_bounds) or "none"
            raise ValidationError(
                f"set exactly one of before, max_len, max_age_seconds (got {got})"
            )
        mode: str
        bound: str
        if opts.before is not None:
            mode, bound = "before", stream_id_arg("before", opts.before).to_redis()
        elif opts.max_len is not None:
            mode, bound = "max_len", str(positive_arg("max_len", opts.max_len))
        else:
            mode, bound = "max_age", str(positive_arg("max_age_seconds", opts.max_age_seconds))
        outcomes = await asyncio.gather(
            *(self._trim_partition(k, mode, bound, opts.dry_run) for k in parts)
        )
        found = [o for o in outcomes if o is not None]
        if not found:
            raise refusal(
                Status.NOT_FOUND,
                f"stream {stream!r} not found in namespace {parts[0].namespace!r}; nothing to trim",
            )
        removed = sum(o[0] for o in found)
        left = sum(o[1] for o in found)
        added = sum(o[2] for o in found)
        return StreamTrimResult(removed=removed, first_seq=added - left + 1)

    async def _trim_partition(
        self, keys: StreamKeys, mode: str, bound: str, dry_run: bool
    ) -> tuple[int, int, int] | None:
        """Trim one partition in bounded steps: (removed, records left, entries ever
        added), or None when the partition does not exist."""
        dry = "1" if dry_run else "0"
        removed, after = 0, ""
        while True:
            reply = await STREAM_TRIM(self._session, keys, [mode, bound, dry, after, TRIM_BATCH])
            if reply.status == Status.NOT_FOUND:
                return None
            removed += reply.removed
            if reply.cutoff:
                mode, bound = "below", reply.cutoff
            length, added = reply.length, reply.entries_added
            if not reply.more:
                break
            if dry_run:
                after = reply.last_id
        left = length - removed if dry_run else length
        return removed, left, added

    # --- consumer groups -----------------------------------------------------------

    async def group_join(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupJoinOptions | None = None,
    ) -> None:
        """Join ``consumer`` to ``group``, creating the group when missing (at the
        beginning of the stream, so it reads every record still held) and the stream too;
        on every partition of a partitioned stream. ``ack_timeout_ms`` / ``max_deliver``
        given in the options are applied to the group."""
        opts = check_options(options, StreamGroupJoinOptions)
        check_name("group name", group)
        check_name("consumer", consumer)
        opts.__post_init__()
        parts = await self._partitions(stream, opts.namespace)
        args: builtins.list[_scripts.Arg] = [
            group,
            consumer,
            "" if opts.ack_timeout_ms is None else opts.ack_timeout_ms,
            "" if opts.max_deliver is None else opts.max_deliver,
        ]
        await asyncio.gather(*(GROUP_JOIN(self._session, (k, k.group(group)), args) for k in parts))
        ns = parts[0].namespace
        await self._remember_stream(ns, stream)

    async def group_leave(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupJoinOptions | None = None,
    ) -> None:
        """Remove ``consumer`` from ``group`` (on every partition). A consumer still holding
        pending entries is kept until they are settled, so none is lost. A missing group
        is not an error."""
        opts = check_options(options, StreamGroupJoinOptions)
        check_name("group name", group)
        check_name("consumer", consumer)
        parts = await self._partitions(stream, opts.namespace)
        await asyncio.gather(
            *(GROUP_LEAVE(self._session, (k, k.group(group)), [group, consumer]) for k in parts)
        )

    async def group_read(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupReadOptions | None = None,
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
        different partition each call so that none is starved."""
        opts = check_options(options, StreamGroupReadOptions)
        check_name("group name", group)
        check_name("consumer", consumer)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        block_ms = block_ms_arg(opts.block_ms)
        if opts.poll_id is not None:
            check_name("poll_id", opts.poll_id)
        parts = await self._partitions(stream, opts.namespace, opts.partition)
        owner = self._session.owner_id
        poll_id = opts.poll_id or ""

        async def read_one(keys: StreamKeys, room: int) -> Attempt[StreamRecord]:
            reply = await GROUP_READ(
                self._session, (keys, keys.group(group)), [group, consumer, owner, room, poll_id]
            )
            return Attempt(reply.records, reply.wait_ms)

        async def attempt() -> Attempt[StreamRecord]:
            if len(parts) == 1:
                return await read_one(parts[0], count)
            first = self._next_turn(parts[0].namespace, stream, group) % len(parts)
            got: builtins.list[StreamRecord] = []
            waits: builtins.list[int] = []
            for keys in parts[first:] + parts[:first]:
                if len(got) >= count:
                    break
                found = await read_one(keys, count - len(got))
                got += found.items
                if found.due_ms >= 0:
                    waits.append(found.due_ms)
            return Attempt(got, min(waits, default=-1))

        return StreamReadResult(records=await self._long_poll(parts, block_ms, attempt))

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
        opts = check_options(options, StreamGroupReadOptions)
        check_name("group name", group)
        if consumer:
            check_name("consumer", consumer)
        count = count_arg("count", opts.count, MAX_COUNT)
        parts = await self._partitions(stream, opts.namespace, opts.partition)

        async def pending_one(keys: StreamKeys) -> builtins.list[PendingEntry]:
            reply = await GROUP_PENDING(
                self._session, (keys, keys.group(group)), [group, consumer, "-", count]
            )
            return [
                PendingEntry(
                    id=row.id,
                    consumer=row.consumer,
                    delivery_count=row.delivery_count,
                    idle_ms=row.idle_ms,
                    partition=keys.partition,
                )
                for row in reply.rows
            ]

        return _merged(await asyncio.gather(*(pending_one(k) for k in parts)), count)

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
        opts = check_options(options, StreamGroupReadOptions)
        check_name("group name", group)
        check_name("consumer", consumer)
        if isinstance(min_idle_ms, bool) or not isinstance(min_idle_ms, int) or min_idle_ms < 0:
            raise ValidationError(f"min_idle_ms must be an int >= 0, got {min_idle_ms!r}")
        start = stream_id_arg("start_id", start_id)
        take = count_arg("count", count, DEFAULT_COUNT)
        parts = await self._partitions(stream, opts.namespace, opts.partition)
        if len(parts) == 1:
            got, next_id = await self._claim_one(
                parts[0], stream, group, consumer, min_idle_ms, start, take
            )
            done = next_id is None
            return StreamClaimResult(
                records=got, next_cursor=StreamID.MAX if next_id is None else next_id, done=done
            )
        partition, entry = decode_cursor(start)
        records_: builtins.list[StreamRecord] = []
        while partition < len(parts):
            got, next_id = await self._claim_one(
                parts[partition], stream, group, consumer, min_idle_ms, entry,
                take - len(records_),
            )  # fmt: skip
            records_ += got
            if next_id is not None:
                return StreamClaimResult(
                    records=records_, next_cursor=encode_cursor(partition, next_id), done=False
                )
            partition, entry = partition + 1, StreamID()
            if len(records_) >= take and partition < len(parts):
                return StreamClaimResult(
                    records=records_, next_cursor=encode_cursor(partition, entry), done=False
                )
        return StreamClaimResult(records=records_, next_cursor=StreamID.MAX, done=True)

    async def _claim_one(
        self,
        keys: StreamKeys,
        stream: str,
        group: str,
        consumer: str,
        min_idle_ms: int,
        start: StreamID,
        take: int,
    ) -> tuple[builtins.list[StreamRecord], StreamID | None]:
        """One claim page of one partition: its records and the next id (None: done)."""
        reply = await GROUP_CLAIM(
            self._session,
            (keys, keys.group(group)),
            [
                group,
                consumer,
                self._session.owner_id,
                min_idle_ms,
                start.to_redis(),
                take,
                CLAIM_SCAN,
            ],
        )
        return reply.records, reply.next_id

    async def group_ack(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID],
        options: StreamGroupAckOptions | None = None,
    ) -> None:
        """Acknowledge entries: they leave the group's pending list for good. Entries not
        pending (already acked) are skipped, so a resend succeeds. With ``token`` (the
        delivery count the caller was handed) the ack is refused with
        :class:`ConflictError` (reason ``STALE_REPORT``), changing nothing, if any entry
        was delivered again since; without it any consumer may ack (flo's behaviour).
        The ids are those of partition ``options.partition`` (0 unless the stream is
        partitioned). :class:`NotFoundError` if the stream or group does not exist."""
        if not ids:
            return
        opts = check_options(options, StreamGroupAckOptions)
        await self._settle(
            GROUP_ACK,
            stream,
            group,
            ids,
            opts.namespace,
            opts.consumer,
            opts.token,
            opts.partition,
        )

    async def group_ack_many(
        self,
        stream: str,
        group: str,
        items: Sequence[tuple[StreamID, int | None]],
        consumer: str = "",
        partition: int = 0,
        namespace: str | None = None,
    ) -> builtins.list[ServerError | None]:
        """Acknowledge several entries, each with its own token (``None``: any consumer),
        under exactly :meth:`group_ack`'s rules, one call per 1000: ``None`` where the
        entry is acked (or already was), else the :class:`ConflictError`
        (``STALE_REPORT``) its single ack would have raised."""
        keys = self._keys(stream, namespace)
        if partition != 0:
            (keys,) = await self._partitions(stream, namespace, partition)
        gk = keys.group(group)
        consumer = check_optional_name("consumer", consumer)
        pairs = check_list("items", items)
        for n, item in enumerate(pairs):
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise ValidationError(f"items[{n}] must be an (entry id, token or None) pair")
        tokens = [
            "" if t is None else token_arg(t)  # token_arg: an int in [1, 2**53]
            for _, t in pairs
        ]
        packed = [[i, t] for i, t in zip(ids_arg([item[0] for item in pairs]), tokens, strict=True)]
        answers: builtins.list[ServerError | None] = []
        for start in range(0, len(packed), MAX_COUNT):
            chunk = packed[start : start + MAX_COUNT]
            reply = await GROUP_ACK_MANY(self._session, (keys, gk), [group, consumer, pack(chunk)])
            if reply.status == Status.NO_GROUP:
                raise refusal(
                    Status.NO_GROUP,
                    f"group {group!r} of stream {stream!r} not found in namespace "
                    f"{keys.namespace!r}; join it first (group_join)",
                )
            for (entry_id, token), item in zip(chunk, reply.items, strict=True):
                status, current = item.status, item.current_count
                answers.append(
                    None
                    if status == Status.OK
                    else refusal(
                        status,
                        f"entry {entry_id} of stream {stream!r} (group {group!r}) was "
                        f"delivered again since delivery {token} (now delivery {current}); "
                        "the ack was dropped",
                    )
                )
        return answers

    async def group_nack(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID],
        options: StreamGroupNackOptions | None = None,
    ) -> None:
        """Give entries back for redelivery: a later ``group_read`` hands each out again,
        before new entries, with its delivery count raised; one already delivered
        ``max_deliver`` times goes to the dead letters now. ``token`` and ``partition``
        as for :meth:`group_ack`. :class:`NotFoundError` if the stream or group does not
        exist."""
        if not ids:
            return
        opts = check_options(options, StreamGroupNackOptions)
        await self._settle(
            GROUP_NACK,
            stream,
            group,
            ids,
            opts.namespace,
            opts.consumer,
            opts.token,
            opts.partition,
        )

    async def _settle(
        self,
        script: Script[Settled],
        stream: str,
        group: str,
        ids: Sequence[StreamID],
        namespace: str | None,
        consumer: str,
        token: int | None,
        partition: int,
    ) -> None:
        keys = self._keys(stream, namespace)
        if partition != 0:
            (keys,) = await self._partitions(stream, namespace, partition)
        gk = keys.group(group)
        consumer = check_optional_name("consumer", consumer)
        if token is not None and (
            isinstance(token, bool) or not isinstance(token, int) or token < 1
        ):
            raise ValidationError(f"token must be an int >= 1 (a delivery count), got {token!r}")
        redis_ids = ids_arg(ids)
        fence = "" if token is None else str(token)
        for i in range(0, len(redis_ids), MAX_COUNT):
            chunk = redis_ids[i : i + MAX_COUNT]
            reply = await script(self._session, (keys, gk), [group, consumer, fence, pack(chunk)])
            status = reply.status
            if status == Status.NO_GROUP:
                raise refusal(
                    status,
                    f"group {group!r} of stream {stream!r} not found in namespace "
                    f"{keys.namespace!r}; join it first (group_join)",
                )
            if status == Status.STALE:
                verb = "ack" if script is GROUP_ACK else "nack"
                raise refusal(
                    status,
                    f"entry {reply.stale_id} of stream {stream!r} (group {group!r}) was "
                    f"delivered again since delivery {token} (now delivery "
                    f"{reply.current_count}, held by {reply.holder!r}); the {verb} was "
                    "refused and changed nothing",
                )

    # --- beyond flo: settings and dead letters --------------------------------------

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
        return (await self._reclaim(stream, group, grace_ms, batch, namespace)).reclaimed

    async def _reclaim(
        self, stream: str, group: str, grace_ms: int, batch: int, namespace: str | None
    ) -> ReclaimResult:
        """One reclaim pass over every partition of ``group`` (:func:`flo_redis.reclaim.sweep`)."""
        check_count("grace_ms", grace_ms, 0, 2**32 - 1)
        check_count("batch", batch, 1, RECLAIM_BATCH_MAX)
        total = NOTHING
        for keys in await self._partitions(stream, namespace):
            swept = await sweep(
                self._session,
                GROUP_RECLAIM,
                (keys, keys.group(group)),
                [group, grace_ms, batch],
                _reclaim_refused,
            )
            total = total.plus(swept)
        return total

    async def group_settings(
        self, stream: str, group: str, namespace: str | None = None
    ) -> StreamGroupSettings:
        """The group's settings (the defaults for a group not created yet). Change them
        with ``group_join(..., StreamGroupJoinOptions(ack_timeout_ms=..., max_deliver=...))``."""
        _, gk = self._group_keys(stream, group, namespace)
        with _scripts.redis_errors("group_settings"):
            raw = await self._session.redis.hmget(gk.config, ["ack_timeout_ms", "max_deliver"])
        return StreamGroupSettings(
            ack_timeout_ms=int(raw[0]) if raw[0] is not None else DEFAULT_ACK_TIMEOUT_MS,
            max_deliver=int(raw[1]) if raw[1] is not None else DEFAULT_MAX_DELIVER,
        )

    async def dead_letters(
        self,
        stream: str,
        group: str,
        options: StreamDeadLetterOptions | None = None,
    ) -> builtins.list[DeadLetter]:
        """The group's dead letters, oldest first, from ``start`` (inclusive), at most
        ``count``; of every partition (or only ``partition``). Dead letters are kept up to
        about 10000 per group and partition (oldest dropped)."""
        opts = check_options(options, StreamDeadLetterOptions)
        check_name("group name", group)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
        parts = await self._partitions(stream, opts.namespace, opts.partition)

        async def letters(keys: StreamKeys) -> builtins.list[DeadLetter]:
            with _scripts.redis_errors("dead_letters"):
                entries: Any = await self._session.redis.xrange(
                    keys.group(group).dead, start, "+", count=count
                )
            return [_dead_letter(i, fields, keys.partition) for i, fields in entries]

        return _merged(await asyncio.gather(*(letters(k) for k in parts)), count)

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
        check_name("group name", group)
        take = count_arg("count", count, DEFAULT_COUNT)
        named = b""
        if ids is not None:
            names = ids_arg(ids)
            if not names:
                return []
            if len(names) > MAX_COUNT:
                raise ValidationError(f"replay at most {MAX_COUNT} dead letters per call")
            take, named = len(names), pack(names)
            partition = partition or 0
        parts = await self._partitions(stream, namespace, partition)
        replayed: builtins.list[StreamID] = []
        for keys in parts:
            if len(replayed) >= take:
                break
            reply = await GROUP_REPLAY(
                self._session, (keys, keys.group(group)), [named, take - len(replayed)]
            )
            replayed += reply.new_ids
        return replayed
