"""Entries read past a group's cursor are recorded as one batch per read, not one record
per entry: what a user relies on still holds entry by entry (ack timeout, fencing,
poll replay, liveness), and a batch's bookkeeping goes once its entries are settled.
Entries delivered under the per-entry layout that came before keep working."""

from __future__ import annotations

import msgpack
import pytest
import redis.asyncio as aioredis
from group_batch_steps import ack, bookkeeping, fill, join, pairs, read
from polling import eventually

from flo_redis import (
    ConflictError,
    FloClient,
    StreamGroupAckOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
)
from flo_redis._wire.keys import stream_keys


async def past_ack_timeout(client: FloClient, ms: int) -> None:
    await eventually(
        lambda: client.stream.group_pending("s", "g"),
        lambda pending: all(p.idle_ms > ms for p in pending),
        what="the entries to pass their ack timeout",
    )


@pytest.mark.slow
async def test_a_batch_partly_acked_redelivers_only_the_rest(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=200)
    ids = await fill(client, 5)
    assert pairs(await read(client)) == [(i, 1) for i in ids]
    assert await bookkeeping(raw, gk) == {
        "batches": 1, "batch_due": 1, "due": 0, "deliveries": 0, "owned": 0,
    }  # fmt: skip
    await ack(client, ids[:3], token=1)
    await past_ack_timeout(client, 250)
    again = await read(client, "c2")
    assert pairs(again) == [(ids[3], 2), (ids[4], 2)]
    with pytest.raises(ConflictError):  # the first delivery's ack comes too late
        await ack(client, [ids[3]], token=1)
    await ack(client, ids[3:], token=2, consumer="c2")
    assert await client.stream.group_pending("s", "g") == []
    await read(client, "c2")
    assert await bookkeeping(raw, gk) == {
        "batches": 0, "batch_due": 0, "due": 0, "deliveries": 0, "owned": 0,
    }  # fmt: skip


async def test_a_readers_acked_batches_are_forgotten_by_its_next_reads(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    await fill(client, 30)
    for _ in range(3):
        batch = await read(client, count=10)
        await ack(client, [r.id for r in batch], token=1)
    assert await raw.zcard(gk.batches) >= 1
    await read(client)
    await read(client)
    assert await bookkeeping(raw, gk) == {
        "batches": 0, "batch_due": 0, "due": 0, "deliveries": 0, "owned": 0,
    }  # fmt: skip


async def test_a_retried_poll_gets_its_redeliveries_and_its_batch_back(
    client: FloClient,
) -> None:
    await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 2)
    [first, _] = await read(client, count=2)
    await client.stream.group_nack("s", "g", [first.id], StreamGroupNackOptions(token=1))
    newer = await fill(client, 2)
    got = await read(client, count=3, poll_id="w#1")
    assert pairs(got) == [(ids[0], 2), (newer[0], 1), (newer[1], 1)]
    # The reply was lost: the same poll again gets the same deliveries, nothing new.
    await fill(client, 1)
    assert pairs(await read(client, count=3, poll_id="w#1")) == pairs(got)
    # Acked meanwhile: not handed out again.
    await ack(client, [newer[0]], token=1)
    assert pairs(await read(client, count=3, poll_id="w#1")) == [(ids[0], 2), (newer[1], 1)]


async def test_a_gone_readers_batches_come_back_raised(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 6)
    async with FloClient(redis_url, namespace=client.namespace) as doomed:
        opts = StreamGroupReadOptions(count=3)
        for _ in range(2):
            await doomed.stream.group_read("s", "g", "gone", opts)
        await doomed.stream.group_ack(
            "s", "g", [ids[0]], StreamGroupAckOptions(consumer="gone", token=1)
        )
    # Its process ended (its liveness went with it): five entries come back at once.
    assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 5
    assert pairs(await read(client)) == [(i, 2) for i in ids[1:]]
    assert (await raw.zcard(gk.batches), await raw.zcard(gk.batch_due)) == (0, 0)
    assert await raw.hlen(gk.owners) == 1  # the gone owner is forgotten; the reader stays


async def test_with_the_ack_timeout_off_a_batch_never_falls_due(
    client: FloClient, raw: aioredis.Redis
) -> None:
    gk = await join(client, ack_timeout_ms=0)
    ids = await fill(client, 3)
    await read(client)
    await ack(client, [ids[0]], token=1)
    # Past the time a batch is kept: its unacked entries are recorded on their own,
    # under their owner, and not delivered again.
    [member] = await raw.zrange(gk.batch_due, 0, -1)
    await raw.zadd(gk.batch_due, {member: 1})
    assert await read(client, "c2") == []
    assert await bookkeeping(raw, gk) == {
        "batches": 0, "batch_due": 0, "due": 0, "deliveries": 2, "owned": 2,
    }  # fmt: skip
    pending = await client.stream.group_pending("s", "g")
    assert [(p.id, p.consumer, p.delivery_count) for p in pending] == [
        (ids[1], "c1", 1),
        (ids[2], "c1", 1),
    ]
    await ack(client, ids[1:], token=1)
    assert await bookkeeping(raw, gk) == {
        "batches": 0, "batch_due": 0, "due": 0, "deliveries": 0, "owned": 0,
    }  # fmt: skip


async def test_entries_delivered_under_the_per_entry_layout_keep_working(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    """What a reader of the layout before batches left behind: each entry read past the
    cursor with its own delivery record, owner index entry and due time."""
    gk = await join(client, ack_timeout_ms=300_000)
    ids = await fill(client, 4)
    log = stream_keys(client.namespace, "s").log
    owner = "owner-of-an-earlier-version"
    await raw.xreadgroup("g", "old", {log: ">"}, count=4)
    for i in ids:
        await raw.hset(gk.deliveries, i.to_redis(), msgpack.packb({"o": owner, "c": "old"}))
        await raw.zadd(gk.owned, {f"{owner}\0{i.to_redis()}": 0})
        await raw.zadd(gk.due, {i.to_redis(): 2**40})
    await raw.hsetnx(gk.owners, owner, 0)
    # Acked with its token: nothing of it is left.
    await ack(client, [ids[0]], token=1, consumer="old")
    assert (await raw.zcard(gk.owned), await raw.zcard(gk.due)) == (3, 3)
    assert await raw.hlen(gk.deliveries) == 3
    # Past its ack timeout: delivered again, raised.
    await raw.zadd(gk.due, {ids[1].to_redis(): 1})
    assert pairs(await read(client, "c1", count=1)) == [(ids[1], 2)]
    # Its owner gone (never subscribed): the rest comes back.
    assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 2
    assert pairs(await read(client, "c1")) == [(ids[2], 2), (ids[3], 2)]
    await ack(client, ids[1:], token=2)
    assert await bookkeeping(raw, gk) == {
        "batches": 0, "batch_due": 0, "due": 0, "deliveries": 0, "owned": 0,
    }  # fmt: skip
