"""What a client remembers per worker, stream or queue stays bounded in a long-lived
process (flo_redis/_wire/lru.py), and forgetting changes no answer: a producer that meets
far more names than the bound keeps at most CACHE_SIZE of each, and every name still
behaves as before it was forgotten."""

from __future__ import annotations

import pytest

from flo_redis import (
    BadRequestError,
    DequeueOptions,
    FloClient,
    Reason,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
)
from flo_redis._wire.lru import CACHE_SIZE, Lru
from flo_redis.ops import discovery
from flo_redis.streams.partitions import POLLS_KEPT

pytestmark = pytest.mark.slow  # thousands of names met

MANY = 2 * CACHE_SIZE + 100


def test_the_least_recently_used_entry_is_forgotten_first() -> None:
    cache: Lru[int, str] = Lru(3)
    for n in range(3):
        cache.put(n, str(n))
    assert cache.get(0) == "0"  # now the most recently used
    cache.put(3, "3")
    assert (1 in cache, 0 in cache, len(cache)) == (False, True, 3)
    assert cache.pop(3) == "3" and cache.pop(3) is None


async def test_streams_met_stay_bounded_and_each_still_works(client: FloClient) -> None:
    streams, state = client.stream, client.stream._state
    for n in range(MANY):
        await streams.append(f"s{n}", b"x")
    assert len(state.listed) <= CACHE_SIZE
    assert len(state.counts._known) <= CACHE_SIZE
    assert len(state.turns) <= CACHE_SIZE
    # Every stream was registered, the forgotten ones too, and each reads as it should.
    assert len(await discovery.stream_names(client)) == MANY
    await streams.append("s0", b"y")  # forgotten long ago: registered again, harmlessly
    assert [r.payload for r in (await streams.read("s0")).records] == [b"x", b"y"]
    await streams.create("parted", partitions=3)
    for n in range(MANY):  # the partition count is forgotten, then read again
        await streams.info(f"s{n}")
    appended = {(await streams.append("parted", b"p")).partition for _ in range(6)}
    assert appended == {0, 1, 2}


async def test_workers_polled_stay_bounded_and_a_drain_is_still_seen(
    client: FloClient,
) -> None:
    await client.action.register("job")
    workers = client.worker
    no_wait = WorkerAwaitOptions(block_ms=0)
    for n in range(MANY):
        await workers.register(f"w{n}", ["job"], None)
        await workers.await_tasks(f"w{n}", ["job"], 1, no_wait, health_ttl_s=60)
    assert len(workers._gate.passed) <= CACHE_SIZE
    assert len(workers._gate.labels) <= CACHE_SIZE
    # w0's health check was forgotten: it is asked again, and sees the drain.
    await workers.drain("w0")
    with pytest.raises(BadRequestError, match="DRAINING") as caught:
        await workers.await_tasks("w0", ["job"], 1, no_wait, health_ttl_s=60)
    assert caught.value.reason == Reason.WORKER_DRAINING


async def test_queues_dequeued_from_stay_bounded(client: FloClient) -> None:
    queue = client.queue
    for n in range(MANY):
        await queue.enqueue(f"q{n}", b"m")
        got = await queue.dequeue(f"q{n}", 1, DequeueOptions(block_ms=0))
        assert [m.payload for m in got.messages] == [b"m"]
    assert len(queue._reclaim_due) <= CACHE_SIZE


async def test_group_reads_of_many_streams_keep_few_turns(client: FloClient) -> None:
    streams, state = client.stream, client.stream._state
    for n in range(CACHE_SIZE + 50):
        await streams.group_join(f"g{n}", "g", "c")
        await streams.group_read(f"g{n}", "g", "c", StreamGroupReadOptions(poll_id=f"p{n}#1"))
    assert len(state.polls) <= POLLS_KEPT
    assert len(state.listed) <= CACHE_SIZE
