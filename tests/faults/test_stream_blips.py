"""Connection blips under a StreamWorker: a lost read reply costs nothing but itself.

``tests/support/proxy.py`` lets a ``group_read`` run in Redis and drops its reply (cutting that
connection). The worker sends the read again under the same poll id, which hands back
the very records it read; it never takes back, redelivers or dead-letters a record it is
handling, and on a partitioned stream the retry replays every partition's part of the
lost reply, however the next reads are spread.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

import pytest
from polling import eventually
from proxy import Proxy

from flo_redis import FloClient, FloError
from flo_redis._wire.keys import stream_keys
from flo_redis._wire.runner import SCRIPTS
from flo_redis.types import (
    PendingEntry,
    StreamAppendOptions,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    StreamRecord,
)
from flo_redis.worker.stream_worker import StreamContext, StreamWorker

READ = SCRIPTS["group_read"].sha.encode()


@pytest.fixture
async def via_proxy(proxy: Proxy, namespace: str) -> AsyncIterator[FloClient]:
    async with FloClient(proxy.url, namespace=namespace) as c:
        yield c


class Handled:
    """A handler that records each run (payload, delivery count) and how many ran at
    once, and waits for :attr:`release` before it returns."""

    def __init__(self) -> None:
        self.runs: list[tuple[bytes, int]] = []
        self.running = 0
        self.most = 0
        self.release = asyncio.Event()

    async def __call__(self, ctx: StreamContext) -> None:
        self.runs.append((ctx.payload, ctx.delivery_count))
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1


async def blip(proxy: Proxy) -> None:
    """Drop the reply of the worker's next group read, then wait until it read again."""
    dropped = proxy.dropped_replies
    proxy.drop_reply_after(READ)
    await eventually(lambda: _value(proxy.dropped_replies), lambda n: n > dropped)
    sent = proxy.forwarded_count(READ)
    await eventually(lambda: _value(proxy.forwarded_count(READ)), lambda n: n > sent)


async def _value(n: int) -> int:
    return n


async def settled(client: FloClient, stream: str = "s") -> None:
    """Wait until nothing of group ``g`` is pending."""
    await eventually(lambda: client.stream.group_pending(stream, "g"), lambda p: p == [])


async def run_worker(worker: StreamWorker) -> asyncio.Task[None]:
    return asyncio.create_task(worker.start())


async def stop(worker: StreamWorker, task: asyncio.Task[None]) -> None:
    worker.stop()
    await asyncio.wait_for(task, 15)


@pytest.mark.parametrize("blips", [1, 3])
async def test_a_record_being_handled_is_never_dead_lettered_by_blips(
    client: FloClient, via_proxy: FloClient, proxy: Proxy, blips: int
) -> None:
    """max_deliver=1: the only delivery is the one being handled; reads whose replies
    are lost meanwhile must not count as deliveries of it."""
    await client.stream.group_join("s", "g", "setup", StreamGroupJoinOptions(max_deliver=1))
    await client.stream.append("s", b"slow-but-fine")
    handler = Handled()
    worker = via_proxy.new_stream_worker(stream="s", group="g", handler=handler, block_ms=200)
    task = await run_worker(worker)
    await eventually(lambda: _value(len(handler.runs)), lambda n: n == 1)
    for _ in range(blips):
        await blip(proxy)
    handler.release.set()
    await settled(client)
    await stop(worker, task)
    assert handler.runs == [(b"slow-but-fine", 1)]
    assert await client.stream.dead_letters("s", "g") == []


async def test_blips_never_run_a_record_twice_at_once(
    client: FloClient, via_proxy: FloClient, proxy: Proxy
) -> None:
    await client.stream.group_join("s", "g", "setup", StreamGroupJoinOptions(max_deliver=10))
    for i in range(3):
        await client.stream.append("s", b"r%d" % i)
    handler = Handled()
    worker = via_proxy.new_stream_worker(stream="s", group="g", handler=handler, block_ms=200)
    task = await run_worker(worker)
    await eventually(lambda: _value(len(handler.runs)), lambda n: n == 3)
    for _ in range(3):
        await blip(proxy)
    handler.release.set()
    await settled(client)
    await stop(worker, task)
    assert sorted(handler.runs) == [(b"r0", 1), (b"r1", 1), (b"r2", 1)]
    assert handler.most == 3  # the three records, each once
    assert await client.stream.dead_letters("s", "g") == []


@pytest.mark.parametrize("partitions", [1, 2])
async def test_a_lost_read_comes_back_as_the_same_delivery(
    client: FloClient, via_proxy: FloClient, proxy: Proxy, partitions: int
) -> None:
    """The records a lost reply carried are handed to the worker again at once, as the
    delivery they were (count 1): with max_deliver=1 and no ack timeout nothing else
    could bring them back, and nothing is dead-lettered."""
    if partitions > 1:
        await client.stream.create("s", partitions=partitions)
    join = StreamGroupJoinOptions(max_deliver=1, ack_timeout_ms=0)
    await client.stream.group_join("s", "g", "setup", join)
    payloads = [b"r%d" % i for i in range(6)]
    for payload in payloads:
        await client.stream.append("s", payload)
    handler = Handled()
    handler.release.set()
    worker = via_proxy.new_stream_worker(
        stream="s", group="g", handler=handler, block_ms=200, batch_size=2
    )
    proxy.drop_reply_after(READ)  # the worker's first read: two records, never received
    task = await run_worker(worker)
    await eventually(lambda: _value(len(handler.runs)), lambda n: n >= len(payloads))
    await settled(client)
    await stop(worker, task)
    assert proxy.dropped_replies == 1
    assert sorted(handler.runs) == [(p, 1) for p in payloads]
    assert await client.stream.dead_letters("s", "g") == []


