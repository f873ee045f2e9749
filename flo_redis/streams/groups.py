"""Consumer groups of ``client.stream``: join and leave, read, pending, claim, the
group's settings, and giving back what gone consumers held (acks and nacks:
:mod:`flo_redis.streams.acks`).

What flo leaves open is settled here (``lua/README.md`` has the details): a group starts
at the beginning of its stream; a nacked entry, or one left unacked past the group's ack
timeout, is handed out again by a later ``group_read`` before new entries, with its
delivery count raised; an entry delivered ``max_deliver`` times without an ack moves to
the group's dead letters (:mod:`flo_redis.streams.dead_letters`); an ack or nack that
names its delivery's count (``token``) is refused with ``STALE_REPORT`` once the entry
was delivered again. On a partitioned stream each call spans every partition unless its
options name one; acks and nacks name the partition of their entries.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.reclaim import (
    NOTHING,
    RECLAIM_BATCH,
    RECLAIM_BATCH_MAX,
    ReapTarget,
    ReclaimResult,
    sweep,
)
from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt
from flo_redis._wire import runner
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import check_count, check_options, stored_or
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import (
    GROUP_CLAIM,
    GROUP_JOIN,
    GROUP_LEAVE,
    GROUP_PENDING,
    GROUP_QUARANTINE,
    GROUP_READ,
    GROUP_RECLAIM,
)
from flo_redis._wire.keys import StreamKeys, check_name
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.stream_codec import (
    DEFAULT_COUNT,
    MAX_COUNT,
    block_ms_arg,
    count_arg,
    stream_id_arg,
)
from flo_redis._wire.stream_replies import BadEntry
from flo_redis.streams.partitions import PartitionedStreams, merged
from flo_redis.streams.placement import decode_cursor, encode_cursor
from flo_redis.types import (
    PendingEntry,
    StreamClaimResult,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamReadResult,
    StreamRecord,
)
from flo_redis.types.base import LUA_INT, U32

log = logging.getLogger("flo_redis.streams")

CLAIM_SCAN = 1000  # pending entries one group_claim call inspects at most
DEFAULT_ACK_TIMEOUT_MS = 30_000
DEFAULT_MAX_DELIVER = 10


@dataclass(frozen=True, slots=True)
class StreamGroupSettings:
    """A group's settings: ``ack_timeout_ms`` (0: never redeliver on timeout) and
    ``max_deliver`` (deliveries before an entry is dead-lettered)."""

    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    max_deliver: int = DEFAULT_MAX_DELIVER


def no_group(keys: StreamKeys, group: str) -> Exception:
    return refusal(
        Status.NO_GROUP,
        f"group {group!r} of stream {keys.stream!r} not found in namespace "
        f"{keys.namespace!r}; join it first (group_join)",
    )


async def set_aside(
    session: Session,
    keys: StreamKeys,
    group: str,
    records: builtins.list[StreamRecord],
    bad: Sequence[BadEntry],
) -> builtins.list[StreamRecord]:
    """``records`` without the ``bad`` ones (headers that do not decode), which are set
    aside into the group's quarantine (``group_quarantine``) as the deliveries they are,
    each logged once; the group's other entries go on. Should that call fail, the bad
    entries still stay out, and come back at their ack timeout to be set aside then."""
    flat: builtins.list[str | int] = []
    for entry in bad:
        flat += (entry.record.id.to_redis(), entry.record.delivery_count, entry.reason)
    try:
        reply = await GROUP_QUARANTINE(session, (keys, keys.group(group)), [group, pack(flat)])
    except Exception as exc:
        log.warning(
            "group %r of stream %r: could not set aside %d record(s) whose headers do not "
            "decode (%s); they come back at their ack timeout",
            group,
            keys.stream,
            len(bad),
            exc,
        )
    else:
        why = {entry.record.id.to_redis(): entry.reason for entry in bad}
        aside = [SetAside("entry", i, why.get(i, "")) for i in reply.ids]
        warn_set_aside(scope_of((keys, keys.group(group))), aside)
    skip = {id(entry.record) for entry in bad}
    return [r for r in records if id(r) not in skip]


def _reclaim_refused(status: int) -> Exception | None:
    if status == Status.NO_GROUP:
        return None  # no group on this partition: nothing to give back
    return refusal(status, "reclaim: grace_ms or batch out of range")


def reap_target(
    streams: ConsumerGroups, stream: str, group: str, namespace: str | None = None
) -> ReapTarget:
    """What a :class:`~flo_redis._session.reclaim.Reaper` sweeps for consumer group ``group``: the
    deliveries its gone consumers hold, on every partition (no upkeep: ``group_read``
    itself hands out entries past their ack timeout)."""
    check_name("group name", group)

    async def swept(grace_ms: int) -> ReclaimResult:
        return await streams._reclaim(stream, group, grace_ms, RECLAIM_BATCH, namespace)

    return ReapTarget(f"{stream}/{group}", swept)


class ConsumerGroups(PartitionedStreams):
    """``client.stream``'s consumer-group calls."""

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
        parts = await self._partitions(stream, opts.namespace)
        args: builtins.list[runner.Arg] = [
            group,
            consumer,
            "" if opts.ack_timeout_ms is None else opts.ack_timeout_ms,
            "" if opts.max_deliver is None else opts.max_deliver,
        ]
        await self._remember_stream(parts[0].namespace, stream)  # first: see append
        await asyncio.gather(*(GROUP_JOIN(self._session, (k, k.group(group)), args) for k in parts))

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
        different partition each call so that none is starved; a retry of a poll id this
        client sent before first replays what each partition handed to it (all of them,
        before any partition reads afresh, so a fresh read filling ``count`` never keeps
        a lost reply's entries from coming back), then fills ``count`` from the
        partitions that had nothing to replay."""
        since = self._session.waker.generation  # an interrupt from here on ends this read
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
        order, retry = parts, False
        if len(parts) > 1:  # once per call: every look of one long poll starts there
            ns = parts[0].namespace
            first = self._next_turn(ns, stream, group) % len(parts)
            order = parts[first:] + parts[:first]
            retry = self._sent_before(poll_id, ns, stream, group)

        async def read_one(keys: StreamKeys, room: int) -> Attempt[StreamRecord]:
            """``room`` 0: only what ``poll_id`` was handed there and is still held."""
            reply = await GROUP_READ(
                self._session, (keys, keys.group(group)), [group, consumer, owner, room, poll_id]
            )
            got = reply.records
            if reply.bad:
                got = await set_aside(self._session, keys, group, got, reply.bad)
            return Attempt(got, reply.wait_ms)

        async def attempt() -> Attempt[StreamRecord]:
            nonlocal retry
            if len(parts) == 1:
                return await read_one(parts[0], count)
            got: builtins.list[StreamRecord] = []
            waits: builtins.list[int] = []
            replayed: set[int] = set()  # read again, these would replay again
            if retry:  # the first look of a retried poll
                retry = False
                for keys in parts:
                    found = await read_one(keys, 0)
                    if found.items:
                        replayed.add(keys.partition)
                        got += found.items
                    if found.due_ms >= 0:
                        waits.append(found.due_ms)
            for keys in order:
                if len(got) >= count:
                    break
                if keys.partition in replayed:
                    continue
                found = await read_one(keys, count - len(got))
                got += found.items
                if found.due_ms >= 0:
                    waits.append(found.due_ms)
            return Attempt(got, min(waits, default=-1))

        return StreamReadResult(records=await self._long_poll(parts, block_ms, attempt, since))

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

        return merged(await asyncio.gather(*(pending_one(k) for k in parts)), count)

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
        check_count("min_idle_ms", min_idle_ms, 0, LUA_INT)
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
        got = reply.records
        if reply.bad:
            got = await set_aside(self._session, keys, group, got, reply.bad)
        return got, reply.next_id

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
        """One reclaim pass over every partition of ``group``
        (:func:`flo_redis._session.reclaim.sweep`)."""
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
        gk = self._keys(stream, namespace).group(group)
        with runner.redis_errors("group_settings"):
            raw = await self._session.redis.hmget(gk.config, ["ack_timeout_ms", "max_deliver"])
        return StreamGroupSettings(
            ack_timeout_ms=stored_or(raw[0], 0, U32 - 1, DEFAULT_ACK_TIMEOUT_MS),
            max_deliver=stored_or(raw[1], 1, U32 - 1, DEFAULT_MAX_DELIVER),
        )
