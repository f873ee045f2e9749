"""StreamWorker against real Redis: acks, nacks and redelivery, dead letters, stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from polling import eventually

from flo_redis import (
    FloClient,
    StreamContext,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    StreamWorker,
)


@contextlib.asynccontextmanager
async def running(worker: StreamWorker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.start())
    try:
        yield task
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_records_are_handled_and_acked(client: FloClient) -> None:
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        assert ctx.stream == "orders" and ctx.group == "billing"
        seen.append(ctx.payload)

    for i in range(25):
        await client.stream.append("orders", f"order-{i}".encode())
    worker = client.new_stream_worker(
        stream="orders", group="billing", handler=handle, batch_size=10, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 25)
        pending = await eventually(
            lambda: client.stream.group_pending("orders", "billing"), lambda p: p == []
        )
    assert sorted(seen) == sorted(f"order-{i}".encode() for i in range(25))
    assert pending == []


async def test_a_failing_record_is_redelivered_then_dead_lettered(client: FloClient) -> None:
    counts: list[int] = []

    async def handle(ctx: StreamContext) -> None:
        if ctx.payload == b"poison":
            counts.append(ctx.delivery_count)
            raise ValueError("cannot parse")

    await client.stream.group_join(
        "events", "etl", "setup", StreamGroupJoinOptions(max_deliver=3, ack_timeout_ms=60_000)
    )
    await client.stream.append("events", b"poison")
    await client.stream.append("events", b"fine")
    worker = client.new_stream_worker(stream="events", group="etl", handler=handle, block_ms=500)
    async with running(worker):
        letters = await eventually(lambda: client.stream.dead_letters("events", "etl"), bool)
    assert counts == [1, 2, 3]
    assert [(d.payload, d.delivery_count) for d in letters] == [(b"poison", 3)]
    assert await client.stream.group_pending("events", "etl") == []


async def test_a_handler_timeout_nacks(client: FloClient) -> None:
    attempts = 0

    async def handle(ctx: StreamContext) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.sleep(10)

    await client.stream.append("slow", b"x")
    worker = client.new_stream_worker(
        stream="slow", group="g", handler=handle, message_timeout=0.2, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, attempts), lambda n: n >= 2)
        await eventually(lambda: client.stream.group_pending("slow", "g"), lambda p: p == [])


async def test_pending_entries_are_processed_first_on_start(client: FloClient) -> None:
    for i in range(5):
        await client.stream.append("jobs", f"job-{i}".encode())
    # A previous incarnation of consumer "c1" took the entries and died before acking.
    taken = await client.stream.group_read("jobs", "workers", "c1", StreamGroupReadOptions(count=5))
    assert len(taken.records) == 5
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    worker = client.new_stream_worker(
        stream="jobs", group="workers", consumer="c1", handler=handle, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 5)
        await eventually(lambda: client.stream.group_pending("jobs", "workers"), lambda p: p == [])
    assert sorted(seen) == [f"job-{i}".encode() for i in range(5)]


async def test_stop_finishes_running_handlers_and_acks(client: FloClient) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def handle(ctx: StreamContext) -> None:
        started.set()
        await release.wait()

    await client.stream.append("s", b"one")
    worker = client.new_stream_worker(stream="s", group="g", handler=handle, block_ms=500)
    task = asyncio.create_task(worker.start())
    await asyncio.wait_for(started.wait(), 15)
    worker.stop()
    await asyncio.sleep(0.1)
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 15)
    assert await client.stream.group_pending("s", "g") == []
