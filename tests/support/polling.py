"""Waiting for a condition in tests: poll with a generous deadline, never sleep a guess."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

import redis.asyncio as aioredis

from flo_redis import ActionWorker, ConnectionFailedError, FloClient, RunStatus
from flo_redis.types import ActionRunStatus

T = TypeVar("T")

FINISHED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT}


async def eventually(
    probe: Callable[[], Awaitable[T] | T],
    accept: Callable[[T], bool] = bool,
    *,
    timeout: float = 15.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Call ``probe`` (a coroutine function or a plain one) until ``accept`` holds for its
    value; fail after ``timeout`` seconds, naming ``what`` was waited for. An ``interval``
    of 0 gives the loop one turn between probes (for conditions no timer decides)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if accept(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        if loop.time() >= deadline:
            raise AssertionError(f"{what} not met within {timeout} s; last value {value!r}")
        await asyncio.sleep(interval)


async def connected(client: FloClient) -> FloClient:
    """``client``, connected once Redis answers: a worker process started during an outage
    or a failover waits for Redis, as a supervisor would, with no deadline."""
    while True:
        try:
            await client.connect()
            return client
        except ConnectionFailedError:
            await asyncio.sleep(0.2)


async def registered(worker: ActionWorker) -> None:
    """Wait until ``worker`` has registered its actions and itself."""
    client = worker._parent
    wid = worker.config.worker_id
    await eventually(
        lambda: client.worker.list(),
        lambda r: any(w.worker_id == wid for w in r.workers),
        what=f"worker {wid} registered",
    )


async def finished(client: FloClient, run_id: str, *, timeout: float = 15.0) -> ActionRunStatus:
    """The status of run ``run_id`` once it has completed, failed or timed out."""
    return await eventually(
        lambda: client.action.status(run_id),
        lambda s: s.status in FINISHED,
        timeout=timeout,
        what=f"run {run_id} finished",
    )


async def watched(raw: aioredis.Redis | aioredis.RedisCluster, channel: str) -> None:
    """Wait until a client is subscribed to the sharded channel ``channel``: a long poll
    armed to be woken by it (the namespace is the test's own, so the poll is the test's).
    On a cluster, the node that owns the channel's slot is asked."""

    async def subscribers() -> int:
        if isinstance(raw, aioredis.RedisCluster):
            await raw.initialize()
            node = raw.get_node_from_key(channel)
            async with aioredis.Redis(host=node.host, port=node.port) as owner:
                reply = await owner.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        else:
            reply = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        return int(reply[1])

    await eventually(subscribers, lambda n: n >= 1, what=f"a subscriber of {channel}")


class _Worker(Protocol):
    async def start(self) -> None: ...

    def stop(self) -> None: ...


W = TypeVar("W", bound=_Worker)


@contextlib.asynccontextmanager
async def running(
    worker: W, *, ready: Callable[[W], Awaitable[object]] | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    """``worker`` started in a task for the ``async with`` body (the task is yielded),
    after ``ready(worker)`` returned if given (``ready=registered``: once the worker has
    registered); stopped on the way out, its ``start()`` awaited for at most 30 s."""
    task = asyncio.create_task(worker.start())
    try:
        if ready is not None:
            await ready(worker)
        yield task
    finally:
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
