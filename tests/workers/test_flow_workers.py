"""Flow control by key as a worker meets it: the claim and the hand-off (a parked
poller handed a run at invoke) both hold a key to its concurrency limit and its rate,
while other keys' runs go on; a handler's RateLimited pauses its key, unspent."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest
import redis.asyncio as aioredis
from handoff import PARK_MS, Channel, channel, register
from polling import eventually, finished, registered, running
from processes import script_process
from windows import most_in_any_window

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    RateLimit,
    RateLimited,
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
    # Never past the limit; and at it for the key with a backlog of its own (the last
    # 15 runs), so the limit was met, not merely never tried. The others reach it when
    # the machine keeps up, which a loaded one need not.
    assert set(most) == {"a", "b", "c"} and max(most.values()) <= 2
    assert most["a"] == 2


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


async def test_a_parked_poller_is_not_handed_a_run_past_its_keys_rate(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client, flow=FlowControl(rate=RateLimit(1, 60_000)))
    await client.worker.register("w1", ["job"])
    await client.action.invoke("job", b"", ActionInvokeOptions(flow_key="a"))
    assert len((await claim(client.session, keys, "w2", b"", 1, "other")).runs) == 1
    assert (await claim(client.session, keys, "w1", b"", 1, "p1#0", PARK_MS)).runs == ()
    second = (await client.action.invoke("job", b"", ActionInvokeOptions(flow_key="a"))).run_id
    status = await client.action.status(second)
    assert status.status == RunStatus.PENDING and status.due_at_ms is not None
    other = (await client.action.invoke("job", b"", ActionInvokeOptions(flow_key="b"))).run_id
    assert (await client.action.status(other)).status == RunStatus.RUNNING


async def test_a_handler_raising_rate_limited_pauses_its_key_without_spending_the_attempt(
    client: FloClient, raw: aioredis.Redis
) -> None:
    worker = client.new_action_worker(block_ms=500, concurrency=10)
    entered: dict[bytes, list[int]] = {}
    pause_ms = 2000

    @worker.action("job", ActionRegisterOptions(flow=FlowControl(concurrency=1)))
    async def handle(ctx: ActionContext) -> bytes:
        seconds, micros = await raw.time()
        entered.setdefault(ctx.input(), []).append(seconds * 1000 + micros // 1000)
        if ctx.input() == b"a0" and len(entered[b"a0"]) == 1:
            raise RateLimited(pause_ms)
        return b"ok"

    async with running(worker, ready=registered):
        run_ids = []
        for name in (b"a0", b"a1", b"b0", b"b1"):
            opts = ActionInvokeOptions(flow_key=name[:1].decode())
            run_ids.append((await client.action.invoke("job", name, opts)).run_id)
        statuses = [await finished(client, r, timeout=30) for r in run_ids]
    assert [s.status for s in statuses] == [RunStatus.COMPLETED] * 4
    assert statuses[0].attempt == 1  # the rate-limited attempt was not spent
    limited_at = entered[b"a0"][0]
    # Key a waited out the pause (a0 again, and a1 behind it); key b did not.
    assert entered[b"a0"][1] >= limited_at + pause_ms
    assert entered[b"a1"][0] >= limited_at + pause_ms
    assert max(entered[b"b0"][0], entered[b"b1"][0]) < limited_at + pause_ms


@pytest.mark.slow
async def test_each_keys_rate_window_holds_across_three_worker_processes(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    most, per_ms, keys, runs = 3, 300, ("a", "b", "c"), 15
    flow = FlowControl(fair=True, rate=RateLimit(most, per_ms))
    await client.action.register("job", options=ActionRegisterOptions(flow=flow, max_retries=20))
    run_ids: dict[str, list[str]] = {}
    for key in keys:
        opts = ActionInvokeOptions(flow_key=key)
        invoked = await client.action.invoke_many("job", [key.encode()] * runs, opts)
        run_ids[key] = [r.run_id for r in invoked]
    args = [redis_url, namespace, f"{namespace}:ledger", "0", f"{most}/{per_ms}"]
    with contextlib.ExitStack() as procs:
        for _ in range(3):
            procs.enter_context(script_process("flow_proc.py", *args))
        for key in keys:
            for run_id in run_ids[key]:
                await finished(client, run_id, timeout=90)
    for key in keys:
        starts = [(await client.action.status(r)).started_at_ms or 0 for r in run_ids[key]]
        # Every window position, by Redis time (the claim's clock): at most `most` starts.
        assert most_in_any_window(starts, per_ms) <= most, key
        # Held, not undershot: the starts spread over about runs / most windows.
        assert max(starts) - min(starts) >= (runs // most - 1) * per_ms
