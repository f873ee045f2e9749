"""Faults around entries a group read recorded as one batch: a reader's process ending
with part of a batch settled, reports racing a reclaim or an ack deadline, dead letters,
claims, trims, retried polls of partitioned streams, the group moved back, a cluster, and
a long-running reader's bookkeeping."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis
from group_batch_steps import ack, bookkeeping, fill, join, nack, pairs, read
from polling import eventually

from flo_redis import (
    ConflictError,
    FloClient,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
    StreamTrimOptions,
)
from flo_redis._wire.keys import stream_keys

NOTHING = {"batches": 0, "batch_due": 0, "due": 0, "deliveries": 0, "owned": 0}


async def held(client: FloClient) -> list[tuple[StreamID, str, int]]:
    return [
        (p.id, p.consumer, p.delivery_count) for p in await client.stream.group_pending("s", "g")
    ]


async def idle_past(client: FloClient, ms: int) -> None:
    await eventually(
        lambda: client.stream.group_pending("s", "g"),
        lambda pending: all(p.idle_ms > ms for p in pending),
        what=f"the pending entries to be idle {ms} ms",
    )


async def test_a_gone_readers_batch_comes_back_around_what_was_settled(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    """Of a batch whose reader's process ended, only what it still held comes back: not
    the entry it acked, nor the one another consumer claimed; its nacked entry once."""
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 6)
    async with FloClient(redis_url, namespace=client.namespace) as doomed:
        got = (
            await doomed.stream.group_read("s", "g", "gone", StreamGroupReadOptions(count=6))
        ).records
        assert pairs(got) == [(i, 1) for i in ids]
        await ack(doomed, [ids[0]], token=1, consumer="gone")
        await nack(doomed, [ids[1]], token=1, consumer="gone")
        await idle_past(client, 5)
        claimed = await client.stream.group_claim("s", "g", "c2", 1, ids[2], 1)
        assert pairs(claimed.records) == [(ids[2], 2)]
    assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 4
    again = await read(client)
    assert pairs(again) == [(ids[1], 2), (ids[3], 2), (ids[4], 2), (ids[5], 2)]
    assert sorted(await held(client), key=lambda p: p[0].as_tuple()) == [
        (ids[1], "c1", 2),
        (ids[2], "c2", 2),
        *[(i, "c1", 2) for i in ids[3:]],
    ]
    with pytest.raises(ConflictError):  # the gone reader's delivery is over
        await ack(client, [ids[3]], token=1, consumer="gone")
    await ack(client, [ids[1], *ids[3:]], token=2)
    await ack(client, [ids[2]], token=2, consumer="c2")
    assert await held(client) == []
    assert await bookkeeping(raw, gk) == NOTHING
    assert await raw.hkeys(gk.owners) == [client.owner_id.encode()]


async def test_a_gone_readers_batches_come_back_however_many_reclaims_it_takes(
    client: FloClient, redis_url: str
) -> None:
    """A reclaim pass gives back a bounded number of entries; what is left of a gone
    reader's batches comes back on the next passes, none twice, none lost."""
    await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 40)
    async with FloClient(redis_url, namespace=client.namespace) as doomed:
        for _ in range(4):
            await doomed.stream.group_read("s", "g", "gone", StreamGroupReadOptions(count=10))
    total = 0
    for _ in range(10):
        n = await client.stream.reclaim_gone_owners("s", "g", grace_ms=0, batch=3)
        total += n
        if n == 0:
            break
    assert total == 40
    again = await read(client)
    assert sorted(pairs(again), key=lambda p: p[0].as_tuple()) == [(i, 2) for i in ids]


async def test_an_ack_racing_a_reclaim_counts_until_the_entry_is_handed_out_again(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 3)
    async with FloClient(redis_url, namespace=client.namespace) as doomed:
        await doomed.stream.group_read("s", "g", "gone", StreamGroupReadOptions(count=3))
    assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 3
    # Taken back but not yet handed out again: the first delivery still holds it.
    await ack(client, [ids[0]], token=1, consumer="gone")
    await nack(client, [ids[1]], token=1, consumer="gone")
    assert pairs(await read(client)) == [(ids[1], 2), (ids[2], 2)]
    with pytest.raises(ConflictError):
        await ack(client, [ids[2]], token=1, consumer="gone")
    with pytest.raises(ConflictError):
        await nack(client, [ids[2]], token=1, consumer="gone")
    await ack(client, ids[1:], token=2)
    assert await held(client) == []
    assert await bookkeeping(raw, gk) == NOTHING


