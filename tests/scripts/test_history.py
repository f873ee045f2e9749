"""The per-minute history of an action's runs (lua/lib/history.lua): exact counts after
known histories, the batched path's one write, percentiles, the ring's bounds."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from histories import NOW, claim, history
from polling import eventually

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    NotFoundError,
    ValidationError,
    WorkerFailOptions,
)
from flo_redis._session.reclaim import reclaim_gone_owners
from flo_redis._wire.keys import action_keys
from flo_redis.actions import Claimed, CompleteItem
from flo_redis.actions.history import BUCKETS, EDGES_MS, MINUTES, ActionHistory, since_arg

RING_BYTES = 8 + MINUTES * (4 + 3 * (3 + 2 * BUCKETS))


async def server_minute(raw: aioredis.Redis) -> int:
    """The server's current minute, once it is at least 5 s from the next one (so a test
    that reads it and then writes stays within it)."""

    async def now() -> tuple[int, int]:
        sec, _ = await raw.time()
        return sec // 60, sec % 60

    minute, _ = await eventually(now, lambda t: t[1] < 55, what="a minute with 5 s left")
    return minute


async def minute_of(client: FloClient, action: str = "job") -> ActionHistory:
    return await client.action.history(action, since="1m")


async def running(client: FloClient, n: int) -> list[Claimed]:
    """``n`` runs of a new action 'job', claimed by worker 'w1'."""
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    await client.action.invoke_many("job", [b"x"] * n)
    runs = await client.worker.await_tasks("w1", ["job"], n, NOW)
    assert len(runs) == n
    return runs


@pytest.mark.slow
async def test_a_known_history_is_counted_exactly(client: FloClient) -> None:
    await history(client)  # 3 completed; 2 failed for good, 1 timed out; none retried
    h = await client.action.history("job", since="6h")
    assert (h.completed, h.failed, h.retried) == (3, 3, 0)
    assert len(h.points) == 360
    assert h.points[-1].at_ms // 60_000 == h.at_ms // 60_000
    assert sum(p.completed + p.failed for p in h.points[-2:]) == 6
    # Pickup and duration are counted for the attempts a handler reported: 3 + 2.
    assert (h.pickup.count, h.duration.count) == (5, 5)
    counts = await client.action.counts("job")
    assert (counts.completed_last_hour, counts.failed_last_hour) == (3, 3)


async def test_retries_are_counted_whatever_made_them(client: FloClient, redis_url: str) -> None:
    await client.action.register(
        "job", options=ActionRegisterOptions(timeout_ms=60_000, max_retries=3)
    )
    await client.worker.register("w1", ["job"])
    ids = [(await client.action.invoke("job", b"x")).run_id for _ in range(3)]
    # A handler's failure with attempts left is a retry; one with retry=False a failure.
    [first, second] = await claim(client, 2)
    await client.worker.fail("w1", "job", first, "again")
    await client.worker.fail("w1", "job", second, "never", WorkerFailOptions(retry=False))
    # A run held by a worker process that died is taken back: a retry too.
    async with FloClient(redis_url, namespace=client.namespace) as other:
        await other.worker.register("w2", ["job"])
        held = await other.worker.await_tasks("w2", ["job"], 1)
        assert len(held) == 1
    taken = await eventually(
        lambda: reclaim_gone_owners(client.session, "job", grace_ms=0),
        lambda r: r.reclaimed == 1,
        what="the gone worker's run taken back",
    )
    assert taken.reclaimed == 1
    h = await client.action.history("job", since="10m")
    assert (h.completed, h.failed, h.retried) == (0, 1, 2)
    assert (h.pickup.count, h.duration.count) == (2, 2)  # the two reported attempts
    assert len(ids) == 3


@pytest.mark.slow
async def test_an_expired_lease_with_attempts_left_is_a_retry(client: FloClient) -> None:
    options = ActionRegisterOptions(timeout_ms=200, max_retries=2)
    await client.action.register("job", options=options)
    await client.worker.register("w1", ["job"])
    await client.action.invoke("job", b"x")
    await claim(client, 1)

    async def retried() -> int:
        await client.action.reap("job")
        return (await client.action.history("job", since="5m")).retried

    await eventually(retried, lambda n: n == 1, what="the expired lease retried")
    h = await client.action.history("job", since="5m")
    assert (h.completed, h.failed, h.pickup.count) == (0, 0, 0)


async def test_a_cancel_is_not_a_failure(client: FloClient) -> None:
    await client.action.register("job")
    run_id = (await client.action.invoke("job", b"x")).run_id
    await client.action.cancel(run_id)
    h = await client.action.history("job", since="5m")
    assert (h.completed, h.failed, h.retried) == (0, 0, 0)


async def test_a_batch_of_completes_is_one_history_write(
    client: FloClient, raw: aioredis.Redis
) -> None:
    runs = await running(client, 100)
    await server_minute(raw)
    # The minute's slot is opened by one complete; then a batch of 99 adds to it.
    await client.worker.complete("w1", "job", runs[0].run_id, b"ok")
    before = await raw.info("commandstats")
    items = [CompleteItem(r.run_id, b"ok", token=r.token) for r in runs[1:]]
    done = await client.worker.complete_many("w1", "job", items)
    after = await raw.info("commandstats")
    assert done == [None] * 99

    def calls(name: str) -> int:
        return int(after.get(f"cmdstat_{name}", {}).get("calls", 0)) - int(
            before.get(f"cmdstat_{name}", {}).get("calls", 0)
        )

    # Read the head, add every counter: two BITFIELDs for the whole batch.
    assert calls("bitfield") == 2
    assert calls("setrange") == 0
    h = await minute_of(client)
    assert h.completed == 100
    assert h.duration.count == h.pickup.count == 100


async def test_latencies_land_in_their_buckets(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    await client.action.invoke("job", b"x")
    await asyncio.sleep(1.1)  # the run waits at least a second to be picked up
    [run_id] = await claim(client, 1)
    await asyncio.sleep(0.25)  # and its handler runs at least 250 ms
    await client.worker.complete("w1", "job", run_id, b"ok")
    h = await client.action.history("job", since="5m")
    assert h.pickup.count == h.duration.count == 1
    assert h.pickup.p50 is not None and h.pickup.p50 >= 1000
    assert h.duration.p50 is not None and h.duration.p50 >= 200
    [minute] = [p for p in h.points if p.completed]
    assert sum(minute.pickup[EDGES_MS.index(1000) + 1 :]) == 1  # 1 s or more
    assert sum(minute.duration[EDGES_MS.index(200) + 1 :]) == 1  # 200 ms or more


async def test_the_ring_is_bounded_and_expires(client: FloClient, raw: aioredis.Redis) -> None:
    await history_of_one(client)
    keys = action_keys(client.namespace, "job")
    assert 0 < await raw.strlen(keys.history) <= RING_BYTES
    ttl = await raw.pttl(keys.history)
    assert 72 * 3_600_000 < ttl <= (MINUTES + 1) * 60_000


async def test_a_slot_left_from_an_earlier_lap_starts_from_zero(
    client: FloClient, raw: aioredis.Redis
) -> None:
    runs = [r.run_id for r in await running(client, 2)]
    keys = action_keys(client.namespace, "job")
    minute = await server_minute(raw)
    # A ring that started this minute 72 h ago and was last written then: the slot of
    # this minute holds that minute, with counts of its own.
    lap = minute - MINUTES
    await (
        raw.bitfield(keys.history)
        .set("u32", 0, lap)
        .set("u32", 32, lap)
        .set("u32", 64, lap)
        .set("u24", 96, 999)
        .execute()
    )
    await client.worker.complete("w1", "job", runs[0], b"ok")
    h = await minute_of(client)
    assert h.completed == 1
    # The clock went back a minute: this minute's slot, written already, is added to.
    await raw.bitfield(keys.history).set("u32", 32, minute + 1).execute()
    await client.worker.complete("w1", "job", runs[1], b"ok")
    assert (await minute_of(client)).completed == 2


async def test_delete_drops_the_history(client: FloClient, raw: aioredis.Redis) -> None:
    await history_of_one(client)
    await client.action.delete("job")
    assert await raw.exists(action_keys(client.namespace, "job").history) == 0
    await client.action.register("job")
    assert (await client.action.history("job")).completed == 0


async def history_of_one(client: FloClient) -> None:
    [run] = await running(client, 1)
    await client.worker.complete("w1", "job", run.run_id, b"ok")


async def test_a_window_round_the_rings_end_and_counts_without_detail(
    client: FloClient,
) -> None:
    await history_of_one(client)
    # 72 hours back from a ring begun this minute: the read wraps round the ring's end.
    whole = await client.action.history("job", since=timedelta(hours=72))
    h = await client.action.history("job", since=timedelta(hours=72), detail=False)
    assert len(h.points) == len(whole.points) == MINUTES
    assert (whole.completed, whole.pickup.count) == (1, 1)
    assert (h.completed, h.pickup.count) == (1, 0)
    assert h.points[-1].pickup == ()
    assert {p.at_ms for p in h.points if p.completed} == {
        p.at_ms for p in whole.points if p.completed
    }


async def test_bad_windows_and_unknown_actions_are_refused(client: FloClient) -> None:
    await client.action.register("job")
    for bad in ("0m", "73h", "4d", "6x", "", "-1h", timedelta(seconds=30), 6):
        with pytest.raises(ValidationError):
            await client.action.history("job", since=bad)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match="register it first"):
        await client.action.history("nope")
    assert since_arg("30m") == timedelta(minutes=30)
    assert since_arg("72h") == since_arg("3d") == timedelta(hours=72)
