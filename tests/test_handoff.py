"""Hand-off (lua/lib/handoff.lua): a poll that found nothing parks its poller, and an
invoke gives a ready run straight to it — lease, token, owner and poll memo recorded —
and tells it on its hand-off channel. These call the scripts directly; the worker's side
is in test_action_worker.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis
from polling import eventually
from test_action_worker import finished, running

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    RateLimit,
    RunStatus,
    WorkerCompleteOptions,
)
from flo_redis.codec import pack
from flo_redis.keys import ActionKeys, action_keys, handoff_channel
from flo_redis.reclaim import reclaim_gone_owners

PARK_MS = 10_000


class Channel:
    """The poller's side of its hand-off channel: subscribed, messages decoded."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    async def next(self, timeout: float = 2.0) -> list[Any] | None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            message = await self.pubsub.get_message(timeout=0.1)
            if message is not None and message["type"] == "smessage":
                # Lua strings are msgpack str; the input is bytes whatever its encoding.
                fields = list(msgpack.unpackb(message["data"], raw=True))
                return [f.decode() if i < 2 else f for i, f in enumerate(fields)]
        return None


@pytest.fixture
async def channel(raw: aioredis.Redis, client: FloClient) -> AsyncIterator[Channel]:
    keys = action_keys(client.namespace, "job")
    pubsub = raw.pubsub()
    await pubsub.ssubscribe(handoff_channel(keys.tag, client.owner_id))
    await pubsub.get_message(timeout=1.0)  # the confirmation
    yield Channel(pubsub)
    await pubsub.aclose()  # type: ignore[no-untyped-call]


async def register(client: FloClient, **options: Any) -> ActionKeys:
    await client.action.register("job", options=ActionRegisterOptions(**options))
    return action_keys(client.namespace, "job")


async def park(
    client: FloClient,
    keys: ActionKeys,
    poll_id: str = "p1#0",
    labels: bytes = b"",
    received: str = "",
) -> None:
    reply = await client.worker.claim(keys, "w1", labels, 1, poll_id, PARK_MS, received)
    assert reply.runs == ()


async def test_an_invoke_hands_a_ready_run_to_a_parked_poller(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, timeout_ms=60_000)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"input")).run_id
    message = await channel.next()
    assert message is not None
    poll_id, handed, token, attempt, created, ready, claimed, data, trace = message
    assert (poll_id, handed, attempt, data, trace) == ("p1#0", run_id, 1, b"input", b"")
    assert created == ready <= claimed
    status = await client.action.status(run_id)
    assert status.status == RunStatus.RUNNING
    assert await raw.zcard(keys.pending) == 0
    assert await raw.zscore(keys.leases, run_id) is not None
    assert await raw.hget(keys.owners, client.owner_id) == b"0"
    assert await raw.zcard(keys.parked) == 0
    # The token is the run's fencing token: the poller completes with it.
    await client.worker.complete("w1", "job", run_id, b"done", WorkerCompleteOptions(token=token))
    assert (await client.action.status(run_id)).status == RunStatus.COMPLETED


