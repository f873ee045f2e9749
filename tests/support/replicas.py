"""A primary with replicas: real ``redis-server`` processes (``--replicaof``) on free
ports, for the durability and failover tests.

``ReplicaSet(replicas=1).start()`` starts the primary, then each replica, and returns
once every replica's link is up and the primary counts it. :meth:`ReplicaSet.frozen`
stops a replica's process (``SIGSTOP``, :func:`stopped`; any server, a cluster node's
too) for a block: it keeps its connection to the primary but acknowledges nothing, as
a replica behind a stalled network or a long pause does; :meth:`ReplicaSet.promote`
makes a replica the primary, as a failover does.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from redis_server import RedisServer

SYNC_TIMEOUT_S = 30.0


@contextmanager
def stopped(server: RedisServer) -> Iterator[RedisServer]:
    """``server``'s process stopped (SIGSTOP) for the block, then let go on: it keeps its
    connections but answers and acknowledges nothing meanwhile."""
    process = server.process
    assert process is not None, "the server is not running"
    process.send_signal(signal.SIGSTOP)
    try:
        # The signal is only sent: wait until the process is stopped, so nothing it was
        # doing at that instant (reading the primary's stream, acknowledging it) goes on.
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while _state(process.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.001)
        yield server
    finally:
        process.send_signal(signal.SIGCONT)


def _state(pid: int) -> str:
    """The process's state letter in ``/proc`` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


@dataclass
class ReplicaSet:
    """A primary and ``replicas`` replicas of it; ``appendonly`` on every server."""

    replicas: int = 1
    appendonly: bool = False
    primary: RedisServer = field(init=False)
    followers: list[RedisServer] = field(default_factory=list, init=False)

    @property
    def url(self) -> str:
        return self.primary.url

    def start(self) -> ReplicaSet:
        self.primary = RedisServer(appendonly=self.appendonly).start()
        try:
            for _ in range(self.replicas):
                follows = ("--replicaof", "127.0.0.1", str(self.primary.port))
                replica = RedisServer(appendonly=self.appendonly, extra=follows)
                self.followers.append(replica.start())
            self.wait_synced()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def replica(self) -> RedisServer:
        """The first replica."""
        return self.followers[0]

    def info(self, server: RedisServer) -> dict[str, object]:
        conn = redis.Redis(port=server.port, socket_timeout=5)
        try:
            return conn.info("replication")  # type: ignore[no-any-return]
        finally:
            conn.close()

    def wait_synced(self, timeout: float = SYNC_TIMEOUT_S) -> None:
        """Return once every replica's link to the primary is up and the primary counts
        them all; RuntimeError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            links = [self.info(r).get("master_link_status") for r in self.followers]
            counted = self.info(self.primary).get("connected_slaves")
            if all(link == "up" for link in links) and counted == len(self.followers):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the replicas did not sync with the primary in {timeout:g} s")

    @contextmanager
    def frozen(self, replica: RedisServer | None = None) -> Iterator[RedisServer]:
        """``replica`` (the first by default) stopped with SIGSTOP for the block, then
        let go on and waited for until it is in sync again."""
        with stopped(replica or self.replica) as server:
            yield server
        self.wait_synced()

    def promote(self, replica: RedisServer | None = None) -> RedisServer:
        """Make ``replica`` (the first by default) a primary (``REPLICAOF NO ONE``), as a
        failover does, and point the others at it; the old primary is left as it is."""
        server = replica or self.replica
        conn = redis.Redis(port=server.port, socket_timeout=5)
        try:
            conn.execute_command("REPLICAOF", "NO", "ONE")
        finally:
            conn.close()
        for other in self.followers:
            if other is not server:
                peer = redis.Redis(port=other.port, socket_timeout=5)
                try:
                    peer.execute_command("REPLICAOF", "127.0.0.1", str(server.port))
                finally:
                    peer.close()
        return server

    def stop(self) -> None:
        for server in [*self.followers, getattr(self, "primary", None)]:
            if server is not None:
                if server.process is not None:
                    server.process.send_signal(signal.SIGCONT)  # a frozen one ends too
                server.discard()
        self.followers.clear()
