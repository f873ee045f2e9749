"""Bulk requeue and purge of 50,000 runs: nothing lost, no script call over 50 ms.

The server is private to this module, with ``slowlog-log-slower-than`` at 50 ms, so its
SLOWLOG lists every command (script call) that ran longer than that."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from slowlog import slow_calls, slowlog_server

from flo_redis import ActionRegisterOptions, FloClient, WorkerAwaitOptions
from flo_redis._wire.keys import action_keys

RUNS = 50_000

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slowlog_url() -> Iterator[str]:
    with slowlog_server() as url:
        yield url


@pytest.fixture
async def bulk(slowlog_url: str) -> AsyncIterator[tuple[FloClient, aioredis.Redis]]:
    async with FloClient(slowlog_url, namespace="bulk") as client:
        conn = aioredis.Redis.from_url(slowlog_url)
        try:
            yield client, conn
        finally:
            await conn.aclose()


async def test_requeue_and_purge_50k_runs_in_short_script_calls(
    bulk: tuple[FloClient, aioredis.Redis],
) -> None:
    client, conn = bulk
    # 50,000 runs that timed out on their only attempt.
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=1, max_retries=1))
    await client.worker.register("w1", ["job"])
    ids = {r.run_id for r in await client.action.invoke_many("job", [b"x"] * RUNS)}
    claimed = 0
    while claimed < RUNS:
        claimed += len(
            await client.worker.await_tasks("w1", ["job"], 5_000, WorkerAwaitOptions(block_ms=0))
        )
    while (await client.action.counts("job")).timed_out < RUNS:
        await client.action.reap("job")
    keys = action_keys("bulk", "job")
    assert set((await conn.zrange(keys.failed, 0, -1)).__iter__()) == {i.encode() for i in ids}

    # The SLOWLOG watches the library's calls only: the checks' own reads of all 50,000
    # runs at once (ZRANGE) are not the library's and may take tens of ms on their own.
    await conn.slowlog_reset()
    requeued = await client.action.requeue_failed("job")
    assert requeued.count == RUNS
    counts = await client.action.counts("job")
    assert (counts.pending, counts.failed, counts.timed_out) == (RUNS, 0, 0)
    assert await slow_calls(conn) == [], "a script call ran longer than 50 ms"
    assert {m.decode() for m in await conn.zrange(keys.pending, 0, -1)} == ids
    await conn.slowlog_reset()
    purged = await client.action.purge("job", "pending")
    assert purged.count == RUNS
    assert (await client.action.counts("job")).pending == 0
    assert await conn.hlen(keys.runs) == 0
    assert await conn.hlen(keys.inputs) == 0
    assert await slow_calls(conn) == [], "a script call ran longer than 50 ms"
    assert requeued.calls >= RUNS // 1000 and purged.calls >= RUNS // 1000