async def test_a_poller_nobody_listens_for_is_not_handed_anything(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = await register(client)
    await park(client, keys)  # parked, but its hand-off channel has no subscriber
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await raw.zcard(keys.parked) == 0  # gone, or reconnecting: it claims again


async def test_a_lost_message_is_replayed_by_the_poll_id(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    token = (await channel.next() or [None, None, None])[2]
    # The poller never heard it: it claims again under the same poll id.
    again = await client.worker.claim(keys, "w1", b"", 1, "p1#0")
    assert [(r.run_id, r.token, r.payload) for r in again.runs] == [(run_id, token, b"x")]


async def test_the_next_poll_answers_with_a_handed_run_not_received(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert await channel.next() is not None
    # The poller's next poll says it did not receive the run: it is in the answer.
    nxt = await client.worker.claim(keys, "w1", b"", 5, "p1#1", PARK_MS, "")
    assert [r.run_id for r in nxt.runs] == [run_id]


async def test_a_received_run_is_not_handed_out_again(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert await channel.next() is not None
    nxt = await client.worker.claim(keys, "w1", b"", 5, "p1#1", PARK_MS, run_id)
    assert nxt.runs == ()
    assert await raw.zcard(keys.parked) == 1  # parked again for the next one


async def test_a_claim_of_the_poller_ends_its_park(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    assert (await client.worker.claim(keys, "w1", b"", 1, "p1#1")).runs == ()
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await raw.zcard(keys.parked) == 0


async def test_an_unpark_only_claim_answers_with_what_was_handed(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    await client.action.invoke("job", b"x")
    second = (await client.action.invoke("job", b"y")).run_id  # queued: the park took one
    handed = await client.worker.claim(keys, "w1", b"", 0, "p1#0")
    assert [r.payload for r in handed.runs] == [b"x"]
    assert (await client.action.status(second)).status == RunStatus.PENDING


async def test_a_park_ends_at_its_deadline(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    assert (await client.worker.claim(keys, "w1", b"", 1, "p1#0", 50)).runs == ()
    await asyncio.sleep(0.1)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_a_delayed_run_is_not_handed_off(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=60_000))).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_labels_are_matched(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys, labels=pack({"gpu": "b:true"}))
    other = (
        await client.action.invoke("job", b"x", ActionInvokeOptions(labels={"gpu": False}))
    ).run_id
    assert (await client.action.status(other)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_waiting_runs_go_first(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys, labels=pack({"gpu": "b:true"}))
    await client.action.invoke(
        "job", b"x", ActionInvokeOptions(labels={"gpu": False})
    )  # waits: no match
    # A run the poller could take is queued behind it rather than handed past it.
    run_id = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_max_concurrency_is_honoured(client: FloClient, channel: Channel) -> None:
    keys = await register(client, max_concurrency=1)
    await client.action.invoke("job", b"x")
    assert len((await client.worker.claim(keys, "w2", b"", 1, "other")).runs) == 1
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_the_rate_limit_is_honoured(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, rate_limit=RateLimit(1, 60_000))
    await park(client, keys)
    first = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(first)).status == RunStatus.RUNNING
    assert await raw.zcard(keys.rate) == 1  # the hand-off is a start
    await park(client, keys, "p1#1", received=first)
    second = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(second)).status == RunStatus.PENDING


async def test_a_handed_run_of_a_gone_owner_comes_back_through_liveness(
    redis_url: str, namespace: str, client: FloClient
) -> None:
    keys = await register(client)
    async with FloClient(redis_url, namespace=namespace) as poller:
        pubsub = poller.redis.pubsub()
        await pubsub.ssubscribe(handoff_channel(keys.tag, poller.owner_id))
        await pubsub.get_message(timeout=1.0)
        await poller.worker.claim(keys, "w1", b"", 1, "p1#0", PARK_MS)
        run_id = (await client.action.invoke("job", b"x")).run_id
        assert (await client.action.status(run_id)).status == RunStatus.RUNNING
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    # The poller's process is gone (its liveness channel has no subscriber): the run is
    # taken back as any claimed run of a gone owner.
    await reclaim_gone_owners(client.session, "job", grace_ms=0)
    status = await client.action.status(run_id)
    assert status.status == RunStatus.PENDING


# --- the worker's side (flo_redis/_poller.py) --------------------------------------


async def parked_pollers(raw: aioredis.Redis, action: str, namespace: str) -> int:
    return int(await raw.zcard(action_keys(namespace, action).parked))


async def test_an_idle_worker_parks_and_runs_what_it_is_handed(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=5000)
    calls: list[str] = []

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        calls.append(ctx.task_id)
        return ctx.payload

    async with running(worker):
        for i in range(5):
            await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
            run_id = (await client.action.invoke("job", str(i).encode())).run_id
            status = await finished(client, run_id)
            assert (status.status, status.output) == (RunStatus.COMPLETED, str(i).encode())
    assert len(calls) == len(set(calls)) == 5
    assert await parked_pollers(raw, "job", client.namespace) == 0  # stopping ended it


async def test_hand_offs_never_run_more_handlers_than_the_concurrency(
    client: FloClient,
) -> None:
    # One slot, two actions: the worker parks in one queue at a time at most, so a
    # hand-off never finds its slot taken.
    for name in ("a", "b"):
        await client.action.register(name)
    worker = client.new_action_worker(concurrency=1, block_ms=5000)
    active, most = 0, 0

    async def handler(ctx: ActionContext) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.005)
        active -= 1

    worker.register_action("a", handler)
    worker.register_action("b", handler)
    async with running(worker):
        ids = []
        for i in range(30):
            ids.append((await client.action.invoke("ab"[i % 2], b"")).run_id)
            await asyncio.sleep(0.002 * (i % 3))
        for run_id in ids:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert most == 1


async def test_a_stopped_worker_is_handed_nothing(client: FloClient, raw: aioredis.Redis) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=5000)
    worker.register_action("job", lambda ctx: b"")
    async with running(worker):
        await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_a_drain_ends_the_workers_parks(client: FloClient, raw: aioredis.Redis) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=30_000)
    worker.register_action("job", lambda ctx: b"")
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
        await client.worker.drain(worker.config.worker_id)
        assert await parked_pollers(raw, "job", client.namespace) == 0
        # Told to look again, the worker hears it is draining and stops, long before
        # its 30 s poll would have ended; nothing invoked meanwhile is handed to it.
        run_id = (await client.action.invoke("job", b"x")).run_id
        await asyncio.wait_for(task, 10)
        assert (await client.action.status(run_id)).status == RunStatus.PENDING
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
