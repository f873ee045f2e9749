"""Consumer groups, as functions over a :class:`~flo_redis.streams.partitions.StreamState`:
join and leave, read, pending, claim, the group's settings, and giving back what gone
consumers held (acks and nacks: :mod:`flo_redis.streams.acks`). ``client.stream`` and the
StreamWorker both call them.

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
from flo_redis.streams.partitions import StreamState, merged
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


def _refused(status: int) -> Exception | None:
    if status == Status.NO_GROUP:
        return None  # no group on this partition: nothing to give back
    return refusal(status, "reclaim: grace_ms or batch out of range")


def reclaim_target(
    state: StreamState, stream: str, group: str, namespace: str | None = None
) -> ReapTarget:
    """What a :class:`~flo_redis._session.reclaim.Reaper` sweeps for consumer group
    ``group``: the deliveries its gone consumers hold, on every partition (no upkeep:
    ``group_read`` itself hands out entries past their ack timeout)."""
    check_name("group name", group)

    async def swept(grace_ms: int) -> ReclaimResult:
        return await reclaim(state, stream, group, grace_ms, RECLAIM_BATCH, namespace)

    return ReapTarget(f"{stream}/{group}", swept)


async def _members(
    state: StreamState, stream: str, group: str, consumer: str, options: object
) -> tuple[StreamGroupJoinOptions, builtins.list[StreamKeys]]:
    """The options, and every partition of ``stream``, for a consumer joining or
    leaving ``group``."""
    opts = check_options(options, StreamGroupJoinOptions)
    check_name("group name", group)
    check_name("consumer", consumer)
    return opts, await state.parts(stream, opts.namespace)


async def join(
    state: StreamState, stream: str, group: str, consumer: str, options: object = None
) -> None:
    """Join ``consumer`` to ``group`` on every partition, creating what is missing."""
    opts, parts = await _members(state, stream, group, consumer, options)
    args: builtins.list[runner.Arg] = [
        group,
        consumer,
        "" if opts.ack_timeout_ms is None else opts.ack_timeout_ms,
        "" if opts.max_deliver is None else opts.max_deliver,
    ]
    await state.remember(parts[0].namespace, stream)  # first: see append
    await asyncio.gather(*(GROUP_JOIN(state.session, (k, k.group(group)), args) for k in parts))


async def leave(
    state: StreamState, stream: str, group: str, consumer: str, options: object = None
) -> None:
    """Remove ``consumer`` from ``group`` on every partition (once it holds nothing)."""
    _, parts = await _members(state, stream, group, consumer, options)
    session, args = state.session, [group, consumer]
    await asyncio.gather(*(GROUP_LEAVE(session, (k, k.group(group)), args) for k in parts))


async def read(
    state: StreamState,
    stream: str,
    group: str,
    consumer: str,
    options: StreamGroupReadOptions | None,
) -> StreamReadResult:
    """Entries handed to ``consumer``: due ones first, then new ones, from every
    partition in turn (a retried poll id first replays what it was handed)."""
    session = state.session
    since = session.waker.generation  # an interrupt from here on ends this read
    opts = check_options(options, StreamGroupReadOptions)
    check_name("group name", group)
    check_name("consumer", consumer)
    count = count_arg("count", opts.count, DEFAULT_COUNT)
    block_ms = block_ms_arg(opts.block_ms)
    if opts.poll_id is not None:
        check_name("poll_id", opts.poll_id)
    parts = await state.parts(stream, opts.namespace, opts.partition)
    owner = session.owner_id
    poll_id = opts.poll_id or ""
    order, retry = parts, False
    if len(parts) > 1:  # once per call: every look of one long poll starts there
        ns = parts[0].namespace
        first = state.next_turn(ns, stream, group) % len(parts)
        order = parts[first:] + parts[:first]
        retry = state.sent_before(poll_id, ns, stream, group)

    async def read_one(keys: StreamKeys, room: int) -> Attempt[StreamRecord]:
        """``room`` 0: only what ``poll_id`` was handed there and is still held."""
        reply = await GROUP_READ(
            session, (keys, keys.group(group)), [group, consumer, owner, room, poll_id]
        )
        got = reply.records
        if reply.bad:
            got = await set_aside(session, keys, group, got, reply.bad)
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

    return StreamReadResult(records=await state.long_poll(parts, block_ms, attempt, since))


async def pending(
    state: StreamState,
    stream: str,
    group: str,
    consumer: str,
    options: StreamGroupReadOptions | None,
) -> builtins.list[PendingEntry]:
    """The group's (or ``consumer``'s) pending entries of every partition, in id order."""
    opts = check_options(options, StreamGroupReadOptions)
    check_name("group name", group)
    if consumer:
        check_name("consumer", consumer)
    count = count_arg("count", opts.count, MAX_COUNT)
    parts = await state.parts(stream, opts.namespace, opts.partition)

    async def pending_one(keys: StreamKeys) -> builtins.list[PendingEntry]:
        reply = await GROUP_PENDING(
            state.session, (keys, keys.group(group)), [group, consumer, "-", count]
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


async def claim(
    state: StreamState,
    where: tuple[str, str, str],
    min_idle_ms: int,
    start_id: StreamID,
    count: int,
    options: object = None,
) -> StreamClaimResult:
    """A page of the pending entries of ``where`` (stream, group, consumer) delivered
    again to its consumer, one partition after the other (the cursor names the
    partition)."""
    stream, group, consumer = where
    opts = check_options(options, StreamGroupReadOptions)
    check_name("group name", group)
    check_name("consumer", consumer)
    check_count("min_idle_ms", min_idle_ms, 0, LUA_INT)
    start = stream_id_arg("start_id", start_id)
    take = count_arg("count", count, DEFAULT_COUNT)
    parts = await state.parts(stream, opts.namespace, opts.partition)
    args: builtins.list[runner.Arg] = [group, consumer, state.session.owner_id, min_idle_ms]
    if len(parts) == 1:
        got, next_id = await _claim_one(state.session, parts[0], group, args, start, take)
        done = next_id is None
        return StreamClaimResult(
            records=got, next_cursor=StreamID.MAX if next_id is None else next_id, done=done
        )
    partition, entry = decode_cursor(start)
    records: builtins.list[StreamRecord] = []
    while partition < len(parts):
        got, next_id = await _claim_one(
            state.session, parts[partition], group, args, entry, take - len(records)
        )
        records += got
        if next_id is not None:
            return StreamClaimResult(
                records=records, next_cursor=encode_cursor(partition, next_id), done=False
            )
        partition, entry = partition + 1, StreamID()
        if len(records) >= take and partition < len(parts):
            return StreamClaimResult(
                records=records, next_cursor=encode_cursor(partition, entry), done=False
            )
    return StreamClaimResult(records=records, next_cursor=StreamID.MAX, done=True)


async def _claim_one(
    session: Session,
    keys: StreamKeys,
    group: str,
    args: builtins.list[runner.Arg],
    start: StreamID,
    take: int,
) -> tuple[builtins.list[StreamRecord], StreamID | None]:
    """One claim page of one partition: its records and the next id (None: done).
    ``args``: group, consumer, owner and min idle ms."""
    reply = await GROUP_CLAIM(
        session, (keys, keys.group(group)), [*args, start.to_redis(), take, CLAIM_SCAN]
    )
    got = reply.records
    if reply.bad:
        got = await set_aside(session, keys, group, got, reply.bad)
    return got, reply.next_id


async def reclaim(
    state: StreamState, stream: str, group: str, grace_ms: int, batch: int, namespace: str | None
) -> ReclaimResult:
    """One reclaim pass over every partition of ``group``
    (:func:`flo_redis._session.reclaim.sweep`)."""
    args: builtins.list[runner.Arg] = [
        group,
        check_count("grace_ms", grace_ms, 0, 2**32 - 1),
        check_count("batch", batch, 1, RECLAIM_BATCH_MAX),
    ]
    total = NOTHING
    for keys in await state.parts(stream, namespace):
        gk = keys.group(group)
        total = total.plus(await sweep(state.session, GROUP_RECLAIM, (keys, gk), args, _refused))
    return total


async def settings(
    state: StreamState, stream: str, group: str, namespace: str | None
) -> StreamGroupSettings:
    """The group's settings (the defaults for a group not created yet)."""
    gk = state.keys(stream, namespace).group(group)
    with runner.redis_errors("group_settings"):
        raw = await state.session.redis.hmget(gk.config, ["ack_timeout_ms", "max_deliver"])
    return StreamGroupSettings(
        ack_timeout_ms=stored_or(raw[0], 0, U32 - 1, DEFAULT_ACK_TIMEOUT_MS),
        max_deliver=stored_or(raw[1], 1, U32 - 1, DEFAULT_MAX_DELIVER),
    )
