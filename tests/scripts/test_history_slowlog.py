"""A full 72-hour history is read within the 50 ms every script call keeps to.

The server is private to this module, with ``slowlog-log-slower-than`` at 50 ms, so its
SLOWLOG lists every script call that ran longer than that."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from slowlog import slow_calls, watched_clients

from flo_redis import FloClient, WorkerAwaitOptions
from flo_redis._wire.keys import action_keys
from flo_redis.actions import CompleteItem
from flo_redis.actions.history import BUCKETS, DURATION, MINUTES, PICKUP, SLOT_BYTES

pytestmark = pytest.mark.slow


@pytest.fixture
async def full(slowlog_url: str) -> AsyncIterator[tuple[FloClient, aioredis.Redis]]:
    async with watched_clients(slowlog_url, "full") as pair:
        yield pair


def u24(n: int) -> bytes:
    return n.to_bytes(3, "big")


async def test_a_full_ring_is_read_in_short_calls(full: tuple[FloClient, aioredis.Redis]) -> None:
    client, conn = full
    await client.action.register("job")
    keys = action_keys("full", "job")
    # A ring written in every minute of the last 72 hours: each minute 3 completed, 2
    # failed, 1 retried, one pickup in bucket 4 and one duration in bucket 9.
    sec, _ = await conn.time()
    now = sec // 60
    first = now - MINUTES + 1
    counters = [0] * (DURATION + BUCKETS)
    counters[:3] = [3, 2, 1]
    counters[PICKUP + 4] = counters[DURATION + 9] = 1
    body = b"".join(map(u24, counters))
    slots = b"".join((m).to_bytes(4, "big") + body for m in range(first, now + 1))
    assert len(slots) == MINUTES * SLOT_BYTES
    head = first.to_bytes(4, "big") + now.to_bytes(4, "big")
    await conn.set(keys.history, head + slots)
    await conn.slowlog_reset()
    for detail in (True, False):
        h = await client.action.history("job", since="72h", detail=detail)
        # The minute may have turned since the ring was written: the newest is then empty.
        minutes = sum(1 for p in h.points if p.completed)
        assert minutes >= MINUTES - 1
        assert (h.completed, h.failed, h.retried) == (3 * minutes, 2 * minutes, minutes)
        if detail:
            assert h.pickup.count == h.duration.count == minutes
    counts = await client.action.counts("job")
    assert counts.completed_last_hour >= 3 * 59
    # Runs completed on top of it, a thousand in one batch.
    await client.worker.register("w1", ["job"])
    await client.action.invoke_many("job", [b"x"] * 1000)
    taken = await client.worker.await_tasks("w1", ["job"], 1000, WorkerAwaitOptions(block_ms=0))
    items = [CompleteItem(r.run_id, b"ok", token=r.token) for r in taken]
    assert await client.worker.complete_many("w1", "job", items) == [None] * len(taken)
    assert await slow_calls(conn) == [], "a script call ran longer than 50 ms"
