"""A Redis that lost its data (restarted without persistence, flushed): running workers
put back what they own — their actions, their registration, their stream groups — so
producers are served again without anyone registering by hand."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from polling import eventually
from redis_server import RedisServer

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    FloError,
    NotFoundError,
    RunStatus,
    StreamContext,
)

OPTIONS = ActionRegisterOptions(timeout_ms=20_000, max_retries=5)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    running = RedisServer().start()  # no persistence: a restart comes back empty
    try:
        yield running
    finally:
        running.discard()


async def _invoke(client: FloClient, payload: bytes) -> str | None:
    try:
        return (await client.action.invoke("job", payload)).run_id
    except FloError:
        return None  # not registered (yet again), or the connection dropped


async def _completed(client: FloClient, run_id: str) -> bool:
    try:
        return (await client.action.status(run_id)).status == RunStatus.COMPLETED
    except FloError:
        return False


@pytest.mark.parametrize("loss", ["restart", "flushall"])
async def test_an_action_worker_registers_its_actions_again(server: RedisServer, loss: str) -> None:
    async with FloClient(server.url, namespace="loss") as client:
        worker = client.new_action_worker(block_ms=1000)
        handled: collections.Counter[bytes] = collections.Counter()

        @worker.action("job", OPTIONS)
        async def job(ctx: ActionContext) -> bytes:
            handled[ctx.payload] += 1
            return ctx.payload

        task = asyncio.create_task(worker.start())
        first = await eventually(lambda: _invoke(client, b"before"), timeout=15)
        await eventually(lambda: _completed(client, first))

        if loss == "restart":
            server.restart()
        else:
            raw = aioredis.Redis.from_url(server.url)
            await raw.flushall()
            await raw.aclose()

        second = await eventually(lambda: _invoke(client, b"after"), timeout=30)
        await eventually(lambda: _completed(client, second), timeout=30)
        definition = next(
            a for a in (await client.action.list()).actions if a.name == "job"
        )  # restored with the worker's own options
        assert (definition.timeout_ms, definition.max_retries) == (20_000, 5)

        async def registered() -> list[str]:
            return [w.worker_id for w in (await client.worker.list()).workers]

        await eventually(registered, lambda ids: ids == [worker.config.worker_id])
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert handled[b"after"] == 1


async def test_a_stream_worker_reads_again_after_its_group_is_gone(server: RedisServer) -> None:
    async with FloClient(server.url, namespace="loss") as client:
        seen: list[bytes] = []

        async def handler(ctx: StreamContext) -> None:
            seen.append(ctx.payload)

        worker = client.new_stream_worker(stream="s", group="g", handler=handler, block_ms=1000)
        task = asyncio.create_task(worker.start())
        await client.stream.append("s", b"before")
        await eventually(lambda: asyncio.sleep(0, seen), lambda s: s == [b"before"])

        raw = aioredis.Redis.from_url(server.url)
        await raw.flushall()
        await raw.aclose()

        await client.stream.append("s", b"after")
        await eventually(lambda: asyncio.sleep(0, seen), lambda s: s == [b"before", b"after"])
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_runs_made_after_the_loss_get_ids_never_seen_and_are_worked(
    server: RedisServer,
) -> None:
    # Ids and tokens never repeat, even once Redis's data is gone (lua/lib/ids.lua): what
    # the worker passed on before the flush is never taken for a run made after it.
    async with FloClient(server.url, namespace="loss") as client:
        worker = client.new_action_worker(block_ms=1000)
        handled: list[bytes] = []

        @worker.action("job", OPTIONS)
        async def job(ctx: ActionContext) -> bytes:
            handled.append(ctx.payload)
            return ctx.payload

        task = asyncio.create_task(worker.start())
        before = [await eventually(lambda: _invoke(client, b"before"), timeout=15)]
        before += [(await client.action.invoke("job", b"before")).run_id for _ in range(2)]
        for run_id in before:
            await eventually(lambda r=run_id: _completed(client, r))

        raw = aioredis.Redis.from_url(server.url)
        await raw.flushall()
        await raw.aclose()

        after = [await eventually(lambda: _invoke(client, b"after"), timeout=30)]
        after += [(await client.action.invoke("job", b"after")).run_id for _ in range(4)]
        assert not set(before) & set(after)
        for run_id in after:
            await eventually(lambda r=run_id: _completed(client, r), timeout=30)
        # Each on its first attempt: none was dropped as a repeat and left to its lease.
        assert [(await client.action.status(r)).attempt for r in after] == [1] * 5
        for run_id in before:
            with pytest.raises(NotFoundError):
                await client.action.status(run_id)
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert handled == [b"before"] * 3 + [b"after"] * 5
