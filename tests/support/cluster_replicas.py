"""Servers that fail over: a Redis Cluster whose every primary has a replica, and one
primary with its replica behind an address that moves.

:class:`ReplicatedCluster` is six redis-servers (three primaries, a replica each) with a
short ``cluster-node-timeout``, so a replica is promoted by the cluster itself a few
seconds after its primary is SIGKILLed. :class:`ReplicatedPair` is what Sentinel or a
managed service gives: one primary, one replica, clients reaching the primary through an
address (a proxy here) that is moved to the replica once it is promoted, and the killed
primary brought back as the new primary's replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis
from polling import eventually
from proxy import Proxy
from redis_server import RedisCluster, RedisServer

#: How long a primary may be unreachable before the cluster promotes its replica.
NODE_TIMEOUT_MS = 1000
#: A replica's first sync starts at once (Redis waits 5 s for more replicas by default).
NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")
# A key of no namespace, written and removed to give WAIT the primary's newest offset.
_MARK = "flo-test:replicated"


async def replicated(primary: aioredis.Redis, replicas: int = 1, timeout_ms: int = 5000) -> int:
    """``WAIT`` for ``replicas`` replicas to have everything the primary holds; how many
    have. ``WAIT`` waits for the writes of its own connection only (a connection that
    wrote nothing returns at once), so this one writes first: a key set and removed,
    whose offset is past every write before it, whichever connection sent them."""
    await primary.set(_MARK, b"1")
    await primary.delete(_MARK)
    return int(await primary.execute_command("WAIT", replicas, timeout_ms))


def replicated_sync(primary: redis.Redis, replicas: int, timeout_ms: int) -> int:
    """:func:`replicated` with redis-py's blocking client."""
    primary.set(_MARK, b"1")
    primary.delete(_MARK)
    return int(primary.execute_command("WAIT", replicas, timeout_ms))


@dataclass
class ReplicatedCluster(RedisCluster):
    """``masters`` primaries with one replica each, judged failed after
    :data:`NODE_TIMEOUT_MS`; all slots covered and every replica in sync when started. A
    killed node's process is discarded, never restarted."""

    replicas: int = 1
    node_timeout_ms: int = NODE_TIMEOUT_MS
    extra: tuple[str, ...] = NO_SYNC_DELAY

    def kill_primary(self, slot: int) -> int:
        """SIGKILL the primary that owns ``slot`` (its port is returned); the cluster
        promotes its replica on its own (:meth:`wait_promoted`)."""
        port = self.owner_port(slot)
        victim = next(s for s in self.servers if s.port == port)
        victim.stop(signal.SIGKILL)
        self.servers.remove(victim)
        victim.discard()
        return port

    def wait_promoted(self, slot: int, old_port: int, timeout: float = 30.0) -> int:
        """Wait until a primary other than ``old_port`` serves ``slot`` and the cluster
        is whole again; that primary's port."""

        def promoted() -> bool:
            try:
                return self.owner_port(slot) != old_port and self._all_ok()
            except LookupError:
                return False

        self._wait(promoted, f"slot {slot} served by a new primary", timeout)
        return self.owner_port(slot)

    def _all_ok(self) -> bool:
        return all("cluster_state:ok" in self.cli(p, "cluster", "info") for p in self.ports)

    @staticmethod
    def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not reached in {timeout:g} s")
            time.sleep(0.05)


@dataclass
class ReplicatedPair:
    """A primary and its replica; clients use :attr:`url`, an address (a proxy) that
    leads to the primary and, after :meth:`fail_over`, to the promoted replica. With a
    ``lag_s``, the replica replicates through a :class:`Proxy` that delivers the
    replication stream that late: the replica trails its primary by the lag, as across a
    slow network, and a killed primary takes its last ``lag_s`` of writes with it."""

    primary: RedisServer
    replica: RedisServer
    proxy: Proxy
    link: Proxy | None = None
    #: The killed primary coming back as the new primary's replica (:meth:`rejoin`).
    rejoining: asyncio.Task[RedisServer] | None = field(default=None, init=False)

    @classmethod
    async def start(cls, lag_s: float = 0.0) -> ReplicatedPair:
        primary = RedisServer(extra=NO_SYNC_DELAY).start()
        link = await Proxy("127.0.0.1", primary.port, lag_s=lag_s).start() if lag_s else None
        upstream = link.port if link else primary.port
        # Promoted, it syncs its own replica at once too (:meth:`rejoin`).
        follows = ("--replicaof", "127.0.0.1", str(upstream))
        replica = RedisServer(extra=(*NO_SYNC_DELAY, *follows)).start()
        async with aioredis.Redis(port=replica.port) as conn:
            synced = lambda info: info["master_link_status"] == "up"  # noqa: E731
            await eventually(lambda: conn.info("replication"), synced, what="replica in sync")
        return cls(primary, replica, await Proxy("127.0.0.1", primary.port).start(), link)

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, lag_s: float = 0.0) -> AsyncIterator[ReplicatedPair]:
        """A pair for the ``async with`` body (:meth:`start`), stopped after it."""
        pair = await cls.start(lag_s)
        try:
            yield pair
        finally:
            await pair.stop()

    @property
    def url(self) -> str:
        return self.proxy.url

    def kill_primary(self) -> None:
        """SIGKILL the primary: what it acknowledged and had not yet sent its replica is
        gone (with a lag, what the link still held). Connections through the address are
        cut, new ones refused."""
        self.primary.stop(signal.SIGKILL)
        if self.link is not None:
            self.link.cut_all()
        self.proxy.blackout()

    def fail_over(self) -> None:
        """Promote the replica and move the address to it, as Sentinel or a managed
        service does once it has judged the primary down."""
        redis.Redis(port=self.replica.port).execute_command("REPLICAOF", "NO", "ONE")
        self.proxy.retarget("127.0.0.1", self.replica.port)
        self.proxy.restore()

    async def failover(self, detect_s: float) -> None:
        """SIGKILL the primary, promote its replica ``detect_s`` later (the time Sentinel
        takes to judge it down) and bring the killed node back as the new primary's
        replica; returns once the new primary serves (the rejoin goes on)."""
        self.kill_primary()
        await asyncio.sleep(detect_s)
        self.fail_over()
        self.rejoin()

    def rejoin(self) -> None:
        """Bring the killed primary back as a replica of the promoted one, as Sentinel
        makes a failed primary when it returns, so writes that wait for a replica
        (``Durability.replicated``) are answered again: restarted empty (its data went
        with it), it syncs in full from the new primary, through the link with its lag;
        the two swap roles. Returns at once: :attr:`rejoining` starts the process, and
        the sync follows (``INFO replication`` says when its link is up)."""
        killed, promoted = self.primary, self.replica
        upstream = promoted.port
        if self.link is not None:
            self.link.retarget("127.0.0.1", promoted.port)
            upstream = self.link.port
        killed.extra = (*NO_SYNC_DELAY, "--replicaof", "127.0.0.1", str(upstream))
        self.primary, self.replica = promoted, killed
        self.rejoining = asyncio.create_task(asyncio.to_thread(killed.start))

    async def stop(self) -> None:
        if self.rejoining is not None:
            await asyncio.gather(self.rejoining, return_exceptions=True)
        for proxy in (self.proxy, self.link):
            if proxy is not None:
                await proxy.stop()
        for server in (self.replica, self.primary):
            server.discard()