async def test_a_retried_partitioned_read_replays_the_lost_reply(
    client: FloClient, via_proxy: FloClient, proxy: Proxy
) -> None:
    """The lost read filled ``count`` on the partition it started at; by the retry the
    other partition has a record too. The retry answers exactly the lost records, the
    next poll the rest: nothing stays pending to the consumer unseen."""
    await client.stream.create("s", partitions=2)
    await client.stream.group_join("s", "g", "c1", StreamGroupJoinOptions(ack_timeout_ms=0))
    for i in range(4):
        await client.stream.append("s", b"r%d" % i)  # round-robin: two per partition
    opts = StreamGroupReadOptions(count=2, poll_id="p#1")
    proxy.drop_reply_after(READ)
    with pytest.raises(FloError):
        await via_proxy.stream.group_read("s", "g", "c1", opts)
    lost = await client.stream.group_pending("s", "g", "c1")
    assert len(lost) == 2
    empty = 1 - lost[0].partition  # the partition the lost read never reached
    await client.stream.append("s", b"late", StreamAppendOptions(partition_key=_key_for(empty)))
    retried = await via_proxy.stream.group_read("s", "g", "c1", opts)
    assert _seen(retried.records) == _pending(lost)
    rest = await via_proxy.stream.group_read(
        "s", "g", "c1", StreamGroupReadOptions(count=10, poll_id="p#2")
    )
    assert sorted(r.payload for r in retried.records + rest.records) == [
        b"late", b"r0", b"r1", b"r2", b"r3"
    ]  # fmt: skip
    assert all(r.delivery_count == 1 for r in rest.records)


async def test_a_retried_partitioned_read_replays_before_any_fresh_read(
    client: FloClient, via_proxy: FloClient, proxy: Proxy, namespace: str
) -> None:
    """The lost read found nothing on its first partition and lost the second's reply;
    by the retry the first has enough new records to fill ``count``. The retry still
    answers the lost records (a fresh read there first would leave them behind)."""
    await client.stream.create("s", partitions=2)
    await client.stream.group_join("s", "g", "c1", StreamGroupJoinOptions(ack_timeout_ms=0))
    second = StreamAppendOptions(partition_key=_key_for(1))
    for i in range(2):
        await client.stream.append("s", b"r%d" % i, second)
    opts = StreamGroupReadOptions(count=2, poll_id="p#1")
    proxy.drop_reply_after(stream_keys(namespace, "s", 1).log.encode())
    with pytest.raises(FloError):  # partition 0 (nothing), then 1 (reply lost)
        await via_proxy.stream.group_read("s", "g", "c1", opts)
    lost = await client.stream.group_pending("s", "g", "c1")
    assert [p.partition for p in lost] == [1, 1]
    first = StreamAppendOptions(partition_key=_key_for(0))
    for i in range(2):
        await client.stream.append("s", b"late%d" % i, first)
    for _ in range(2):  # the retry, and the retry of a retry whose reply arrived
        retried = await via_proxy.stream.group_read("s", "g", "c1", opts)
        assert _seen(retried.records) == _pending(lost)
    rest = await via_proxy.stream.group_read(
        "s", "g", "c1", StreamGroupReadOptions(count=10, poll_id="p#2")
    )
    assert sorted(r.payload for r in rest.records) == [b"late0", b"late1"]


async def test_a_partitioned_read_cut_midway_replays_every_partitions_part(
    client: FloClient, via_proxy: FloClient, proxy: Proxy, namespace: str
) -> None:
    """A read spanning both partitions, cut after both ran (the first partition's reply
    arrived, the second's was lost): the retry hands back every record of that poll,
    and only those."""
    await client.stream.create("s", partitions=2)
    await client.stream.group_join("s", "g", "c1", StreamGroupJoinOptions(ack_timeout_ms=0))
    for p in (0, 1):
        await client.stream.append("s", b"r%d" % p, StreamAppendOptions(partition_key=_key_for(p)))
    await client.stream.append("s", b"later", StreamAppendOptions(partition_key=_key_for(0)))
    opts = StreamGroupReadOptions(count=2, poll_id="q#1")
    # Another consumer takes r0; this client's turn moves on: its next read starts at 1.
    await via_proxy.stream.group_read("s", "g", "c0", StreamGroupReadOptions(count=1))
    proxy.drop_reply_after(stream_keys(namespace, "s", 0).log.encode())
    with pytest.raises(FloError):  # partition 1 (arrived), then 0 (reply lost)
        await via_proxy.stream.group_read("s", "g", "c1", opts)
    lost = await client.stream.group_pending("s", "g", "c1")
    assert sorted(p.partition for p in lost) == [0, 1]
    retried = await via_proxy.stream.group_read("s", "g", "c1", opts)
    assert _seen(retried.records) == _pending(lost)


def _key_for(partition: int, partitions: int = 2) -> str:
    """A partition key whose records go to ``partition``."""
    keys = (f"k{i}" for i in range(1000))
    return next(k for k in keys if zlib.crc32(k.encode()) % partitions == partition)


def _seen(records: list[StreamRecord]) -> list[tuple[int, str, int]]:
    return sorted((r.partition, r.id.to_redis(), r.delivery_count) for r in records)


def _pending(entries: list[PendingEntry]) -> list[tuple[int, str, int]]:
    return sorted((p.partition, p.id.to_redis(), p.delivery_count) for p in entries)
