"""client.action.wait: the run's final status as soon as it ends, woken by the script."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
    WaitTimeoutError,
    WorkerFailOptions,
)
from flo_redis.keys import action_keys


async def take(client: FloClient, action: str) -> str:
    """Register worker w1 and take one run of ``action``; its run id."""
    await client.worker.register("w1", [action])
    [run] = await client.worker.await_tasks("w1", [action], 1)
    return run.run_id


async def test_wait_returns_when_the_run_completes(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"{}")).run_id
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await client.worker.complete("w1", "resize", await take(client, "resize"), b"done")
    status = await asyncio.wait_for(waiter, 30)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"done")


async def test_wait_returns_when_the_run_fails_for_good(client: FloClient) -> None:
    await client.action.register("resize", options=ActionRegisterOptions(max_retries=2))
    run_id = (await client.action.invoke("resize", b"{}")).run_id
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await client.worker.fail("w1", "resize", await take(client, "resize"), "again")  # retried
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await client.worker.fail(
        "w1", "resize", await take(client, "resize"), "gone", WorkerFailOptions(retry=False)
    )
    status = await asyncio.wait_for(waiter, 30)
    assert (status.status, status.error_message, status.attempt) == (RunStatus.FAILED, "gone", 2)


async def test_wait_returns_when_the_lease_of_the_last_attempt_expires(client: FloClient) -> None:
    once = ActionRegisterOptions(timeout_ms=200, max_retries=1)
    await client.action.register("slow", options=once)
    run_id = (await client.action.invoke("slow", b"")).run_id
    await take(client, "slow")
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await asyncio.sleep(0.5)
    await client.action.reap("slow")  # what every worker's reaper does
    status = await asyncio.wait_for(waiter, 30)
    assert status.status == RunStatus.TIMED_OUT


async def test_wait_on_an_ended_run_returns_at_once(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"")).run_id
    await client.worker.complete("w1", "resize", await take(client, "resize"), b"x")
    assert (await client.action.wait(run_id, timeout_ms=0)).status == RunStatus.COMPLETED


async def test_wait_raises_a_typed_timeout_with_the_status_then(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"")).run_id
    with pytest.raises(WaitTimeoutError, match="did not end within 300 ms") as info:
        await client.action.wait(run_id, timeout_ms=300)
    assert isinstance(info.value, TimeoutError)
    assert info.value.status.status == RunStatus.PENDING


async def test_wait_refuses_bad_arguments(client: FloClient) -> None:
    await client.action.register("resize")
    with pytest.raises(ValidationError, match="timeout_ms"):
        await client.action.wait("resize:1", timeout_ms=-1)
    with pytest.raises(NotFoundError):
        await client.action.wait("resize:999", timeout_ms=100)


async def test_ends_are_published_only_while_someone_waits(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("resize")
    channel = action_keys(client.namespace, "resize").ended
    pubsub = raw.pubsub()
    try:
        await pubsub.ssubscribe(channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        run_id = (await client.action.invoke("resize", b"")).run_id
        await client.worker.complete("w1", "resize", await take(client, "resize"), b"x")
        message = await pubsub.get_message(timeout=5)
        assert message is not None and message["data"] == run_id.encode()
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_a_finished_wait_leaves_the_channel_so_ends_are_no_longer_published(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("resize")
    channel = action_keys(client.namespace, "resize").ended
    run_id = (await client.action.invoke("resize", b"")).run_id
    with pytest.raises(WaitTimeoutError):
        await client.action.wait(run_id, timeout_ms=100)

    async def listeners() -> int:
        [_, count] = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        return int(count)

    assert await eventually(listeners, lambda n: n == 0) == 0


async def test_wait_on_a_cluster_is_woken_on_the_node_of_each_queue(cluster_url: str) -> None:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as client:
        names = [f"job-{i}" for i in range(6)]  # queues spread over the nodes
        runs = {}
        for name in names:
            await client.action.register(name)
            runs[name] = (await client.action.invoke(name, b"")).run_id
        waiters = [
            asyncio.create_task(client.action.wait(runs[n], timeout_ms=60_000)) for n in names
        ]
        await asyncio.sleep(0.2)
        await client.worker.register("w1", names)
        for run in await client.worker.await_tasks("w1", names, len(names)):
            await client.worker.complete("w1", run.action, run.run_id, run.action.encode())
        done = await asyncio.wait_for(asyncio.gather(*waiters), 30)
    assert [(s.status, s.output) for s in done] == [
        (RunStatus.COMPLETED, n.encode()) for n in names
    ]
