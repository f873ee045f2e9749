"""Flow control by key as a worker meets it: the claim and the hand-off (a parked
poller handed a run at invoke) both hold a key to its concurrency limit, while other
keys' runs go on; a parked poller is not handed a run whose key is full."""

from __future__ import annotations

import asyncio
from collections import Counter

import redis.asyncio as aioredis
from handoff import PARK_MS, Channel, channel, register
from polling import eventually, finished, registered, running

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    RunStatus,
)
from flo_redis.actions.claims import claim

__all__ = ["channel"]  # the hand-off channel fixture


async def test_a_worker_never_runs_more_of_a_key_than_its_limit(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500, concurrency=20)
    now: Counter[str] = Counter()
    most: Counter[str] = Counter()

    @worker.action("job", ActionRegisterOptions(flow=FlowControl(concurrency=2, fair=True)))
    async def handle(ctx: ActionContext) -> bytes:
        key = ctx.input().decode()
        now[key] += 1
        most[key] = max(most[key], now[key])
        await asyncio.sleep(0.01)
        now[key] -= 1
        return b"ok"

    async with running(worker, ready=registered):
        run_ids = []
        for i in range(60):
            key = ("a", "b", "c")[i % 3] if i < 45 else "a"
            opts = ActionInvokeOptions(flow_key=key)
            run_ids.append((await client.action.invoke("job", key.encode(), opts)).run_id)
        statuses = [await finished(client, r, timeout=60) for r in run_ids]
    assert all(s.status == RunStatus.COMPLETED for s in statuses)
    assert most == {"a": 2, "b": 2, "c": 2}


async def test_a_parked_poller_is_not_handed_a_run_whose_key_is_full(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, flow=FlowControl(concurrency=1))
    one = ActionInvokeOptions(flow_key="k")
    first = (await client.action.invoke("job", b"x", one)).run_id
    assert len((await claim(client.session, keys, "w2", b"", 1, "other")).runs) == 1
    reply = await claim(client.session, keys, "w1", b"", 1, "p1#0", PARK_MS)
    assert reply.runs == ()
    held = (await client.action.invoke("job", b"y", one)).run_id
    assert (await client.action.status(held)).status == RunStatus.PENDING
    other = (await client.action.invoke("job", b"z", ActionInvokeOptions(flow_key="j"))).run_id
    # The park took the other key's run; the held one waits for "k"'s slot.
    assert (await client.action.status(other)).status == RunStatus.RUNNING
    await client.worker.complete("w2", "job", first, b"ok")

    async def held_status() -> RunStatus:
        await claim(client.session, keys, "w3", b"", 1, "")
        return (await client.action.status(held)).status

    await eventually(held_status, lambda s: s == RunStatus.RUNNING)
