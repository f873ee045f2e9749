"""Flow control with 100,000 active keys: every script call stays under 50 ms (SLOWLOG),
the per-key state is measured, and once the keys go idle it is all gone.

The action limits each key to one run at once and ten starts a second, and takes keys
in fair turns: each of 100,000 keys has a run running (its running count, its start in
its rate window, its place in the turns), 20,000 of them a second run held back by the
limit. Then every run completes, batch by batch (claims and complete batches of 100
runs: a worker's at concurrency 100), and the reaper is left to forget what the idle
keys left behind. The server is private to this module, with
``slowlog-log-slower-than`` at 50 ms."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from slowlog import slow_script_work, watched_clients

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    RateLimit,
    WorkerAwaitOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis._wire.library import SCRIPTS
from flo_redis.actions.reports import CompleteItem
from flo_redis.actions.workers import Claimed

pytestmark = pytest.mark.slow

KEYS = 100_000
HELD = 20_000
AT_ONCE = 500  # invokes in flight at once
BATCH = 100  # runs a claim takes, and a complete batch reports: a worker's, at concurrency 100
NOW = WorkerAwaitOptions(block_ms=0)


@pytest.fixture
async def busy(slowlog_url: str) -> AsyncIterator[tuple[FloClient, aioredis.Redis]]:
    async with watched_clients(slowlog_url, "keys") as pair:
        yield pair


async def invoke_keys(client: FloClient, keys: range) -> None:
    async def one(i: int) -> None:
        await client.action.invoke("job", b"x", ActionInvokeOptions(flow_key=f"tenant-{i}"))

    for start in range(keys.start, keys.stop, AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(start, min(keys.stop, start + AT_ONCE))))


async def workload(client: FloClient, conn: aioredis.Redis) -> float:
    """100,000 keys made active, their runs completed, the keys left idle until the reaper
    forgot them; the bytes of flow state per active key, measured at the busiest."""
    flow = FlowControl(concurrency=1, fair=True, rate=RateLimit(10, 1000))
    options = ActionRegisterOptions(timeout_ms=3_600_000, flow=flow)
    await client.action.register("job", options=options)
    await client.worker.register("w1", ["job"])
    keys = action_keys(client.namespace, "job")
    flow_keys = (keys.flows, keys.flow_held, keys.flow_vt, keys.flow_rate, keys.flow_once)

    async def claim() -> list[Claimed]:
        # A heartbeat first, as a worker sends them: on a loaded machine the workload
        # outlasts the heartbeat timeout, past which a silent worker's claims are refused.
        await client.worker.heartbeat("w1")
        return await client.worker.await_tasks("w1", ["job"], BATCH, NOW)

    await invoke_keys(client, range(KEYS))
    running = []
    while len(running) < KEYS:
        running += await claim()
    await invoke_keys(client, range(HELD))  # each held at once: its key is at its limit
    counts = await client.action.counts("job")
    assert (counts.running, counts.pending) == (KEYS, HELD)
    busiest = await client.action.flow_keys("job", limit=5)
    assert busiest.keys[0].held == 1 and busiest.keys[0].running == 1

    # What the keys' state holds, per active key (the runs' own records apart).
    held_bytes = 0
    for key in flow_keys:
        held_bytes += await conn.memory_usage(key, samples=0) or 0

    # Every run completes, a batch at a time; each frees its key's slot, and a held run
    # goes back to the queue, to be claimed and completed in turn.
    for start in range(0, len(running), BATCH):
        chunk = running[start : start + BATCH]
        await client.worker.complete_many(
            "w1", "job", [CompleteItem(r.run_id, b"ok", token=r.token) for r in chunk]
        )
    while tasks := await claim():
        await client.worker.complete_many(
            "w1", "job", [CompleteItem(t.run_id, b"ok", token=t.token) for t in tasks]
        )
    assert (await client.action.counts("job")).completed_total == KEYS + HELD

    # The keys are idle: the reaper forgets what they left, a bounded batch a call.
    await asyncio.sleep(1.1)  # the starts leave their one-second windows
    for _ in range(10 * KEYS // 100):
        await client.action.reap("job")
        if not any([await conn.exists(key) for key in flow_keys]):
            break
    assert [await conn.exists(key) for key in flow_keys] == [0] * len(flow_keys)
    await client.action.delete("job")
    return held_bytes / KEYS


@pytest.mark.timeout(400)  # two passes of 100,000 keys: 40-90 s each beside other passes
async def test_100k_active_keys_keep_every_call_short_and_leave_nothing(
    busy: tuple[FloClient, aioredis.Redis],
) -> None:
    client, conn = busy
    scripts = {s.sha[:12]: name for name, s in SCRIPTS.items()}
    # SLOWLOG times calls on the wall clock: on a loaded machine a call can be stalled
    # by the scheduler for tens of ms in any line of a script. A call over 50 ms in one
    # pass is looked at again in a second pass: a script whose work passes the bound is
    # slow in both; a stall is not where it was.
    slow: list[tuple[int, str]] = []
    for _ in range(2):
        await conn.slowlog_reset()
        per_key = await workload(client, conn)
        print(f"flow state: {per_key:.0f} bytes per active key ({KEYS:,} keys)")
        assert per_key < 400
        slow = [(us, scripts.get(c[48:], c)) for us, c in await slow_script_work(conn)]
        if not slow:
            break
    assert slow == [], f"script calls over 50 ms in two passes: {slow}"
