"""Partitioned streams on one Redis: creation, routing by key, reads, info, trims and
consumer groups spanning every partition, acks by partition, claims walking partitions."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from polling import eventually, running, watched

from flo_redis import (
    ConflictError,
    FloClient,
    StreamAppendOptions,
    StreamContext,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamReadOptions,
    StreamTrimOptions,
    ValidationError,
)
from flo_redis._wire.keys import stream_keys
from flo_redis.streams import StreamDeadLetterOptions
from flo_redis.streams.placement import partition_of_key


async def test_create_fixes_the_partition_count(client: FloClient) -> None:
    assert await client.stream.partitions("orders") == 1
    assert await client.stream.create("orders", partitions=3) == 3
    assert await client.stream.create("orders", partitions=3) == 3  # again: no change
    with pytest.raises(ConflictError):
        await client.stream.create("orders", partitions=4)
    assert (await client.stream.info("orders")).partition_count == 3
    # another client finds the count
    async with FloClient(client.settings.endpoint, namespace=client.namespace) as other:
        assert await other.stream.partitions("orders") == 3


async def test_a_used_stream_cannot_become_partitioned(client: FloClient) -> None:
    await client.stream.append("plain", b"x")
    with pytest.raises(ConflictError):
        await client.stream.create("plain", partitions=2)
    assert await client.stream.create("plain", partitions=1) == 1


@pytest.mark.parametrize("bad", [0, -1, 1025, True, "3"])
async def test_create_refuses_bad_counts(client: FloClient, bad: object) -> None:
    with pytest.raises(ValidationError):
        await client.stream.create("s", partitions=bad)  # type: ignore[arg-type]


async def test_a_partition_key_keeps_its_records_in_order_in_one_partition(
    client: FloClient,
) -> None:
    await client.stream.create("s", partitions=3)
    sent: dict[str, list[int]] = {}
    for i in range(60):
        key = f"customer-{i % 7}"
        result = await client.stream.append(
            "s", str(i).encode(), StreamAppendOptions(partition_key=key)
        )
        assert result.partition == partition_of_key(key, 3)
        sent.setdefault(key, []).append(i)
    got: dict[str, list[int]] = {}
    for p in range(3):
        recs = (await client.stream.read("s", StreamReadOptions(partition=p))).records
        assert all(r.partition == p for r in recs)
        for r in recs:
            i = int(r.payload)
            got.setdefault(f"customer-{i % 7}", []).append(i)
    assert got == sent


async def test_records_without_a_key_are_spread(client: FloClient) -> None:
    await client.stream.create("s", partitions=3)
    parts = [(await client.stream.append("s", b"x")).partition for _ in range(9)]
    assert sorted(parts) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


async def test_read_and_info_span_partitions(client: FloClient) -> None:
    await client.stream.create("s", partitions=3)
    ids = [(await client.stream.append("s", str(i).encode())).id for i in range(12)]
    recs = (await client.stream.read("s")).records
    assert sorted(int(r.payload) for r in recs) == list(range(12))
    assert [r.id.as_tuple() for r in recs] == sorted(r.id.as_tuple() for r in recs)
    assert {r.partition for r in recs} == {0, 1, 2}
    tail = (await client.stream.read("s", StreamReadOptions(tail=True, count=4))).records
    assert [r.id.as_tuple() for r in tail] == [r.id.as_tuple() for r in recs[-4:]]
    info = await client.stream.info("s")
    assert (info.count, info.partition_count) == (12, 3)
    assert info.first_id == min(ids) and info.last_id == max(ids)
    assert info.bytes_size == sum(len(str(i)) for i in range(12))
    with pytest.raises(ValidationError, match="3 partition"):
        await client.stream.read("s", StreamReadOptions(partition=3))
    removed = await client.stream.trim("s", StreamTrimOptions(max_len=1))
    assert removed.removed == 9
    assert (await client.stream.info("s")).count == 3


async def test_a_blocking_read_wakes_on_any_partition(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.stream.create("s", partitions=3)
    waiting = asyncio.create_task(client.stream.read("s", StreamReadOptions(block_ms=10_000)))
    for partition in range(3):
        await watched(raw, stream_keys(client.namespace, "s", partition).wake)
    await client.stream.append("s", b"late", StreamAppendOptions(partition_key="k2"))
    recs = (await asyncio.wait_for(waiting, 5)).records
    assert [r.payload for r in recs] == [b"late"]


async def test_a_group_reads_every_partition_fairly(client: FloClient) -> None:
    await client.stream.create("s", partitions=3)
    for i in range(30):
        await client.stream.append("s", str(i).encode())
    await client.stream.group_join("s", "g", "c1")
    first = (
        await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=3))
    ).records
    assert len(first) == 3
    seen = list(first)
    while True:
        batch = (
            await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=4))
        ).records
        if not batch:
            break
        seen += batch
    assert sorted(int(r.payload) for r in seen) == list(range(30))
    pending = await client.stream.group_pending("s", "g")
    assert len(pending) == 30 and {e.partition for e in pending} == {0, 1, 2}
    # Acks name the partition of each record.
    for r in seen:
        await client.stream.group_ack(
            "s", "g", [r.id], StreamGroupAckOptions(token=r.delivery_count, partition=r.partition)
        )
    assert await client.stream.group_pending("s", "g") == []


async def test_a_nack_is_redelivered_from_its_partition(client: FloClient) -> None:
    await client.stream.create("s", partitions=2)
    await client.stream.append("s", b"a", StreamAppendOptions(partition_key="x"))
    rec = (await client.stream.group_read("s", "g", "c1")).records[0]
    await client.stream.group_nack(
        "s", "g", [rec.id], StreamGroupNackOptions(token=1, partition=rec.partition)
    )
    again = (await client.stream.group_read("s", "g", "c1")).records
    assert [(r.id, r.partition, r.delivery_count) for r in again] == [(rec.id, rec.partition, 2)]


async def test_claims_walk_every_partition_once(client: FloClient) -> None:
    await client.stream.create("s", partitions=3)
    for i in range(25):
        await client.stream.append("s", str(i).encode())
    got = (await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=25))).records
    assert len(got) == 25
    claimed = []
    cursor = StreamID()
    for _ in range(50):
        page = await client.stream.group_claim("s", "g", "c1", 0, cursor, 4)
        claimed += page.records
        if page.done:
            break
        cursor = page.next_cursor
    assert page.done and page.next_cursor == StreamID.MAX
    assert sorted((r.partition, r.id.as_tuple()) for r in claimed) == sorted(
        (r.partition, r.id.as_tuple()) for r in got
    )
    assert {r.delivery_count for r in claimed} == {2}
    one = await client.stream.group_claim(
        "s", "g", "c1", 0, StreamID(), 100, StreamGroupReadOptions(partition=1)
    )
    assert one.done and {r.partition for r in one.records} == {1}


async def test_dead_letters_span_partitions(client: FloClient) -> None:
    await client.stream.create("s", partitions=2)
    await client.stream.append("s", b"a")  # round-robin: partitions 0 and 1
    await client.stream.append("s", b"b")
    await client.stream.group_join("s", "g", "c1", StreamGroupJoinOptions(max_deliver=1))
    recs = (await client.stream.group_read("s", "g", "c1")).records
    assert {r.partition for r in recs} == {0, 1}
    for r in recs:
        await client.stream.group_nack(
            "s", "g", [r.id], StreamGroupNackOptions(partition=r.partition)
        )
    dead = await client.stream.dead_letters("s", "g")
    assert sorted(d.payload for d in dead) == [b"a", b"b"]
    only = await client.stream.dead_letters("s", "g", StreamDeadLetterOptions(partition=1))
    assert [d.partition for d in only] == [1]
    replayed = await client.stream.replay_dead_letters("s", "g")
    assert len(replayed) == 2
    assert await client.stream.dead_letters("s", "g") == []


async def test_a_stream_worker_handles_and_acks_every_partition(client: FloClient) -> None:
    await client.stream.create("s", partitions=3)
    for i in range(30):
        await client.stream.append("s", str(i).encode(), StreamAppendOptions(partition_key=str(i)))
    seen: list[int] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(int(ctx.payload))

    worker = client.new_stream_worker(stream="s", group="g", handler=handle, block_ms=500)
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 30)
        await eventually(lambda: client.stream.group_pending("s", "g"), lambda p: p == [])
    assert sorted(seen) == list(range(30))
