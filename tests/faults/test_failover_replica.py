"""A failover that leaves the client connected to the old primary, now a replica.

A managed Redis fails over by promoting a replica and moving its address to it; the
connections made before stay on the old primary, which answers every write ``READONLY``
and closes nothing. Here Redis's own ``FAILOVER`` swaps a primary and its replica while
the clients reach them through a proxy that then sends new connections to the new
primary, as the moved address does. Nothing may be stranded on the replica: a finished
run's complete lands on the new primary, the worker claims there, its liveness is seen
there (a run it holds is not taken back from a live worker), and an invoke lands.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
from polling import eventually
from proxy import Proxy
from redis_server import RedisServer

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus
from flo_redis.sync import SyncFloClient

LEASE = ActionRegisterOptions(timeout_ms=300_000)


@dataclass
class Pair:
    """A primary and its replica, reached through ``proxy`` (first the primary)."""

    primary: RedisServer
    replica: RedisServer
    proxy: Proxy

    async def failover(self) -> None:
        """``FAILOVER`` (writes paused, the replica caught up, the roles swapped), then
        new connections through the proxy reach the new primary."""
        old = aioredis.Redis(port=self.primary.port)
        new = aioredis.Redis(port=self.replica.port)
        try:
            assert await old.execute_command("FAILOVER", "TIMEOUT", 5000)
            await eventually(lambda: _role(new), lambda role: role == "master")
            await eventually(lambda: _role(old), lambda role: role == "slave")
        finally:
            await old.aclose()
            await new.aclose()
        self.proxy.retarget("127.0.0.1", self.replica.port)


async def _role(r: aioredis.Redis) -> str:
    return (await r.execute_command("ROLE"))[0].decode()


@pytest.fixture
def servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    primary = RedisServer().start()
    replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port))).start()
    try:
        yield primary, replica
    finally:
        for server in (replica, primary):
            server.discard()


@pytest.fixture
async def pair(servers: tuple[RedisServer, RedisServer]) -> AsyncIterator[Pair]:
    primary, replica = servers
    r = aioredis.Redis(port=replica.port)
    try:
        await eventually(r.info, lambda info: info.get("master_link_status") == "up")
    finally:
        await r.aclose()
    proxy = await Proxy("127.0.0.1", primary.port).start()
    try:
        yield Pair(primary, replica, proxy)
    finally:
        await proxy.stop()


async def _live_channels(server: RedisServer) -> list[bytes]:
    r = aioredis.Redis(port=server.port)
    try:
        return list(await r.execute_command("PUBSUB", "SHARDCHANNELS", "*:live:*"))
    finally:
        await r.aclose()


async def test_a_worker_carries_on_on_the_new_primary(pair: Pair, namespace: str) -> None:
    async with FloClient(pair.proxy.url, namespace=namespace) as via_proxy:
        worker = via_proxy.new_action_worker(concurrency=20, block_ms=500)
        handled: collections.Counter[str] = collections.Counter()
        release = asyncio.Event()

        @worker.action("job", LEASE)
        async def job(ctx: ActionContext) -> bytes:
            handled[ctx.task_id] += 1
            if ctx.payload == b"held":
                await release.wait()
            return ctx.payload

        await via_proxy.action.register("job", options=LEASE)
        held = (await via_proxy.action.invoke("job", b"held")).run_id
        task = asyncio.create_task(worker.start())
        try:
            await eventually(lambda: asyncio.sleep(0, handled[held]), lambda n: n == 1)
            assert await _live_channels(pair.primary)

            await pair.failover()

            async with FloClient(pair.replica.url, namespace=namespace) as on_new:
                # The worker's liveness moves with it: seen on the new primary, gone from
                # the replica, so the run it holds is not taken back (3 reclaim graces).
                await eventually(lambda: _live_channels(pair.replica), bool)
                await eventually(lambda: _live_channels(pair.primary), lambda c: not c)
                await asyncio.sleep(3 * via_proxy.liveness_grace_ms / 1000)
                running = await on_new.action.status(held)
                assert running.status == RunStatus.RUNNING and running.attempt == 1

                # Work invoked on the new primary is claimed there, once each.
                fresh = [
                    (await on_new.action.invoke("job", str(i).encode())).run_id for i in range(20)
                ]
                release.set()  # the held run's complete meets the failover's aftermath
                for run_id in [held, *fresh]:
                    done = await eventually(
                        lambda run_id=run_id: on_new.action.status(run_id),
                        lambda s: s.status == RunStatus.COMPLETED,
                    )
                    assert done.attempt == 1, done
                    assert handled[run_id] == 1, (run_id, handled[run_id])
        finally:
            worker.stop()
            await task


async def test_invokes_after_a_failover_land_on_the_new_primary(pair: Pair, namespace: str) -> None:
    async with FloClient(pair.proxy.url, namespace=namespace) as via_proxy:
        await via_proxy.action.register("job")
        before = (await via_proxy.action.invoke("job", b"before")).run_id
        with SyncFloClient(pair.proxy.url, namespace=namespace) as sync:
            # (In a thread: the proxy runs in this event loop.) Its pooled connection is on
            # the old primary.
            await asyncio.to_thread(sync.action.invoke, "job", b"warm")

            await pair.failover()

            # Each client's next call is refused by the replica, connects again and is sent
            # once more: the caller sees it land.
            after = (await via_proxy.action.invoke("job", b"after")).run_id
            from_sync = (await asyncio.to_thread(sync.action.invoke, "job", b"sync")).run_id
        async with FloClient(pair.replica.url, namespace=namespace) as on_new:
            for run_id in (before, after, from_sync):
                assert (await on_new.action.status(run_id)).status == RunStatus.PENDING