async def test_a_batch_past_its_ack_timeout_fences_off_its_first_delivery(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=150)
    ids = await fill(client, 4)
    await read(client)
    await nack(client, [ids[0]], token=1)
    await idle_past(client, 200)
    again = await read(client, "c2")
    assert sorted(pairs(again)) == [(i, 2) for i in ids]
    for report in (ack, nack):
        with pytest.raises(ConflictError):
            await report(client, [ids[1]], 1, "c1")
        with pytest.raises(ConflictError):  # token checked whoever reports
            await report(client, [ids[1]], 1, "")
    # An ack naming several entries, one of them stale, changes nothing.
    with pytest.raises(ConflictError):
        await ack(client, ids, token=2, consumer="c1")
    assert len(await held(client)) == 4
    answers = await client.stream.group_ack_many(
        "s", "g", [(ids[0], 1), (ids[1], 2)], consumer="c2"
    )
    assert answers[0] is not None and answers[1] is None
    await ack(client, [ids[0], *ids[2:]], token=2, consumer="c2")
    assert await held(client) == []
    await read(client, "c2")
    assert await bookkeeping(raw, gk) == NOTHING


async def test_max_deliver_counts_the_delivery_a_batch_recorded(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=100, max_deliver=2)
    ids = await fill(client, 2)
    assert pairs(await read(client)) == [(i, 1) for i in ids]
    await idle_past(client, 150)
    assert pairs(await read(client, "c2")) == [(i, 2) for i in ids]
    await idle_past(client, 150)
    assert await read(client, "c3") == []
    dead = await client.stream.dead_letters("s", "g")
    assert sorted((d.original_id, d.delivery_count, d.reason, d.consumer) for d in dead) == [
        (i, 2, "ack_timeout", "c2") for i in ids
    ]
    assert all(d.owner == client.owner_id for d in dead)
    assert await held(client) == []
    assert await bookkeeping(raw, gk) == NOTHING


async def test_a_batch_entry_dead_lettered_on_its_first_delivery_names_its_reader(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=100, max_deliver=1)
    ids = await fill(client, 2)
    await read(client)
    await idle_past(client, 150)
    assert await read(client, "c2") == []
    dead = await client.stream.dead_letters("s", "g")
    assert sorted((d.original_id, d.delivery_count, d.reason, d.consumer) for d in dead) == [
        (i, 1, "ack_timeout", "c1") for i in ids
    ]
    assert all(d.owner == client.owner_id for d in dead)
    assert await bookkeeping(raw, gk) == NOTHING


async def test_claims_pending_and_leave_see_batch_entries_as_deliveries(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 4)
    await read(client, count=4)
    assert await held(client) == [(i, "c1", 1) for i in ids]
    await client.stream.group_leave("s", "g", "c1")  # holds entries: stays
    assert await held(client) == [(i, "c1", 1) for i in ids]
    # Its own entries, without waiting: raised, and the batch no longer answers for them.
    mine = await client.stream.group_claim("s", "g", "c1", 0, StreamID(), 2)
    assert pairs(mine.records) == [(ids[0], 2), (ids[1], 2)]
    await idle_past(client, 5)
    theirs = await client.stream.group_claim("s", "g", "c2", 1, ids[2], 10)
    assert pairs(theirs.records) == [(ids[2], 2), (ids[3], 2)] and theirs.done
    with pytest.raises(ConflictError):
        await ack(client, [ids[0]], token=1)
    await ack(client, ids[:2], token=2)
    await client.stream.group_leave("s", "g", "c1")
    await ack(client, ids[2:], token=2, consumer="c2")
    await client.stream.group_leave("s", "g", "c2")
    log = stream_keys(client.namespace, "s").log
    assert await raw.xinfo_consumers(log, "g") == []
    # The batch has nothing left, and is forgotten by the reader's next read.
    await read(client)
    assert await bookkeeping(raw, gk) == NOTHING


async def test_trimmed_batch_entries_are_dropped_never_handed_out_empty(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=150)
    ids = await fill(client, 5)
    got = await read(client, count=5, poll_id="w#1")
    assert pairs(got) == [(i, 1) for i in ids]
    await client.stream.trim("s", StreamTrimOptions(max_len=2))
    # The poll's reply was lost: only what is still in the stream is handed out again.
    assert pairs(await read(client, count=5, poll_id="w#1")) == [(i, 1) for i in ids[3:]]
    await ack(client, [ids[3]], token=1)
    await idle_past(client, 200)
    assert pairs(await read(client, "c2")) == [(ids[4], 2)]
    assert await held(client) == [(ids[4], "c2", 2)]
    assert await client.stream.dead_letters("s", "g") == []
    await ack(client, [ids[4]], token=2, consumer="c2")
    assert await bookkeeping(raw, gk) == NOTHING


def seen(records: list[StreamRecord]) -> list[tuple[int, str, int]]:
    return sorted((r.partition, r.id.to_redis(), r.delivery_count) for r in records)


