"""A private Redis Sentinel deployment for the tests: a primary, its replicas and three
sentinels on free ports, with timings short enough that a failover after ``SIGKILL`` of
the primary completes in a few seconds.

    group = SentinelGroup().start()     # or SentinelGroup(password="pw", sentinel_password="s")
    client = FloClient(group.url, namespace=...)  # redis+sentinel://127.0.0.1:p1,p2,p3/flo
    ...
    group.replicated()                  # what the primary holds is on every replica
    new_primary = group.kill_primary()  # SIGKILL; returns once the sentinels name the new one
    group.discard()                     # every process stopped, every data folder removed

The servers are the tests' :class:`~redis_server.RedisServer` (``FLO_REDIS_TEST_SERVER=valkey``
runs ``valkey-server`` for the data nodes and the sentinels alike), so their data folders
sit under the same temporary root as every other test server's and are removed at the
end of the test session too (:func:`redis_server.discard_all`), even when a test forgets
:meth:`SentinelGroup.discard`.

What a test reads and uses:

- :attr:`SentinelGroup.url` -- the ``redis+sentinel://`` URL naming every sentinel, with
  the data password in its user info and ``sentinel_password=`` in its query when set;
  :meth:`SentinelGroup.url_with` for another scheme, other sentinel ports (one where
  nothing listens, say: :func:`flo_redis.testing.free_port`) or a different query.
- :attr:`SentinelGroup.primary` / :attr:`SentinelGroup.replicas` -- the data nodes as the
  sentinels see them now (after :meth:`SentinelGroup.kill_primary` the promoted replica is
  the primary and the killed one is in :attr:`SentinelGroup.down`).
- :attr:`SentinelGroup.sentinels` -- the sentinel servers; ``sentinels[i].stop()`` takes one
  down (a failover still happens with two of three: the quorum is 2).
- :meth:`SentinelGroup.replicated` -- ``WAIT`` until every replica has what the primary
  holds, before a kill that must lose nothing (replication is asynchronous).
- :meth:`SentinelGroup.kill_primary` -- ``SIGKILL`` the primary and wait until every
  running sentinel names a promoted replica that answers as primary.
- :meth:`SentinelGroup.failover` -- a failover with the primary alive (``SENTINEL
  FAILOVER``): it runs on as a replica, the sentinels having closed its clients'
  connections (``CLIENT KILL``) as they demoted it.
- :meth:`SentinelGroup.rejoin` -- start a killed node again as a replica of the current
  primary (as the sentinels would make it, a few seconds later); returns once synced.
- ``SentinelGroup(chained=1)`` -- a replica of the first replica too, which the
  sentinels never promote (:attr:`SentinelGroup.followers`).
- :meth:`SentinelGroup.named_primary` -- the address the sentinels give for the service.
- :meth:`SentinelGroup.data_client` -- a plain redis-py client of one data node (with
  the password), for assertions on what a node holds.
- ``SentinelGroup(tls=make_authority(folder))`` -- every process on TLS as well
  (:mod:`tls_certs`); :attr:`SentinelGroup.url` is then ``rediss+sentinel://`` naming
  the CA, and :meth:`SentinelGroup.address` gives a node's TLS port.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote

import redis
from cluster_replicas import replicated_sync
from redis_server import RedisServer
from tls_certs import Authority, server_args

from flo_redis.testing import free_port

HOST = "127.0.0.1"
SERVICE = "flo"
START_TIMEOUT_S = 90.0  # a group's start: its sentinels and replicas settled
# Until a group has settled its sentinels think a node down only after this long: a
# primary slow to answer on a busy machine is not failed over before a test begins.
START_DOWN_AFTER_MS = 60_000
T = TypeVar("T")


@dataclass
class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinel_count`` sentinels monitoring it as
    ``service`` (module docstring). ``password`` guards the data nodes (``requirepass``
    and ``masterauth``; the sentinels get it as ``auth-pass``), ``sentinel_password``
    the sentinels (``requirepass``, and ``sentinel-pass`` between them). With ``tls``
    (a CA from :func:`tls_certs.make_authority`) every process also listens on a TLS
    port, which is the one replicas, sentinels and :attr:`url` use (``rediss+sentinel``);
    the plain ports stay, for the tests' own look at each node. A node is thought down
    after ``down_after_ms`` without an answer, once the group has started (a minute
    before, so a busy machine's slow answer starts no failover). ``chained`` more
    replicas follow the first replica, not the primary (:attr:`followers`): the
    primary's ``WAIT`` does not count them, and the sentinels never promote them (they
    learn only the primary's own replicas, and a ``replica-priority`` of 0 says never).
    With one replica and chained ones, ``WAIT 1`` counts the one replica a failover can
    promote, and the chained ones follow it once it is primary."""

    service: str = SERVICE
    password: str | None = None
    sentinel_password: str | None = None
    replica_count: int = 1
    chained: int = 0
    sentinel_count: int = 3
    down_after_ms: int = 1000
    failover_timeout_ms: int = 3000
    timeout_s: float = 30.0
    tls: Authority | None = None
    primary: RedisServer | None = None
    replicas: list[RedisServer] = field(default_factory=list)
    sentinels: list[RedisServer] = field(default_factory=list)
    down: list[RedisServer] = field(default_factory=list)
    # The chained replicas (``chained``).
    followers: list[RedisServer] = field(default_factory=list)
    # A server's TLS port by its plain port (with ``tls``).
    tls_ports: dict[int, int] = field(default_factory=dict)

    # --- starting and stopping ---------------------------------------------------------

    def start(self) -> SentinelGroup:
        """Start every process and return once the sentinels know the primary, every
        replica and each other (a failover needs their votes)."""
        try:
            self.primary = self._data_node().start()
            for _ in range(self.replica_count):
                replica = self._data_node("--replicaof", HOST, str(self.address(self.primary)))
                self.replicas.append(replica.start())
            for _ in range(self.chained):
                first = self.address(self.replicas[0])
                follows = ("--replicaof", HOST, str(first), "--replica-priority", "0")
                self.followers.append(self._data_node(*follows).start())
            for _ in range(self.sentinel_count):
                self.sentinels.append(self._sentinel(self.address(self.primary)).start())
            # Sentinels learn of replicas from the primary's INFO every 10 s and of each
            # other by hello messages every 2 s; beside two more test passes on two cores
            # that has taken over 30 s. A start is not what the tests measure.
            self._wait(
                self._settled,
                "the sentinels did not find the replicas and each other",
                max(self.timeout_s, START_TIMEOUT_S),
            )
            for sentinel in self.sentinels:  # quick to judge a node down from now on
                with self._sentinel_client(sentinel) as client:
                    client.execute_command(
                        "SENTINEL", "SET", self.service,
                        "down-after-milliseconds", str(self.down_after_ms),
                    )  # fmt: skip
        except BaseException:
            self.discard()
            raise
        return self

    def discard(self) -> None:
        """Stop every process and remove its data folder."""
        for server in [*self.sentinels, *self.replicas, *self.followers, *self.down]:
            server.discard()
        if self.primary is not None:
            self.primary.discard()
        self.sentinels.clear()
        self.replicas.clear()
        self.down.clear()
        self.followers.clear()
        self.primary = None

    def _data_node(self, *extra: str) -> RedisServer:
        auth = ("--requirepass", self.password, "--masterauth", self.password)
        return self._secured(RedisServer(extra=(*(auth if self.password else ()), *extra)))

    def _secured(self, server: RedisServer) -> RedisServer:
        """``server``, with a TLS port too when the group has ``tls``."""
        if self.tls is not None:
            port = self.tls_ports[server.port] = free_port()
            tls = server_args(self.tls, port, client_certs=False)
            server.extra = (*server.extra, *tls, "--tls-replication", "yes")
        return server

    def address(self, server: RedisServer) -> int:
        """The port the others reach ``server`` on (its TLS port with ``tls``)."""
        return self.tls_ports.get(server.port, server.port)

    def _sentinel(self, primary_port: int) -> RedisServer:
        server = self._secured(RedisServer(extra=("--sentinel",)))
        name = self.service
        lines = [
            f"sentinel monitor {name} {HOST} {primary_port} 2",
            f"sentinel down-after-milliseconds {name} {START_DOWN_AFTER_MS}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {name} {_quoted(self.password)}")
        if self.sentinel_password:
            lines += [
                f"requirepass {_quoted(self.sentinel_password)}",
                f"sentinel sentinel-pass {_quoted(self.sentinel_password)}",
            ]
        server.config = server.workdir / "sentinel.conf"
        server.config.write_text("\n".join(lines) + "\n")
        return server

    # --- addresses ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """A ``redis+sentinel://`` URL naming every sentinel, credentials included."""
        return self.url_with()

    def url_with(
        self,
        *,
        scheme: str | None = None,
        ports: list[int] | None = None,
        query: str | None = None,
    ) -> str:
        """The URL with ``scheme`` (default ``redis+sentinel``, ``rediss+sentinel`` with
        ``tls``), naming the
        sentinels on ``ports`` (default: every sentinel's), with ``query`` (default:
        ``sentinel_password=`` when one is set, and the CA with ``tls``)."""
        ports = [self.address(s) for s in self.sentinels] if ports is None else ports
        hosts = ",".join(f"{HOST}:{port}" for port in ports)
        user = f":{quote(self.password, safe='')}@" if self.password else ""
        if query is None:
            secret = self.sentinel_password
            parts = [f"sentinel_password={quote(secret, safe='')}"] if secret else []
            if self.tls is not None:
                parts.append(f"ssl_ca_certs={self.tls.ca}")
            query = "&".join(parts)
        if scheme is None:
            scheme = "redis+sentinel" if self.tls is None else "rediss+sentinel"
        return f"{scheme}://{user}{hosts}/{self.service}" + (f"?{query}" if query else "")

    def data_client(self, server: RedisServer) -> redis.Redis:
        """A plain client of the data node ``server`` (close it after use)."""
        return redis.Redis(host=HOST, port=server.port, password=self.password, socket_timeout=5)

    def _sentinel_client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(
            host=HOST, port=server.port, password=self.sentinel_password, socket_timeout=2
        )

    def named_primary(self) -> set[int | None]:
        """The primary's port (:meth:`address`) as each running sentinel names it (None:
        it names none, or does not answer)."""
        named: set[int | None] = set()
        for sentinel in self.sentinels:
            if sentinel.process is None:
                continue
            with self._sentinel_client(sentinel) as client:
                try:
                    address = client.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                    )
                except redis.RedisError:
                    address = None
            named.add(int(address[1]) if address else None)
        return named

    # --- faults ------------------------------------------------------------------------

    def replicated(self) -> None:
        """Return once every replica acknowledged all the primary has written."""
        assert self.primary is not None
        with self.data_client(self.primary) as client:
            wanted = len(self.replicas)
            got = replicated_sync(client, wanted, int(self.timeout_s * 1000))
            assert got >= wanted, f"{got} of {wanted} replicas caught up"

    def kill_primary(self) -> RedisServer:
        """``SIGKILL`` the primary; return the replica the sentinels promoted, once every
        running sentinel names it and it answers as a primary. The killed node moves to
        :attr:`down`."""
        old = self.primary
        assert old is not None, "start() the group first"
        old.stop(signal.SIGKILL)
        self.down.append(old)
        return self._promoted(old)

    def failover(self) -> RedisServer:
        """A failover the sentinels run with the primary alive (``SENTINEL FAILOVER``):
        return the promoted replica once every running sentinel names it and the old
        primary, still running (its clients' connections closed by the sentinels), is
        its replica (in :attr:`replicas`) and has synced."""
        old = self.primary
        assert old is not None, "start() the group first"
        sentinel = next(s for s in self.sentinels if s.process is not None)
        with self._sentinel_client(sentinel) as client:
            client.execute_command("SENTINEL", "FAILOVER", self.service)
        new = self._promoted(old)
        self.replicas.append(old)
        self._wait(lambda: self._role(old) == "slave" and self._linked(old), "no demotion")
        return new

    def _promoted(self, old: RedisServer) -> RedisServer:
        """The replica that took over from ``old``, once every running sentinel names it
        and it answers as a primary; it is then :attr:`primary`."""

        def promoted() -> RedisServer | None:
            named = self.named_primary()
            if len(named) != 1 or self.address(old) in named or None in named:
                return None
            port = named.pop()
            server = next((r for r in self.replicas if self.address(r) == port), None)
            return server if server is not None and self._role(server) == "master" else None

        new = self._wait(promoted, f"no replica took over from port {old.port}")
        self.replicas.remove(new)
        self.primary = new
        return new

    def rejoin(self, server: RedisServer) -> None:
        """Start ``server`` (a node in :attr:`down`) again and return once the sentinels
        made it a replica of the current primary and it has synced."""
        assert self.primary is not None
        self.down.remove(server)
        # A replica from its start: an empty primary told to follow later would be a
        # primary with no data for that moment (docs/durability.md).
        server.extra = (
            *_without_replicaof(server.extra),
            "--replicaof",
            HOST,
            str(self.address(self.primary)),
        )
        server.start()
        self.replicas.append(server)

        def synced() -> bool:
            with self.data_client(server) as client:
                info = client.info("replication")
            return info.get("role") == "slave" and info.get("master_link_status") == "up"

        self._wait(synced, f"port {server.port} did not sync with the new primary")

    # --- waiting -----------------------------------------------------------------------

    def _role(self, server: RedisServer) -> str | None:
        with self.data_client(server) as client:
            try:
                return str(client.execute_command("ROLE")[0].decode())
            except redis.RedisError:
                return None

    def _settled(self) -> bool:
        for sentinel in self.sentinels:
            with self._sentinel_client(sentinel) as client:
                state = client.execute_command("SENTINEL", "MASTER", self.service)
            if not isinstance(state, dict):  # RESP2: a flat list of names and values
                state = dict(zip(state[::2], state[1::2], strict=True))
            state = {_text(k): _text(v) for k, v in state.items()}
            if state.get("flags") != "master":  # not yet seen up (s_down on a busy machine)
                return False
            if int(state["num-slaves"]) < self.replica_count:
                return False
            if int(state["num-other-sentinels"]) < self.sentinel_count - 1:
                return False
        return all(self._linked(replica) for replica in [*self.replicas, *self.followers])

    def _linked(self, replica: RedisServer) -> bool:
        with self.data_client(replica) as client:
            return client.info("replication").get("master_link_status") == "up"

    def _wait(
        self, condition: Callable[[], T | None], what: str, timeout_s: float | None = None
    ) -> T:
        """Poll ``condition`` until it returns something true; RuntimeError after
        ``timeout_s`` (:attr:`timeout_s` when not given)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while True:
            try:
                result = condition()
            except redis.RedisError:
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} within {limit:g} s")
            time.sleep(0.05)


def _without_replicaof(args: tuple[str, ...]) -> tuple[str, ...]:
    """Server arguments ``args`` without a ``--replicaof HOST PORT``."""
    if "--replicaof" not in args:
        return args
    at = args.index("--replicaof")
    return (*args[:at], *args[at + 3 :])


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _quoted(secret: str) -> str:
    """``secret`` as one argument of a line of a Redis configuration file."""
    return '"' + secret.replace("\\", "\\\\").replace('"', '\\"') + '"'
