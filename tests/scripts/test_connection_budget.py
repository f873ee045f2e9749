"""More concurrent calls than connections wait their turn; none fails for want of one.

redis-py's own pool raises "Too many connections" at its limit; a FloClient's pool holds
``max_connections`` and makes the rest wait, on one server and on a cluster.
"""

from __future__ import annotations

import asyncio
import collections

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus, ValidationError


@pytest.mark.parametrize("max_connections", [1, 2, 4, 100])  # 1: no lane; 2: a lane and one more
@pytest.mark.slow
async def test_many_concurrent_invokes_all_succeed(
    redis_url: str, namespace: str, max_connections: int
) -> None:
    async with FloClient(redis_url, namespace=namespace, max_connections=max_connections) as client:
        await client.action.register("job")
        results = await asyncio.gather(
            *(client.action.invoke("job", b"%d" % i) for i in range(250))
        )
        assert len({r.run_id for r in results}) == 250
        statuses = await asyncio.gather(*(client.action.status(r.run_id) for r in results))
        assert {s.status for s in statuses} == {RunStatus.PENDING}


async def test_the_pool_holds_at_most_max_connections(
    redis_url: str, namespace: str, raw: aioredis.Redis
) -> None:
    name = f"budget-{namespace}"
    before = await _clients_named(raw, name)
    async with FloClient(redis_url, namespace=namespace, max_connections=5) as client:
        client.redis.connection_pool.connection_kwargs["client_name"] = name  # type: ignore[union-attr]
        await client.action.register("job")
        await asyncio.gather(*(client.action.invoke("job", b"") for _ in range(200)))
        assert await _clients_named(raw, name) - before <= 5


async def _clients_named(raw: aioredis.Redis, name: str) -> int:
    clients = await raw.client_list()
    return sum(1 for c in clients if c.get("name") == name)


@pytest.mark.slow
async def test_a_worker_far_wider_than_its_pool_loses_no_report(
    redis_url: str, namespace: str
) -> None:
    async with FloClient(redis_url, namespace=namespace, max_connections=16) as client:
        worker = client.new_action_worker(concurrency=400, block_ms=500)
        arrived = 0
        release = asyncio.Event()
        handled: collections.Counter[str] = collections.Counter()
        options = ActionRegisterOptions(timeout_ms=300_000, max_retries=1)

        @worker.action("job", options)
        async def job(ctx: ActionContext) -> bytes:
            nonlocal arrived
            arrived += 1
            handled[ctx.task_id] += 1
            await release.wait()
            raise RuntimeError("all fail together")

        await client.action.register("job", options=options)
        ids = [r.run_id for r in await client.action.invoke_many("job", [b""] * 400)]
        task = asyncio.create_task(worker.start())
        await eventually(lambda: asyncio.sleep(0, arrived), lambda n: n == 400, timeout=60)
        release.set()  # 400 fails at once on 16 connections

        async def failed() -> int:
            runs = await asyncio.gather(*(client.action.status(i) for i in ids))
            return sum(1 for r in runs if r.status == RunStatus.FAILED)

        await eventually(failed, lambda n: n == 400, timeout=60)
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert set(handled.values()) == {1}


async def test_a_cluster_client_waits_for_a_connection_too(
    cluster_url: str, namespace: str
) -> None:
    async with FloClient(cluster_url, namespace=namespace, max_connections=3) as client:
        await client.action.register("job")
        results = await asyncio.gather(*(client.action.invoke("job", b"") for _ in range(200)))
        assert len({r.run_id for r in results}) == 200


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10", None, 10_001])
def test_max_connections_is_checked(redis_url: str, bad: object) -> None:
    with pytest.raises(ValidationError, match="max_connections"):
        FloClient(redis_url, max_connections=bad)  # type: ignore[arg-type]