async def test_a_retried_poll_of_a_partitioned_stream_gets_what_it_was_handed(
    client: FloClient,
) -> None:
    await client.stream.create("s", partitions=3)
    await client.stream.group_join("s", "g", "c1", StreamGroupJoinOptions(ack_timeout_ms=300_000))
    for i in range(9):
        await client.stream.append("s", f"e{i}".encode())
    first = await read(client, count=100)
    assert len(first) == 9
    await client.stream.group_nack(
        "s", "g", [first[0].id], StreamGroupNackOptions(token=1, partition=first[0].partition)
    )
    for i in range(3):
        await client.stream.append("s", f"n{i}".encode())
    got = await read(client, count=100, poll_id="w#1")
    handed = seen(got)
    assert len(handed) == 4
    assert (first[0].partition, first[0].id.to_redis(), 2) in handed
    for _ in range(3):  # lost replies: the same entries, nothing new, whatever the order
        await client.stream.append("s", b"later")
        assert seen(await read(client, count=100, poll_id="w#1")) == handed
    # One of them acked, one handed out again: neither is replayed.
    new = [r for r in got if r.delivery_count == 1]
    await client.stream.group_ack(
        "s", "g", [new[0].id], StreamGroupAckOptions(token=1, partition=new[0].partition)
    )
    claimed = await client.stream.group_claim(
        "s", "g", "c1", 0, new[1].id, 1, StreamGroupReadOptions(partition=new[1].partition)
    )
    assert seen(claimed.records) == [(new[1].partition, new[1].id.to_redis(), 2)]
    rest = seen(await read(client, count=100, poll_id="w#1"))
    settled = {(r.partition, r.id.to_redis()) for r in new[:2]}
    # What is still held is handed out again; a partition whose part of the poll is all
    # settled reads afresh (a retried poll is never answered empty while there is work).
    assert [h for h in handed if h[:2] not in settled] == [h for h in rest if h in handed]
    assert not [h for h in rest if h[:2] in settled]


async def test_a_group_moved_back_does_not_give_a_live_readers_entries_away(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    """XGROUP SETID back (or the group destroyed and created again) makes Redis deliver
    entries a second time as first deliveries: the earlier reader's batches no longer
    answer for them, so its process ending or its ack deadline never takes them from the
    reader that holds them now."""
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 4)
    log = stream_keys(client.namespace, "s").log
    async with FloClient(redis_url, namespace=client.namespace) as doomed:
        await doomed.stream.group_read("s", "g", "gone", StreamGroupReadOptions(count=4))
        await raw.execute_command("XGROUP", "SETID", log, "g", "0")
        assert pairs(await read(client, count=4)) == [(i, 1) for i in ids]
    assert await held(client) == [(i, "c1", 1) for i in ids]
    await client.stream.reclaim_gone_owners("s", "g", grace_ms=0)
    assert await read(client, "c2") == []
    assert await held(client) == [(i, "c1", 1) for i in ids]
    await ack(client, ids, token=1)
    await read(client)
    assert (await raw.zcard(gk.due), await raw.hlen(gk.deliveries)) == (0, 0)


async def test_a_long_running_readers_bookkeeping_stays_small(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    for _ in range(60):
        await fill(client, 3)
        batch = await read(client, count=10)
        await ack(client, [r.id for r in batch], token=1)
        assert await raw.zcard(gk.batches) <= 3
    # A slow entry in the oldest batch does not keep the later ones around.
    [slow, *_] = await fill(client, 2)
    first = await read(client, count=10)
    await ack(client, [r.id for r in first if r.id != slow], token=1)
    for _ in range(60):
        await fill(client, 3)
        batch = await read(client, count=10)
        await ack(client, [r.id for r in batch], token=1)
        assert await raw.zcard(gk.batches) <= 4
    await ack(client, [slow], token=1)
    await read(client)
    await read(client)
    assert await bookkeeping(raw, gk) == NOTHING


async def test_on_a_cluster_a_gone_readers_batch_comes_back(cluster_url: str) -> None:
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    async with FloClient(cluster_url, namespace=namespace) as client:
        await join(client, ack_timeout_ms=300_000)
        ids = await fill(client, 5)
        async with FloClient(cluster_url, namespace=namespace) as doomed:
            got = (
                await doomed.stream.group_read("s", "g", "gone", StreamGroupReadOptions(count=5))
            ).records
            assert pairs(got) == [(i, 1) for i in ids]
            await ack(doomed, [ids[0]], token=1, consumer="gone")
        assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 4
        assert pairs(await read(client, poll_id="p#1")) == [(i, 2) for i in ids[1:]]
        assert pairs(await read(client, poll_id="p#1")) == [(i, 2) for i in ids[1:]]
        await ack(client, ids[1:], token=2)
        assert await held(client) == []


async def test_a_group_moved_back_keeps_the_new_deliveries_ack_deadline(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 3)
    log = stream_keys(client.namespace, "s").log
    await read(client, "c0")
    await raw.execute_command("XGROUP", "SETID", log, "g", "0")
    assert pairs(await read(client, "c1", poll_id="w#1")) == [(i, 1) for i in ids]
    # The earlier reading's deadline passes: the entries are c1's now, and stay so.
    for member in await raw.zrange(gk.batch_due, 0, -1):
        await raw.zadd(gk.batch_due, {member: 1})
    assert await read(client, "c2") == []
    assert await held(client) == [(i, "c1", 1) for i in ids]
    assert pairs(await read(client, "c1", poll_id="w#1")) == [(i, 1) for i in ids]
    await ack(client, ids, token=1)
    assert await bookkeeping(raw, gk) == NOTHING
